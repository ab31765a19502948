"""Exact inference for tree-structured CRFs with typed edges: numpy in, numpy out.

A batch of ``m`` instances is flat rows ``unary (n, K)`` with ``lengths (m,)``.
``parents (n,)`` holds each row's parent *within its instance* (``-1`` for a
root; any row order; forests allowed). ``transitions[type, a, b]`` scores
parent label ``a`` with child label ``b`` (``(K, K)``: one type) and
``edge_types (n,)`` picks each row's edge type (``None``: all 0). A
labelling scores::

    sum_v unary[v, y_v] + sum_{v non-root} transitions[edge_types[v], y_parent(v), y_v]

A chain is ``parents = [-1, 0, 1, ..., L - 2]``. ``-inf`` entries of
``transitions`` forbid a pair of labels.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .._typing import ArrayLike, Floats, Ints

from . import _tree
from .chain import GAMMA_METHODS
from ..sequences import check_labels, check_lengths, check_unary, offsets_from_lengths



def _whole_numbers(x, name, n):
    arr = np.asarray(x)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have one entry per row ({n}); got shape {arr.shape}.")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must be whole numbers (integer indices).")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name} must be integers; got dtype {arr.dtype}.")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _check_transitions(transitions, k):
    trans = np.asarray(transitions, dtype=np.float64)
    if trans.ndim == 2:
        trans = trans[None]
    if trans.ndim != 3 or trans.shape[1:] != (k, k) or trans.shape[0] < 1:
        raise ValueError(
            f"transitions must have shape (K, K) or (n_types, K, K) with K = {k}; "
            f"got {np.shape(transitions)}."
        )
    if np.isnan(trans).any() or np.isposinf(trans).any():
        raise ValueError("transitions contain NaN or +inf; only finite values or -inf are allowed.")
    dead = ~np.isfinite(trans).reshape(trans.shape[0], -1).any(axis=1)
    if dead.any():
        raise ValueError(
            f"transitions[{int(np.flatnonzero(dead)[0])}] is all -inf and forbids every "
            "pair of labels; allow at least one pair per edge type."
        )
    return np.ascontiguousarray(trans)


def _check_parents(parents, lengths, offsets):
    n = int(offsets[-1])
    par = _whole_numbers(parents, "parents", n)
    size = np.repeat(lengths, lengths)
    local = np.arange(n) - np.repeat(offsets[:-1], lengths)
    inst = np.repeat(np.arange(len(lengths)), lengths)
    bad = (par < -1) | (par >= size)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"parents[{r}] = {int(par[r])} is outside -1..{int(size[r]) - 1} for instance "
            f"{int(inst[r])} of {int(size[r])} rows: parents are indices within the "
            "instance, -1 for a root."
        )
    own = par == local
    if own.any():
        r = int(np.flatnonzero(own)[0])
        raise ValueError(
            f"row {r} (node {int(local[r])} of instance {int(inst[r])}) is its own parent; "
            "use -1 for a root."
        )
    return par


class TreeBatch(NamedTuple):
    """Validated arrays of a batch of trees (:func:`check_tree`), taken whole by the numba kernels.

    ``gparent`` holds global parent rows; ``order``, ``child_ptr`` and
    ``child_idx`` come from :func:`structboost.inference._tree.structure`.
    """

    unary: np.ndarray
    offsets: np.ndarray
    gparent: np.ndarray
    order: np.ndarray
    child_ptr: np.ndarray
    child_idx: np.ndarray
    edge_types: np.ndarray
    transitions: np.ndarray

    @property
    def lengths(self):
        return np.diff(self.offsets)


def check_tree(unary, lengths, parents, transitions, edge_types=None):
    """Validate and convert the inputs shared by every tree function.

    Parameters
    ----------
    unary : (n, K) array-like
    lengths : (m,) array-like of int
    parents : (n,) array-like of int
    transitions : (K, K) or (n_types, K, K) array-like
    edge_types : (n,) array-like of int or None

    Returns
    -------
    TreeBatch
    """
    u = check_unary(unary)
    n, k = u.shape
    lens = check_lengths(lengths, n)
    offsets = offsets_from_lengths(lens)
    trans = _check_transitions(transitions, k)
    par = _check_parents(parents, lens, offsets)
    if edge_types is None:
        types = np.zeros(n, dtype=np.int64)
    else:
        types = _whole_numbers(edge_types, "edge_types", n).copy()
        types[par < 0] = 0
        bad = (types < 0) | (types >= trans.shape[0])
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"edge_types[{r}] = {int(types[r])} is outside 0..{trans.shape[0] - 1}: "
                f"transitions has {trans.shape[0]} edge type(s)."
            )
    order, gparent, child_ptr, child_idx, reached = _tree.structure(offsets, par)
    cyclic = reached < lens
    if cyclic.any():
        i = int(np.flatnonzero(cyclic)[0])
        lo, hi = offsets[i], offsets[i + 1]
        seen = np.zeros(hi - lo, dtype=bool)
        seen[order[lo : lo + reached[i]] - lo] = True
        stuck = np.flatnonzero(~seen)
        raise ValueError(
            f"parents of instance {i} contain a cycle: nodes {stuck[:10].tolist()} never "
            "reach a root. Every node must lead to a root (-1) through its parents."
        )
    return TreeBatch(u, offsets, gparent, order, child_ptr, child_idx, types, trans)


def map_labels(batch):
    """MAP labels ``(n,)`` of a :class:`TreeBatch` (ties to the lowest label; arbitrary where
    nothing is allowed).
    """
    return _tree.viterbi(batch)[0]


def label_scores(batch, labels):
    """Score ``(m,)`` of the labelling ``labels (n,)`` of every instance (``-inf`` with a forbidden
    pair).
    """
    return _tree.label_scores(batch, labels)


def _raise_infeasible(log_score):
    dead = np.flatnonzero(log_score == -np.inf)
    if dead.size:
        raise ValueError(
            f"instance {int(dead[0])} has no labelling allowed by the transitions (every "
            "labelling scores -inf); relax the -inf entries of transitions."
        )


class TreeMessages(NamedTuple):
    """Log-space messages of a batch, ``(n, K)`` each (see :mod:`structboost.inference._tree`)."""

    inside: np.ndarray
    up: np.ndarray
    outside: np.ndarray
    down: np.ndarray


@dataclass
class TreePosterior:
    """Log-space sum-product messages of a batch (built by :func:`posterior`), with what derives
    from them.
    """

    batch: TreeBatch
    log_z: np.ndarray
    messages: TreeMessages
    belief: np.ndarray

    def marginals(self):
        """Node marginals ``(n, K)``."""
        return _tree.softmax_rows(self.belief)

    def edge_marginals(self, marginals=None):
        """Joint marginals ``(n, K, K)``; row ``v`` joins ``parent(v)`` (first axis) and ``v``."""
        p = self.marginals() if marginals is None else marginals
        return _tree.edge_marginals(p, self.batch, self.messages)

    def _mixing(self):
        rates = _tree.mixing_rates(self.batch, self.messages)
        return _tree.mixing_bounds(self.batch, *rates)

    def node_gamma(self, method="mixing", marginals=None):
        """Per-node bound ``(n,)`` (Theorem 4.1, Corollary 4.1 or exact)."""
        b = self.batch
        if method == "mixing":
            return self._mixing()[0]
        if method == "length":
            return np.repeat(2.0 * b.lengths, b.lengths).astype(np.float64)
        if method == "exact":
            p = self.marginals() if marginals is None else marginals
            return _tree.exact_gamma(b, self.messages, p)
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` (Theorem 4.2 generalised to trees); zero for roots."""
        return self._mixing()[1]


