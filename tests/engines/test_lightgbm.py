"""The LightGBM backend: objective, metric, transitions, early stopping, saving."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import joblib
import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.engines.lightgbm import (
    kept_rounds,
    lgb_crf_objective,
    lgb_params,
    load_lgb_model,
    load_state,
    save_lgb_model,
)

pytestmark = pytest.mark.usefixtures("single_threaded")

K = 3
# One thread: the CI machine has two busy cores.
TREES = {"num_leaves": 8, "num_threads": 1}
# Small trees that both engines grow identically: depth-2, no penalties or
# minimum sizes, one thread.
SAME_TREES_LGB = {
    "max_depth": 2,
    "num_leaves": 4,
    "min_sum_hessian_in_leaf": 0.0,
    "min_data_in_leaf": 1,
    "num_threads": 1,
}
SAME_TREES_XGB = {"max_depth": 2, "reg_lambda": 0.0, "min_child_weight": 0.0, "nthread": 1}


@pytest.fixture(scope="module")
def hmm():
    """Sticky labels, informative but noisy observations."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=100, length=(10, 30), stay=0.9, emission=0.7, random_state=0
    )
    m_train = 70
    cut = int(lengths[:m_train].sum())
    return {
        "train": (X[:cut], y[:cut], lengths[:m_train]),
        "test": (X[cut:], y[cut:], lengths[m_train:]),
    }


def dataset(part, **kw):
    X, y, lengths = part
    return lgb.Dataset(X, label=y, group=lengths, **kw)


def train(hmm, rounds=10, lr=0.5, valid=True, callbacks=(), params=None, **kw):
    obj = lgb_crf_objective(K, **kw)
    dtrain, dtest = dataset(hmm["train"]), dataset(hmm["test"])
    log = {}
    booster = lgb.train(
        lgb_params(K, objective=obj, learning_rate=lr, **{**TREES, **(params or {})}),
        dtrain,
        num_boost_round=rounds,
        valid_sets=[dtrain, dtest] if valid else [],
        valid_names=["train", "test"] if valid else None,
        feval=obj.metric,
        callbacks=[obj.callback(), lgb.record_evaluation(log), *callbacks],
    )
    return obj, booster, log


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"mode": "treecrf"},
        {"mode": "logitboost"},
        {"hessian_bound": "length", "transition_solver": "newton"},
        {"hessian_bound": "exact"},
        {"hessian_bound": 4.0},
    ],
    ids=["gbcrf", "treecrf", "logitboost", "length-newton", "exact", "fixed-gamma"],
)
def test_same_model_as_xgboost(hmm, config):
    """One CRF objective, two engines: identical trees give identical models."""
    X, y, lengths = hmm["train"]
    xobj = sb.crf_objective(K, **config)
    xgb_booster = xgb.train(
        sb.xgb_params(K, eta=0.5, **SAME_TREES_XGB),
        xgb.DMatrix(X, label=y, group=lengths),
        3,
        obj=xobj,
        callbacks=[xobj.callback()],
    )
    lobj = lgb_crf_objective(K, **config)
    lgb_booster = lgb.train(
        lgb_params(K, objective=lobj, learning_rate=0.5, **SAME_TREES_LGB),
        dataset(hmm["train"]),
        3,
        callbacks=[lobj.callback()],
    )
    Xt, _, lt = hmm["test"]
    np.testing.assert_allclose(
        lgb_booster.predict(Xt, raw_score=True),
        xgb_booster.predict(xgb.DMatrix(Xt), output_margin=True),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        load_state(lgb_booster)[2].to_vector(), xobj.params.to_vector(), atol=1e-5
    )
    np.testing.assert_array_equal(
        sb.predict(lgb_booster, Xt, lengths=lt), sb.predict(xgb_booster, Xt, lengths=lt)
    )


def test_similar_accuracy_to_xgboost(hmm):
    """Each engine with its own tree growth (depth-wise / leaf-wise) and defaults."""
    X, y, lengths = hmm["train"]
    Xt, yt, lt = hmm["test"]
    xobj = sb.crf_objective(K)
    xgb_booster = xgb.train(
        sb.xgb_params(K, eta=1.0, max_depth=4, nthread=1),
        xgb.DMatrix(X, label=y, group=lengths),
        40,
        obj=xobj,
        callbacks=[xobj.callback()],
    )
    _, lgb_booster, _ = train(hmm, rounds=40, lr=1.0, valid=False, params={"num_leaves": 16})
    acc_xgb = np.mean(sb.predict(xgb_booster, Xt, lengths=lt) == yt)
    acc_lgb = np.mean(sb.predict(lgb_booster, Xt, lengths=lt) == yt)
    assert acc_lgb > 0.75 and acc_xgb > 0.75
    assert abs(acc_lgb - acc_xgb) < 0.05


