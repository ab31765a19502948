"""Prediction from a trained booster: Viterbi paths, marginals, log-likelihoods.

Chains (:func:`predict`, :func:`predict_marginals`,
:func:`sequence_log_likelihood`: XGBoost or LightGBM boosters) and trees
(:func:`predict_tree`, :func:`predict_tree_marginals`,
:func:`tree_log_likelihood`: XGBoost boosters trained with
:func:`structboost.xgboost.tree_crf_objective`).

The booster's raw margins are the node scores and it carries its
transitions; sequence boundaries come from the data's groups or from
``lengths=``/``groups=``.
"""

import sys
from typing import Any

import numpy as np

from .._compile_log import reports
from .._typing import ArrayLike, Floats, Ints
from ..inference.chain import map_labels, path_scores, posterior
from ..inference.tree import check_tree, label_scores
from ..inference.tree import map_labels as tree_map_labels
from ..inference.tree import posterior as tree_posterior
from ..objectives.base import DIVERGED, check_margin_values
from ..objectives.constraints import resolve as resolve_constraints
from ..sequences import check_labels, offsets_from_lengths, resolve_lengths
from ..transitions.tree import TreeTransitionParams
from .validate import check_feature_count, check_xgboost_booster

DECODINGS = ("viterbi", "marginal")


def _xgboost_inputs(booster, data, groups, lengths):
    import xgboost as xgb

    from .edge import edge_inputs, is_edge_model
    from .xgboost import booster_margins, dmatrix_lengths, kept_rounds, load_state

    check_xgboost_booster(booster)
    if is_edge_model(booster):
        return edge_inputs(booster, data, groups, lengths)
    num_labels, _, params = load_state(booster)
    if not isinstance(data, xgb.DMatrix) and in_place(data):
        lengths = resolve_lengths(data.shape[0], groups=groups, lengths=lengths)
        check_feature_count(data.shape[1] if data.ndim > 1 else 1, booster.num_features())
        return inplace_margins(booster, data, kept_rounds(booster)), lengths, params, num_labels, None
    if isinstance(data, xgb.DMatrix):
        dmat = data
        if groups is None and lengths is None:
            lengths = dmatrix_lengths(dmat)
        labels = dmat.get_label()
    else:
        dmat = xgb.DMatrix(data)
        labels = None
    lengths = resolve_lengths(dmat.num_row(), groups=groups, lengths=lengths)
    check_feature_count(dmat.num_col(), booster.num_features())
    return booster_margins(booster, dmat), lengths, params, num_labels, labels


def in_place(data):
    """Whether XGBoost's ``inplace_predict`` reads ``data`` as it is (a 2-D float array or CSR)."""
    import scipy.sparse as sp

    if isinstance(data, np.ndarray):
        return data.ndim == 2 and data.dtype.kind == "f"
    return sp.issparse(data) and data.format == "csr"


def inplace_margins(booster, data, rounds):
    """Raw margins ``(n, K)`` of the first ``rounds`` rounds of ``data`` that :func:`in_place` accepts."""
    return booster.inplace_predict(data, predict_type="margin", iteration_range=(0, rounds))


def _lightgbm_inputs(booster, data, groups, lengths):
    import lightgbm as lgb

    from .lightgbm import booster_margins, load_state

    labels = None
    if isinstance(data, lgb.Dataset):
        raw = data.data
        if raw is None or isinstance(raw, (str, bytes)) or hasattr(raw, "__fspath__"):
            raise ValueError(
                "this lightgbm.Dataset holds no in-memory features (freed after training, or "
                "a file): pass the features with lengths= or groups=, or build the Dataset "
                "with free_raw_data=False."
            )
        if groups is None and lengths is None:
            lengths = data.group
        labels = data.label
        data = data.data
    num_labels, _, params = load_state(booster)
    n_rows = data.shape[0]
    lengths = resolve_lengths(n_rows, groups=groups, lengths=lengths)
    check_feature_count(data.shape[1] if len(data.shape) > 1 else 1, booster.num_feature())
    return booster_margins(booster, data), lengths, params, num_labels, labels


