"""LinearChainCRF and LatentLogLinearClassifier save and load as JSON (estimators/array_file.py)."""

import json

import numpy as np
import pytest

import structboost as sb
from structboost.datasets import make_hmm_sequences

pytestmark = [pytest.mark.usefixtures("single_threaded"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]


@pytest.fixture(scope="module")
def data():
    return make_hmm_sequences(30, length=(4, 9), random_state=0)


def test_a_linear_chain_crf_loads_and_predicts_the_same(data, tmp_path):
    X, y, lengths = data
    crf = sb.LinearChainCRF(max_iter=5, reg=0.5).fit(X, y, lengths)
    crf.save_model(tmp_path / "crf.json")
    back = sb.LinearChainCRF().load_model(tmp_path / "crf.json")
    assert back.get_params() == crf.get_params()
    np.testing.assert_array_equal(back.predict(X, lengths), crf.predict(X, lengths))
    np.testing.assert_allclose(back.predict_marginals(X, lengths),
                               crf.predict_marginals(X, lengths))  # fmt: skip
    # a boosted estimator starts from the loaded model as from the fitted one
    boosted = sb.XGBCRFClassifier(n_estimators=2, base_model=back, max_depth=2).fit(
        X, y, lengths=lengths, verbose=False
    )
    assert boosted.predict(X, lengths=lengths).shape == y.shape


def test_a_latent_classifier_loads_and_predicts_the_same(data, tmp_path):
    X, y, _ = data
    labels = np.array(["ant", "bee", "cat"])[y]
    clf = sb.LatentLogLinearClassifier(n_hidden=2, max_iter=5).fit(X, labels)
    clf.save_model(tmp_path / "latent.json")
    back = sb.LatentLogLinearClassifier().load_model(tmp_path / "latent.json")
    np.testing.assert_array_equal(back.classes_, clf.classes_)
    np.testing.assert_allclose(back.predict_proba(X), clf.predict_proba(X))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["arrays"].pop("start"), "its arrays"),
        (lambda d: d["arrays"].update(start=[0.0, 1.0]), "'start' has 2 along 'K'"),
        (lambda d: d["arrays"].update(coef_="many"), "not an array of numbers"),
        (lambda d: d["arrays"].update(coef_=[1.0, 2.0]), "finite 2-d array"),
        (lambda d: d["arrays"]["end"].__setitem__(0, float("nan")), "finite"),
        (lambda d: d.update(estimator="LatentLogLinearClassifier"), "load it with"),
        (lambda d: d["params"].update(solver_of_choice=1), "its parameters"),
        (lambda d: d.update(format="structboost-crf-classifier"), "is not a structboost-array"),
    ],
)
def test_a_damaged_array_file_is_refused_by_field(data, tmp_path, edit, message):
    X, y, lengths = data
    path = tmp_path / "crf.json"
    sb.LinearChainCRF(max_iter=3).fit(X, y, lengths).save_model(path)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        sb.LinearChainCRF().load_model(path)
