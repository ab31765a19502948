"""Exact inference for linear-chain CRFs: numpy in, numpy out.

A batch of ``m`` sequences is given as flat rows ``unary (n, K)`` (node
potentials, e.g. a booster's margins) and ``lengths (m,)`` with
``lengths.sum() == n``. ``transitions[a, b]`` scores label ``a`` followed
by ``b``; ``start`` and ``end`` ``(K,)`` score the first and last label. The
score of a labelling ``y`` of one sequence is::

    start[y_0] + sum_t unary[t, y_t] + sum_t transitions[y_t, y_{t+1}] + end[y_last]

Every public function validates its input, converts it once to C-contiguous
float64 and calls the numba kernels of :mod:`structboost._chain`.
``-inf`` entries of ``transitions``, ``start`` or ``end`` forbid a move.
Messages live in scaled probability space (fast, no logs in the inner
loops); with forbidden moves, a sequence whose only allowed labellings lie
more than ~700 (natural-log units) below a forbidden one cannot be
represented and raises a ``ValueError`` rather than returning NaN.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import _chain
from .sequences import check_labels, check_lengths, check_unary, offsets_from_lengths
from .tree_inference import (  # noqa: F401  (re-exported: the tree contract lives here too)
    tree_edge_gamma,
    tree_edge_marginals,
    tree_forward_backward,
    tree_gamma,
    tree_nll,
    tree_viterbi,
)

GAMMA_METHODS = ("mixing", "length", "exact")


def _as_float_array(x, name, shape):
    arr = np.ascontiguousarray(x, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {arr.shape}.")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(f"{name} contains NaN or +inf; only finite values or -inf are allowed.")
    return arr


def check_chain(unary, lengths, transitions, start, end):
    """Validate and convert the inputs shared by every chain function.

    Returns
    -------
    unary : (n, K) float64, C-contiguous
    offsets : (m + 1,) int64
    transitions : (K, K) float64
    start, end : (K,) float64
    """
    u = check_unary(unary)
    n, k = u.shape
    offsets = offsets_from_lengths(check_lengths(lengths, n))
    trans = _as_float_array(transitions, "transitions", (k, k))
    if not np.isfinite(trans).any():
        raise ValueError("transitions forbid every move (all -inf); allow at least one.")
    return (
        u,
        offsets,
        trans,
        _as_float_array(start, "start", (k,)),
        _as_float_array(end, "end", (k,)),
    )


@dataclass
class ChainPosterior:
    """Scaled forward-backward messages of a batch, with what derives from them.

    Built by :func:`posterior` from already validated arrays; objectives and
    solvers use it to avoid repeating validation and message passes.
    """

    offsets: np.ndarray
    transitions: np.ndarray
    log_z: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    r: np.ndarray
    into: np.ndarray
    beta_scale: np.ndarray

    def marginals(self):
        """Node marginals ``(n, K)``."""
        p = self.alpha * self.beta
        p /= p.sum(axis=1, keepdims=True)
        return p

    def edge_marginals(self):
        """Pairwise marginals ``(n, K, K)``; row ``t`` joins ``t`` and ``t + 1``."""
        return _chain.edge_marginals(self.alpha, self.r, self.offsets, self.transitions)

    @cached_property
    def _path_sums(self):
        """Eq. 17 message sums ``(to_right, to_left)``, shared by node and edge bounds."""
        right, left = _chain.mixing_rates(
            self.alpha, self.beta, self.r, self.into, self.beta_scale, self.offsets, self.transitions
        )
        return _chain.path_sums(right, left, self.offsets)

    def node_gamma(self, method="mixing", marginals=None):
        """Per-position node bound ``(n,)`` (Theorem 4.1, Corollary 4.1 or exact)."""
        if method == "mixing":
            to_right, to_left = self._path_sums
            return 2.0 * (1.0 + to_right + to_left)
        if method == "length":
            lengths = np.diff(self.offsets)
            return np.repeat(2.0 * lengths, lengths).astype(np.float64)
        if method == "exact":
            p = self.marginals() if marginals is None else marginals
            return _chain.exact_gamma(self.alpha, self.r, p, self.offsets, self.transitions)
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` of Theorem 4.2; zero on each sequence's last row."""
        to_right, to_left = self._path_sums
        out = np.zeros_like(to_right)
        out[:-1] = 2.0 * (3.0 + to_left[:-1] + to_right[1:])
        out[self.offsets[1:] - 1] = 0.0
        return out