def crf_inputs(model, data, *, groups=None, lengths=None, base_margin=None):
    """Margins, boundaries and transitions of a model on some data.

    ``base_margin (n, K)``, if given, is added to the booster's margins.

    Returns
    -------
    margins : (n, K) float64, C-contiguous
    offsets : (m + 1,) int64
    params : TransitionParams
        With per-position ``transitions (n, K, K)`` for a model with
        boosted transitions (:mod:`structboost.engines.edge`).
    labels : (n,) array or None
        The labels stored in the data object, if any.
    """
    # a booster of either engine implies that engine is imported
    xgb, lgb = sys.modules.get("xgboost"), sys.modules.get("lightgbm")
    if xgb is not None and isinstance(model, xgb.Booster):
        inputs = _xgboost_inputs(model, data, groups, lengths)
    elif lgb is not None and isinstance(model, lgb.Booster):
        inputs = _lightgbm_inputs(model, data, groups, lengths)
    else:
        raise ValueError(
            f"cannot predict with a {type(model).__name__}: pass an xgboost.Booster trained "
            "with structboost.crf_objective or a lightgbm.Booster trained with "
            "structboost.lightgbm.lgb_crf_objective."
        )
    margins, lengths, params, num_labels, labels = inputs
    margins = node_scores(margins, num_labels)
    if base_margin is not None:
        base = np.asarray(base_margin, dtype=np.float64)
        if base.shape != margins.shape:
            raise ValueError(
                f"base_margin has shape {base.shape} but the booster's margins have shape "
                f"{margins.shape}: give one score per row and label."
            )
        margins += base
        check_margin_values(margins, "the margin (booster + base_margin)",
                            "the model cannot score it (" + DIVERGED + "), or base_margin holds it")
    else:
        check_node_scores(margins)
    check_transition_values(params)
    return margins, offsets_from_lengths(lengths), params, labels


def node_scores(margins, num_labels):
    """The booster's margins as C-contiguous float64 ``(n, K)``; ``ValueError`` without rows or
    ``num_labels`` scores per row.
    """
    if len(margins) == 0:
        raise ValueError("the data has no rows: there is nothing to predict.")
    margins = np.ascontiguousarray(np.asarray(margins).reshape(len(margins), -1), dtype=np.float64)
    if margins.shape[1] != num_labels:
        raise ValueError(
            f"the booster outputs {margins.shape[1]} scores per row but its CRF has "
            f"{num_labels} labels."
        )
    return margins


def check_node_scores(margins):
    """Raise naming the first row of the booster's ``margins (n, K)`` that is not finite."""
    check_margin_values(
        margins, "the booster's margin", "the model cannot score it (" + DIVERGED + ")"
    )


def check_transition_values(params):
    """Raise when a model's transition, start or end scores hold NaN or +inf."""
    for name in ("transitions", "start", "end"):
        scores = getattr(params, name)
        if np.isnan(scores).any() or np.isposinf(scores).any():
            raise ValueError(f"the booster's CRF {name} scores hold NaN or +inf: {DIVERGED}.")


def constrained(params, allowed_transitions):
    """The model's transition parameters with the forbidden moves at ``-inf``."""
    constraints = resolve_constraints(allowed_transitions, params.num_labels)
    return params if constraints is None else constraints.apply(params)


def check_decode(decode):
    """Raise unless ``decode`` is one of :data:`DECODINGS`."""
    if decode not in DECODINGS:
        raise ValueError(f"decode must be one of {DECODINGS}; got {decode!r}.")


def node_marginals(margins, offsets, params):
    """Posterior marginals ``(n, K)`` of checked node scores under (constrained) ``params``."""
    p = params
    return posterior(margins, offsets, p.transitions, p.start, p.end, keep_messages=False).marginals()


def decode_labels(margins, offsets, params, decode):
    """Labels ``(n,)`` int64 of checked node scores ``margins (n, K)`` under ``params``
    (``decode`` as in :func:`predict`).
    """
    if decode == "marginal":
        return node_marginals(margins, offsets, params).argmax(axis=1).astype(np.int64)
    p = params
    return map_labels(margins, offsets, p.transitions, p.start, p.end)


@reports("predict")
def predict(model: Any, data: Any, *, groups: ArrayLike | None = None,
            lengths: ArrayLike | None = None, decode: str = "viterbi",
            base_margin: ArrayLike | None = None, allowed_transitions: Any = None) -> Ints:
    """Predicted labels of every sequence.

    Parameters
    ----------
    model : xgboost.Booster or lightgbm.Booster
        Trained with :func:`structboost.crf_objective` /
        :func:`structboost.lightgbm.lgb_crf_objective` and its callback, or loaded.
    data : xgboost.DMatrix, lightgbm.Dataset or array-like (n, d)
        A DMatrix or Dataset with groups, or features with ``groups``/``lengths``
        (boosted transitions: a DMatrix of :func:`structboost.xgboost.edge_dmatrix`).
    groups : (n,) array-like, optional
        Per-row sequence id (rows of a sequence contiguous).
    lengths : (m,) array-like, optional
        Rows per sequence.
    decode : {"viterbi", "marginal"}
        The most probable path of each sequence, or each position's most
        probable label ``argmax_k P(y_t = k | x)``.
    base_margin : (n, K) array-like, optional
        Node scores added to the booster's raw margins (XGBoost ``base_margin``,
        LightGBM ``init_score``, which LightGBM does not add when it predicts);
        not again for a DMatrix that carries one.
    allowed_transitions : Constraints or (K, K) bool array-like, optional
        Moves the decoder may make
        (:func:`structboost.objectives.constraints.allowed_transitions`); a
        model trained with constraints applies them already.

    Returns
    -------
    (n,) int64
    """
    check_decode(decode)
    u, offsets, p, _ = crf_inputs(
        model, data, groups=groups, lengths=lengths, base_margin=base_margin
    )
    return decode_labels(u, offsets, constrained(p, allowed_transitions), decode)