def posterior(batch):
    """Sum-product passes on a :class:`TreeBatch`; ``ValueError`` when an instance has no allowed
    labelling.
    """
    log_z, inside, up, outside, down, belief = _tree.messages(batch)
    _raise_infeasible(log_z)
    return TreePosterior(batch, log_z, TreeMessages(inside, up, outside, down), belief)


def tree_forward_backward(unary: ArrayLike, lengths: ArrayLike, parents: ArrayLike,
                          transitions: ArrayLike,
                          edge_types: ArrayLike | None = None) -> tuple[Floats, Floats]:
    """Log partition function and node marginals of every tree.

    Parameters
    ----------
    unary : (n, K) array-like
    lengths : (m,) array-like of int
        Rows per instance.
    parents : (n,) array-like of int
        Parent index within the instance, ``-1`` for a root.
    transitions : (K, K) or (n_types, K, K) array-like
        ``transitions[type, a, b]`` scores parent label ``a`` with child label ``b``.
    edge_types : (n,) array-like of int, optional
        Type of the edge to each row's parent; all 0 if None.

    Returns
    -------
    log_z : (m,) float64
    marginals : (n, K) float64
    """
    post = posterior(check_tree(unary, lengths, parents, transitions, edge_types))
    return post.log_z, post.marginals()


