"""Numba kernels of linear-chain CRFs: node exponentials, the scaled sweeps, what derives from them.

Kernels take flat C-contiguous float64 rows (:func:`exp_rows` also float32
in any layout) and ``offsets (m + 1,)`` int64. Transition scores are one
array ``trans (P, K, K)``: ``P == 1`` one shared table, ``P == n``
per-position scores (``trans[t, a, b]``: ``a`` at ``t - 1`` into ``b`` at
``t``; a sequence's first row is never read); :func:`table` picks a
position's. The sweeps take ``emat, emax = exp_tables(trans)``. Nothing
here validates input (:mod:`structboost.inference.chain` does).

Messages are scaled probabilities, so the inner loops are multiply-adds:

* ``alpha[t]`` ~ the forward message *including* position ``t``'s unary
  factor, summing to one;
* ``into[t] = alpha[t - 1] @ E_t``, the forward message entering ``t``;
* ``beta[t]`` ~ the backward message *excluding* position ``t``, summing to
  one; ``E_{t+1} @ r[t + 1] = beta_scale[t] * beta[t]``;
* ``r[t]`` ~ ``exp(unary[t]) * beta[t]``, summing to one.

Hence ``P(y_t = k) ~ alpha[t, k] * beta[t, k]`` and
``P(y_t = a, y_{t+1} = b) ~ alpha[t, a] * E_{t+1}[a, b] * r[t + 1, b]``.

The sweeps run a chunk of :data:`CHUNK` sequences in lockstep, longest
first: the sequences are the lanes (innermost axis) of planes ``(K, lanes)``,
rows of ``vec (7, lanes)`` and ``idx (5, lanes)`` named by the constants
below; the lane kernels (``_lanes_*``) run over the first ``act`` lanes at
once, with no horizontal sums.

Scaled messages drop whatever falls below float64's range; each such loss
at position ``t`` is below ``TINY`` before normalisation, so it removes at
most ``TINY / (s_t ov_t)`` (forward) or ``TINY / (b_t ov_t)`` (backward) of
the posterior mass, with ``s_t``, ``b_t`` the normalisers of ``alpha[t]``,
``beta[t]`` and ``ov_t = alpha[t] @ beta[t]``. A sequence is *lost* once
``s_t ov_t`` or ``b_t ov_t`` falls below ``SAFE = TINY * 1e30`` (or a
normaliser below ``TINY``); otherwise the result is exact to rounding. Lost
sequences are recomputed by :func:`log_space_posterior`.
"""

from typing import NamedTuple

import numpy as np
from numba import get_num_threads, prange

from .._config import CACHE, FINITE, KERNEL, PARALLEL, SAFE, TINY, njit
from ._logspace import logsumexp

# -- tables and node exponentials; the log-space fallback -----------------------------------------
# exp(x) for x below this is under 2 ** -1022: taken as zero (any such
# entry of a possible label is below TINY and marks its sequence anyway).
EXP_FLOOR = -708.0

#: Sequences per chunk of the sweeps, run in lockstep (:func:`_chunk_messages`).
CHUNK = 64


@njit(inline="always")
def table(n_tables, t):
    """Index of the transition table of position ``t``: ``t`` if per position, else 0."""
    return t if n_tables > 1 else 0


@njit(**KERNEL)
def _shift_row(src, t, w, row_max):
    """Row ``t`` of :func:`exp_rows` before the exponential: ``w = src - max``, ``-inf`` at or
    below :data:`EXP_FLOOR` (and where the row is all ``-inf``).
    """
    k = src.shape[1]
    top = -np.inf
    for j in range(k):
        top = max(top, np.float64(src[t, j]))
    row_max[t] = top
    for j in range(k):
        d = np.float64(src[t, j]) - top
        w[t, j] = d if d > EXP_FLOOR else -np.inf


@njit(**PARALLEL)
def _shift_rows_parallel(src, w, row_max):
    for t in prange(src.shape[0]):
        _shift_row(src, t, w, row_max)


@njit(**KERNEL)
def _shift_rows_serial(src, w, row_max):
    for t in range(src.shape[0]):
        _shift_row(src, t, w, row_max)


def exp_rows(src, w, row_max, parallel, normalise=False):
    """Row-wise ``w = exp(src - max)``, ``row_max = max`` (in the given buffers).

    Parameters
    ----------
    src : (n, K) float32 or float64, any memory layout
        Finite or ``-inf`` entries, read in place (float32 widened exactly).
    w : (n, K) float64, output
    row_max : (n,) float64, output
    parallel : bool
    normalise : bool
        Divide each row of ``w`` by its sum: the row-wise softmax.
    """
    (_shift_rows_parallel if parallel else _shift_rows_serial)(src, w, row_max)
    np.exp(w, out=w)
    if normalise:
        w /= w.sum(axis=1, keepdims=True)


