"""The public XGBoost contract (docs/user-guide/native.md), end to end on sticky-HMM data."""

import pickle

import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost.engines.xgboost import load_state
from structboost.datasets import make_hmm_sequences

K = 3
TREE = {"max_depth": 3, "min_child_weight": 1.0}


@pytest.fixture(scope="module")
def hmm():
    """Sticky labels, weak observations: structure matters."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=160, length=(10, 30), stay=0.95, emission=0.5, random_state=0
    )
    m_train = 110
    cut = int(lengths[:m_train].sum())
    return {
        "train": (X[:cut], y[:cut], lengths[:m_train]),
        "test": (X[cut:], y[cut:], lengths[m_train:]),
    }


def dmatrix(part, **kw):
    X, y, lengths = part
    return xgb.DMatrix(X, label=y, group=lengths, **kw)


def train(hmm, mode="gbcrf", rounds=15, eta=1.0, evals=True, **kw):
    obj = sb.crf_objective(K, mode=mode, **kw)
    dtrain, dtest = dmatrix(hmm["train"]), dmatrix(hmm["test"])
    log = {}
    booster = xgb.train(
        sb.xgb_params(K, eta=eta, **TREE),
        dtrain,
        num_boost_round=rounds,
        obj=obj,
        custom_metric=obj.metric,
        evals=[(dtrain, "train"), (dtest, "test")] if evals else (),
        evals_result=log,
        verbose_eval=False,
        callbacks=[obj.callback()],
    )
    return obj, booster, log, dtest


def test_logitboost_reproduces_multi_softprob(hmm):
    X, y, lengths = hmm["train"]
    params = {"max_depth": 3, "eta": 0.5, "base_score": 0.0, "tree_method": "hist"}
    native = xgb.train(
        {**params, "objective": "multi:softprob", "num_class": K},
        xgb.DMatrix(X, label=y),
        num_boost_round=10,
    )
    obj = sb.crf_objective(K, mode="logitboost")
    ours = xgb.train(
        sb.xgb_params(K, **params),
        xgb.DMatrix(X, label=y, group=lengths),
        num_boost_round=10,
        obj=obj,
        callbacks=[obj.callback()],
    )
    Xt, _, lt = hmm["test"]
    p_native = native.predict(xgb.DMatrix(Xt))
    p_ours = sb.predict_marginals(ours, Xt, lengths=lt)
    np.testing.assert_allclose(p_ours, p_native, atol=1e-4)


def test_gbcrf_training_nll_never_rises_at_eta_one(hmm):
    # Theorem 4.1's bound with a monotone refit; the adaptive step scales the bound
    # down and so may overshoot (here by 0.2% in one round with the L-BFGS memory)
    _, _, log, _ = train(hmm, "gbcrf", rounds=12, eta=1.0, step="bound")
    nll = np.array(log["train"]["crf-nll"])
    assert np.all(np.diff(nll) <= 1e-6 * nll[:-1])
    assert nll[-1] < 0.9 * nll[0]


def test_structured_modes_beat_logitboost(hmm):
    _, y, _ = hmm["test"]
    acc = {}
    # GBCRF's bound makes its steps safe (eta = 1 is monotone) but conservative.
    for mode, eta in [("logitboost", 0.5), ("treecrf", 0.5), ("gbcrf", 1.0)]:
        _, booster, _, dtest = train(hmm, mode, rounds=12, eta=eta, evals=False)
        acc[mode] = np.mean(sb.predict(booster, dtest) == y)
    assert acc["gbcrf"] > acc["logitboost"] + 0.05
    assert acc["treecrf"] > acc["logitboost"] + 0.05


def test_newton_transition_solver_trains(hmm):
    obj, booster, log, dtest = train(hmm, "gbcrf", rounds=10, transition_solver="newton")
    nll = np.array(log["train"]["crf-nll"])
    assert nll[-1] < nll[0]
    diag = np.diag(obj.params.transitions)
    off = obj.params.transitions[~np.eye(K, dtype=bool)]
    assert diag.min() > off.max()  # sticky chain learned


@pytest.mark.parametrize("suffix", ["json", "ubj"])
def test_save_load_round_trip(hmm, tmp_path, suffix):
    obj, booster, _, dtest = train(hmm, rounds=5, evals=False)
    path = tmp_path / f"model.{suffix}"
    booster.save_model(path)
    loaded = xgb.Booster(model_file=path)
    np.testing.assert_array_equal(sb.predict(loaded, dtest), sb.predict(booster, dtest))
    np.testing.assert_array_equal(
        sb.predict_marginals(loaded, dtest), sb.predict_marginals(booster, dtest)
    )
    restored = load_state(loaded)[2]
    np.testing.assert_array_equal(restored.transitions, obj.params.transitions)
    unpickled = pickle.loads(pickle.dumps(booster))
    np.testing.assert_array_equal(
        sb.sequence_log_likelihood(unpickled, dtest), sb.sequence_log_likelihood(booster, dtest)
    )


def test_predictions_agree_with_inference_on_margins(hmm):
    obj, booster, _, dtest = train(hmm, rounds=5, evals=False)
    X, y, lengths = hmm["test"]
    margins = booster.predict(dtest, output_margin=True)
    p = obj.params
    args = (margins, lengths, p.transitions, p.start, p.end)
    np.testing.assert_array_equal(sb.predict(booster, dtest), sb.inference.viterbi(*args))
    np.testing.assert_allclose(
        sb.predict_marginals(booster, X, lengths=lengths), sb.inference.forward_backward(*args)[1]
    )
    np.testing.assert_allclose(
        sb.sequence_log_likelihood(booster, dtest),
        -sb.inference.sequence_nll(margins, lengths, y, p.transitions, p.start, p.end),
    )
    groups = np.repeat(np.arange(len(lengths)), lengths)
    np.testing.assert_array_equal(sb.predict(booster, X, groups=groups), sb.predict(booster, dtest))


def _early_stopped(hmm, callback_factory):
    obj = sb.crf_objective(K)
    recorder = obj.callback()
    X, y, lengths = hmm["train"]
    few = int(lengths[:15].sum())  # a tiny training set overfits within a few rounds
    dtrain = xgb.DMatrix(X[:few], label=y[:few], group=lengths[:15])
    dtest = dmatrix(hmm["test"])
    booster = xgb.train(
        sb.xgb_params(K, eta=1.0, max_depth=6, min_child_weight=0.0, reg_lambda=0.0),
        dtrain,
        num_boost_round=25,
        obj=obj,
        custom_metric=obj.metric,
        evals=[(dtest, "test")],
        verbose_eval=False,
        callbacks=[recorder, *callback_factory()],
    )
    return obj, recorder, booster, dtest


@pytest.mark.parametrize(
    "factory",
    [
        lambda: [xgb.callback.EarlyStopping(rounds=3)],
        lambda: [xgb.callback.EarlyStopping(rounds=3, save_best=True)],
    ],
    ids=["early_stopping_rounds", "save_best"],
)
def test_early_stopping_keeps_the_transitions_of_the_best_iteration(hmm, factory):
    obj, recorder, booster, dtest = _early_stopped(hmm, factory)
    best = booster.best_iteration
    last = max(recorder.history)
    assert best < last, "the overfitting setup should stop after its best round"
    stored = load_state(booster)[2]
    np.testing.assert_array_equal(stored.transitions, recorder.history[best].transitions)
    assert not np.array_equal(stored.transitions, obj.params.transitions)
    margins = booster.predict(dtest, output_margin=True, iteration_range=(0, best + 1))
    _, y, lengths = hmm["test"]
    expected = sb.inference.viterbi(margins, lengths, stored.transitions, stored.start, stored.end)
    np.testing.assert_array_equal(sb.predict(booster, dtest), expected)


def test_qid_gives_the_same_model_as_group(hmm):
    X, y, lengths = hmm["train"]
    qid = np.repeat(np.arange(len(lengths)), lengths)
    boosters = []
    for dm in (xgb.DMatrix(X, label=y, group=lengths), xgb.DMatrix(X, label=y, qid=qid)):
        obj = sb.crf_objective(K)
        boosters.append(
            xgb.train(sb.xgb_params(K, **TREE), dm, 3, obj=obj, callbacks=[obj.callback()])
        )
    dtest = dmatrix(hmm["test"])
    np.testing.assert_array_equal(
        sb.predict_marginals(boosters[0], dtest), sb.predict_marginals(boosters[1], dtest)
    )


def test_error_metric_is_token_error(hmm):
    obj, booster, log, dtest = train(hmm, rounds=5, metric="crf-error")
    _, y, _ = hmm["test"]
    error = np.mean(sb.predict(booster, dtest) != y)
    assert log["test"]["crf-error"][-1] == pytest.approx(error, abs=5e-7)  # logged to 6 decimals


def test_clear_errors(hmm):
    X, y, lengths = hmm["train"]
    obj = sb.crf_objective(K)
    params = sb.xgb_params(K)
    with pytest.raises(ValueError, match="no sequence boundaries"):
        xgb.train(params, xgb.DMatrix(X, label=y), 1, obj=obj)
    with pytest.raises(ValueError, match="outside 0..2"):
        xgb.train(params, xgb.DMatrix(X, label=y + 1, group=lengths), 1, obj=obj)
    bad = y.astype(float)
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        xgb.train(params, xgb.DMatrix(X, label=bad, group=lengths), 1, obj=obj)
    with pytest.raises(ValueError, match="num_labels=3"):
        xgb.train(sb.xgb_params(4), xgb.DMatrix(X, label=y, group=lengths), 1, obj=obj)
    plain = xgb.train(params, xgb.DMatrix(X, label=y, group=lengths), 1, obj=obj)
    with pytest.raises(ValueError, match="no CRF transitions"):
        sb.predict(plain, xgb.DMatrix(X, group=lengths))
    trained = xgb.train(
        params, xgb.DMatrix(X, label=y, group=lengths), 1, obj=obj, callbacks=[obj.callback()]
    )
    with pytest.raises(ValueError, match="sequence boundaries are required"):
        sb.predict(trained, X)
    with pytest.raises(ValueError, match="sum to"):
        sb.predict(trained, X, lengths=[len(X) - 1])