def tree_edge_marginals(unary: ArrayLike, lengths: ArrayLike, parents: ArrayLike,
                        transitions: ArrayLike, edge_types: ArrayLike | None = None) -> Floats:
    """Joint marginals ``(n, K, K)`` ``P(y_parent(v) = a, y_v = b | x)`` of every edge (zero for
    roots); parameters as :func:`tree_forward_backward`.
    """
    return posterior(check_tree(unary, lengths, parents, transitions, edge_types)).edge_marginals()


def tree_viterbi(unary: ArrayLike, lengths: ArrayLike, parents: ArrayLike, transitions: ArrayLike,
                 edge_types: ArrayLike | None = None) -> Ints:
    """Most probable labelling ``(n,)`` int64 of every tree (ties to the lowest label); parameters
    as :func:`tree_forward_backward`.
    """
    b = check_tree(unary, lengths, parents, transitions, edge_types)
    labels, best = _tree.viterbi(b)
    _raise_infeasible(best)
    return labels


def tree_gamma(unary: ArrayLike, lengths: ArrayLike, parents: ArrayLike, transitions: ArrayLike,
               edge_types: ArrayLike | None = None, method: str = "mixing") -> Floats:
    """Per-node bound gamma ``(n,)`` of Chen et al. (2015) on trees.

    Parameters
    ----------
    unary, lengths, parents, transitions, edge_types
        As in :func:`tree_forward_backward`.
    method : {"mixing", "length", "exact"}
        ``"mixing"``: Theorem 4.1 by Eq. 17 messages, O(n K^2). ``"length"``:
        twice the instance size. ``"exact"``: ``max_k sum_j |H_ij| / H_ii``,
        O(L^2 K^3) per instance.

    Returns
    -------
    (n,) float64
        ``length >= mixing >= exact >= 2`` at every node.
    """
    return posterior(check_tree(unary, lengths, parents, transitions, edge_types)).node_gamma(
        method
    )


def tree_edge_gamma(unary: ArrayLike, lengths: ArrayLike, parents: ArrayLike,
                    transitions: ArrayLike, edge_types: ArrayLike | None = None) -> Floats:
    """Per-edge bound gamma^(e) ``(n,)`` (Theorem 4.2 made valid on trees,
    :func:`structboost.inference._tree.mixing_bounds`); zero for roots.
    """
    return posterior(check_tree(unary, lengths, parents, transitions, edge_types)).edge_gamma()


def tree_nll(unary: ArrayLike, lengths: ArrayLike, parents: ArrayLike, labels: ArrayLike,
             transitions: ArrayLike, edge_types: ArrayLike | None = None) -> Floats:
    """Negative log-likelihood ``log Z - score(labels)`` ``(m,)`` of every tree (``inf`` with a
    forbidden pair).

    Parameters
    ----------
    unary, lengths, parents, transitions, edge_types
        As in :func:`tree_forward_backward`.
    labels : (n,) array-like of int
    """
    b = check_tree(unary, lengths, parents, transitions, edge_types)
    y = check_labels(labels, b.unary.shape[1], b.unary.shape[0])
    return posterior(b).log_z - label_scores(b, y)