@reports("predict_marginals")
def predict_marginals(model: Any, data: Any, *, groups: ArrayLike | None = None,
                      lengths: ArrayLike | None = None, base_margin: ArrayLike | None = None,
                      allowed_transitions: Any = None) -> Floats:
    """Posterior marginals ``P(y_t = k | x)``, shape ``(n, K)``.

    Parameters are as in :func:`predict`.
    """
    u, offsets, p, _ = crf_inputs(
        model, data, groups=groups, lengths=lengths, base_margin=base_margin
    )
    return node_marginals(u, offsets, constrained(p, allowed_transitions))


@reports("sequence_log_likelihood")
def sequence_log_likelihood(model: Any, data: Any, labels: ArrayLike | None = None, *,
                            groups: ArrayLike | None = None, lengths: ArrayLike | None = None,
                            base_margin: ArrayLike | None = None,
                            allowed_transitions: Any = None) -> Floats:
    """Log-likelihood ``log P(y | x)`` of every sequence, shape ``(m,)``.

    ``labels`` default to the ones stored in a DMatrix or Dataset; the other
    parameters are as in :func:`predict`. Under ``allowed_transitions`` a
    labelling that makes a forbidden move has log-likelihood ``-inf``.
    """
    u, offsets, p, stored = crf_inputs(
        model, data, groups=groups, lengths=lengths, base_margin=base_margin
    )
    p = constrained(p, allowed_transitions)
    if labels is None:
        labels = stored
    if labels is None or np.size(labels) == 0:
        raise ValueError("no labels: pass labels= or a DMatrix/Dataset built with label=.")
    y = check_labels(labels, u.shape[1], u.shape[0])
    post = posterior(u, offsets, p.transitions, p.start, p.end, keep_messages=False)
    return path_scores(u, offsets, y, p.transitions, p.start, p.end) - post.log_z


def _tree_inputs(booster, X, lengths, parents, edge_types, groups):
    import xgboost as xgb

    from .xgboost import booster_margins, load_state
    from .xgboost_tree import TREE_STATE_KEY

    num_labels, _, params = load_state(
        booster, TREE_STATE_KEY, TreeTransitionParams, "tree_crf_objective"
    )
    check_xgboost_booster(booster)
    dmat = X if isinstance(X, xgb.DMatrix) else xgb.DMatrix(X)
    lens = resolve_lengths(dmat.num_row(), groups=groups, lengths=lengths)
    check_feature_count(dmat.num_col(), booster.num_features())
    margins = node_scores(booster_margins(booster, dmat), num_labels)
    return check_tree(margins, lens, parents, params.transitions, edge_types)


def predict_tree(booster: Any, X: Any, lengths: ArrayLike | None = None,
                 parents: ArrayLike | None = None, edge_types: ArrayLike | None = None, *,
                 groups: ArrayLike | None = None) -> Ints:
    """MAP labelling of every tree, flat ``(n,)``.

    Parameters
    ----------
    booster : xgboost.Booster
        Trained with :func:`tree_crf_objective` and its callback.
    X : (n, d) array-like or xgboost.DMatrix
    lengths : (m,) array-like of int, optional
        Rows per instance (or ``groups``, a per-row instance id).
    parents : (n,) array-like of int
    edge_types : (n,) array-like of int, optional
    """
    return tree_map_labels(_tree_inputs(booster, X, lengths, parents, edge_types, groups))


def predict_tree_marginals(booster: Any, X: Any, lengths: ArrayLike | None = None,
                           parents: ArrayLike | None = None, edge_types: ArrayLike | None = None, *,
                           groups: ArrayLike | None = None) -> Floats:
    """Node marginals ``P(y_v = k | x)``, shape ``(n, K)``; arguments as :func:`predict_tree`."""
    return tree_posterior(_tree_inputs(booster, X, lengths, parents, edge_types, groups)).marginals()


def tree_log_likelihood(booster: Any, X: Any, labels: ArrayLike, lengths: ArrayLike | None = None,
                        parents: ArrayLike | None = None, edge_types: ArrayLike | None = None, *,
                        groups: ArrayLike | None = None) -> Floats:
    """``log P(y | x)`` of every tree, shape ``(m,)``; arguments as :func:`predict_tree`."""
    b = _tree_inputs(booster, X, lengths, parents, edge_types, groups)
    y = check_labels(labels, b.unary.shape[1], b.unary.shape[0])
    return label_scores(b, y) - tree_posterior(b).log_z