def exp_tables(trans, parallel=False):
    """``emat (P, K, K)``, ``emax (P,)`` with ``emat[p] = exp(trans[p] - emax[p])``.

    A table with every move forbidden gets ``emax = -inf`` and a zero ``emat``.
    """
    p, k, _ = trans.shape
    flat = trans.reshape(p, k * k)
    emat = np.empty((p, k * k))
    emax = np.empty(p)
    exp_rows(flat, emat, emax, parallel)
    emat[~np.isfinite(emax)] = 0.0
    return emat.reshape(p, k, k), emax


def shifted_exp(x):
    """``(exp(x - max(x)), max(x))`` of start or end scores ``x (K,)``; zeros if all ``-inf``."""
    top = x.max()
    return (np.exp(x - top) if top > -np.inf else np.zeros_like(x)), top


@njit(cache=CACHE, error_model="numpy")
def log_space_posterior(unary, offsets, sequences, trans, start, end):
    """Forward-backward in log space of ``sequences (s,)`` (increasing; the lost ones).

    Returns
    -------
    log_z : (s,) float64
        ``-inf`` for a sequence with no allowed labelling.
    marginals : (r, K) float64
        Of the sequences' rows, in order.
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    """
    k = unary.shape[1]
    n_tab = trans.shape[0]
    total = 0
    for i in sequences:
        total += offsets[i + 1] - offsets[i]
    log_z = np.empty(sequences.shape[0])
    marginals = np.zeros((total, k))
    pairwise = np.zeros((total, k, k))
    tmp = np.empty(k)
    row = 0
    for idx in range(sequences.shape[0]):
        lo, hi = offsets[sequences[idx]], offsets[sequences[idx] + 1]
        length = hi - lo
        la = np.empty((length, k))
        lb = np.empty((length, k))
        for b in range(k):
            la[0, b] = start[b] + unary[lo, b]
        for t in range(1, length):
            tr = trans[table(n_tab, lo + t)]
            for b in range(k):
                for a in range(k):
                    tmp[a] = la[t - 1, a] + tr[a, b]
                la[t, b] = logsumexp(tmp) + unary[lo + t, b]
        lb[length - 1] = end
        for t in range(length - 2, -1, -1):
            tr = trans[table(n_tab, lo + t + 1)]
            for a in range(k):
                for b in range(k):
                    tmp[b] = tr[a, b] + unary[lo + t + 1, b] + lb[t + 1, b]
                lb[t, a] = logsumexp(tmp)
        for b in range(k):
            tmp[b] = la[length - 1, b] + end[b]
        lz = logsumexp(tmp)
        log_z[idx] = lz
        if lz > -np.inf:
            # Rounding in sums of potentials ~1e4 leaves ~1e-12 in the totals: renormalise.
            for t in range(length):
                s = 0.0
                for a in range(k):
                    v = np.exp(la[t, a] + lb[t, a] - lz)
                    marginals[row + t, a] = v
                    s += v
                marginals[row + t] /= s
            for t in range(length - 1):
                tr = trans[table(n_tab, lo + t + 1)]
                total_pair = 0.0
                for a in range(k):
                    for b in range(k):
                        v = np.exp(la[t, a] + tr[a, b] + unary[lo + t + 1, b] + lb[t + 1, b] - lz)
                        pairwise[row + t, a, b] = v
                        total_pair += v
                pairwise[row + t] /= total_pair
        row += length
    return log_z, marginals, pairwise


# -- lane kernels of the lockstep sweeps ----------------------------------------------------------
# Planes of ``buf (10, K, lanes)``: incoming message, alpha, w, r, marginals,
# previous alpha, second r, the rates' inverses and penalties, edges' weighted r.
_IN, _MSG, _W, _R, _MARG, _PREV, _R2, _RINV, _RPEN, _EDGE = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
_PLANES = 10
# Rows of ``vec (7, lanes)``: sums, inverses, overlaps, log Z's running sum,
# beta_scale, the rates' totals (and edge weights), forward normaliser.
_SUM, _INV, _OV, _ACC, _BS, _TOT, _FS = 0, 1, 2, 3, 4, 5, 6
_VECS = 7
# Rows of ``idx (5, lanes)`` int64: sequence, first row, length, current row, table.
_SEQ, _FIRST, _LEN, _ROW, _TAB = 0, 1, 2, 3, 4
# Penalty of a label of zero probability in the rates' minima: above every finite value.
_EXCLUDE = np.inf
# The largest inverse of a possible label's weight: keeps conditionals finite (FINITE's ``nnan``).
_HUGE = np.finfo(np.float64).max


@njit(**KERNEL)
def _gather(src, idx, lo, act, step, plane):
    """``plane[a, s] = src[row_s + step, a]`` for the lanes ``lo <= s < act``."""
    for s in range(lo, act):
        row = idx[_ROW, s] + step
        for a in range(src.shape[1]):
            plane[a, s] = src[row, a]