def test_objective_returns_two_dimensional_gradients(hmm):
    obj = lgb_crf_objective(K)
    ds = dataset(hmm["train"]).construct()
    n = ds.num_data()
    grad, hess = obj(np.zeros((n, K), order="F"), ds)
    assert grad.shape == hess.shape == (n, K)
    np.testing.assert_allclose(grad.sum(axis=1), 0.0, atol=1e-12)
    assert (hess > 0).all()


def test_a_flat_row_major_gradient_would_train_a_wrong_model(hmm):
    """LightGBM reads a flat gradient class-major: row-major trains garbage silently."""

    def flattened(order):
        obj = lgb_crf_objective(K)

        def fobj(preds, data):
            grad, hess = obj(preds, data)
            return grad.ravel(order=order), hess.ravel(order=order)

        booster = lgb.train(
            lgb_params(K, objective=fobj, learning_rate=0.5, **TREES),
            dataset(hmm["train"]),
            8,
            callbacks=[obj.callback()],
        )
        return sb.sequence_log_likelihood(booster, *hmm["train"][:2], lengths=hmm["train"][2])

    _, booster, _ = train(hmm, rounds=8, valid=False)
    ours = sb.sequence_log_likelihood(booster, *hmm["train"][:2], lengths=hmm["train"][2])
    np.testing.assert_allclose(flattened("F"), ours)
    assert flattened("C").sum() < ours.sum() - 0.1 * abs(ours.sum())


def test_gbcrf_training_nll_never_rises_at_learning_rate_one(hmm):
    _, _, log = train(hmm, rounds=15, lr=1.0)
    nll = np.array(log["train"]["crf-nll"])
    assert np.all(np.diff(nll) <= 1e-6 * nll[:-1])
    assert nll[-1] < 0.9 * nll[0]


def _leaf_hessian_sums(booster):
    def leaves(node):
        if "leaf_value" in node:
            return [node["leaf_weight"]]
        return leaves(node["left_child"]) + leaves(node["right_child"])

    return np.array(
        [w for tree in booster.dump_model()["tree_info"] for w in leaves(tree["tree_structure"])]
    )


