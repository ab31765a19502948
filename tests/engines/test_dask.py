"""Distributed training on a loopback LocalCluster equals single-process training."""

import json
import os
import sys
import threading

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import structboost as sb

dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
sbd = pytest.importorskip("structboost.engines.dask")
from structboost.estimators.dask import DaskXGBCRFClassifier  # noqa: E402

K = 3
PARAMS = sb.xgb_params(K, max_depth=2, eta=0.5, nthread=1)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster, distributed.Client(cluster) as c:
        yield c


def _data(m=40, seed=0):
    """Sticky label chains with noisy one-hot features on a 0.1 grid (exact quantile cuts)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 9, m)
    labels = []
    for length in lengths:
        state = rng.integers(K)
        for _ in range(length):
            state = rng.integers(K) if rng.random() < 0.3 else state
            labels.append(state)
    y = np.array(labels)
    X = np.round(np.eye(K)[y] + rng.normal(0, 0.8, (len(y), K)), 1)
    return X, y, lengths


def _chunks(lengths, cuts):
    """Rows per partition when partitions end after the sequences in ``cuts``."""
    ends = np.concatenate(([0], np.cumsum(lengths)))[list(cuts) + [len(lengths)]]
    return tuple(int(c) for c in np.diff(np.concatenate(([0], ends))))


def _arrays(X, y, lengths, cuts):
    chunks = _chunks(lengths, cuts)
    seq = np.repeat(np.arange(len(lengths)), lengths)
    return (
        da.from_array(X, chunks=(chunks, -1)),
        da.from_array(y, chunks=(chunks,)),
        da.from_array(seq, chunks=(chunks,)),
    )


def _frame(X, y, lengths, cuts):
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(K)])
    frame["seq"] = [f"s{i}" for i in np.repeat(np.arange(len(lengths)), lengths)]
    frame["label"] = np.array(["a", "b", "c"])[y]
    chunks = _chunks(lengths, cuts)
    starts = np.concatenate(([0], np.cumsum(chunks)))
    pieces = [frame.iloc[a:b] for a, b in zip(starts[:-1], starts[1:])]
    divisions = list(starts[:-1]) + [len(frame) - 1]
    return dd.from_map(lambda piece: piece, pieces, divisions=divisions), frame


def _single(X, y, lengths, solver, rounds=4, valid=None):
    """One-process booster, its training DMatrix and metric history (on ``valid`` or train)."""
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    watched = dtrain if valid is None else xgb.DMatrix(valid[0], label=valid[1], group=valid[2])
    obj = sb.crf_objective(K, transition_solver=solver)
    history = {}
    booster = xgb.train(
        PARAMS, dtrain, rounds, obj=obj, custom_metric=obj.metric, evals=[(watched, "watched")],
        evals_result=history, callbacks=[obj.callback()], verbose_eval=False,
    )
    return booster, dtrain, history["watched"]["crf-nll"]


def _transitions(booster):
    return sb.engines.xgboost.load_state(booster)[2].to_vector()


@pytest.mark.parametrize("solver", ["lbfgs", "newton", "majorize"])
def test_distributed_training_equals_one_process(client, solver):
    X, y, lengths = _data()
    Xd, yd, sd = _arrays(X, y, lengths, cuts=(13, 27))
    dtrain = sbd.sequence_dmatrix(client, Xd, yd, groups=sd)
    out = sbd.train(
        client, PARAMS, dtrain, sb.crf_objective(K, transition_solver=solver), 4,
        evals=[(dtrain, "train")],
    )
    booster, single_dtrain, history = _single(X, y, lengths, solver)
    np.testing.assert_allclose(_transitions(out["booster"]), _transitions(booster), atol=1e-8)
    np.testing.assert_allclose(
        out["booster"].predict(single_dtrain, output_margin=True),
        booster.predict(single_dtrain, output_margin=True),
        atol=1e-5,
    )
    np.testing.assert_allclose(out["history"]["train"]["crf-nll"], history, rtol=1e-6)
    labels = sbd.predict(client, out["booster"], Xd, groups=sd)
    assert labels.chunks == Xd.chunks[:1]
    np.testing.assert_array_equal(labels.compute(), sb.predict(booster, single_dtrain))
    marginals = sbd.predict_marginals(client, out["booster"], Xd, groups=sd).compute()
    np.testing.assert_allclose(marginals, sb.predict_marginals(booster, single_dtrain), atol=1e-8)


def test_a_worker_without_training_rows_takes_part(client):
    X, y, lengths = _data(m=20, seed=1)
    valid = _data(m=8, seed=6)
    a, b = sorted(client.scheduler_info()["workers"])
    train_parts = [client.persist(c, workers=[a]) for c in _arrays(X, y, lengths, cuts=())]
    valid_parts = [client.persist(c, workers=[b]) for c in _arrays(*valid, cuts=())]
    dtrain = sbd.sequence_dmatrix(client, *train_parts[:2], groups=train_parts[2])
    dvalid = sbd.sequence_dmatrix(client, *valid_parts[:2], groups=valid_parts[2])
    # Both workers train; b holds no training rows, a no validation rows.
    assert list(dtrain.worker_map) == [a] and list(dvalid.worker_map) == [b]
    out = sbd.train(client, PARAMS, dtrain, sb.crf_objective(K), 3, evals=[(dvalid, "valid")])
    booster, _, history = _single(X, y, lengths, "lbfgs", rounds=3, valid=valid)
    np.testing.assert_allclose(_transitions(out["booster"]), _transitions(booster), atol=1e-8)
    np.testing.assert_allclose(out["history"]["valid"]["crf-nll"], history, rtol=1e-6)


def test_estimator_on_a_dataframe_with_string_labels(client, tmp_path):
    X, y, lengths = _data(m=30, seed=2)
    train, frame = _frame(X, y, lengths, cuts=(9, 21))
    est = DaskXGBCRFClassifier(
        n_estimators=6, max_depth=2, learning_rate=0.5, n_jobs=1, early_stopping_rounds=2
    )
    est.fit(train.drop(columns="label"), train["label"], groups="seq",
            eval_set=[(train.drop(columns="label"), train["label"], "seq")])
    assert list(est.classes_) == ["a", "b", "c"]
    single = sb.XGBCRFClassifier(
        n_estimators=6, max_depth=2, learning_rate=0.5, n_jobs=1, early_stopping_rounds=2
    ).fit(frame.drop(columns="label"), frame["label"], groups="seq",
          eval_set=[(frame.drop(columns="label"), frame["label"], "seq")])
    assert est.best_iteration_ == single.best_iteration_
    np.testing.assert_allclose(est.transitions_, single.transitions_, atol=1e-8)
    predicted = est.predict(train.drop(columns="label"), groups="seq")
    assert predicted.npartitions == train.npartitions
    pd.testing.assert_index_equal(predicted.compute().index, frame.index)
    np.testing.assert_array_equal(
        predicted.compute().to_numpy(), single.predict(frame.drop(columns="label"), groups="seq")
    )
    marginals = est.predict_marginals(train.drop(columns="label"), groups="seq").compute()
    assert list(marginals.columns) == ["a", "b", "c"]
    # The JSON model file: a bit-identical round trip that keeps the loader's client.
    est.save_model(tmp_path / "dask.json")
    back = DaskXGBCRFClassifier()
    back.client = client
    assert back.load_model(tmp_path / "dask.json") is back and back.client is client
    assert back.get_params() == est.get_params() and back.evals_result_ == est.evals_result_
    pd.testing.assert_frame_equal(
        back.predict_marginals(train.drop(columns="label"), groups="seq").compute(), marginals
    )
    with pytest.raises(ValueError, match="holds a DaskXGBCRFClassifier"):
        sb.XGBCRFClassifier().load_model(tmp_path / "dask.json")
    doc = json.loads((tmp_path / "dask.json").read_text())
    doc["classes"]["values"].append("d")
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"{tmp_path / 'bad.json'}.*4 labels"):
        back.load_model(tmp_path / "bad.json")


def test_estimator_metric_and_named_eval_set(client):
    X, y, lengths = _data(m=20, seed=5)
    train, frame = _frame(X, y, lengths, cuts=(10,))
    features, labels = train.drop(columns="label"), train["label"]
    est = DaskXGBCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1, eval_metric="crf-error")
    est.fit(features, labels, groups="seq", verbose=False,
            eval_set=[{"X": features, "y": labels, "groups": "seq", "name": "train"}])
    single = sb.XGBCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1, eval_metric="crf-error")
    single.fit(frame.drop(columns="label"), frame["label"], groups="seq", verbose=False,
               eval_set=[{"X": frame.drop(columns="label"), "y": frame["label"],
                          "groups": "seq", "name": "train"}])  # fmt: skip
    assert list(est.evals_result_) == ["train"] and list(est.evals_result_["train"]) == [
        "crf-error"
    ]
    np.testing.assert_allclose(est.evals_result_["train"]["crf-error"],
                               single.evals_result_["train"]["crf-error"], atol=1e-6)  # fmt: skip
    for metric in (lambda y_true, y_proba: 0.0, ["crf-nll", "crf-error"]):
        with pytest.raises(ValueError, match="one metric summed over the workers"):
            est.set_params(eval_metric=metric).fit(features, labels, groups="seq")
    unseen = labels.map(lambda v: "never" if v == labels.head(1).iloc[0] else v, meta=labels)
    with pytest.raises(ValueError, match=r"eval_set\[0\] has labels not seen in y"):
        est.set_params(eval_metric="crf-nll").fit(
            features, labels, groups="seq", eval_set=[(features, unseen, "seq")]
        )


def test_a_split_sequence_raises_naming_it(client):
    X, y, lengths = _data(m=10, seed=3)
    train, _ = _frame(X, y, lengths, cuts=(4,))
    shifted = list(train.divisions)
    shifted[1] += 1  # the first row of sequence s4 moves into partition 0
    split = train.repartition(divisions=shifted)
    with pytest.raises(ValueError, match="sequence 's4' spans partitions 0 and 1"):
        sbd.sequence_dmatrix(client, split.drop(columns="label"), split["label"], groups="seq")


def test_weights_and_missing_groups_are_refused(client):
    X, y, lengths = _data(m=6, seed=4)
    Xd, yd, sd = _arrays(X, y, lengths, cuts=(3,))
    with pytest.raises(ValueError, match="weights are not supported"):
        sbd.sequence_dmatrix(client, Xd, yd, groups=sd, weight=yd)
    with pytest.raises(ValueError, match="groups .* is required"):
        sbd.sequence_dmatrix(client, Xd, yd, groups=None)


class _DieAtRound(xgb.callback.TrainingCallback):
    """Ends the process of rank 1 after round 2, as a crashed worker would."""

    def after_iteration(self, model, epoch, evals_log):
        if epoch == 2 and xgb.collective.get_rank() == 1:
            os._exit(1)
        return False


def test_a_worker_killed_mid_training_raises_instead_of_hanging(client):
    X, y, lengths = _data(m=20, seed=5)
    Xd, yd, sd = _arrays(X, y, lengths, cuts=(10,))
    dtrain = sbd.sequence_dmatrix(client, Xd, yd, groups=sd)
    outcome = {}

    def run():
        try:
            sbd.train(client, PARAMS, dtrain, sb.crf_objective(K), 50, callbacks=[_DieAtRound()])
        except Exception as err:  # noqa: BLE001 - the outcome is checked below
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "training hung after a worker died"
    assert isinstance(outcome.get("error"), RuntimeError)
    assert "a worker died or lost its connection" in str(outcome["error"])


def _objective_threads(nthread):
    """On a worker: the ``nthread`` a distributed objective runs its kernels with."""
    dobj = sbd.distributed_objective(sb.crf_objective(K, nthread=nthread))
    X, y, lengths = _data(m=3)
    dobj.batch(xgb.DMatrix(X, label=y, group=lengths))
    return dobj.crf.spec.nthread


def test_the_objective_runs_on_the_workers_threads_without_environment_variables(client):
    """Each worker process runs one thread (the cluster sets no NUMBA_NUM_THREADS): numba's
    default pool of every core in each of two worker processes oversubscribed two cores."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        assert client.submit(_objective_threads, None, pure=False).result() == 1
        assert client.submit(_objective_threads, 3, pure=False).result() == 3  # the user's choice
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert sbd.worker_threads() is None and _objective_threads(None) is None  # not on a worker