@njit(**KERNEL)
def _scatter(plane, idx, lo, act, dst):
    """``dst[row_s, a] = plane[a, s]`` for the lanes ``lo <= s < act``."""
    for s in range(lo, act):
        row = idx[_ROW, s]
        for a in range(dst.shape[1]):
            dst[row, a] = plane[a, s]


@njit(**KERNEL)
def _lanes_sums(plane, act, sums):
    """``sums[s] = sum_a plane[a, s]`` for the first ``act`` lanes."""
    for s in range(act):
        sums[s] = 0.0
    for a in range(plane.shape[0]):
        for s in range(act):
            sums[s] += plane[a, s]


@njit(**KERNEL)
def _lanes_times(src, dst, mat, idx, act):
    """``dst[b, s] = sum_a src[a, s] mat[tab_s, a, b]`` over ``(K, lanes)`` planes, for the first
    ``act`` lanes.
    """
    k = mat.shape[1]
    for b in range(k):
        for s in range(act):
            dst[b, s] = 0.0
    for a in range(k):
        for b in range(k):
            if mat.shape[0] == 1:  # one table: its entry out of the lanes' loop
                e = mat[0, a, b]
                for s in range(act):
                    dst[b, s] += src[a, s] * e
            else:
                for s in range(act):
                    dst[b, s] += src[a, s] * mat[idx[_TAB, s], a, b]


@njit(**FINITE)
def _lanes_min(inv, pen, dst, mat, idx, act, shift, penalised):
    """``dst[b, s] = min_a (mat[tab_s + shift, a, b] inv[a, s] + pen[a, s])`` for the first ``act``
    lanes (penalties read only if ``penalised``).
    """
    k = mat.shape[1]
    if mat.shape[0] == 1:
        for a in range(0, k, 4):
            a1, a2, a3 = min(a + 1, k - 1), min(a + 2, k - 1), min(a + 3, k - 1)
            for b in range(k):
                e0, e1, e2, e3 = mat[0, a, b], mat[0, a1, b], mat[0, a2, b], mat[0, a3, b]
                if penalised:
                    for s in range(act):
                        m01 = min(inv[a, s] * e0 + pen[a, s], inv[a1, s] * e1 + pen[a1, s])
                        m23 = min(inv[a2, s] * e2 + pen[a2, s], inv[a3, s] * e3 + pen[a3, s])
                        dst[b, s] = min(m01, m23) if a == 0 else min(dst[b, s], min(m01, m23))
                else:
                    for s in range(act):
                        m01 = min(inv[a, s] * e0, inv[a1, s] * e1)
                        m23 = min(inv[a2, s] * e2, inv[a3, s] * e3)
                        dst[b, s] = min(m01, m23) if a == 0 else min(dst[b, s], min(m01, m23))
        return
    for b in range(k):
        for s in range(act):
            dst[b, s] = _EXCLUDE
    for a in range(k):
        for b in range(k):
            for s in range(act):
                v = inv[a, s] * mat[idx[_TAB, s] + shift, a, b] + pen[a, s]
                dst[b, s] = min(dst[b, s], v)


@njit(**KERNEL)
def _lanes_rate(weights, mins, act, vec, scaled, idx, out):
    """``out[row_s] = max(0, 1 - sum_b weights[b, s] kept(mins[b, s]) / d_s)``, ``d_s = vec[_BS,
    s]`` if ``scaled`` else 1.
    """
    for s in range(act):
        vec[_TOT, s] = 0.0
    for b in range(mins.shape[0]):
        for s in range(act):
            m = mins[b, s]
            vec[_TOT, s] += weights[b, s] * (m if m < _EXCLUDE else 0.0)
    for s in range(act):
        tot = vec[_TOT, s] / vec[_BS, s] if scaled else vec[_TOT, s]
        out[idx[_ROW, s]] = max(0.0, 1.0 - tot)