def posterior(unary, offsets, transitions, start, end, exp_unary=None):
    """Run the message passes on validated arrays (see :func:`check_chain`).

    ``exp_unary`` is ``_chain.exp_rows(unary)``, passed in by callers that
    run several passes over the same node potentials.
    """
    w, row_max = _chain.exp_rows(unary) if exp_unary is None else exp_unary
    log_z, alpha, beta, r, into, beta_scale = _chain.messages(
        unary, w, row_max, offsets, transitions, start, end
    )
    forbids = not (np.isfinite(transitions).all() and np.isfinite(start).all() and np.isfinite(end).all())
    if forbids:
        mass = np.einsum("nk,nk->n", alpha, beta)
        bad_rows = ~(mass > 0.0)
        if bad_rows.any() or not np.isfinite(log_z).all():
            seq = np.flatnonzero(~np.isfinite(log_z))
            seq = int(seq[0]) if seq.size else int(np.searchsorted(offsets, np.flatnonzero(bad_rows)[0], "right") - 1)
            raise ValueError(
                f"sequence {seq}: every allowed labelling is either forbidden by the -inf "
                "transition/start/end scores or lies more than ~700 below a forbidden one in "
                "node potential, beyond float64 range in scaled space. Check that the "
                "constraints allow a labelling, or bound the node potentials (e.g. clip margins)."
            )
    return ChainPosterior(offsets, transitions, log_z, alpha, beta, r, into, beta_scale)


def path_scores(unary, offsets, labels, transitions, start, end):
    """Score of a given labelling of every sequence.

    Parameters
    ----------
    unary : (n, K) float64
    offsets : (m + 1,) int64
    labels : (n,) int64
    transitions : (K, K) float64
    start, end : (K,) float64

    Returns
    -------
    (m,) float64
    """
    n = unary.shape[0]
    node = unary[np.arange(n), labels]
    inner = np.ones(n, dtype=bool)
    inner[offsets[1:] - 1] = False
    idx = np.flatnonzero(inner)
    edge = np.zeros(n)
    edge[idx] = transitions[labels[idx], labels[idx + 1]]
    per_row = node + edge
    total = np.add.reduceat(per_row, offsets[:-1]) if n else np.zeros(0)
    return total + start[labels[offsets[:-1]]] + end[labels[offsets[1:] - 1]]


def forward_backward(unary, lengths, transitions, start, end):
    """Log partition function and node marginals of every sequence.

    Parameters
    ----------
    unary : (n, K) array-like
    lengths : (m,) array-like of int
    transitions : (K, K) array-like
    start, end : (K,) array-like

    Returns
    -------
    log_z : (m,) float64
    marginals : (n, K) float64
        ``P(y_t = k | x)``; rows sum to one.
    """
    post = posterior(*check_chain(unary, lengths, transitions, start, end))
    return post.log_z, post.marginals()


def edge_marginals(unary, lengths, transitions, start, end):
    """Pairwise marginals ``P(y_t = a, y_{t+1} = b | x)``.

    Returns
    -------
    (n, K, K) float64
        Row ``t`` joins positions ``t`` and ``t + 1``; the last row of every
        sequence is zero.
    """
    return posterior(*check_chain(unary, lengths, transitions, start, end)).edge_marginals()


def viterbi(unary, lengths, transitions, start, end):
    """Most probable labelling of every sequence.

    Returns
    -------
    (n,) int64
        The flat best label path (ties go to the lowest label index).
    """
    u, offsets, trans, s, e = check_chain(unary, lengths, transitions, start, end)
    return _chain.viterbi(u, offsets, trans, s, e)


def gamma(unary, lengths, transitions, start, end, method="mixing"):
    """Per-position node bound gamma of Chen et al. (2015).

    Parameters
    ----------
    unary, lengths, transitions, start, end
        As in :func:`forward_backward`.
    method : {"mixing", "length", "exact"}
        ``"mixing"``: Theorem 4.1 through the Eq. 17 chain recursions,
        O(n K^2). ``"length"``: twice the sequence length (Corollary 4.1).
        ``"exact"``: the smallest valid value, ``max_k sum_j |H_ij| / H_ii``
        from all-pairs conditionals, O(L^2 K^3) per sequence.

    Returns
    -------
    (n,) float64
        Always ``length >= mixing >= exact >= 2``.
    """
    if method not in GAMMA_METHODS:
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")
    return posterior(*check_chain(unary, lengths, transitions, start, end)).node_gamma(method)


def edge_gamma(unary, lengths, transitions, start, end):
    """Per-edge bound gamma^(e) of Theorem 4.2 (Chen et al. 2015).

    Returns
    -------
    (n,) float64
        Row ``t`` bounds the edge ``(t, t + 1)``; zero on the last row of
        every sequence.
    """
    return posterior(*check_chain(unary, lengths, transitions, start, end)).edge_gamma()


def sequence_nll(unary, lengths, labels, transitions, start, end):
    """Negative log-likelihood ``log Z - score(labels)`` of every sequence.

    Returns
    -------
    (m,) float64
    """
    u, offsets, trans, s, e = check_chain(unary, lengths, transitions, start, end)
    y = check_labels(labels, u.shape[1], u.shape[0])
    post = posterior(u, offsets, trans, s, e)
    return post.log_z - path_scores(u, offsets, y, trans, s, e)
