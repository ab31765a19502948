"""XGBoost wiring for boosted, input-dependent transitions (:mod:`structboost.objectives.edge`).

One booster scores edge rows: :func:`edge_dmatrix` repeats each position's
features once per possible previous label, appended as the categorical
column ``prev_label`` (``K``: the start symbol), so a sequence of length
``L`` becomes ``1 + (L - 1) K`` rows, one group. Labels and lengths reach
the objective through a registry keyed weakly by the ``DMatrix``. The fixed
transition, start and end masks live on the booster as the JSON attribute
``structboost_edge_crf``, which also marks the model for
:func:`structboost.predict`.
"""

import weakref
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import xgboost as xgb

from .._typing import ArrayLike
from ..objectives.chain import SequenceBatch
from ..objectives.edge import EdgeCRFObjective, edge_positions, edge_potentials, edge_row_counts
from ..objectives.params import EDGE_PARAMS, ObjectiveSpec, fill_doc
from ..sequences import offsets_from_lengths, resolve_lengths
from ..transitions.chain import TransitionParams
from .xgboost import XGBCRFObjective, booster_margins, load_state
from .validate import check_feature_count

EDGE_STATE_KEY = "structboost_edge_crf"
#: Name of the appended previous-label column.
PREV_LABEL = "prev_label"
_EDGE_DATA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def edge_features(X, lengths, num_labels, categorical=True):
    """Each position's features ``X (n, d)`` (numpy, pandas or sparse) once per previous label.

    Returns
    -------
    rows : (r, d + 1) same kind as ``X``
        Row ``(t, u)``: ``X[t]`` and ``u`` (``K`` on first rows; categorical or numeric) last.
    feature_types : list of str or None
        XGBoost feature types for numpy and sparse input.
    """
    position, previous = edge_positions(lengths, num_labels)
    if isinstance(X, pd.DataFrame):
        if PREV_LABEL in X.columns:
            raise ValueError(f"X already has a column {PREV_LABEL!r}; rename it.")
        rows = X.iloc[position].reset_index(drop=True)
        codes = previous.astype(np.float64)
        if categorical:
            codes = pd.Categorical(previous, categories=range(int(num_labels) + 1))
        rows[PREV_LABEL] = codes
        return rows, None
    if sp.issparse(X):
        column = sp.csr_matrix(
            (previous.astype(np.float64), (np.arange(position.size), np.zeros(position.size, int))),
            shape=(position.size, 1),
        )
        rows = sp.hstack([sp.csr_matrix(X)[position], column], format="csr")
    else:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (one row per position); got shape {X.shape}.")
        rows = np.column_stack([X[position], previous.astype(np.float64)])
    return rows, ["q"] * (rows.shape[1] - 1) + ["c" if categorical else "q"]


def edge_dmatrix(X: Any, label: ArrayLike | None = None, lengths: ArrayLike | None = None, *,
                 num_labels: int, groups: ArrayLike | None = None, weight: ArrayLike | None = None,
                 feature_names: list[str] | None = None, categorical: bool = True,
                 **kwargs: Any) -> xgb.DMatrix:
    """Build the edge-row DMatrix of boosted transitions and register its sequences.

    Parameters
    ----------
    X : (n, d) numpy array, pandas DataFrame or scipy sparse matrix
        One row per position, the rows of a sequence contiguous.
    label : (n,) array-like of int, optional
        Labels ``0..K-1`` per position.
    lengths : (m,) array-like of int, optional
        Positions per sequence (or ``groups``, a per-position sequence id).
    num_labels : int
    weight : (m,) array-like, optional
        One weight per sequence.
    feature_names : list of str, optional
        Names of numpy or sparse ``X``'s columns (``prev_label`` appended).
    categorical : bool, default True
        The previous label as a categorical feature; pass False with
        ``multi_output_tree``, which does not split on categories.
    **kwargs
        Passed to :class:`xgboost.DMatrix`.

    Returns
    -------
    xgboost.DMatrix
        ``1 + (L - 1) K`` rows per sequence, grouped by sequence; row
        ``(t, u)`` has label ``label[t]``.
    """
    k = int(num_labels)
    if k < 1:
        raise ValueError(f"num_labels must be a positive integer; got {num_labels!r}.")
    lengths = resolve_lengths(X.shape[0], groups=groups, lengths=lengths)
    rows, types = edge_features(X, lengths, k, categorical)
    position, _ = edge_positions(lengths, k)
    labels = None if label is None else np.asarray(label)
    if labels is not None and labels.shape != (X.shape[0],):
        raise ValueError(
            f"label must have one entry per position ({X.shape[0]}); got shape {labels.shape}."
        )
    if isinstance(rows, pd.DataFrame):
        feature_names = None  # the frame's columns
    else:
        if feature_names is None:
            feature_names = [f"f{i}" for i in range(rows.shape[1] - 1)]
        feature_names = list(feature_names) + [PREV_LABEL]
    dmat = xgb.DMatrix(
        rows, label=None if labels is None else labels[position], group=edge_row_counts(lengths, k),
        weight=weight, feature_names=feature_names, feature_types=types,
        enable_categorical=categorical, **kwargs
    )
    _EDGE_DATA[dmat] = (lengths, labels, k)
    return dmat