def test_safe_defaults_keep_leaf_hessian_sums_above_one():
    """LightGBM's own 1e-3 lets a leaf take a step -G/H from a Hessian sum near zero."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=40, length=(10, 30), stay=0.95, emission=0.99, random_state=1
    )
    sums = {}
    for name, params in [("raw", {"num_class": K, "metric": "None", "verbose": -1}),
                         ("safe", lgb_params(K))]:
        obj = lgb_crf_objective(K)
        booster = lgb.train(
            {**params, "objective": obj, "learning_rate": 1.0, "num_threads": 1},
            lgb.Dataset(X, label=y, group=lengths),
            10,
            callbacks=[obj.callback()],
        )
        sums[name] = _leaf_hessian_sums(booster)
    assert sums["raw"].min() < 1.0
    assert sums["safe"].min() >= 1.0


def test_params_defaults_and_aliases():
    params = lgb_params(4, learning_rate=0.2)
    assert params["num_class"] == 4 and params["metric"] == "None"
    assert params["min_sum_hessian_in_leaf"] == 1.0 and params["learning_rate"] == 0.2
    overridden = lgb_params(4, min_child_weight=0.1)
    assert "min_sum_hessian_in_leaf" not in overridden
    assert overridden["min_child_weight"] == 0.1


def test_objective_state_survives_lightgbms_deep_copy_of_params(hmm):
    """lightgbm.train deep-copies params; the metric and callback must see the refit."""
    obj, booster, log = train(hmm, rounds=3)
    assert np.abs(obj.params.transitions).max() > 0.5
    np.testing.assert_array_equal(load_state(booster)[2].transitions, obj.params.transitions)
    X, y, lengths = hmm["train"]
    np.testing.assert_allclose(
        log["train"]["crf-nll"][-1],
        -sb.sequence_log_likelihood(booster, X, y, lengths=lengths).mean(),
    )


def _overfit(hmm, **train_kw):
    return train(
        hmm,
        rounds=40,
        lr=1.0,
        callbacks=[lgb.early_stopping(3, first_metric_only=True, verbose=False)],
        params={"num_leaves": 31, "min_data_in_leaf": 1, "min_sum_hessian_in_leaf": 0.0},
        **train_kw,
    )


@pytest.mark.parametrize("keep", [False, True], ids=["truncated", "keep_training_booster"])
def test_early_stopping_keeps_the_transitions_of_the_best_iteration(hmm, keep):
    obj = lgb_crf_objective(K)
    recorder = obj.callback()
    dtrain, dtest = dataset(hmm["train"]), dataset(hmm["test"])
    booster = lgb.train(
        lgb_params(K, objective=obj, learning_rate=1.0, num_leaves=31, min_data_in_leaf=1,
                   min_sum_hessian_in_leaf=0.0, num_threads=1),
        dtrain,
        num_boost_round=40,
        valid_sets=[dtest],
        feval=obj.metric,
        keep_training_booster=keep,
        callbacks=[recorder, lgb.early_stopping(3, first_metric_only=True, verbose=False)],
    )
    best = booster.best_iteration
    assert 0 < best < max(recorder.history) + 1, "the overfitting setup should stop early"
    assert booster.current_iteration() == (best + 3 if keep else best)
    assert kept_rounds(booster) == best
    stored = load_state(booster)[2]
    np.testing.assert_array_equal(stored.transitions, recorder.history[best - 1].transitions)
    assert not np.array_equal(stored.transitions, obj.params.transitions)
    Xt, _, lt = hmm["test"]
    margins = booster.predict(Xt, raw_score=True, num_iteration=best)
    expected = sb.inference.viterbi(margins, lt, stored.transitions, stored.start, stored.end)
    np.testing.assert_array_equal(sb.predict(booster, Xt, lengths=lt), expected)


def test_error_metric_is_token_error(hmm):
    _, booster, log = train(hmm, rounds=4, metric="crf-error")
    Xt, yt, lt = hmm["test"]
    assert log["test"]["crf-error"][-1] == pytest.approx(
        np.mean(sb.predict(booster, Xt, lengths=lt) != yt)
    )


def test_sequence_weights_from_constant_row_weights(hmm):
    X, y, lengths = hmm["train"]
    seq_w = np.arange(1.0, len(lengths) + 1)
    ds = lgb.Dataset(X, label=y, group=lengths, weight=np.repeat(seq_w, lengths)).construct()
    obj = lgb_crf_objective(K)
    np.testing.assert_array_equal(obj.batch(ds).seq_weight, seq_w)
    margins = np.zeros((len(y), K))
    nll = obj.crf.sequence_nll(margins, obj.batch(ds))
    assert obj.metric(margins, ds) == ("crf-nll", pytest.approx(seq_w @ nll / seq_w.sum()), False)


@pytest.fixture(scope="module")
def trained(hmm):
    _, booster, _ = train(hmm, rounds=5, valid=False)
    return booster


def test_save_load_pickle_joblib_round_trips(hmm, trained, tmp_path):
    Xt, yt, lt = hmm["test"]
    path = tmp_path / "model.json"
    save_lgb_model(trained, path)
    doc = json.loads(path.read_text())
    assert set(doc) == {"lgb_model", "structboost_crf"}
    joblib.dump(trained, tmp_path / "model.joblib")
    copies = [
        load_lgb_model(path),
        pickle.loads(pickle.dumps(trained)),
        joblib.load(tmp_path / "model.joblib"),
    ]
    expected = (
        sb.predict(trained, Xt, lengths=lt),
        sb.predict_marginals(trained, Xt, lengths=lt),
        sb.sequence_log_likelihood(trained, Xt, yt, lengths=lt),
    )
    for model in copies:
        np.testing.assert_array_equal(sb.predict(model, Xt, lengths=lt), expected[0])
        np.testing.assert_array_equal(sb.predict_marginals(model, Xt, lengths=lt), expected[1])
        np.testing.assert_array_equal(
            sb.sequence_log_likelihood(model, Xt, yt, lengths=lt), expected[2]
        )


def test_linear_trees_round_trip_and_their_leaf_models_are_checked(hmm, tmp_path):
    X, y, lengths = hmm["train"]
    est = sb.LGBMCRFClassifier(n_estimators=4, num_leaves=4, min_child_samples=2,
                               linear_tree=True, n_jobs=1).fit(X, y, lengths=lengths)  # fmt: skip
    est.save_model(tmp_path / "linear.json")
    back = sb.LGBMCRFClassifier().load_model(tmp_path / "linear.json")
    np.testing.assert_array_equal(
        back.predict_marginals(X, lengths=lengths), est.predict_marginals(X, lengths=lengths)
    )
    doc = json.loads((tmp_path / "linear.json").read_text())
    text = doc["engine"]["lgb_model"]
    assert "is_linear=1" in text
    damage = (("num_features=", "num_features=9999 "), ("leaf_features= ", "leaf_features= 99999 "))
    for old, new in damage:
        doc["engine"]["lgb_model"] = text.replace(old, new, 1)
        (tmp_path / "bad.json").write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="LightGBM cannot read the model"):
            sb.LGBMCRFClassifier().load_model(tmp_path / "bad.json")


def test_saved_early_stopped_model_keeps_best_rounds(hmm, tmp_path):
    obj, booster, _ = _overfit(hmm)
    save_lgb_model(booster, tmp_path / "m.json")
    loaded = load_lgb_model(tmp_path / "m.json")
    assert loaded.current_iteration() == booster.best_iteration
    Xt, _, lt = hmm["test"]
    np.testing.assert_array_equal(
        sb.predict_marginals(loaded, Xt, lengths=lt), sb.predict_marginals(booster, Xt, lengths=lt)
    )


def test_model_saved_in_one_process_predicts_identically_in_another(hmm, trained, tmp_path):
    Xt, _, lt = hmm["test"]
    save_lgb_model(trained, tmp_path / "model.json")
    np.savez(tmp_path / "data.npz", X=Xt, lengths=lt)
    script = (
        "import sys, numpy as np, structboost.engines.lightgbm as sl, structboost as sb\n"
        "d = np.load(sys.argv[1] + '/data.npz')\n"
        "m = sl.load_lgb_model(sys.argv[1] + '/model.json')\n"
        "p = sb.predict_marginals(m, d['X'], lengths=d['lengths'])\n"
        "np.save(sys.argv[1] + '/out.npy', p)\n"
    )
    root = Path(sb.__file__).resolve().parent.parent
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, env=env, timeout=120)
    np.testing.assert_array_equal(
        np.load(tmp_path / "out.npy"), sb.predict_marginals(trained, Xt, lengths=lt)
    )


def test_predict_from_a_dataset_with_raw_data(hmm, trained):
    Xt, yt, lt = hmm["test"]
    ds = dataset(hmm["test"], free_raw_data=False)
    np.testing.assert_array_equal(sb.predict(trained, ds), sb.predict(trained, Xt, lengths=lt))
    np.testing.assert_array_equal(
        sb.sequence_log_likelihood(trained, ds),
        sb.sequence_log_likelihood(trained, Xt, yt, lengths=lt),
    )


def test_clear_errors(hmm, trained, tmp_path):
    X, y, lengths = hmm["train"]
    obj = lgb_crf_objective(K)
    with pytest.raises(ValueError, match="no sequence boundaries"):
        lgb.train(lgb_params(K, objective=obj), lgb.Dataset(X, label=y), 1)
    with pytest.raises(ValueError, match="outside 0..2"):
        lgb.train(lgb_params(K, objective=obj), lgb.Dataset(X, label=y + 1, group=lengths), 1)
    with pytest.raises(ValueError, match="num_labels=3"):
        lgb.train(lgb_params(4, objective=obj), lgb.Dataset(X, label=y, group=lengths), 1)
    varying = np.ones(len(y))
    varying[1] = 2.0
    with pytest.raises(ValueError, match="varies within sequence 0"):
        lgb.train(
            lgb_params(K, objective=obj), lgb.Dataset(X, label=y, group=lengths, weight=varying), 1
        )
    with pytest.raises(ValueError, match="lightgbm.cv"):
        lgb.cv(
            lgb_params(K, objective=obj),
            lgb.Dataset(X, label=y, group=lengths),
            1,
            nfold=2,
            stratified=False,
            callbacks=[obj.callback()],
        )
    plain = lgb.train(lgb_params(K, objective=obj), lgb.Dataset(X, label=y, group=lengths), 1)
    with pytest.raises(ValueError, match="no CRF transitions"):
        sb.predict(plain, X, lengths=lengths)
    with pytest.raises(ValueError, match="sequence boundaries are required"):
        sb.predict(trained, X)
    with pytest.raises(ValueError, match="sum to"):
        sb.predict(trained, X, lengths=[len(X) - 1])
    with pytest.raises(ValueError, match="in-memory features"):
        sb.predict(trained, dataset(hmm["train"]).construct())
    trained.save_model(tmp_path / "plain.txt")
    with pytest.raises(ValueError, match="not a file written by structboost.lightgbm.save_lgb_model"):
        load_lgb_model(tmp_path / "plain.txt")
    with pytest.raises(ValueError, match="no sequence groups"):
        obj.sklearn_objective(y, np.zeros((len(y), K)), None, None)
