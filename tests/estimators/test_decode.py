"""The ``decode`` parameter: what ``predict`` (and so ``score``) returns, and what stops a fit."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, cross_val_score

from structboost.datasets import make_hmm_sequences
from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.lgbm import LGBMCRFClassifier

pytestmark = pytest.mark.usefixtures("single_threaded")

SMALL = {
    XGBCRFClassifier: {"n_estimators": 8, "max_depth": 3, "n_jobs": 1},
    LGBMCRFClassifier: {"n_estimators": 8, "num_leaves": 8, "n_jobs": 1},
}
ESTIMATORS = pytest.mark.parametrize(
    "cls", [XGBCRFClassifier, LGBMCRFClassifier], ids=["xgboost", "lightgbm"]
)


@pytest.fixture(scope="module")
def hmm():
    """A sticky chain seen through noisy emissions: the two decodings disagree often."""
    X, y, lengths = make_hmm_sequences(60, 20, random_state=0)
    return X.astype(np.float64), y, lengths


def by_marginals(est, X, lengths):
    return est.classes_[est.predict_marginals(X, lengths=lengths).argmax(axis=1)]


@ESTIMATORS
def test_decode_sets_what_predict_and_score_return(cls, hmm):
    X, y, lengths = hmm
    viterbi = cls(**SMALL[cls]).fit(X, y, lengths=lengths, verbose=False)
    marginal = clone(viterbi).set_params(decode="marginal").fit(X, y, lengths=lengths,
                                                                verbose=False)  # fmt: skip
    # The same model either way (decoding is not training) ...
    np.testing.assert_array_equal(marginal.predict_marginals(X, lengths=lengths),
                                  viterbi.predict_marginals(X, lengths=lengths))  # fmt: skip
    path, each = viterbi.predict(X, lengths=lengths), marginal.predict(X, lengths=lengths)
    assert np.any(path != each)  # the data make the decodings differ
    np.testing.assert_array_equal(each, by_marginals(marginal, X, lengths))
    np.testing.assert_array_equal(path, marginal.predict(X, lengths=lengths, decode="viterbi"))
    np.testing.assert_array_equal(each, viterbi.predict(X, lengths=lengths, decode="marginal"))
    # ... and score (hence cross_val_score and grid searches) follows the estimator's decode.
    assert marginal.score(X, y, lengths=lengths) == pytest.approx(np.mean(each == y))
    assert viterbi.score(X, y, lengths=lengths) == pytest.approx(np.mean(path == y))
    seqs = [X[s : s + n] for s, n in zip(np.cumsum(lengths) - lengths, lengths)]
    first = marginal.predict_single(seqs[0])
    np.testing.assert_array_equal(first, each[: lengths[0]])


def test_cross_val_score_scores_the_chosen_decoding(hmm):
    X, y, lengths = hmm
    frame = pd.DataFrame(X).add_prefix("x").assign(seq=np.repeat(np.arange(len(lengths)), lengths))
    scores = {
        decode: cross_val_score(
            XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode=decode, sequence_column="seq"),
            frame, y, groups=frame["seq"], cv=GroupKFold(3), params={"verbose": False},
            error_score="raise")
        for decode in ("viterbi", "marginal")
    }
    assert np.all(np.isfinite(scores["viterbi"])) and np.all(np.isfinite(scores["marginal"]))
    assert not np.allclose(scores["viterbi"], scores["marginal"])


@pytest.mark.parametrize("value", ["max", "Viterbi", None, 1])
def test_an_unknown_decoding_is_refused_at_fit(hmm, value):
    X, y, lengths = hmm
    with pytest.raises(ValueError, match=r"parameter decode must be one of 'viterbi', 'marginal'"):
        XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode=value).fit(X, y, lengths=lengths)


def test_the_model_file_keeps_the_decoding(hmm, tmp_path):
    X, y, lengths = hmm
    est = LGBMCRFClassifier(**SMALL[LGBMCRFClassifier], decode="marginal").fit(
        X, y, lengths=lengths, verbose=False)
    est.save_model(tmp_path / "m.json")
    loaded = LGBMCRFClassifier()
    loaded.load_model(tmp_path / "m.json")
    assert loaded.decode == "marginal"
    np.testing.assert_array_equal(loaded.predict(X, lengths=lengths), est.predict(X, lengths=lengths))
