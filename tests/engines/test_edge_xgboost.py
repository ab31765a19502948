"""Boosted transitions through xgboost.train: edge DMatrix, objective, prediction, model files."""

import pickle

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xgboost as xgb

import structboost as sb
import structboost.xgboost as sbx
from structboost.objectives.chain import SequenceBatch
from structboost.objectives.constraints import from_masks
from structboost.objectives.edge import edge_row_counts

K = 3
TREE = {"max_depth": 3, "min_child_weight": 0.1}


def switching_sequences(n_seq, seed):
    """Labels that keep or rotate according to an input feature: transitions depend on X."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 12, size=n_seq)
    X, y = [], []
    for length in lengths:
        labels = [int(rng.integers(K))]
        switch = rng.normal(size=length)
        for t in range(1, length):
            labels.append(labels[-1] if switch[t] > 0 else (labels[-1] + 1) % K)
        labels = np.array(labels)
        X.append(np.column_stack([labels + rng.normal(scale=1.2, size=length), switch]))
        y.append(labels)
    return np.concatenate(X), np.concatenate(y), lengths


@pytest.fixture(scope="module")
def data(single_threaded):
    return {"train": switching_sequences(60, 0), "test": switching_sequences(30, 1)}


def train(data, mode="gbcrf", rounds=12, eta=1.0, **kw):
    obj = sbx.edge_crf_objective(K, mode=mode, **kw)
    dtrain = sbx.edge_dmatrix(*data["train"], num_labels=K)
    dtest = sbx.edge_dmatrix(*data["test"], num_labels=K)
    log = {}
    booster = xgb.train(
        sb.xgb_params(K, eta=eta, **TREE), dtrain, num_boost_round=rounds, obj=obj,
        custom_metric=obj.metric, evals=[(dtrain, "train"), (dtest, "test")],
        evals_result=log, verbose_eval=False, callbacks=[obj.callback()],
    )  # fmt: skip
    return booster, obj, dtrain, dtest, log


def test_edge_dmatrix_layout(data):
    X, y, lengths = data["train"]
    dmat = sbx.edge_dmatrix(X, y, lengths, num_labels=K)
    counts = edge_row_counts(lengths, K)
    assert dmat.num_row() == counts.sum() == len(lengths) + (len(y) - len(lengths)) * K
    np.testing.assert_array_equal(np.diff(dmat.get_uint_info("group_ptr")), counts)
    assert dmat.feature_types == ["q", "q", "c"]
    with pytest.raises(ValueError, match="one entry per position"):
        sbx.edge_dmatrix(X, y[:-1], lengths, num_labels=K)


def test_gbcrf_training_nll_never_rises_at_learning_rate_one(data):
    _, _, _, _, log = train(data, eta=1.0)
    nll = np.array(log["train"]["crf-nll"])
    assert (np.diff(nll) <= 1e-9).all()
    assert nll[-1] < 0.6 * nll[0]


def test_treecrf_mode_trains(data):
    _, _, _, _, log = train(data, mode="treecrf", eta=0.3)
    assert log["train"]["crf-nll"][-1] < log["train"]["crf-nll"][0]


def test_trees_split_on_the_previous_label_and_beat_linear_transitions():
    (X, y, lengths), test = switching_sequences(300, 2), switching_sequences(100, 3)
    params = sb.xgb_params(K, eta=1.0, max_depth=3)
    # A fixed gamma = 2 (LogitBoost's curvature, not a safe bound) learns fastest here.
    obj = sbx.edge_crf_objective(K, hessian_bound=2.0)
    dtrain = sbx.edge_dmatrix(X, y, lengths, num_labels=K)
    booster = xgb.train(params, dtrain, 20, obj=obj, callbacks=[obj.callback()])
    assert booster.get_score(importance_type="total_gain").get("prev_label", 0) > 0
    edge_acc = (sb.predict(booster, test[0], lengths=test[2]) == test[1]).mean()
    obj = sb.crf_objective(K)
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    linear = xgb.train(params, dtrain, 20, obj=obj, callbacks=[obj.callback()])
    linear_acc = (sb.predict(linear, test[0], lengths=test[2]) == test[1]).mean()
    assert edge_acc > linear_acc + 0.05, (edge_acc, linear_acc)


def test_prediction_paths_agree(data, tmp_path):
    booster, obj, _, dtest, _ = train(data)
    X, y, lengths = data["test"]
    batch = SequenceBatch.build(y, lengths, K)
    margins = booster.predict(dtest, output_margin=True)
    labels = sb.predict(booster, dtest)
    np.testing.assert_array_equal(labels, obj.crf.decode(margins, batch))
    np.testing.assert_array_equal(sb.predict(booster, X, lengths=lengths), labels)
    np.testing.assert_array_equal(sb.predict(booster, sp.csr_matrix(X), lengths=lengths), labels)
    marg = sb.predict_marginals(booster, X, lengths=lengths)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0)
    np.testing.assert_allclose(
        -sb.sequence_log_likelihood(booster, dtest), obj.crf.sequence_nll(margins, batch)
    )
    path = tmp_path / "edge.json"
    booster.save_model(path)
    loaded = xgb.Booster(model_file=str(path))
    np.testing.assert_array_equal(sb.predict(loaded, X, lengths=lengths), labels)
    np.testing.assert_array_equal(sb.predict(pickle.loads(pickle.dumps(booster)), dtest), labels)
    with pytest.raises(ValueError, match="edge_dmatrix"):
        sb.predict(booster, xgb.DMatrix(X, group=lengths))


def test_dataframe_input(data):
    X, y, lengths = data["train"]
    frame = pd.DataFrame(X, columns=["obs", "switch"])
    obj = sbx.edge_crf_objective(K)
    dtrain = sbx.edge_dmatrix(frame, y, lengths, num_labels=K)
    booster = xgb.train(sb.xgb_params(K, **TREE), dtrain, 3, obj=obj, callbacks=[obj.callback()])
    np.testing.assert_array_equal(
        sb.predict(booster, frame, lengths=lengths), sb.predict(booster, dtrain)
    )


def test_constrained_decoding_never_makes_a_forbidden_move(data):
    booster, *_ = train(data)
    X, _, lengths = data["test"]
    allowed = np.ones((K, K), dtype=bool)
    allowed[0, 1] = allowed[1, 2] = allowed[2, 0] = False  # the rotation the data uses
    labels = sb.predict(booster, X, lengths=lengths, allowed_transitions=from_masks(allowed))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    inner = np.setdiff1d(np.arange(1, len(labels)), offsets[1:-1])
    assert allowed[labels[inner - 1], labels[inner]].all()
    marg = sb.predict_marginals(booster, X, lengths=lengths, allowed_transitions=allowed)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0)


def test_training_under_constraints(data):
    X, y, lengths = data["train"]
    dtrain = sbx.edge_dmatrix(X, y, lengths, num_labels=K)
    allowed = np.ones((K, K), dtype=bool)
    allowed[0, 1] = False  # the data make this move
    obj = sbx.edge_crf_objective(K, allowed_transitions=allowed)
    with pytest.raises(ValueError, match="forbid"):
        xgb.train(sb.xgb_params(K, **TREE), dtrain, 1, obj=obj)
    allowed = np.ones((K, K), dtype=bool)
    allowed[0, 2] = False  # a move the rotating labels never make
    obj = sbx.edge_crf_objective(K, allowed_transitions=allowed)
    booster = xgb.train(sb.xgb_params(K, **TREE), dtrain, 5, obj=obj, callbacks=[obj.callback()])
    Xt, _, lt = data["test"]
    labels = sb.predict(booster, Xt, lengths=lt)  # the model carries its constraints
    offsets = np.concatenate(([0], np.cumsum(lt)))
    inner = np.setdiff1d(np.arange(1, len(labels)), offsets[1:-1])
    assert allowed[labels[inner - 1], labels[inner]].all()
    assert not ((labels[inner - 1] == 0) & (labels[inner] == 2)).any()