@njit(**KERNEL)
def _lanes_rates(j, new, act, am, pm, ro, wj, swept, tab, scratch, right, left):
    """The mixing rates of the edges at position ``j`` of the lanes, into ``right`` and ``left``.

    On entry ``am``, ``buf[_IN]`` hold ``alpha[t]``, ``beta[t]``; ``pm``
    ``alpha[t - 1]``; for the first ``new`` lanes ``ro`` holds ``r[t + 1]``
    and ``vec[_BS]`` ``beta_scale[t]``. ``right[t] = 1 - sum_b min_a P(y_{t+1}
    = b | y_t = a)`` (zero on last rows), ``left[t] = 1 - sum_a min_b
    P(y_{t-1} = a | y_t = b)`` (zero on first rows); with ``swept`` (``wj`` =
    ``w[t]``, ``vec[_FS]`` = ``s_t``) ``1 / into[t, b] = w[t, b] / (alpha[t, b]
    s_t)``. Labels of zero probability get ``inv = 0`` and penalty ``_EXCLUDE``.
    """
    buf, vec, idx = scratch.buf, scratch.vec, scratch.idx
    emat, emat_t = tab.emat, tab.emat_t
    beta, inv, pen, mins = buf[_IN], buf[_RINV], buf[_RPEN], buf[_MARG]
    k = buf.shape[1]
    excluded = 0
    for a in range(k):
        for s in range(act):
            ok = am[a, s] * beta[a, s] > 0.0
            x = min(1.0 / beta[a, s], _HUGE)
            inv[a, s] = x if ok else 0.0
            pen[a, s] = 0.0 if ok else _EXCLUDE
            excluded += 0 if ok else 1
    penalised = excluded > 0
    if new > 0:
        _lanes_min(inv, pen, mins, emat, idx, new, 1 if emat.shape[0] > 1 else 0, penalised)
        _lanes_rate(ro, mins, new, vec, True, idx, right)
    for s in range(new, act):
        right[idx[_ROW, s]] = 0.0
    if j == 0:
        for s in range(act):
            left[idx[_ROW, s]] = 0.0
        return
    if swept:
        for b in range(k):
            for s in range(act):
                x = min(wj[b, s] / (am[b, s] * vec[_FS, s]), _HUGE)
                inv[b, s] = x if pen[b, s] == 0.0 else 0.0
    else:
        _lanes_times(pm, mins, emat, idx, act)
        for b in range(k):
            for s in range(act):
                x = min(1.0 / mins[b, s], _HUGE)
                inv[b, s] = x if pen[b, s] == 0.0 else 0.0
    _lanes_min(inv, pen, mins, emat_t, idx, act, 0, penalised)
    _lanes_rate(pm, mins, act, vec, False, idx, left)


@njit(**KERNEL)
def _lanes_outer(x, y, lanes, acc):
    """``acc[a, b] += sum_{s < lanes} x[a, s] y[b, s]`` over ``x, y (K, lanes)`` planes."""
    k = x.shape[0]
    for a in range(0, k, 2):
        a1 = min(a + 1, k - 1)  # (odd K: the last row twice, added once)
        for b in range(0, k, 2):
            b1 = min(b + 1, k - 1)
            t00 = t01 = t10 = t11 = 0.0
            for s in range(lanes):
                xa, xb, ya, yb = x[a, s], x[a1, s], y[b, s], y[b1, s]
                t00 += xa * ya
                t01 += xa * yb
                t10 += xb * ya
                t11 += xb * yb
            acc[a, b] += t00
            if b1 > b:
                acc[a, b1] += t01
            if a1 > a:
                acc[a1, b] += t10
                if b1 > b:
                    acc[a1, b1] += t11


@njit(**KERNEL)
def _lanes_edges(new, am, ro, vec, idx, seq_weight, buf, acc):
    """Add ``seq_weight[i] alpha[t] r[t + 1]' / (beta_scale[t] overlap[t])`` of the first ``new``
    lanes' edges to ``acc (K, K)``.
    """
    cy = buf[_EDGE]
    for s in range(new):
        vec[_TOT, s] = seq_weight[idx[_SEQ, s]] * vec[_INV, s] / vec[_BS, s]
    for b in range(cy.shape[0]):
        for s in range(new):
            cy[b, s] = vec[_TOT, s] * ro[b, s]
    _lanes_outer(am, cy, new, acc)


@njit(**KERNEL)
def _set_rows(j, idx, act, n_tab):
    """Point the first ``act`` lanes at their row ``j`` and its table."""
    for s in range(act):
        row = idx[_FIRST, s] + j
        idx[_ROW, s] = row
        idx[_TAB, s] = table(n_tab, row)


# -- what derives from the messages: pairwise marginals, rates, exact gamma -----------------------
class Messages(NamedTuple):
    """The stored scaled messages of a batch (:meth:`of` a ``Workspace`` or ``ChainPosterior``), and
    their rates.

    Attributes
    ----------
    offsets : (m + 1,) int64
    alpha, beta, r : (n, K) float64
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
    """``1 - sum_j min_{i possible} emat[i, j] * into_inv[i] * weight[j]`` (see :func:`_lanes_rates`)."""
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


# -- the scaled forward and backward sweeps -------------------------------------------------------
# Entries of each of a task's arrays of cached planes (``Scratch.w_at``,
# ``Scratch.alpha_at``): 256 KiB, so that both stay in a core's cache.
_CACHE_ENTRIES = 1 << 15
#: What a chunk's task does (:func:`_chunk_pass`): both sweeps; both sweeps
#: and the rates; the rates of swept messages.
SWEEPS, SWEEPS_RATES, RATES = 0, 1, 2


@njit(**KERNEL)
def _chunk_edges_rowwise(lanes, idx, msg, nodes, acc):
    """``acc`` as :func:`_lanes_edges` over the chunk's sequences not lost, from the stored rows."""
    alpha, r, beta_scale, overlap = msg.alpha, msg.r, msg.beta_scale, nodes.overlap
    acc[:] = 0.0
    for s in range(lanes):
        i = idx[_SEQ, s]
        if nodes.lost[i]:
            continue
        for t in range(msg.offsets[i], msg.offsets[i + 1] - 1):
            c = nodes.seq_weight[i] / (beta_scale[t] * overlap[t])
            for a in range(alpha.shape[1]):
                x = alpha[t, a] * c
                for b in range(alpha.shape[1]):
                    acc[a, b] += x * r[t + 1, b]


