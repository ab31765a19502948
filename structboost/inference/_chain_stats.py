"""What derives from the messages or pairwise marginals of linear chains: rates, pairwise marginals,
Eq. 17 path sums, the exact node bound.
"""

from typing import NamedTuple

import numpy as np
from numba import prange

from .._config import KERNEL, PARALLEL, njit
from ._chain import table


class Messages(NamedTuple):
    """The stored scaled messages of a batch (:meth:`of` a ``Workspace`` or ``ChainPosterior``), and
    their rates.

    Attributes
    ----------
    offsets : (m + 1,) int64
    alpha, beta, r : (n, K) float64
        As in :mod:`structboost.inference._chain_sweeps`.
    beta_scale : (n,) float64
    right, left : (n,) float64, output
        ``right[t] = alpha_{t, t+1}`` (zero on last rows), ``left[t] =
        alpha_{t, t-1}`` (zero on first rows).
    """

    offsets: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    r: np.ndarray
    beta_scale: np.ndarray
    right: np.ndarray
    left: np.ndarray

    @classmethod
    def of(cls, holder):
        """The fields' arrays of a workspace or posterior ``holder`` (views, no copies)."""
        return cls(
            offsets=holder.offsets, alpha=holder.alpha, beta=holder.beta, r=holder.r,
            beta_scale=holder.beta_scale, right=holder.right, left=holder.left,
        )


@njit(**KERNEL)
def _edge_joint(alpha_t, emat, r_next, out):
    """``out[a, b] = P(y_t = a, y_{t+1} = b)`` from the scaled messages."""
    k = alpha_t.shape[0]
    s = 0.0
    for a in range(k):
        for b in range(k):
            v = alpha_t[a] * emat[a, b] * r_next[b]
            out[a, b] = v
            s += v
    inv = 1.0 / s
    for a in range(k):
        for b in range(k):
            out[a, b] *= inv


@njit(**KERNEL)
def _sequence_edges(i, alpha, r, offsets, emat, out):
    for t in range(offsets[i], offsets[i + 1] - 1):
        _edge_joint(alpha[t], emat[table(emat.shape[0], t + 1)], r[t + 1], out[t])


@njit(**PARALLEL)
def _edges_parallel(alpha, r, offsets, emat, out):
    for i in prange(offsets.shape[0] - 1):
        _sequence_edges(i, alpha, r, offsets, emat, out)


@njit(**KERNEL)
def _edges_serial(alpha, r, offsets, emat, out):
    for i in range(offsets.shape[0] - 1):
        _sequence_edges(i, alpha, r, offsets, emat, out)


def edge_marginals(alpha, r, offsets, emat, parallel):
    """Pairwise marginals ``(n, K, K)`` ``P(y_t = a, y_{t+1} = b)`` of consecutive positions; zero
    on last rows.
    """
    n, k = alpha.shape
    out = np.zeros((n, k, k))
    (_edges_parallel if parallel else _edges_serial)(alpha, r, offsets, emat, out)
    return out


@njit(**KERNEL)
def _row_conditional(mat, weight, out):
    """``out[i, j] = mat[i, j] * weight[j]`` normalised over ``j``; zero rows stay zero."""
    k = weight.shape[0]
    for i in range(k):
        s = 0.0
        for j in range(k):
            v = mat[i, j] * weight[j]
            out[i, j] = v
            s += v
        inv = 1.0 / s if s > 0.0 else 0.0
        for j in range(k):
            out[i, j] *= inv


@njit(**KERNEL)
def _rate(emat, into_inv, weight, possible, low):
    """``1 - sum_j min_{i possible} emat[i, j] * into_inv[i] * weight[j]`` (see
    :func:`~structboost.inference._chain_lanes._lanes_rates`).
    """
    k = low.shape[0]
    low[:] = np.inf
    for i in range(k):
        if possible[i]:
            s = into_inv[i]
            for j in range(k):
                v = emat[i, j] * s
                low[j] = v if v < low[j] else low[j]
    total = 0.0
    for j in range(k):
        if low[j] < np.inf:
            total += low[j] * weight[j]
    return max(0.0, 1.0 - total)


