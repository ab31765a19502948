"""Numba kernels for linear-chain CRFs: tables, exponentials and the log-space fallback.

Kernels take flat C-contiguous float64 rows (:func:`exp_rows` also float32
in any layout) and ``offsets (m + 1,)`` int64. Transition scores are one
array ``trans (P, K, K)``: ``P == 1`` one shared table, ``P == n``
per-position scores (``trans[t, a, b]``: ``a`` at ``t - 1`` into ``b`` at
``t``; a sequence's first row is never read); :func:`table` picks a
position's. Probability-space kernels also take ``emat, emax =
exp_tables(trans)``. Nothing here validates input
(:mod:`structboost.inference.chain` does).

Fallback criterion
------------------
Scaled messages drop whatever falls below float64's range; each such loss
at position ``t`` is below ``TINY`` before normalisation, so it removes at
most ``TINY / (s_t ov_t)`` (forward) or ``TINY / (b_t ov_t)`` (backward) of
the posterior mass, with ``s_t``, ``b_t`` the normalisers of ``alpha[t]``,
``beta[t]`` and ``ov_t = alpha[t] @ beta[t]``. A sequence is *lost* once
``s_t ov_t`` or ``b_t ov_t`` falls below ``SAFE = TINY * 1e30`` (or a
normaliser below ``TINY``); otherwise the result is exact to rounding. Lost
sequences are recomputed by :func:`log_space_posterior`.
"""

import numpy as np
from numba import prange

from .._config import CACHE, KERNEL, PARALLEL, njit
from ._logspace import logsumexp

# exp(x) for x below this is under 2 ** -1022: returned as zero (any such
# entry of a possible label is below TINY and marks its sequence anyway).
EXP_FLOOR = -708.0
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_BLOCK = 4096

#: Sequences per task of the sweeps (and of the mixing rates, computed in
#: their lanes): a chunk's sequences run in lockstep
#: (:func:`~structboost.inference._chain_sweeps._chunk_messages`), longest
#: first, one vector lane each.
CHUNK = 64


@njit(inline="always")
def table(n_tables, t):
    """Index of the transition table of position ``t``: ``t`` if per position, else 0."""
    return t if n_tables > 1 else 0


@njit(**KERNEL)
def _exp_nonpositive(x, bits):
    """In place ``x = exp(x)`` for entries ``<= 0`` (``-inf`` allowed), vectorisable (``bits``:
    int64 scratch).

    Cody-Waite reduction ``x = k ln 2 + r``, a degree-13 Taylor polynomial in
    ``r`` (relative error below 1e-16) and ``2 ** k`` built in the exponent bits.
    """
    scale = bits.view(np.float64)
    for j in range(x.shape[0]):
        v = x[j]
        c = v if v > EXP_FLOOR else EXP_FLOOR
        kf = np.floor(c * _LOG2E + 0.5)
        r = c - kf * _LN2_HI - kf * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        bits[j] = (np.int64(kf) + 1023) << 52
        x[j] = p if v > EXP_FLOOR else 0.0
    for j in range(x.shape[0]):
        x[j] *= scale[j]


@njit(**KERNEL)
def _exp_block(src, lo, hi, w, row_max, bits, normalise):
    """Rows ``lo:hi`` of :func:`exp_rows` into the flat ``(n * K,)`` ``w`` (``bits``: scratch)."""
    k = src.shape[1]
    for t in range(lo, hi):
        top = -np.inf
        for j in range(k):
            top = max(top, np.float64(src[t, j]))
        row_max[t] = top
        for j in range(k):
            w[t * k + j] = np.float64(src[t, j]) - top
    _exp_nonpositive(w[lo * k : hi * k], bits[: (hi - lo) * k])
    if normalise:
        for t in range(lo, hi):
            total = 0.0
            for j in range(k):
                total += w[t * k + j]
            inv = 1.0 / total
            for j in range(k):
                w[t * k + j] *= inv


@njit(**PARALLEL)
def _exp_rows_parallel(src, w, row_max, normalise):
    n, k = src.shape
    rows = max(1, _EXP_BLOCK // max(1, k))
    for b in prange((n + rows - 1) // rows):
        bits = np.empty(rows * k, dtype=np.int64)
        _exp_block(src, b * rows, min(n, (b + 1) * rows), w, row_max, bits, normalise)


@njit(**KERNEL)
def _exp_rows_serial(src, w, row_max, normalise):
    n, k = src.shape
    rows = max(1, _EXP_BLOCK // max(1, k))
    bits = np.empty(rows * k, dtype=np.int64)  # one small scratch, not a fresh (n * K,) one
    for lo in range(0, n, rows):
        _exp_block(src, lo, min(n, lo + rows), w, row_max, bits, normalise)


def exp_rows(src, w, row_max, parallel, normalise=False):
    """Row-wise ``w = exp(src - max)``, ``row_max = max`` (in the given buffers).

    Parameters
    ----------
    src : (n, K) float32 or float64, any memory layout
        Finite or ``-inf`` entries, read in place (float32 widened exactly).
    w : (n, K) float64, output
        C-contiguous.
    row_max : (n,) float64, output
    parallel : bool
    normalise : bool
        Divide each row of ``w`` by its sum: the row-wise softmax.
    """
    run = _exp_rows_parallel if parallel else _exp_rows_serial
    run(src, w.reshape(-1), row_max, normalise)


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
    """Forward-backward in log space for some sequences (the fallback of the module notes).

    Parameters
    ----------
    unary : (n, K) float64
    offsets : (m + 1,) int64
    sequences : (s,) int64
        The sequences to process, increasing.
    trans : (P, K, K) float64
    start, end : (K,) float64

    Returns
    -------
    log_z : (s,) float64
        ``-inf`` for a sequence with no allowed labelling.
    marginals : (r, K) float64
        Node marginals of the selected sequences' rows, in order.
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
