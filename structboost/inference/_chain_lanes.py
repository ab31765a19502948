"""The lane kernels of the lockstep sweeps (:mod:`._chain_sweeps`).

A chunk's sequences are the lanes of its scratch: planes ``(K, lanes)``
(lanes innermost), rows of ``vec (8, lanes)`` and ``idx (5, lanes)`` named
by the constants below. Every kernel runs over the first ``act`` (or
``new``) lanes at once, with no horizontal sums.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .._config import FINITE, KERNEL, njit
from ._chain import table

# Planes of the chunk's scratch ``buf (10, K, lanes)``: the incoming message,
# alpha and w (at the positions past the cached ones, ``Scratch.w_at``), r
# and the marginals; the mixing rates' alpha of the previous position (past
# the cached ones), second r, inverses and penalties (:func:`_lanes_rates`),
# and the edges' weighted r (:func:`_lanes_edges`).
_IN, _MSG, _W, _R, _MARG, _PREV, _R2, _RINV, _RPEN, _EDGE = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
_PLANES = 10
# Rows of ``vec (8, lanes)``: sums, their inverses, overlaps, log Z's
# running sum and running product of normalisers, beta_scale, the rates'
# totals (also the edges' weights) and the forward sweep's normaliser.
_SUM, _INV, _OV, _ACC, _RUN, _BS, _TOT, _FS = 0, 1, 2, 3, 4, 5, 6, 7
_VECS = 8
# Rows of ``idx (5, lanes)`` int64: sequence, first row, length, current row, table.
_SEQ, _FIRST, _LEN, _ROW, _TAB = 0, 1, 2, 3, 4
# Added to the conditionals given a label of zero probability (the mixing
# rates, whose inverse is then zero): above every finite one.
_EXCLUDE = np.inf
# The largest inverse of a possible label's weight (the inverse of a
# subnormal one overflows): keeps every conditional finite, as ``minnum``
# under FINITE's ``nnan`` needs.
_HUGE = np.finfo(np.float64).max


@intrinsic
def _fmin(typingctx, a, b):
    """``min(a, b)`` of two float64 as LLVM's ``minnum``, which vectorises."""
    sig = types.float64(types.float64, types.float64)

    def codegen(context, builder, signature, args):
        d = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.minnum", [d], ir.FunctionType(d, [d, d]))
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _prefetch(typingctx, arr, row, col):
    """Prefetch for writing the cache line of ``arr[row, col]`` (``llvm.prefetch``; no effect on
    results).
    """
    sig = types.void(arr, row, col)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], args[2]])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


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
    if mat.shape[0] == 1:
        for a in range(0, k, 4):
            a1, a2, a3 = min(a + 1, k - 1), min(a + 2, k - 1), min(a + 3, k - 1)
            for b in range(k):
                e0 = mat[0, a, b]
                e1 = mat[0, a1, b] if a + 1 < k else 0.0
                e2 = mat[0, a2, b] if a + 2 < k else 0.0
                e3 = mat[0, a3, b] if a + 3 < k else 0.0
                if a == 0:
                    for s in range(act):
                        dst[b, s] = src[0, s] * e0 + src[a1, s] * e1 + src[a2, s] * e2 + src[a3, s] * e3
                else:
                    for s in range(act):
                        dst[b, s] += (src[a, s] * e0 + src[a1, s] * e1
                                      + src[a2, s] * e2 + src[a3, s] * e3)
        return
    for b in range(k):
        for s in range(act):
            dst[b, s] = 0.0
    for a in range(k):
        for b in range(k):
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
                        m01 = _fmin(inv[a, s] * e0 + pen[a, s], inv[a1, s] * e1 + pen[a1, s])
                        m23 = _fmin(inv[a2, s] * e2 + pen[a2, s], inv[a3, s] * e3 + pen[a3, s])
                        dst[b, s] = _fmin(m01, m23) if a == 0 else _fmin(dst[b, s], _fmin(m01, m23))
                else:
                    for s in range(act):
                        m01 = _fmin(inv[a, s] * e0, inv[a1, s] * e1)
                        m23 = _fmin(inv[a2, s] * e2, inv[a3, s] * e3)
                        dst[b, s] = _fmin(m01, m23) if a == 0 else _fmin(dst[b, s], _fmin(m01, m23))
        return
    for b in range(k):
        for s in range(act):
            dst[b, s] = _EXCLUDE
    for a in range(k):
        for b in range(k):
            for s in range(act):
                v = inv[a, s] * mat[idx[_TAB, s] + shift, a, b] + pen[a, s]
                dst[b, s] = _fmin(dst[b, s], v)


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
    ``alpha[t - 1]`` (``j > 0``); for the first ``new`` lanes ``ro`` holds
    ``r[t + 1]`` and ``vec[_BS]`` ``beta_scale[t]``.

    ``right[t] = 1 - sum_b min_a P(y_{t+1} = b | y_t = a)`` with
    ``P(b | a) = E[a, b] r[t + 1, b] / (beta_scale[t] beta[t, a])``, zero on
    last rows; ``left[t] = 1 - sum_a min_b P(y_{t-1} = a | y_t = b)`` with
    ``P(a | b) = alpha[t - 1, a] E[a, b] / into[t, b]``, zero on first rows.
    With ``swept`` (``wj`` holds ``w[t]``, ``vec[_FS]`` the normaliser
    ``s_t``), ``1 / into[t, b] = w[t, b] / (alpha[t, b] s_t)``. Labels of zero
    probability are excluded branch-free (``inv = 0``, penalty ``_EXCLUDE``).
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
def _prefetch_rows(idx, act, step, dst):
    """Prefetch the rows ``row_s + step`` of ``dst (n, K)`` of the first ``act`` lanes."""
    last = dst.shape[1] - 1
    for s in range(act):
        row = idx[_ROW, s] + step
        for a in range(0, last, 8):
            _prefetch(dst, row, a)
        _prefetch(dst, row, last)


@njit(**KERNEL)
def _set_rows(j, idx, act, n_tab):
    """Point the first ``act`` lanes at their row ``j`` and its table."""
    for s in range(act):
        row = idx[_FIRST, s] + j
        idx[_ROW, s] = row
        idx[_TAB, s] = table(n_tab, row)