def registered(dmat, num_labels):
    """Positions per sequence ``(m,)`` and labels ``(n,)`` (or None) of an edge DMatrix."""
    entry = _EDGE_DATA.get(dmat)
    if entry is None:
        raise ValueError(
            "this DMatrix was not built by structboost.xgboost.edge_dmatrix: a model with boosted "
            "transitions scores edge rows; build the data with "
            f"structboost.xgboost.edge_dmatrix(X, y, lengths, num_labels={num_labels})."
        )
    lengths, labels, k = entry
    if k != num_labels:
        raise ValueError(
            f"the DMatrix was built with num_labels={k} but the model has {num_labels} labels."
        )
    return lengths, labels


class XGBEdgeCRFObjective(XGBCRFObjective):
    """A boosted-transition CRF objective for ``xgboost.train(obj=...)`` (build with
    :func:`edge_crf_objective`; G and H ``(r, K)`` over edge rows).
    """

    state_key = EDGE_STATE_KEY
    grad_layout = {}  # the edge-row objective returns fresh float64 G and H

    def _build_batch(self, dmat):
        lengths, labels = registered(dmat, self.num_labels)
        if labels is None:
            raise ValueError("the edge DMatrix has no labels: build it with edge_dmatrix(X, y, ...).")
        return SequenceBatch.build(labels, lengths, self.num_labels, dmat.get_weight())


@fill_doc(*EDGE_PARAMS)
def edge_crf_objective(
    num_labels: int, spec: ObjectiveSpec | None = None, **params: Any
) -> XGBEdgeCRFObjective:
    """Build a CRF objective with boosted, input-dependent transitions for ``xgboost.train``.

    Parameters
    ----------
    num_labels : int
        Number of labels K; the booster needs ``num_target=K``.
    spec : ObjectiveSpec, optional
        Settings (``transitions_from="input"``) the keywords below change.
        Modes ``"gbcrf"`` (the edge bound of Theorem 4.2) and ``"treecrf"``;
        a transition-solver setting raises: nothing is refit here.
    {objective_params}

    Returns
    -------
    XGBEdgeCRFObjective
    """
    return XGBEdgeCRFObjective(EdgeCRFObjective(num_labels, spec, **params))


def is_edge_model(booster):
    """Whether an XGBoost booster was trained with boosted transitions."""
    return booster.attr(EDGE_STATE_KEY) is not None


def edge_inputs(booster, data, groups, lengths):
    """Position-level chain inputs of a boosted-transition model.

    Parameters
    ----------
    booster : xgboost.Booster
    data : xgboost.DMatrix from :func:`edge_dmatrix`, or (n, d) features
        Features come with ``groups`` or ``lengths``.
    groups, lengths : array-like, optional

    Returns
    -------
    unary : (n, K) float64
    lengths : (m,) int64
    params : TransitionParams
        Per-position ``transitions (n, K, K)`` (boosted scores plus the masks)
        and the stored start and end scores.
    num_labels : int
    labels : (n,) array or None
    """
    num_labels, _, masks = load_state(booster, EDGE_STATE_KEY, factory="edge_crf_objective")
    if isinstance(data, xgb.DMatrix):
        stored, labels = registered(data, num_labels)
        dmat = data
        lengths = stored if groups is None and lengths is None else lengths
        lengths = resolve_lengths(int(stored.sum()), groups=groups, lengths=lengths)
        if not np.array_equal(lengths, stored):
            raise ValueError(
                "lengths/groups disagree with the sequences the edge DMatrix was built with; "
                "leave them out."
            )
    else:
        n = data.shape[0]
        lengths = resolve_lengths(n, groups=groups, lengths=lengths)
        check_feature_count(data.shape[1], booster.num_features() - 1)
        names, types = booster.feature_names, booster.feature_types
        dmat = edge_dmatrix(
            data, lengths=lengths, num_labels=num_labels,
            feature_names=None if names is None or isinstance(data, pd.DataFrame) else names[:-1],
            categorical=types is None or types[-1] == "c",
        )  # fmt: skip
        labels = None
    check_feature_count(dmat.num_col(), booster.num_features(), "the edge DMatrix")
    margins = np.asarray(booster_margins(booster, dmat), dtype=np.float64).reshape(-1, num_labels)
    unary, trans = edge_potentials(margins, offsets_from_lengths(lengths), num_labels)
    trans += masks.transitions
    return unary, lengths, TransitionParams(trans, masks.start, masks.end), num_labels, labels
