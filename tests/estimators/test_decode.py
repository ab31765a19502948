"""The ``decode`` parameter: what ``predict`` (and so ``score``) returns, and what stops a fit;
``decode="auto"``: the decoding with the lower token error on the held-out sequences."""

import json

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


def held_rows(lengths, held):
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in held])


@ESTIMATORS
@pytest.mark.parametrize("seed", [0, 1])
def test_auto_takes_the_lower_held_out_error_viterbi_on_a_tie(cls, seed):
    X, y, lengths = make_hmm_sequences(60, 20, random_state=seed)
    est = cls(**SMALL[cls], decode="auto", early_stopping=True, refit=False)
    est.fit(X, y, lengths=lengths)
    held = est.validation_sequences_
    assert len(held) > 0
    rows = held_rows(lengths, held)
    error = {d: np.mean(est.predict(X[rows], lengths=lengths[held], decode=d) != y[rows])
             for d in ("viterbi", "marginal")}
    expected = "marginal" if error["marginal"] < error["viterbi"] else "viterbi"
    assert est.decode_ == expected
    assert np.array_equal(est.predict(X, lengths=lengths),
                          est.predict(X, lengths=lengths, decode=expected))


@ESTIMATORS
def test_auto_is_viterbi_without_held_out_sequences(cls, hmm):
    X, y, lengths = hmm
    est = cls(**SMALL[cls], decode="auto").fit(X, y, lengths=lengths)  # 1,200 rows: none held out
    assert est.decode_ == "viterbi"


def test_auto_is_viterbi_under_allowed_transitions(hmm):
    X, y, lengths = hmm
    allowed = np.ones((len(np.unique(y)),) * 2, dtype=bool)
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode="auto", early_stopping=True,
                           allowed_transitions=allowed).fit(X, y, lengths=lengths)
    assert est.decode_ == "viterbi"


@pytest.mark.parametrize("decode", ["viterbi", "marginal"])
def test_a_set_decoding_is_kept(decode, hmm):
    X, y, lengths = hmm
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode=decode, early_stopping=True)
    assert est.fit(X, y, lengths=lengths).decode_ == decode


def test_the_model_file_keeps_the_choice(hmm, tmp_path):
    X, y, lengths = hmm
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode="auto", early_stopping=True)
    est.fit(X, y, lengths=lengths)
    est.decode_ = "marginal"  # whatever the fit chose, the file must give it back
    path = tmp_path / "model.json"
    est.save_model(path)
    back = XGBCRFClassifier().load_model(path)
    assert back.decode_ == "marginal"
    assert np.array_equal(back.predict(X, lengths=lengths), est.predict(X, lengths=lengths))
    doc = json.loads(path.read_text())
    doc["decode"] = "beam"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="decode must be one of"):
        XGBCRFClassifier().load_model(path)