class Tables(NamedTuple):
    """The factors of a pass besides the node scores.

    Attributes
    ----------
    emat, emax : (P, K, K), (P,) float64
        ``exp(trans - emax)`` (:func:`exp_tables`).
    emat_t : (P, K, K) float64
        Its transpose (C-contiguous for one table, a view for per-position tables).
    start_e, end_e : (K,) float64
        ``exp(start - start_max)``, ``exp(end - end_max)`` (:func:`shifted_exp`).
    start_max, end_max : float
    """

    emat: np.ndarray
    emat_t: np.ndarray
    emax: np.ndarray
    start_e: np.ndarray
    start_max: float
    end_e: np.ndarray
    end_max: float


class Nodes(NamedTuple):
    """The per-node buffers of a pass besides the stored messages (``Messages``).

    Attributes
    ----------
    w, row_max : (n, K), (n,) float64
        ``exp(unary - row_max)`` and ``row_max`` (:func:`exp_rows`).
    log_z : (m,) float64, output
    marg : (n, K) float64, output
    overlap : (n,) float64, output
        ``alpha[t] @ beta[t]``.
    lost : (m,) bool, output
    seq_weight : (m,) float64
        The sequences' weights in ``edges`` (empty: no edge sums).
    edges : (T, K, K) float64, output
        Each task's edge sums (:func:`messages`); ``(0, K, K)`` when not asked for.
    keep : bool
        Store ``alpha`` and ``r`` of every row.
    """

    w: np.ndarray
    row_max: np.ndarray
    log_z: np.ndarray
    marg: np.ndarray
    overlap: np.ndarray
    lost: np.ndarray
    seq_weight: np.ndarray
    edges: np.ndarray
    keep: bool


class Scratch(NamedTuple):
    """One task's scratch of the lockstep sweeps (:func:`_chunk_messages`).

    Attributes
    ----------
    buf : (10, K, lanes) float64
    vec : (7, lanes) float64
    idx : (5, lanes) int64
    w_at, alpha_at : (cap, K, lanes) float64
        The forward sweep's planes of ``w`` and ``alpha`` at positions ``j < cap``.
    edges : (2, K, K) float64
        The edge sums of the current chunk and of the task's chunks before it.
    """

    buf: np.ndarray
    vec: np.ndarray
    idx: np.ndarray
    w_at: np.ndarray
    alpha_at: np.ndarray
    edges: np.ndarray


@njit(**KERNEL)
def _scratch(k, cap):
    """A fresh :class:`Scratch` for ``k`` labels, :data:`CHUNK` lanes and ``cap`` cached positions."""
    return Scratch(
        np.empty((_PLANES, k, CHUNK)), np.empty((_VECS, CHUNK)), np.empty((5, CHUNK), dtype=np.int64),
        np.empty((cap, k, CHUNK)), np.empty((cap, k, CHUNK)), np.zeros((2, k, k)),
    )


