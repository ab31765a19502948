"""Exact inference for linear-chain CRFs: numpy in, numpy out.

A batch of ``m`` sequences is given as flat rows ``unary (n, K)`` (node
potentials, e.g. a booster's margins) and ``lengths (m,)`` with
``lengths.sum() == n``. ``transitions[a, b]`` scores label ``a`` followed
by ``b``; ``start`` and ``end`` ``(K,)`` score the first and last label. The
score of a labelling ``y`` of one sequence is::

    start[y_0] + sum_t unary[t, y_t] + sum_t transitions[y_t, y_{t+1}] + end[y_last]

Every public function validates its input, converts it once to C-contiguous
float64 and calls the numba kernels of :mod:`structboost._chain`.
``-inf`` entries of ``transitions``, ``start`` or ``end`` forbid a move
(see :mod:`structboost.constraints`). Messages live in scaled probability
space (fast, no logs in the inner loops). With forbidden moves, a sequence
whose allowed labellings lie more than ~700 (natural-log units) below a
forbidden one cannot be held in that space; such sequences are detected
(a position whose forward and backward messages barely overlap) and
recomputed by a log-space forward-backward, so any finite node potentials
work. Only a sequence that the constraints leave no labelling at all raises
a ``ValueError``.
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
# A position whose scaled forward and backward messages overlap by less than
# this is recomputed in log space: any label the scaled pass lost (below
# float64's ~1e-308) then has posterior probability below 1e-158.
_OVERLAP_FLOOR = 1e-150


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
    return (u, offsets, *check_chain_params(k, transitions, start, end))


def check_chain_params(num_labels, transitions, start, end):
    """Validate and convert the transition, start and end scores of ``num_labels`` labels.

    Returns
    -------
    transitions : (K, K) float64
    start, end : (K,) float64
    """
    k = num_labels
    trans = _as_float_array(transitions, "transitions", (k, k))
    if not np.isfinite(trans).any():
        raise ValueError("transitions forbid every move (all -inf); allow at least one.")
    return trans, _as_float_array(start, "start", (k,)), _as_float_array(end, "end", (k,))


@dataclass
class LogSpacePart:
    """Posterior of the sequences recomputed in log space.

    Attributes
    ----------
    sequences : (s,) int64
        Their indices, increasing.
    rows : (r,) int64
        Their rows, in order.
    offsets : (s + 1,) int64
        Boundaries of each sequence within ``rows``.
    marginals : (r, K) float64
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    """

    sequences: np.ndarray
    rows: np.ndarray
    offsets: np.ndarray
    marginals: np.ndarray
    pairwise: np.ndarray


@dataclass
class ChainPosterior:
    """Scaled forward-backward messages of a batch, with what derives from them.

    Built by :func:`posterior` from already validated arrays; objectives and
    solvers use it to avoid repeating validation and message passes. On the
    rows of the sequences in ``log_space`` (if any), ``alpha`` holds the node
    marginals and ``beta`` ones, while ``r``, ``into`` and ``beta_scale`` are
    finite placeholders: every method below takes those rows from
    ``log_space`` instead.
    """

    offsets: np.ndarray
    transitions: np.ndarray
    log_z: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    r: np.ndarray
    into: np.ndarray
    beta_scale: np.ndarray
    log_space: LogSpacePart | None = None

    def marginals(self, rows=None):
        """Node marginals ``(n, K)``, or ``(len(rows), K)`` of the given rows."""
        p = self.alpha * self.beta if rows is None else self.alpha[rows] * self.beta[rows]
        p /= p.sum(axis=1, keepdims=True)
        return p

    def edge_marginals(self):
        """Pairwise marginals ``(n, K, K)``; row ``t`` joins ``t`` and ``t + 1``."""
        out = _chain.edge_marginals(self.alpha, self.r, self.offsets, self.transitions)
        if self.log_space is not None:
            out[self.log_space.rows] = self.log_space.pairwise
        return out

    def edge_sums(self, edges, weights, curvature_weights=None):
        """Weighted sums of the pairwise marginals over some edges.

        Parameters
        ----------
        edges : (e,) int64
            Rows ``t`` (none last in its sequence) of the edges ``(t, t + 1)``.
        weights : (e,) float64
        curvature_weights : (e,) float64, optional

        Returns
        -------
        total : (K, K) float64
            ``sum_t weights_t P_t``.
        curvature : (K, K) float64 or None
            ``sum_t curvature_weights_t P_t (1 - P_t)``, when asked for.

        Notes
        -----
        Two matrix products over all edges at once:
        ``P_t(a, b) = alpha_t[a] E[a, b] r_{t+1}[b] / z_t``, so
        ``sum_t c_t P_t = E * (A' diag(c / z) R)`` and
        ``sum_t c_t P_t^2 = E^2 * ((A^2)' diag(c / z^2) R^2)``.
        """
        part = self.log_space
        if part is not None:
            # Edges of log-space sequences: summed from their pairwise marginals.
            n = self.alpha.shape[0]
            local = np.full(n, -1, dtype=np.int64)
            local[part.rows] = np.arange(part.rows.size)
            mine = local[edges] >= 0
            pair = part.pairwise[local[edges[mine]]]
            total = np.einsum("e,eab->ab", weights[mine], pair)
            if curvature_weights is not None:
                fallback_curv = np.einsum("e,eab->ab", curvature_weights[mine], pair * (1.0 - pair))
                curvature_weights = curvature_weights[~mine]
            edges, weights = edges[~mine], weights[~mine]
        emat = np.exp(self.transitions - self.transitions.max())
        a = self.alpha[edges]
        r = self.r[edges + 1]
        z = np.einsum("ij,ij->i", a @ emat, r)
        scaled = emat * (a.T @ (r * (weights / z)[:, None]))
        total = scaled if part is None else total + scaled
        if curvature_weights is None:
            return total, None
        g = curvature_weights / z
        curvature = emat * (a.T @ (r * g[:, None])) - emat**2 * ((a * a).T @ (r * r * (g / z)[:, None]))
        if part is not None:
            curvature += fallback_curv
        return total, curvature

    @cached_property
    def _path_sums(self):
        """Eq. 17 message sums ``(to_right, to_left)``, shared by node and edge bounds."""
        right, left = _chain.mixing_rates(
            self.alpha, self.beta, self.r, self.into, self.beta_scale, self.offsets, self.transitions
        )
        part = self.log_space
        if part is not None:
            right[part.rows], left[part.rows] = _chain.pairwise_rates(part.pairwise, part.offsets)
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
            out = _chain.exact_gamma(self.alpha, self.r, p, self.offsets, self.transitions)
            part = self.log_space
            if part is not None:
                out[part.rows] = _chain.exact_gamma_pairwise(part.pairwise, part.marginals, part.offsets)
            return out
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` of Theorem 4.2; zero on each sequence's last row."""
        to_right, to_left = self._path_sums
        out = np.zeros_like(to_right)
        out[:-1] = 2.0 * (3.0 + to_left[:-1] + to_right[1:])
        out[self.offsets[1:] - 1] = 0.0
        return out


def _log_space_part(unary, offsets, sequences, transitions, start, end):
    """Run :func:`structboost._chain.log_space_posterior`; raise where nothing is allowed.

    Returns
    -------
    log_z : (s,) float64
    part : LogSpacePart
    """
    log_z, marginals, pairwise = _chain.log_space_posterior(
        unary, offsets, sequences, transitions, start, end
    )
    if not np.isfinite(log_z).all():
        seq = int(sequences[np.flatnonzero(~np.isfinite(log_z))[0]])
        raise ValueError(
            f"sequence {seq} (length {int(offsets[seq + 1] - offsets[seq])}) has no allowed "
            "labelling: the -inf transition/start/end scores (allowed_transitions) forbid "
            "every label path of that length. Allow more moves."
        )
    lengths = offsets[sequences + 1] - offsets[sequences]
    rows = np.repeat(offsets[sequences] - np.cumsum(lengths) + lengths, lengths) + np.arange(
        lengths.sum()
    )
    part_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return log_z, LogSpacePart(sequences, rows, part_offsets, marginals, pairwise)


def posterior(unary, offsets, transitions, start, end, exp_unary=None):
    """Run the message passes on validated arrays (see :func:`check_chain`).

    ``exp_unary`` is ``_chain.exp_rows(unary)``, passed in by callers that
    run several passes over the same node potentials. Sequences the scaled
    messages cannot hold are recomputed in log space (see the module notes).
    """
    w, row_max = _chain.exp_rows(unary) if exp_unary is None else exp_unary
    log_z, alpha, beta, r, into, beta_scale = _chain.messages(
        unary, w, row_max, offsets, transitions, start, end
    )
    overlap = np.einsum("nk,nk->n", alpha, beta)
    weak = ~(overlap >= _OVERLAP_FLOOR)
    part = None
    if weak.any() or not np.isfinite(log_z).all():
        sequences = np.union1d(
            np.flatnonzero(~np.isfinite(log_z)),
            np.searchsorted(offsets, np.flatnonzero(weak), "right") - 1,
        ).astype(np.int64)
        log_z[sequences], part = _log_space_part(unary, offsets, sequences, transitions, start, end)
        alpha[part.rows] = part.marginals
        k = alpha.shape[1]
        beta[part.rows] = 1.0
        r[part.rows] = 1.0 / k
        into[part.rows] = 1.0
        beta_scale[part.rows] = 1.0
    return ChainPosterior(offsets, transitions, log_z, alpha, beta, r, into, beta_scale, part)


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
