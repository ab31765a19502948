"""early_stopping="auto": held-out sequences above 10,000 rows, as HistGradientBoosting."""

import math

import numpy as np
import pytest
from sklearn.base import clone

from structboost import ESSTreeCRFClassifier, TreeCRFClassifier
from structboost.estimators.base import (
    AUTO_EARLY_STOPPING_ROWS,
    ROUNDS_FIXED,
    ROUNDS_STOPPED,
    Stopping,
)
from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.lgbm import LGBMCRFClassifier

pytestmark = pytest.mark.usefixtures("single_threaded")

LENGTH = 5
ABOVE = AUTO_EARLY_STOPPING_ROWS // LENGTH + 20  # 10,100 rows
BELOW = AUTO_EARLY_STOPPING_ROWS // LENGTH  # 10,000 rows: not more than the threshold
SMALL = {
    XGBCRFClassifier: {"max_depth": 3, "n_jobs": 1, "n_iter_no_change": 3},
    LGBMCRFClassifier: {"num_leaves": 8, "n_jobs": 1, "n_iter_no_change": 3},
}
ESTIMATORS = pytest.mark.parametrize(
    "cls", [XGBCRFClassifier, LGBMCRFClassifier], ids=["xgboost", "lightgbm"]
)


def noise(m, seed=0):
    """``m`` sequences of ``LENGTH`` rows, labels independent of the features (the NLL turns)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m * LENGTH, 4))
    y = rng.integers(0, 3, size=m * LENGTH)
    return X, y, np.full(m, LENGTH)


@pytest.fixture(scope="module")
def above():
    return noise(ABOVE)


def held_rows(lengths, held):
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in held])


@ESTIMATORS
def test_auto_holds_out_sequences_above_the_threshold_and_stops(cls, above):
    X, y, lengths = above
    est = cls(**SMALL[cls], refit=False).fit(X, y, lengths=lengths)
    held = est.validation_sequences_
    assert len(held) == math.ceil(0.1 * ABOVE)
    assert np.all(np.diff(held) > 0) and held[-1] < ABOVE
    curves = est.evals_result_["validation"]
    assert sorted(curves) == ["crf-error", "crf-nll"]  # both recorded, the error decides
    error = np.asarray(curves["crf-error"])
    # Stopped: n_iter_no_change rounds after the best one, far below the bound.
    best = est.best_iteration
    assert best == est.validation_best_iteration_ == int(np.argmin(error))
    assert len(error) == len(curves["crf-nll"]) == best + 1 + 3 < ROUNDS_STOPPED
    # The curves are those of exactly the held-out sequences: NLL per sequence, token error.
    rows = held_rows(lengths, held)
    nll = -est.predict_log_likelihood(X[rows], y[rows], lengths=lengths[held]).mean()
    assert curves["crf-nll"][best] == pytest.approx(nll, rel=1e-5)
    wrong = np.mean(est.predict(X[rows], lengths=lengths[held]) != y[rows])
    assert est.best_score_ == error[best] == pytest.approx(wrong)


@ESTIMATORS
def test_marginal_decoding_stops_on_the_nll(cls, above):
    X, y, lengths = above
    est = cls(**SMALL[cls], refit=False, decode="marginal").fit(X, y, lengths=lengths)
    curves = est.evals_result_["validation"]
    assert sorted(curves) == ["crf-error", "crf-nll"]  # both recorded, the NLL decides
    nll = np.asarray(curves["crf-nll"])
    best = est.best_iteration
    assert best == int(np.argmin(nll)) and est.best_score_ == nll[best]
    assert len(nll) == best + 1 + 3 < ROUNDS_STOPPED


@ESTIMATORS
def test_refit_trains_all_sequences_for_the_scaled_rounds(cls, above):
    """The refit model is the one early_stopping=False trains on everything for those rounds."""
    X, y, lengths = above
    est = cls(**SMALL[cls]).fit(X, y, lengths=lengths)
    held = cls(**SMALL[cls], refit=False).fit(X, y, lengths=lengths)
    chosen = held.best_iteration
    assert est.validation_best_iteration_ == chosen
    assert est.evals_result_ == held.evals_result_ and est.best_score_ == held.best_score_
    np.testing.assert_array_equal(est.validation_sequences_, held.validation_sequences_)
    rounds = math.ceil((chosen + 1) / 0.9)
    assert est.best_iteration + 1 == rounds
    plain = cls(**SMALL[cls], early_stopping=False, n_estimators=rounds).fit(
        X, y, lengths=lengths)
    np.testing.assert_allclose(est.predict_proba(X[:500], lengths=lengths[:100]),
                               plain.predict_proba(X[:500], lengths=lengths[:100]), rtol=1e-6)


@pytest.mark.parametrize("chosen, bound, rounds", [(9, 1000, 10), (90, 1000, 100), (95, 100, 100)])
def test_refit_rounds_scale_by_the_kept_share_up_to_the_bound(chosen, bound, rounds):
    est = XGBCRFClassifier()
    est.validation_best_iteration_ = chosen - 1
    held = np.arange(3)
    assert est._refit_stopping(Stopping(bound, 10, held)) == (rounds, None, None)
    assert est._refit_stopping(Stopping(bound, 10, None)) is None
    assert est.set_params(refit=False)._refit_stopping(Stopping(bound, 10, held)) is None


@ESTIMATORS
def test_auto_is_off_at_the_threshold(cls):
    X, y, lengths = noise(BELOW)
    est = cls(**{**SMALL[cls], "n_estimators": 4}).fit(X, y, lengths=lengths)
    assert est.evals_result_ == {} and len(est.validation_sequences_) == 0
    assert est.best_iteration == 3 and est.validation_best_iteration_ is None


def test_rounds_patience_and_hold_out_by_setting():
    est = XGBCRFClassifier()
    assert est._stopping(np.full(BELOW, LENGTH), False) == (ROUNDS_FIXED, None, None)
    rounds, patience, held = est._stopping(np.full(BELOW + 1, LENGTH), False)
    assert (rounds, patience, len(held)) == (ROUNDS_STOPPED, 30, math.ceil(0.1 * (BELOW + 1)))
    # True forces it on small data, False off on large data; n_estimators stays a bound.
    rounds, patience, held = est.set_params(early_stopping=True, n_estimators=50)._stopping(
        np.full(20, 3), False
    )
    assert (rounds, patience, held.tolist()) == (50, 30, sorted(held.tolist()))
    assert len(held) == 2
    est.set_params(early_stopping=False, n_estimators=None)
    assert est._stopping(np.full(BELOW + 1, LENGTH), False) == (ROUNDS_FIXED, None, None)


def test_an_eval_set_or_early_stopping_rounds_keeps_xgboost_behaviour():
    lengths = np.full(BELOW + 1, LENGTH)
    est = XGBCRFClassifier()
    assert est._stopping(lengths, True) == (ROUNDS_FIXED, None, None)
    assert est.set_params(early_stopping_rounds=7)._stopping(lengths, True) == (
        ROUNDS_FIXED, 7, None,
    )
    # early_stopping=True with an eval_set: its patience on that set, nothing held out.
    est.set_params(early_stopping=True, early_stopping_rounds=None)
    assert est._stopping(lengths, True) == (ROUNDS_STOPPED, 30, None)


def test_an_eval_set_overrides_the_hold_out(above):
    X, y, lengths = above
    cut = int(lengths[:100].sum())
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], n_estimators=4).fit(
        X, y, lengths=lengths, eval_set=[(X[:cut], y[:cut], lengths[:100])]
    )
    assert est.evals_result_ == {"validation_0": {"crf-nll": est.evals_result_["validation_0"][
        "crf-nll"]}}  # eval_metric=None on an eval_set: the NLL alone, as before
    assert len(est.evals_result_["validation_0"]["crf-nll"]) == 4
    assert len(est.validation_sequences_) == 0


def test_the_hold_out_is_determined_by_random_state():
    lengths = np.full(300, 2)
    def draw(seed):
        est = XGBCRFClassifier(early_stopping=True, random_state=seed)
        return est._stopping(lengths, False).held_out

    assert np.array_equal(draw(3), draw(3))
    assert np.array_equal(draw(None), draw(0))
    assert not np.array_equal(draw(3), draw(4))


def test_fits_repeat_with_one_random_state():
    X, y, lengths = noise(200, seed=1)
    est = XGBCRFClassifier(
        **SMALL[XGBCRFClassifier], early_stopping=True, random_state=5, n_estimators=30
    )
    a, b = (clone(est).fit(X, y, lengths=lengths, verbose=False) for _ in range(2))
    assert np.array_equal(a.validation_sequences_, b.validation_sequences_)
    assert a.evals_result_ == b.evals_result_
    assert a.best_iteration_ == b.best_iteration_


@ESTIMATORS
def test_model_file_keeps_the_curve_best_round_and_held_out_sequences(cls, tmp_path):
    X, y, lengths = noise(200, seed=2)
    est = cls(**SMALL[cls], early_stopping=True, n_estimators=40).fit(X, y, lengths=lengths)
    path = tmp_path / "model.json"
    est.save_model(path)
    back = cls().load_model(path)
    assert np.array_equal(back.validation_sequences_, est.validation_sequences_)
    assert back.evals_result_ == est.evals_result_
    assert back.best_iteration_ == est.best_iteration_
    assert back.validation_best_iteration_ == est.validation_best_iteration_ is not None
    np.testing.assert_array_equal(back.predict(X, lengths=lengths), est.predict(X, lengths=lengths))
    doc = est.to_document()
    for bad in (-1, 2.5, "3", True):
        with pytest.raises(ValueError, match="validation_best_iteration must be null"):
            cls().from_document({**doc, "validation_best_iteration": bad}, "model.json")
    with pytest.raises(ValueError, match="validation_best_iteration must be null"):
        cls().from_document({**doc, "validation_sequences": []}, "model.json")
    older = {k: v for k, v in doc.items() if k != "validation_best_iteration"}
    assert cls().from_document(older).validation_best_iteration_ is None


def test_tree_estimators_hold_out_instances():
    rng = np.random.default_rng(3)
    m, size = 60, 4
    X = rng.normal(size=(m * size, 3))
    y = rng.integers(0, 2, size=m * size)
    parents = np.tile([-1, 0, 0, 1], m)
    est = TreeCRFClassifier(max_depth=2, n_jobs=1, early_stopping=True, n_iter_no_change=2,
                            n_estimators=40).fit(X, y, parents=parents, lengths=np.full(m, size))
    assert len(est.validation_sequences_) == 6
    chosen = est.validation_best_iteration_
    assert len(est.evals_result_["validation"]["crf-nll"]) == chosen + 3
    assert est.best_iteration_ + 1 == math.ceil((chosen + 1) / 0.9)  # refit on all instances
    Y = rng.integers(0, 2, size=(40, 3))
    ess = ESSTreeCRFClassifier(structure="chow-liu", max_depth=2, n_jobs=1, early_stopping=True,
                               n_estimators=20).fit(rng.normal(size=(40, 2)), Y)
    assert len(ess.validation_sequences_) == 4  # inputs, each one tree of 3 label nodes
    assert "validation" in ess.evals_result_


@pytest.mark.parametrize(
    "params, message",
    [
        ({"early_stopping": "yes"}, "early_stopping must be"),
        ({"early_stopping": True, "validation_fraction": 1.5}, "validation_fraction must be"),
        ({"early_stopping": True, "n_iter_no_change": 0}, "n_iter_no_change must be"),
        ({"early_stopping": False, "early_stopping_rounds": 5}, "drop one of them"),
        ({"early_stopping_rounds": 5}, "early_stopping=True to hold out"),
        ({"n_estimators": 0}, "n_estimators must be"),
        ({"refit": "yes"}, "refit must be"),
    ],
)
def test_bad_settings_are_named(params, message):
    X, y, lengths = noise(10)
    with pytest.raises(ValueError, match=message):
        XGBCRFClassifier(**params).fit(X, y, lengths=lengths)


def test_forcing_it_on_one_sequence_says_why_not():
    X, y, lengths = noise(1)
    with pytest.raises(ValueError, match="leaves none to train on"):
        XGBCRFClassifier(early_stopping=True).fit(X, y, lengths=lengths)


def test_held_out_sequences_print_only_when_asked(capsys):
    from structboost.datasets import make_hmm_sequences

    X, y, lengths = make_hmm_sequences(n_sequences=40, length=(5, 10), random_state=1)
    XGBCRFClassifier(n_estimators=3, early_stopping=True).fit(X, y, lengths=lengths)
    assert capsys.readouterr().out == ""  # quiet by default, as XGBoost without an eval_set
    XGBCRFClassifier(n_estimators=3, early_stopping=True).fit(
        X, y, lengths=lengths, verbose=True
    )
    assert "validation-crf-error" in capsys.readouterr().out
