"""Named presets: what each sets, explicit parameters over it, unknown names refused."""

import numpy as np
import pytest
from sklearn.base import clone

from structboost import LGBMCRFClassifier, XGBCRFClassifier
from structboost.presets import PRESETS, preset


def test_each_preset_sets_what_it_names():
    assert preset("dense") == {
        "multi_strategy": "multi_output_tree", "max_depth": 8, "learning_rate": 0.1,
        "transition_solver": "newton",
    }
    assert preset("sparse-text") == {"transition_solver": "newton"}
    assert preset("per-token") == {"decode": "marginal"}
    assert sorted(PRESETS) == ["dense", "per-token", "sparse-text"]


def test_the_estimator_takes_them_as_its_own_parameters():
    est = XGBCRFClassifier(**preset("dense"))
    params = est.get_params()
    assert all(params[k] == v for k, v in PRESETS["dense"].items())
    assert clone(est).get_params() == params  # plain parameters: clone keeps them
    lgbm = LGBMCRFClassifier(**preset("sparse-text"))
    assert lgbm.get_params()["transition_solver"] == "newton"


def test_explicit_parameters_override_the_preset():
    params = preset("dense", max_depth=6, n_estimators=50)
    assert params["max_depth"] == 6 and params["n_estimators"] == 50
    assert params["multi_strategy"] == "multi_output_tree"
    est = XGBCRFClassifier(**preset("dense")).set_params(learning_rate=0.3)
    assert est.learning_rate == 0.3


def test_a_fit_uses_the_preset_tree_shape():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 3, size=60)
    est = XGBCRFClassifier(**preset("dense", n_estimators=2, n_jobs=1)).fit(
        X, y, lengths=np.full(12, 5), verbose=False)
    config = est.booster_.save_config()
    assert '"multi_strategy":"multi_output_tree"' in config and '"max_depth":"8"' in config


def test_per_token_predicts_each_positions_most_probable_label():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(200, 3)), rng.integers(0, 3, size=200)
    lengths = np.full(20, 10)
    est = LGBMCRFClassifier(**preset("per-token", n_estimators=3, n_jobs=1)).fit(
        X, y, lengths=lengths, verbose=False)
    marginals = est.predict_marginals(X, lengths=lengths)
    np.testing.assert_array_equal(est.predict(X, lengths=lengths), est.classes_[marginals.argmax(1)])


def test_the_presets_cannot_be_changed_in_place():
    with pytest.raises(TypeError):
        PRESETS["dense"]["max_depth"] = 3
    preset("dense")["max_depth"] = 3  # a copy
    assert PRESETS["dense"]["max_depth"] == 8


@pytest.mark.parametrize("name", ["Dense", "sparse", None, 3])
def test_unknown_names_are_refused_with_the_choices(name):
    with pytest.raises(ValueError, match=r"is not one of \['dense', 'per-token', 'sparse-text'\]"):
        preset(name)