@njit(**KERNEL)
def _cached_positions(offsets, k, task):
    """Positions whose planes a chunk's sweeps keep (``Scratch.w_at``): the longest length, at
    most :data:`_CACHE_ENTRIES` entries a plane array; none for :data:`RATES`.
    """
    if task == RATES:
        return 0
    longest = 0
    for i in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    return min(longest, max(1, _CACHE_ENTRIES // (k * CHUNK)))


@njit(**KERNEL)
def _chunk_lanes(c, offsets, idx):
    """Point the lanes of ``idx (5, lanes)`` at the sequences of chunk ``c``, longest first; their
    count.
    """
    lo, hi = c * CHUNK, min(offsets.shape[0] - 1, (c + 1) * CHUNK)
    lanes = hi - lo
    lengths = np.empty(lanes, dtype=np.int64)
    for i in range(lo, hi):
        lengths[i - lo] = offsets[i] - offsets[i + 1]  # negated: longest first
    order = np.argsort(lengths, kind="mergesort")
    for s in range(lanes):
        i = lo + order[s]
        idx[_SEQ, s] = i
        idx[_FIRST, s] = offsets[i]
        idx[_LEN, s] = offsets[i + 1] - offsets[i]
    return lanes


@njit(**KERNEL)
def _chunk_messages(c, msg, nodes, tab, rates, keep, scratch):
    """Both sweeps of the sequences of chunk ``c`` (see :func:`messages`), in lockstep.

    At position ``j`` the lanes longer than ``j`` are a prefix; a lost lane
    goes on computing (its rows unspecified). The forward sweep keeps ``w`` and
    ``alpha`` of the first ``cap`` positions in ``Scratch`` for the backward
    one, which adds the rates with ``rates`` and the edge sums when
    ``nodes.edges`` asks (from stored rows in a chunk with a lost sequence).
    Without ``keep`` only ``alpha`` past ``cap`` is stored and no ``r``; a chunk
    that would then need stored rows returns False, having added nothing.
    """
    offsets, alpha, beta, r = msg.offsets, msg.alpha, msg.beta, msg.r
    beta_scale = msg.beta_scale
    w, row_max, log_z, marg = nodes.w, nodes.row_max, nodes.log_z, nodes.marg
    overlap, lost = nodes.overlap, nodes.lost
    emat, emat_t, emax = tab.emat, tab.emat_t, tab.emax
    start_e, start_max, end_e, end_max = tab.start_e, tab.start_max, tab.end_e, tab.end_max
    buf, vec, idx, w_at, alpha_at = scratch.buf, scratch.vec, scratch.idx, scratch.w_at, scratch.alpha_at
    into, sums, inv, ovs = buf[_IN], vec[_SUM], vec[_INV], vec[_OV]
    k = w.shape[1]
    n_tab = emat.shape[0]
    cap = w_at.shape[0]
    lanes = _chunk_lanes(c, offsets, idx)
    sum_edges = nodes.edges.shape[0] > 0
    chunk_edges = scratch.edges[0]
    if sum_edges:
        chunk_edges[:] = 0.0
    for s in range(lanes):
        lost[idx[_SEQ, s]] = False
        vec[_ACC, s] = start_max
    top = idx[_LEN, 0]
    e_sum = 0.0
    for a in range(k):
        e_sum += end_e[a]
    # Forward: into = alpha[t - 1] @ E_t, aj = alpha[t] (normalised), wj = w[t].
    act = lanes
    prev = buf[_MSG]
    for j in range(top):
        while idx[_LEN, act - 1] <= j:
            act -= 1
        _set_rows(j, idx, act, n_tab)
        wj, aj = (w_at[j], alpha_at[j]) if j < cap else (buf[_W], buf[_MSG])
        _gather(w, idx, 0, act, 0, wj)
        if j == 0:
            for a in range(k):
                for s in range(act):
                    into[a, s] = start_e[a]
        else:
            _lanes_times(prev, into, emat, idx, act)
        for s in range(act):
            sums[s] = 0.0
        for a in range(k):
            for s in range(act):
                v = into[a, s] * wj[a, s]
                aj[a, s] = v
                sums[s] += v
        for s in range(act):
            inv[s] = 1.0 / sums[s]
        for a in range(k):
            for s in range(act):
                aj[a, s] *= inv[s]
        if keep or j >= cap:
            _scatter(aj, idx, 0, act, alpha)
        _forward_log_z(j, act, aj, vec, idx, nodes, tab)
        prev = aj
    # Backward: into = E_{t+1} @ r[t + 1] (or end) with its sums, then
    # beta[t] (normalised); am = alpha[t], wj = w[t]; rn = r[t], ro = r[t + 1].
    rn, ro, mg = buf[_R], buf[_R2], buf[_MARG]
    act = 0
    for j in range(top - 1, -1, -1):
        new = act
        while act < lanes and idx[_LEN, act] > j:
            act += 1
        for s in range(new, act):
            for a in range(k):
                into[a, s] = end_e[a]
            sums[s] = e_sum
        _set_rows(j, idx, act, n_tab)
        if j < cap:
            am, wj = alpha_at[j], w_at[j]
        else:
            am, wj = buf[_MSG], buf[_W]
            _gather(alpha, idx, 0, act, 0, am)
            _gather(w, idx, 0, act, 0, wj)
        for s in range(act):
            inv[s] = 1.0 / sums[s]
            ovs[s] = 0.0
        for a in range(k):
            for s in range(act):
                b = into[a, s] * inv[s]
                into[a, s] = b
                ovs[s] += am[a, s] * b
                rn[a, s] = b * wj[a, s]
        bad = False
        for s in range(act):
            row = idx[_ROW, s]
            bs, ov, fs = sums[s], ovs[s], overlap[row]
            bad |= not ((bs >= TINY) & (fs * ov >= SAFE) & (bs * ov >= SAFE))
            beta_scale[row] = bs
            vec[_BS, s] = bs
            vec[_FS, s] = fs
            overlap[row] = ov
            inv[s] = 1.0 / ov
            sums[s] = 0.0
        if bad:
            for s in range(act):
                bs, ov, fs = vec[_BS, s], ovs[s], vec[_FS, s]
                if not (bs >= TINY and fs * ov >= SAFE and bs * ov >= SAFE):
                    lost[idx[_SEQ, s]] = True
        if sum_edges and new > 0:
            _lanes_edges(new, am, ro, vec, idx, nodes.seq_weight, buf, chunk_edges)
        for a in range(k):
            for s in range(act):
                mg[a, s] = am[a, s] * into[a, s] * inv[s]
                sums[s] += rn[a, s]
        bad = False
        for s in range(act):
            bad |= not sums[s] >= TINY
            inv[s] = 1.0 / sums[s]
        if bad:
            for s in range(act):
                if not sums[s] >= TINY:
                    lost[idx[_SEQ, s]] = True
        for a in range(k):
            for s in range(act):
                rn[a, s] *= inv[s]
        _scatter(into, idx, new, act, beta)
        if keep:
            _scatter(rn, idx, 0, act, r)
        _scatter(mg, idx, 0, act, marg)
        if rates:
            pm = buf[_PREV]
            if 0 < j <= cap:
                pm = alpha_at[j - 1]
            elif j > 0:
                _gather(alpha, idx, 0, act, -1, pm)
            _lanes_rates(j, new, act, am, pm, ro, wj, True, tab, scratch, msg.right, msg.left)
        rn, ro = ro, rn  # ro = r[t], the r[t + 1] of the next position
        if j > 0:
            _lanes_times(ro, into, emat_t, idx, act)
            _lanes_sums(into, act, sums)
    if sum_edges:
        for s in range(lanes):
            if lost[idx[_SEQ, s]]:
                if not keep:
                    return False
                _chunk_edges_rowwise(lanes, idx, msg, nodes, chunk_edges)
                break
        scratch.edges[1] += chunk_edges
    return True


@njit(**KERNEL)
def _forward_log_z(j, act, aj, vec, idx, nodes, tab):
    """The forward sweep's bookkeeping at position ``j`` of the first ``act`` lanes.

    The normalisers ``vec[_SUM]`` of ``alpha[t]`` go to ``nodes.overlap[t]``
    and their logarithms into log Z's running sum; lanes whose sequence ends
    at ``j`` get their ``log_z``.
    """
    row_max, log_z, overlap, lost = nodes.row_max, nodes.log_z, nodes.overlap, nodes.lost
    emax, end_e, end_max = tab.emax, tab.end_e, tab.end_max
    for s in range(act):
        row = idx[_ROW, s]
        sm = vec[_SUM, s]
        overlap[row] = sm
        if not sm >= TINY:
            lost[idx[_SEQ, s]] = True
        vec[_ACC, s] += row_max[row] + (emax[idx[_TAB, s]] if j > 0 else 0.0) + np.log(sm)
    ends = act
    while ends > 0 and idx[_LEN, ends - 1] == j + 1:
        ends -= 1
    for s in range(ends, act):
        i = idx[_SEQ, s]
        last = 0.0
        for a in range(aj.shape[0]):
            last += aj[a, s] * end_e[a]
        if not last >= TINY:
            lost[i] = True
        log_z[i] = vec[_ACC, s] + end_max + np.log(last)


@njit(**KERNEL)
def _chunk_late_rates(c, msg, tab, scratch):
    """The mixing rates of the sequences of chunk ``c`` from their stored messages.

    A backward sweep as in :func:`_chunk_messages` without exponentials and
    marginals, rebuilding ``beta[t] = (E_{t+1} @ r[t + 1]) / beta_scale[t]``
    from the stored ``r``; equal to the sweep's rates to rounding.
    """
    offsets, alpha, beta, r = msg.offsets, msg.alpha, msg.beta, msg.r
    emat_t = tab.emat_t
    buf, vec, idx = scratch.buf, scratch.vec, scratch.idx
    into, ro, sums = buf[_IN], buf[_R], vec[_SUM]
    k = emat_t.shape[1]
    n_tab = emat_t.shape[0]
    lanes = _chunk_lanes(c, offsets, idx)
    am, pm = buf[_MSG], buf[_PREV]
    act = 0
    for j in range(idx[_LEN, 0] - 1, -1, -1):
        new = act
        while act < lanes and idx[_LEN, act] > j:
            act += 1
        _set_rows(j, idx, act, n_tab)
        _gather(beta, idx, new, act, 0, into)
        _gather(alpha, idx, new, act, 0, am)
        if j > 0:
            _gather(alpha, idx, 0, act, -1, pm)
        _lanes_rates(j, new, act, am, pm, ro, buf[_W], False, tab, scratch, msg.right, msg.left)
        am, pm = pm, am
        if j > 0:
            _gather(r, idx, 0, act, 0, ro)
            _lanes_times(ro, into, emat_t, idx, act)
            _lanes_sums(into, act, sums)
            for s in range(act):
                vec[_BS, s] = sums[s]
                vec[_INV, s] = 1.0 / sums[s]
            for a in range(k):
                for s in range(act):
                    into[a, s] *= vec[_INV, s]


@njit(**KERNEL)
def _chunk_pass(c, msg, nodes, tab, task, scratch):
    """The ``task`` of chunk ``c``."""
    if task == RATES:
        _chunk_late_rates(c, msg, tab, scratch)
    elif not _chunk_messages(c, msg, nodes, tab, task == SWEEPS_RATES, nodes.keep, scratch):
        _chunk_messages(c, msg, nodes, tab, task == SWEEPS_RATES, True, scratch)


@njit(**PARALLEL)
def _pass_parallel(msg, nodes, tab, task, threads):
    k = tab.emat.shape[1]
    chunks = (msg.offsets.shape[0] + CHUNK - 2) // CHUNK
    cap = _cached_positions(msg.offsets, k, task)
    # A task per thread, each with its own scratch, over consecutive chunks.
    tasks = max(1, min(threads, chunks))
    for t in prange(tasks):
        scratch = _scratch(k, cap)
        for c in range(t * chunks // tasks, (t + 1) * chunks // tasks):
            _chunk_pass(c, msg, nodes, tab, task, scratch)
        if nodes.edges.shape[0] > 0:
            out = nodes.edges[t]  # (through a view: numba 0.68 drops ``edges[t] = ...`` in a prange)
            out[:] = scratch.edges[1]


@njit(**KERNEL)
def _pass_serial(msg, nodes, tab, task):
    k = tab.emat.shape[1]
    scratch = _scratch(k, _cached_positions(msg.offsets, k, task))
    for c in range((msg.offsets.shape[0] + CHUNK - 2) // CHUNK):
        _chunk_pass(c, msg, nodes, tab, task, scratch)
    if nodes.edges.shape[0] > 0:
        nodes.edges[0] = scratch.edges[1]


def _run(msg, nodes, tab, task, parallel):
    """The ``task`` of every chunk: ``prange`` over tasks of the current numba threads, or serial."""
    if parallel:
        _pass_parallel(msg, nodes, tab, task, get_num_threads())
    else:
        _pass_serial(msg, nodes, tab, task)


def _tables(emat, emax, start, end):
    """The :class:`Tables` of a pass."""
    # The backward product is the forward one with the tables transposed.
    emat_t = emat.transpose(0, 2, 1)
    if emat.shape[0] == 1:
        emat_t = np.ascontiguousarray(emat_t)
    start_e, s_max = shifted_exp(start)
    end_e, e_max = shifted_exp(end)
    return Tables(emat, emat_t, emax, start_e, s_max, end_e, e_max)


def messages(ws, emat, emax, start, end, with_rates, parallel, seq_weight=None, keep=True):
    """Scaled forward-backward messages, marginals, mixing rates and edge sums of every sequence.

    ``beta`` is stored on each sequence's last row only; rows of ``lost``
    sequences are unspecified.

    Parameters
    ----------
    ws : Workspace-like
        Holds ``w, row_max`` (:func:`exp_rows`), ``offsets`` and the outputs
        ``log_z (m,)``, ``alpha, beta, r, marg (n, K)``, ``beta_scale, overlap,
        right, left (n,)``, ``lost (m,)`` bool.
    emat, emax : (P, K, K), (P,) float64
        From :func:`exp_tables`.
    start, end : (K,) float64
    with_rates : bool
        Fill the mixing rates ``right`` and ``left`` (see :class:`Messages`).
    parallel : bool
    seq_weight : (m,) float64, optional
        Sum the weighted edge products within the sweep (one shared table only).
    keep : bool
        Store ``alpha`` and ``r`` (else their rows are unspecified).

    Returns
    -------
    (K, K) float64 or None
        With ``seq_weight``: ``sum_t seq_weight[i(t)] alpha[t] r[t + 1]' /
        (beta_scale[t] overlap[t])`` over the edges of sequences not lost
        (times the table: their weighted pairwise marginals).
    """
    tab = _tables(emat, emax, start, end)
    k = emat.shape[1]
    if seq_weight is not None and emat.shape[0] != 1:
        raise ValueError("edge sums within the sweep need one shared table; got per-position tables.")
    tasks = 0 if seq_weight is None else (get_num_threads() if parallel else 1)
    nodes = Nodes(
        w=ws.w, row_max=ws.row_max, log_z=ws.log_z, marg=ws.marg, overlap=ws.overlap, lost=ws.lost,
        seq_weight=np.zeros(0) if seq_weight is None else seq_weight, edges=np.zeros((tasks, k, k)),
        keep=keep,
    )
    task = SWEEPS_RATES if with_rates else SWEEPS
    _run(Messages.of(ws), nodes, tab, task, parallel)
    return None if seq_weight is None else nodes.edges.sum(axis=0)


def late_rates(msg, emat, parallel):
    """The mixing rates of messages swept without them, into ``msg.right`` and ``msg.left``.

    Parameters
    ----------
    msg : Messages
        Of :func:`messages` without ``with_rates``.
    emat : (P, K, K) float64
    parallel : bool
    """
    k = msg.alpha.shape[1]
    none = np.zeros(k)
    tab = _tables(emat, np.zeros(emat.shape[0]), none, none)
    rows = np.empty((0, k))
    nodes = Nodes(
        w=rows, row_max=none, log_z=none, marg=rows, overlap=none, lost=np.empty(0, dtype=bool),
        seq_weight=none, edges=np.zeros((0, k, k)), keep=True,
    )
    _run(msg, nodes, tab, RATES, parallel)