@njit(**KERNEL)
def path_sums(right, left, offsets):
    """Eq. 17 on a chain: sums over other positions of the products of rates.

    Returns
    -------
    to_right : (n,) float64
        ``beta_{t+1 -> t} = sum_{s > t} prod_{h=t}^{s-1} right[h]``.
    to_left : (n,) float64
        ``beta_{t-1 -> t} = sum_{s < t} prod_{h=s+1}^{t} left[h]``.
    """
    n = right.shape[0]
    to_right = np.zeros(n)
    to_left = np.zeros(n)
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        for t in range(hi - 2, lo - 1, -1):
            to_right[t] = right[t] * (1.0 + to_right[t + 1])
        for t in range(lo + 1, hi):
            to_left[t] = left[t] * (1.0 + to_left[t - 1])
    return to_right, to_left


@njit(**KERNEL)
def _sequence_exact_gamma(fwd, bwd, marginals, lo, out):
    """Exact node bound of one sequence into ``out[lo:lo + L]`` from ``fwd[t] = P(y_{t+1} | y_t)``,
    ``bwd[t] = P(y_{t-1} | y_t)``.
    """
    length, k, _ = fwd.shape
    for t in range(length):
        tv = np.zeros(k)
        for direction in range(2):
            cond = np.eye(k)
            s = t
            while True:
                s = s + 1 if direction == 0 else s - 1
                if s < 0 or s >= length:
                    break
                step = fwd[s - 1] if direction == 0 else bwd[s + 1]
                cond = cond @ step
                for kk in range(k):
                    d = 0.0
                    for j in range(k):
                        d += abs(cond[kk, j] - marginals[lo + s, j])
                    tv[kk] += 0.5 * d
        best = 0.0
        for kk in range(k):
            p = marginals[lo + t, kk]
            if p * (1.0 - p) >= 1e-12:
                g = 2.0 * (1.0 + tv[kk] / (1.0 - p))
                if g > best:
                    best = g
        out[lo + t] = best if best > 0.0 else 2.0


@njit(**PARALLEL)
def exact_gamma(alpha, r, marginals, offsets, emat):
    """Smallest valid node bound ``(n,)``: ``max_k sum_j |H_ij| / H_ii`` per position.

    Lemma 3.1: ``sum_j |H_ij| = 2 p_i sum_s TV(P(y_s | y_t = k), P(y_s))``;
    ``O(sum_i L_i^2 K^3)``; labels with ``p (1 - p) < 1e-12`` skipped.
    """
    n, k = alpha.shape
    out = np.zeros(n)
    for i in prange(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        length = hi - lo
        fwd = np.zeros((length, k, k))
        bwd = np.zeros((length, k, k))
        for t in range(length - 1):
            e = emat[table(emat.shape[0], lo + t + 1)]
            _row_conditional(e, r[lo + t + 1], fwd[t])
            _row_conditional(np.ascontiguousarray(e.T), alpha[lo + t], bwd[t + 1])
        _sequence_exact_gamma(fwd, bwd, marginals, lo, out)
    return out


def exact_gamma_pairwise(pairwise, marginals, offsets):
    """:func:`exact_gamma` ``(r,)`` from pairwise marginals ``(r, K, K)`` of the log-space rows
    (``alpha = r = 1``).
    """
    ones = np.ones_like(marginals)
    tables = np.concatenate((np.zeros_like(pairwise[:1]), pairwise[:-1]))
    return exact_gamma(ones, ones, marginals, offsets, tables)


@njit(**KERNEL)
def pairwise_rates(pairwise, offsets):
    """Mixing rates ``right, left (r,)`` from pairwise marginals ``(r, K, K)`` of the log-space
    rows.
    """
    r, k, _ = pairwise.shape
    right = np.zeros(r)
    left = np.zeros(r)
    ones = np.ones(k)
    inv = np.empty(k)
    low = np.empty(k)
    possible = np.empty(k, dtype=np.bool_)
    for i in range(offsets.shape[0] - 1):
        for t in range(offsets[i], offsets[i + 1] - 1):
            joint = pairwise[t]
            joint_t = np.ascontiguousarray(joint.T)
            for side in range(2):
                mat = joint if side == 0 else joint_t
                for a in range(k):
                    s = mat[a].sum()
                    possible[a] = s > 0.0
                    inv[a] = 1.0 / s if possible[a] else 0.0
                rate = _rate(mat, inv, ones, possible, low)
                if side == 0:
                    right[t] = rate
                else:
                    left[t + 1] = rate
    return right, left
