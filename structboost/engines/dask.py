"""Distributed chain-CRF boosting on Dask with XGBoost.

Each worker's objective sees its own sequences; the transition step's sums
and the metric cross the workers in XGBoost's collective
(:func:`allreduce_sum`), so every worker takes the same step. Sequences must
not straddle partitions; ``qid`` is the global sequence index, in order.
Prediction decodes each partition where it lies. (LightGBM exposes no
collective on user arrays.)
"""

import copy
import weakref

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from xgboost import collective
from xgboost.core import XGBoostError
from xgboost import dask as dxgb

from .. import _config
from ..inference.chain import map_labels, posterior
from ..objectives.chain import SequenceBatch
from ..sequences import lengths_from_groups, offsets_from_lengths
from .predict import DECODINGS
from .xgboost import XGBCRFObjective, kept_rounds, load_state


def allreduce_sum(values):
    """Sum ``values (p,)`` over the workers of the running XGBoost collective."""
    return collective.allreduce(np.ascontiguousarray(values, dtype=np.float64), collective.Op.SUM)


def worker_threads():
    """Threads of the Dask worker running the caller, or None outside a worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # ValueError: not on a worker
        return None
    return getattr(getattr(worker, "state", worker), "nthreads", None)


class DaskXGBCRFObjective(XGBCRFObjective):
    """An :class:`~structboost.engines.xgboost.XGBCRFObjective` summing over the workers of
    ``xgboost.dask`` (:func:`distributed_objective`); kernels on the worker's threads unless
    ``nthread`` is set.
    """

    def __init__(self, crf):
        super().__init__(crf)
        crf.allreduce = allreduce_sum

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_batches"]  # a weak cache of this process's DMatrix objects
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._batches = weakref.WeakKeyDictionary()

    def _build_batch(self, dmat):
        threads = worker_threads() if self.crf.spec.nthread is None else None
        if threads is not None:  # the kernels on the worker's threads
            self.crf.spec = self.crf.spec.replace(nthread=threads)
        if dmat.num_row() == 0:  # a worker without partitions: no labels, no groups
            empty = np.zeros(0, dtype=np.int64)
            return SequenceBatch.build(empty, empty, self.num_labels)
        return super()._build_batch(dmat)


def distributed_objective(obj):
    """A :class:`DaskXGBCRFObjective` deep copy of ``obj`` (from :func:`structboost.crf_objective`)."""
    if not isinstance(obj, XGBCRFObjective):
        raise ValueError(
            f"distributed training needs a chain-CRF objective from structboost.crf_objective; "
            f"got {type(obj).__name__}."
        )
    if callable(obj.spec.metric):
        raise ValueError(
            "a callable metric sees one worker's rows only: distributed training reports "
            'metric="crf-nll" or "crf-error", summed over the workers.'
        )
    return DaskXGBCRFObjective(copy.deepcopy(obj.crf))


# -- sequences and partitions ---------------------------------------------------------------


def split_groups(X, groups):
    """``(features, ids)`` of a dask DataFrame or Array ``X (n, d)``: ``groups`` is a column name
    (dropped from the features) or the ids ``(n,)``, partitioned like ``X``.
    """
    if not isinstance(X, (dd.DataFrame, da.Array)):
        raise ValueError(
            f"X must be a dask DataFrame or dask Array; got {type(X).__name__}. Use "
            "dask.dataframe.from_pandas(frame, npartitions=...) or dask.array.from_array."
        )
    if isinstance(groups, str):
        if not isinstance(X, dd.DataFrame) or groups not in X.columns:
            raise ValueError(
                f"groups={groups!r} names a column, but X has no such column: pass the name of "
                "X's sequence-id column or the ids as a dask Series/Array."
            )
        return X.drop(columns=groups), X[groups]
    if not isinstance(groups, (dd.Series, da.Array)):
        raise ValueError(
            "groups (the per-row sequence id) is required: the name of a column of X or a "
            f"dask Series/Array partitioned like X; got {type(groups).__name__}."
        )
    if groups.npartitions != X.npartitions:
        raise ValueError(
            f"groups has {groups.npartitions} partitions but X has {X.npartitions}: partition "
            "both alike (the sequence ids of a row must lie in the row's partition)."
        )
    return X, groups


def _partitions(collection):
    """One delayed object per row partition of a dask collection."""
    return list(np.ravel(collection.to_delayed()))


def _runs(ids):
    """The first id of every sequence of one partition, and their lengths."""
    ids = np.asarray(ids)
    lengths = lengths_from_groups(ids)
    return ids[offsets_from_lengths(lengths)[:-1]], lengths


def sequence_layout(ids):
    """Sequence lengths ``(m_i,)`` of every partition of ``ids (n,)``; ``ValueError`` naming a
    sequence split across partitions.
    """
    runs = dask.compute(*[dask.delayed(_runs)(part) for part in _partitions(ids)])
    firsts = np.concatenate([np.asarray(first, dtype=object) for first, _ in runs])
    owner = np.repeat(np.arange(len(runs)), [len(first) for first, _ in runs])
    values, inverse, counts = np.unique(firsts.astype(str), return_inverse=True, return_counts=True)
    if (counts > 1).any():
        dup = int(np.flatnonzero(counts > 1)[0])
        where = owner[inverse == dup]
        name = firsts[np.flatnonzero(inverse == dup)[0]]
        raise ValueError(
            f"sequence {name!r} spans partitions {where[0]} and {where[1]}: every sequence must "
            "lie in one partition. Repartition at sequence boundaries, e.g. "
            "frame.set_index(sequence_id_column) (rows of a sequence stay in order only if "
            "the index sorts them), or rechunk a dask array at sequence starts."
        )
    return [lengths for _, lengths in runs]


def _qid(lengths, start):
    """Global sequence index of every row of one partition."""
    return np.repeat(np.arange(start, start + len(lengths), dtype=np.int64), lengths)


def sequence_dmatrix(client, X, label=None, *, groups, **kwargs):
    """An ``xgboost.dask.DaskDMatrix`` whose partitions hold whole sequences, ``qid`` the global
    sequence index.

    Parameters
    ----------
    client : distributed.Client or None
        None for Dask's default client.
    X : dask DataFrame or dask Array, shape (n, d)
        One row per position, the rows of a sequence contiguous and in order.
    label : dask Series or dask Array (n,), optional
        Integer labels ``0..K-1``, partitioned like ``X``.
    groups : str, dask Series or dask Array (n,)
        Per-row sequence id (see :func:`split_groups`).
    **kwargs
        Other ``DaskDMatrix`` arguments; weights are refused (XGBoost's dask
        interface has no per-group weights).
    """
    if kwargs.get("weight") is not None:
        raise ValueError(
            "weights are not supported in distributed training: xgboost.dask cannot store "
            "per-sequence weights next to qid. Train without weight=."
        )
    features, ids = split_groups(X, groups)
    layout = sequence_layout(ids)
    starts = np.concatenate(([0], np.cumsum([len(lengths) for lengths in layout])))
    qid = da.concatenate(
        [
            da.from_delayed(
                dask.delayed(_qid)(lengths, start), shape=(int(lengths.sum()),), dtype=np.int64
            )
            for lengths, start in zip(layout, starts)
        ]
    )
    dmat = dxgb.DaskDMatrix(client, features, label, qid=qid, **kwargs)
    # Each worker's partitions in global order: qid stays sorted (XGBoost's sort is unstable).
    for parts in dmat.worker_map.values():
        parts.sort(key=lambda part: dmat.partition_order[part.key])
    return dmat


# Operations whose failure means a worker of the ring went away.
_COLLECTIVE_OPS = ("Allreduce", "Allgather", "Broadcast")


def train(client, params, dtrain, obj, num_boost_round=10, *, evals=None,
          early_stopping_rounds=None, callbacks=(), verbose_eval=False, **kwargs):
    """``xgboost.dask.train`` with a chain-CRF objective, exact over the workers.

    Parameters
    ----------
    client : distributed.Client or None
    params : dict
        From :func:`structboost.xgb_params`.
    dtrain : xgboost.dask.DaskDMatrix
        From :func:`sequence_dmatrix`.
    obj : XGBCRFObjective
        From :func:`structboost.crf_objective`; a :func:`distributed_objective` copy trains.
    num_boost_round, evals, early_stopping_rounds, callbacks, verbose_eval, **kwargs
        As in ``xgboost.dask.train`` (the last of ``evals`` drives early stopping).

    Returns
    -------
    dict
        ``{"booster": xgboost.Booster, "history": dict}``; the booster carries
        the transitions (of the best iteration after early stopping).
    """
    dobj = distributed_objective(obj)
    try:
        return dxgb.train(
            client, params, dtrain, num_boost_round, evals=evals, obj=dobj,
            custom_metric=dobj.metric, early_stopping_rounds=early_stopping_rounds,
            callbacks=[dobj.callback(), *callbacks], verbose_eval=verbose_eval, **kwargs
        )
    except XGBoostError as err:
        failed = [line for line in str(err).splitlines() if any(op in line for op in _COLLECTIVE_OPS)]
        if not failed:
            raise
        raise RuntimeError(
            "distributed training stopped: a worker died or lost its connection during a "
            f"collective operation, so the others cannot go on ({failed[0].strip(' -')}). Train "
            "again once the cluster is whole; pass coll_cfg=xgboost.collective.Config("
            "timeout=seconds) to bound the wait for a worker that hangs without dying."
        ) from err


# -- prediction --------------------------------------------------------------------------------


def _decode(margins, lengths, params, decode):
    """Labels ``(n_i,)`` or marginals ``(n_i, K)`` of one partition from its margins."""
    u = np.ascontiguousarray(np.asarray(margins, dtype=np.float64).reshape(int(lengths.sum()), -1))
    offsets = offsets_from_lengths(lengths)
    with _config.threads(1):  # one task per worker thread: numba's pool would take every core
        if decode == "viterbi":
            return map_labels(u, offsets, params.transitions, params.start, params.end)
        marginals = posterior(u, offsets, params.transitions, params.start, params.end,
                              keep_messages=False)  # fmt: skip
        marginals = marginals.marginals()
    return marginals if decode == "marginals" else marginals.argmax(axis=1).astype(np.int64)


def _frame_part(values, ids):
    """``values`` with the index of the partition's ids."""
    if values.ndim == 1:
        return pd.Series(values, index=ids.index)
    return pd.DataFrame(values, index=ids.index)


def _decode_collection(client, booster, X, groups, decode):
    features, ids = split_groups(X, groups)
    layout = sequence_layout(ids)
    num_labels, _, params = load_state(booster)
    margins = dxgb.inplace_predict(
        client, booster, features, predict_type="margin", iteration_range=(0, kept_rounds(booster))
    )
    if isinstance(margins, (dd.DataFrame, dd.Series)):
        margins = margins.to_dask_array()
    parts = [
        dask.delayed(_decode)(m, lengths, params, decode)
        for m, lengths in zip(_partitions(margins), layout)
    ]
    width = (num_labels,) if decode == "marginals" else ()
    dtype = np.float64 if decode == "marginals" else np.int64
    if isinstance(ids, dd.Series):
        meta = _frame_part(np.zeros((0,) + width, dtype=dtype), ids._meta)
        frames = [
            dask.delayed(_frame_part)(part, id_part)
            for part, id_part in zip(parts, _partitions(ids))
        ]
        return dd.from_delayed(frames, meta=meta, divisions=ids.divisions)
    return da.concatenate(
        [
            da.from_delayed(part, shape=(int(lengths.sum()),) + width, dtype=dtype)
            for part, lengths in zip(parts, layout)
        ]
    )


def predict(client, booster, X, *, groups, decode="viterbi"):
    """Predicted labels of every sequence, computed where the partitions lie.

    Parameters
    ----------
    client : distributed.Client or None
    booster : xgboost.Booster
        Carrying CRF transitions (e.g. from :func:`train`).
    X : dask DataFrame or dask Array, shape (n, d)
    groups : str, dask Series or dask Array (n,)
        Per-row sequence id (see :func:`split_groups`).
    decode : {"viterbi", "marginal"}
        As in :func:`structboost.predict`.

    Returns
    -------
    dask Series (DataFrame input, X's index) or dask Array, (n,) int64
    """
    if decode not in DECODINGS:
        raise ValueError(f"decode must be one of {DECODINGS}; got {decode!r}.")
    return _decode_collection(client, booster, X, groups, decode)


def predict_marginals(client, booster, X, *, groups):
    """Posterior marginals ``P(y_t = k | x)``, computed where the partitions lie (parameters as
    :func:`predict`).

    Returns
    -------
    dask DataFrame (columns ``0..K-1``, X's index) or dask Array, (n, K) float64
    """
    return _decode_collection(client, booster, X, groups, "marginals")
