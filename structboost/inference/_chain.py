"""Numba kernels for linear-chain CRFs over ragged batches of sequences.

Interface
---------
Every kernel takes flat, C-contiguous float64 rows of all sequences and
``offsets (m + 1,)`` int64 with ``offsets[i]:offsets[i + 1]`` the rows of
sequence ``i``. Transition scores come as one array ``trans (P, K, K)``:

* ``P == 1``: one table shared by every position (``transitions[None]``, a
  view of the usual ``(K, K)`` table);
* ``P == n``: per-position scores, ``trans[t, a, b]`` scores the move from
  label ``a`` at position ``t - 1`` into label ``b`` at position ``t``; the
  table of a sequence's first row is never read.

:func:`table` picks the table of a position. The probability-space kernels
also take ``emat, emax = exp_tables(trans)``: ``emat[p] = exp(trans[p] -
emax[p])``. Nothing here validates input: :mod:`structboost.inference.chain`
does that once. Each batch kernel comes as a ``prange`` driver and a serial one
over the same per-sequence (the sweeps: per-chunk) function;
:mod:`structboost._config` picks.

Messages
--------
Messages are kept in scaled probability space, so the inner loops are plain
multiply-adds with no ``exp``/``log``; ``exp`` runs once per round over all
node scores (:func:`exp_rows`, a vectorisable polynomial):

* ``alpha[t]`` is proportional to the forward message *including* the unary
  factor of position ``t`` and sums to one;
* ``into[t] = alpha[t - 1] @ E_t`` is the forward message entering ``t``;
* ``beta[t]`` is proportional to the backward message *excluding* position
  ``t`` and sums to one; ``E_{t+1} @ r[t + 1] = beta_scale[t] * beta[t]``;
* ``r[t]`` is proportional to ``exp(unary[t]) * beta[t]`` and sums to one.

Hence ``P(y_t = k) ~ alpha[t, k] * beta[t, k]`` and
``P(y_t = a, y_{t+1} = b) ~ alpha[t, a] * E_{t+1}[a, b] * r[t + 1, b]``.
One forward and one backward sweep (:func:`messages`) give log Z, the node
marginals and, on request, both Dobrushin mixing rates of every edge.

Fallback criterion
------------------
Scaled messages drop whatever falls below float64's range: an unnormalised
entry, a product in a message or an ``exp`` below ``2 ** -1022`` (forbidden
moves, node or transition scores hundreds of units apart). Each such loss at
position ``t`` is below ``TINY`` (``_config``) before normalisation, so the
posterior mass of the labellings it removes is at most ``TINY / (s_t ov_t)``
for the forward sweep and ``TINY / (b_t ov_t)`` for the backward one, where
``s_t`` and ``b_t`` are the normalisers of ``alpha[t]`` and ``beta[t]`` and
``ov_t = alpha[t] @ beta[t]``: the removed labellings pass through a node
whose forward (backward) factor was below ``TINY``. A sequence is therefore
*lost* as soon as ``s_t ov_t`` or ``b_t ov_t`` falls below ``SAFE = TINY *
1e30`` at some position (or a normaliser below ``TINY``); otherwise every
drop removes less than ``1e-30`` of the posterior mass per position and the
result is exact to rounding. Lost sequences are recomputed in log space
(:func:`log_space_posterior`), which holds any finite scores;
:func:`pairwise_rates` and :func:`exact_gamma_pairwise` then derive the
bounds from its pairwise marginals.
"""

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .._config import FINITE, KERNEL, PARALLEL, SAFE, TINY
from ._logspace import logsumexp

# exp(x) for x below this is under 2 ** -1022: returned as zero (any such
# entry of a possible label is below TINY and marks its sequence anyway).
EXP_FLOOR = -708.0
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_BLOCK = 4096
# log Z adds the logarithm of a running product of the normalisers once the
# product leaves [LOG_LO, LOG_HI], not one logarithm per position; a
# normaliser below LOG_LO (at least TINY) is logged alone, so that the
# product never leaves float64's normal range.
LOG_LO = 1e-100
LOG_HI = 1e100
# Added to the conditionals given a label of zero probability: no finite
# conditional (at most 1 / TINY) comes near it.
_EXCLUDE = 1e300


@njit(inline="always")
def table(n_tables, t):
    """Index of the transition table of position ``t``: ``t`` if per position, else 0."""
    return t if n_tables > 1 else 0


@njit(**KERNEL)
def _exp_nonpositive(x, bits):
    """In place ``x = exp(x)`` for entries ``<= 0`` (``-inf`` allowed), vectorisable.

    Cody-Waite reduction ``x = k ln 2 + r``, ``|r| <= ln 2 / 2``, a degree-13
    Taylor polynomial in ``r`` (relative error below 1e-16) and ``2 ** k``
    assembled in the exponent bits of ``bits`` (int64 scratch, same length).
    Loops start at zero, so that LLVM drops numba's negative-index checks.
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
def _exp_block(src, lo, hi, w, row_max, bits):
    """Rows ``lo:hi`` of :func:`exp_rows` into the flat ``(n * K,)`` ``w`` (``bits``: scratch)."""
    k = src.shape[1]
    for t in range(lo, hi):
        top = -np.inf
        for j in range(k):
            top = max(top, src[t, j])
        row_max[t] = top
        for j in range(k):
            w[t * k + j] = src[t, j] - top
    _exp_nonpositive(w[lo * k : hi * k], bits[: (hi - lo) * k])


@njit(**PARALLEL)
def _exp_rows_parallel(src, w, row_max):
    n, k = src.shape
    rows = max(1, _EXP_BLOCK // max(1, k))
    for b in prange((n + rows - 1) // rows):
        bits = np.empty(rows * k, dtype=np.int64)
        _exp_block(src, b * rows, min(n, (b + 1) * rows), w, row_max, bits)


@njit(**KERNEL)
def _exp_rows_serial(src, w, row_max):
    n, k = src.shape
    rows = max(1, _EXP_BLOCK // max(1, k))
    bits = np.empty(rows * k, dtype=np.int64)  # one small scratch, not a fresh (n * K,) one
    for lo in range(0, n, rows):
        _exp_block(src, lo, min(n, lo + rows), w, row_max, bits)


def exp_rows(src, w, row_max, parallel):
    """Row-wise ``w = exp(src - max)``, ``row_max = max`` (in the given buffers).

    Parameters
    ----------
    src : (n, K) float64
        Finite or ``-inf`` entries; a row may be all ``-inf`` (its ``w`` is
        then NaN, and only a forbidden table has such rows).
    w : (n, K) float64, output
    row_max : (n,) float64, output
    parallel : bool
    """
    (_exp_rows_parallel if parallel else _exp_rows_serial)(src, w.reshape(-1), row_max)


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


@intrinsic
def _fmin(typingctx, a, b):
    """``min(a, b)`` of two float64 as LLVM's ``minnum``, which LLVM vectorises in reductions.

    numba's ``min`` lowers to a compare and select that LLVM 22 keeps scalar
    inside a reduction loop; ``minnum`` becomes ``vminpd``.
    """
    sig = types.float64(types.float64, types.float64)

    def codegen(context, builder, signature, args):
        d = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.minnum", [d], ir.FunctionType(d, [d, d]))
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _prefetch(typingctx, arr, row, col):
    """Prefetch, for writing, the cache line of ``arr[row, col]`` (a 2-d array).

    LLVM's ``llvm.prefetch``: no effect on results. The sweeps' lanes write
    rows far apart, more streams than the hardware prefetcher follows.
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


@njit(**FINITE)
def _kept(m):
    """A row minimum, or 0 for a row with no finite entry (every label excluded)."""
    return m if m < _EXCLUDE else 0.0


@njit(**FINITE)
def _min_rate(mat, p, inv, pen, weights, row_w):
    """``1 - sum_i w[i] min_j (mat[p, i, j] inv[j] + pen[j])``, ``w = weights[row_w]``.

    Rows with no finite minimum are skipped. ``pen[j]`` is 0 for labels
    ``j`` of nonzero probability and ``_EXCLUDE`` otherwise (with ``inv[j] =
    0``), so that every value stays finite and the minimum vectorises. Rows
    go four at a time, sharing the loads of ``inv`` and ``pen`` (a third
    faster at K = 26 than one row at a time). Tables and rows are indexed,
    never sliced: a slice passed on is a new array whose reference count
    costs two atomic operations.
    """
    k = inv.shape[0]
    total = 0.0
    top = k - k % 4
    for i in range(0, top, 4):
        m0 = m1 = m2 = m3 = _EXCLUDE
        for j in range(k):
            s, q = inv[j], pen[j]
            m0 = _fmin(m0, mat[p, i, j] * s + q)
            m1 = _fmin(m1, mat[p, i + 1, j] * s + q)
            m2 = _fmin(m2, mat[p, i + 2, j] * s + q)
            m3 = _fmin(m3, mat[p, i + 3, j] * s + q)
        total += weights[row_w, i] * _kept(m0) + weights[row_w, i + 1] * _kept(m1)
        total += weights[row_w, i + 2] * _kept(m2) + weights[row_w, i + 3] * _kept(m3)
    for i in range(top, k):
        m = _EXCLUDE
        for j in range(k):
            m = _fmin(m, mat[p, i, j] * inv[j] + pen[j])
        total += weights[row_w, i] * _kept(m)
    return max(0.0, 1.0 - total)


@njit(**FINITE)
def _rate_weights(alpha, beta, t, scale, den, inv, pen):
    """The ``inv`` and ``pen`` of :func:`_min_rate` for the labels of position ``t``.

    ``inv = 1 / (scale * den[t])`` and ``pen = 0`` where ``alpha[t] *
    beta[t] > 0`` (a possible label), else ``inv = 0`` and ``pen =
    _EXCLUDE``. Branch-free (the division of an excluded label, possibly
    ``1 / 0``, is computed and discarded), so that the ``K`` divisions
    vectorise.
    """
    for a in range(inv.shape[0]):
        ok = alpha[t, a] * beta[t, a] > 0.0
        x = 1.0 / (scale * den[t, a])
        inv[a] = x if ok else 0.0
        pen[a] = 0.0 if ok else _EXCLUDE


@njit(**KERNEL)
def _rates(t, emat, emat_tt, p, alpha, beta, r, into, beta_scale, inv, pen, right, left):
    """Mixing rates ``right[t - 1]`` and ``left[t]`` of the edge ``(t - 1, t)`` (table ``p``).

    ``right[t - 1] = 1 - sum_b min_a P(y_t = b | y_{t-1} = a)`` over labels
    ``a`` of nonzero marginal, from ``P(b | a) = E[a, b] r[t, b] /
    (beta_scale[t - 1] beta[t - 1, a])`` (rows of ``emat_tt = E.T``);
    ``left[t]`` likewise from ``P(a | b) = alpha[t - 1, a] E[a, b] /
    into[t, b]`` (rows of ``E``). Labels of zero probability add nothing to
    the total variation of Theorem 3.1.
    """
    _rate_weights(alpha, beta, t - 1, beta_scale[t - 1], beta, inv, pen)
    right[t - 1] = _min_rate(emat_tt, p, inv, pen, r, t)
    _rate_weights(alpha, beta, t, 1.0, into, inv, pen)
    left[t] = _min_rate(emat, p, inv, pen, alpha, t - 1)


#: Sequences per task of the sweeps: a chunk's sequences run in lockstep
#: (:func:`_chunk_messages`), longest first, one vector lane each.
_CHUNK = 32
# Planes of the chunk's scratch ``buf (5, K, lanes)``: the incoming message,
# alpha (forward) or its stored rows (backward), w, r and the marginals.
_IN, _MSG, _W, _R, _MARG = 0, 1, 2, 3, 4
# Rows of ``vec (5, lanes)``: sums, their inverses, overlaps, log Z's
# running sum and running product of normalisers.
_SUM, _INV, _OV, _ACC, _RUN = 0, 1, 2, 3, 4
# Rows of ``idx (5, lanes)`` int64: sequence, first row, length, current row, table.
_SEQ, _FIRST, _LEN, _ROW, _TAB = 0, 1, 2, 3, 4


@njit(**KERNEL)
def _gather(src, idx, act, buf, q):
    """``buf[q, a, s] = src[row_s, a]`` for the first ``act`` lanes."""
    for s in range(act):
        row = idx[_ROW, s]
        for a in range(src.shape[1]):
            buf[q, a, s] = src[row, a]


@njit(**KERNEL)
def _scatter(buf, q, idx, act, dst):
    """``dst[row_s, a] = buf[q, a, s]`` for the first ``act`` lanes."""
    for s in range(act):
        row = idx[_ROW, s]
        for a in range(dst.shape[1]):
            dst[row, a] = buf[q, a, s]


@njit(**KERNEL)
def _lanes_times(buf, src, dst, mat, idx, act, vec):
    """``buf[dst, b, s] = sum_a buf[src, a, s] mat[tab_s, a, b]``, ``vec[_SUM] =`` its sums.

    For the first ``act`` lanes. One shared table: each entry is loaded once
    for all lanes, and the lanes are the vector dimension (no horizontal
    sums), four rows of the table per pass over ``buf[dst]``. Per-position
    tables (``mat`` may be a transposed view) are read lane by lane.
    """
    k = mat.shape[1]
    for b in range(k):
        for s in range(act):
            buf[dst, b, s] = 0.0
    if mat.shape[0] == 1:
        top = k - k % 4
        for a in range(0, top, 4):
            for b in range(k):
                e0, e1, e2, e3 = mat[0, a, b], mat[0, a + 1, b], mat[0, a + 2, b], mat[0, a + 3, b]
                for s in range(act):
                    buf[dst, b, s] += (buf[src, a, s] * e0 + buf[src, a + 1, s] * e1
                                       + buf[src, a + 2, s] * e2 + buf[src, a + 3, s] * e3)
        for a in range(top, k):
            for b in range(k):
                e0 = mat[0, a, b]
                for s in range(act):
                    buf[dst, b, s] += buf[src, a, s] * e0
    else:
        for a in range(k):
            for b in range(k):
                for s in range(act):
                    buf[dst, b, s] += buf[src, a, s] * mat[idx[_TAB, s], a, b]
    for s in range(act):
        vec[_SUM, s] = 0.0
    for b in range(k):
        for s in range(act):
            vec[_SUM, s] += buf[dst, b, s]


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


@njit(**KERNEL)
def _chunk_messages(
    c, w, row_max, offsets, emat, emat_t, emax, start_e, start_max, end_e, end_max,
    log_z, alpha, beta, r, into, beta_scale, marg, overlap, lost, buf, vec, idx,
):
    """Both sweeps of the sequences of chunk ``c`` (see :func:`messages`), in lockstep.

    The chunk's sequences, sorted longest first, are the lanes of the
    scratch ``buf (5, K, lanes)``, ``vec (5, lanes)`` and ``idx (5, lanes)``
    (lanes innermost), so that every pass over the labels and every product
    runs over all lanes at once with no horizontal sums. At position ``j``
    the lanes of the sequences longer than ``j`` are a prefix; the backward
    sweep starts a lane with ``end`` at its last row. Each lane's arithmetic
    is that of its sequence alone. A lane that the module notes' criterion
    marks lost goes on computing (its rows are unspecified).
    """
    m = offsets.shape[0] - 1
    k = w.shape[1]
    n_tab = emat.shape[0]
    lo, hi = c * _CHUNK, min(m, (c + 1) * _CHUNK)
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
        lost[i] = False
        vec[_ACC, s] = start_max
        vec[_RUN, s] = 1.0
    top = idx[_LEN, 0]
    e_sum = 0.0
    for a in range(k):
        e_sum += end_e[a]
    # Forward: buf[_IN] = alpha[t - 1] @ E_t, buf[_MSG] = alpha[t] (normalised).
    act = lanes
    for j in range(top):
        while idx[_LEN, act - 1] <= j:
            act -= 1
        _set_rows(j, idx, act, n_tab)
        _gather(w, idx, act, buf, _W)
        if j == 0:
            for a in range(k):
                for s in range(act):
                    buf[_IN, a, s] = start_e[a]
        else:
            _lanes_times(buf, _MSG, _IN, emat, idx, act, vec)
        for s in range(act):
            vec[_SUM, s] = 0.0
        for a in range(k):
            for s in range(act):
                v = buf[_IN, a, s] * buf[_W, a, s]
                buf[_MSG, a, s] = v
                vec[_SUM, s] += v
        for s in range(act):
            vec[_INV, s] = 1.0 / vec[_SUM, s]
        for a in range(k):
            for s in range(act):
                buf[_MSG, a, s] *= vec[_INV, s]
        _scatter(buf, _IN, idx, act, into)
        _scatter(buf, _MSG, idx, act, alpha)
        if j + 1 < top:
            _prefetch_rows(idx, act, 1, into)
            _prefetch_rows(idx, act, 1, alpha)
            _prefetch_rows(idx, act, 1, w)
        for s in range(act):
            row, i = idx[_ROW, s], idx[_SEQ, s]
            sm = vec[_SUM, s]
            if not sm >= TINY:
                lost[i] = True
            overlap[row] = sm
            acc = vec[_ACC, s] + row_max[row] + (emax[idx[_TAB, s]] if j > 0 else 0.0)
            run = vec[_RUN, s]
            if sm >= LOG_LO:
                run *= sm
            else:
                acc += np.log(sm)
            if not LOG_LO <= run <= LOG_HI:
                acc += np.log(run)
                run = 1.0
            vec[_ACC, s] = acc
            vec[_RUN, s] = run
            if j == idx[_LEN, s] - 1:
                last = 0.0
                for a in range(k):
                    last += buf[_MSG, a, s] * end_e[a]
                if not last >= TINY:
                    lost[i] = True
                log_z[i] = acc + np.log(run) + end_max + np.log(last)
    # Backward: buf[_IN] = E_{t+1} @ r[t + 1] (or end) with its sums in vec[_SUM].
    act = 0
    for j in range(top - 1, -1, -1):
        new = act
        while act < lanes and idx[_LEN, act] > j:
            act += 1
        for s in range(new, act):
            for a in range(k):
                buf[_IN, a, s] = end_e[a]
            vec[_SUM, s] = e_sum
        _set_rows(j, idx, act, n_tab)
        _gather(alpha, idx, act, buf, _MSG)
        _gather(w, idx, act, buf, _W)
        for s in range(act):
            vec[_INV, s] = 1.0 / vec[_SUM, s]
            vec[_OV, s] = 0.0
        for a in range(k):
            for s in range(act):
                b = buf[_IN, a, s] * vec[_INV, s]
                buf[_IN, a, s] = b
                vec[_OV, s] += buf[_MSG, a, s] * b
                buf[_R, a, s] = b * buf[_W, a, s]
        for s in range(act):
            row = idx[_ROW, s]
            bs, ov = vec[_SUM, s], vec[_OV, s]
            if not (bs >= TINY and overlap[row] * ov >= SAFE and bs * ov >= SAFE):
                lost[idx[_SEQ, s]] = True
            beta_scale[row] = bs
            overlap[row] = ov
            vec[_INV, s] = 1.0 / ov
            vec[_SUM, s] = 0.0
        for a in range(k):
            for s in range(act):
                buf[_MARG, a, s] = buf[_MSG, a, s] * buf[_IN, a, s] * vec[_INV, s]
                vec[_SUM, s] += buf[_R, a, s]
        for s in range(act):
            if not vec[_SUM, s] >= TINY:
                lost[idx[_SEQ, s]] = True
            vec[_INV, s] = 1.0 / vec[_SUM, s]
        for a in range(k):
            for s in range(act):
                buf[_R, a, s] *= vec[_INV, s]
        _scatter(buf, _IN, idx, act, beta)
        _scatter(buf, _R, idx, act, r)
        _scatter(buf, _MARG, idx, act, marg)
        if j > 0:
            _prefetch_rows(idx, act, -1, beta)
            _prefetch_rows(idx, act, -1, r)
            _prefetch_rows(idx, act, -1, marg)
            _lanes_times(buf, _R, _IN, emat_t, idx, act, vec)


@njit(**KERNEL)
def _chunk_pass(
    c, offsets, emat, emat_tt, with_rates, alpha, beta, r, into, beta_scale, right, left, lost,
    w, row_max, emat_t, emax, start_e, start_max, end_e, end_max, log_z, marg, overlap,
    buf, vec, idx, inv, pen,
):
    """:func:`_chunk_messages` of chunk ``c``, then its rates while its rows are in cache."""
    _chunk_messages(
        c, w, row_max, offsets, emat, emat_t, emax, start_e, start_max, end_e, end_max, log_z,
        alpha, beta, r, into, beta_scale, marg, overlap, lost, buf, vec, idx,
    )
    if with_rates:
        for i in range(c * _CHUNK, min(offsets.shape[0] - 1, (c + 1) * _CHUNK)):
            if not lost[i]:
                _sequence_rates(
                    i, offsets, emat, emat_tt, alpha, beta, r, into, beta_scale, right, left,
                    inv, pen,
                )


@njit(**PARALLEL)
def _messages_parallel(offsets, emat, *args):
    k = emat.shape[1]
    for c in prange((offsets.shape[0] + _CHUNK - 2) // _CHUNK):
        buf = np.empty((5, k, _CHUNK))
        vec = np.empty((5, _CHUNK))
        idx = np.empty((5, _CHUNK), dtype=np.int64)
        inv = np.empty(k)
        pen = np.empty(k)
        _chunk_pass(c, offsets, emat, *args, buf, vec, idx, inv, pen)


@njit(**KERNEL)
def _messages_serial(offsets, emat, *args):
    k = emat.shape[1]
    buf = np.empty((5, k, _CHUNK))
    vec = np.empty((5, _CHUNK))
    idx = np.empty((5, _CHUNK), dtype=np.int64)
    inv = np.empty(k)
    pen = np.empty(k)
    for c in range((offsets.shape[0] + _CHUNK - 2) // _CHUNK):
        _chunk_pass(c, offsets, emat, *args, buf, vec, idx, inv, pen)


def shifted_exp(x):
    """``(exp(x - max(x)), max(x))`` of start or end scores ``x (K,)``; zeros if all ``-inf``."""
    top = x.max()
    return (np.exp(x - top) if top > -np.inf else np.zeros_like(x)), top


def messages(ws, emat, emax, start, end, with_rates, parallel):
    """Scaled forward-backward messages, marginals and mixing rates of every sequence.

    Parameters
    ----------
    ws : Workspace-like
        Holds ``w, row_max`` (from :func:`exp_rows`) and ``offsets``, and the
        output buffers ``log_z (m,)``, ``alpha, beta, r, into, marg (n, K)``,
        ``beta_scale, overlap, right, left (n,)`` and ``lost (m,)`` bool.
    emat, emax : (P, K, K), (P,) float64
        From :func:`exp_tables`.
    start, end : (K,) float64
    with_rates : bool
        Fill ``right[t] = alpha_{t, t+1}`` (zero on last rows) and
        ``left[t] = alpha_{t, t-1}`` (zero on first rows), from the stored
        messages of each chunk right after its sweeps.
    parallel : bool

    Notes
    -----
    ``marg`` holds the node marginals, ``overlap[t] = alpha[t] @ beta[t]``
    (so that ``alpha[t] @ E @ r[t + 1] = beta_scale[t] * overlap[t]``).
    Rows of sequences with ``lost[i]`` set are unspecified: the caller
    recomputes them in log space. The sweeps run the sequences
    of a chunk in lockstep (:func:`_chunk_messages`).
    """
    # The backward product is the forward one with the tables transposed.
    emat_t = emat.transpose(0, 2, 1)
    if emat.shape[0] == 1:
        emat_t = np.ascontiguousarray(emat_t)
    start_e, s_max = shifted_exp(start)
    end_e, e_max = shifted_exp(end)
    emat_tt = emat_t if emat.shape[0] == 1 or not with_rates else np.ascontiguousarray(emat_t)
    (_messages_parallel if parallel else _messages_serial)(
        ws.offsets, emat, emat_tt, with_rates, ws.alpha, ws.beta, ws.r, ws.into, ws.beta_scale,
        ws.right, ws.left, ws.lost, ws.w, ws.row_max, emat_t, emax, start_e, s_max, end_e,
        e_max, ws.log_z, ws.marg, ws.overlap,
    )


@njit(**KERNEL)
def _sequence_rates(
    i, offsets, emat, emat_tt, alpha, beta, r, into, beta_scale, right, left, inv, pen,
):
    lo, hi = offsets[i], offsets[i + 1]
    right[hi - 1] = 0.0
    left[lo] = 0.0
    for t in range(lo + 1, hi):
        p = table(emat.shape[0], t)
        _rates(t, emat, emat_tt, p, alpha, beta, r, into, beta_scale, inv, pen, right, left)


@njit(**PARALLEL)
def _rates_parallel(offsets, emat, *args):
    m = offsets.shape[0] - 1
    k = emat.shape[1]
    for c in prange((m + _CHUNK - 1) // _CHUNK):
        inv = np.empty(k)
        pen = np.empty(k)
        for i in range(c * _CHUNK, min(m, (c + 1) * _CHUNK)):
            _sequence_rates(i, offsets, emat, *args, inv, pen)


@njit(**KERNEL)
def _rates_serial(offsets, emat, *args):
    k = emat.shape[1]
    inv = np.empty(k)
    pen = np.empty(k)
    for i in range(offsets.shape[0] - 1):
        _sequence_rates(i, offsets, emat, *args, inv, pen)


def mixing_rates(offsets, emat, alpha, beta, r, into, beta_scale, right, left, parallel):
    """The mixing rates of :func:`messages` from its stored messages, into ``right``, ``left``.

    For posteriors swept without rates: one more sweep over the edges,
    without repeating the messages. Rows of lost sequences are unspecified.
    """
    emat_tt = np.ascontiguousarray(emat.transpose(0, 2, 1))
    (_rates_parallel if parallel else _rates_serial)(
        offsets, emat, emat_tt, alpha, beta, r, into, beta_scale, right, left
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
    """Pairwise marginals of consecutive positions.

    Returns
    -------
    (n, K, K) float64
        Row ``t`` is ``P(y_t = a, y_{t+1} = b)``; the last row of every
        sequence is zero.
    """
    n, k = alpha.shape
    out = np.zeros((n, k, k))
    (_edges_parallel if parallel else _edges_serial)(alpha, r, offsets, emat, out)
    return out


@njit(**KERNEL)
def _row_conditional(mat, weight, out):
    """``out[i, j] = mat[i, j] * weight[j]`` normalised over ``j``; zero rows stay zero.

    With ``mat = E`` and ``weight = r[t + 1]``, row ``a`` is
    ``P(y_{t+1} | y_t = a)``; with ``mat = E.T`` and ``weight = alpha[t]``,
    row ``b`` is ``P(y_t | y_{t+1} = b)``.
    """
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
    """``1 - sum_j min_{i possible} emat[i, j] * into_inv[i] * weight[j]`` (see :func:`_rates`)."""
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
    """Exact node bound of one sequence from its one-step conditionals.

    ``fwd[t]`` is ``P(y_{t+1} | y_t)`` (rows: ``y_t``), ``bwd[t]`` is
    ``P(y_{t-1} | y_t)`` (rows: ``y_t``), both ``(L, K, K)``; writes
    ``out[lo:lo + L]``.
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
    """Smallest valid node bound: ``max_k sum_j |H_ij| / H_ii`` per position.

    Uses Lemma 3.1: ``sum_j |H_ij| = 2 p_i sum_s TV(P(y_s | y_t = k), P(y_s))``
    with the conditionals propagated along the chain. Cost
    ``O(sum_i L_i^2 K^3)``; labels with ``p (1 - p) < 1e-12`` are skipped.

    Returns
    -------
    (n,) float64
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


@njit(**KERNEL)
def exact_gamma_pairwise(pairwise, marginals, offsets):
    """:func:`exact_gamma` from pairwise marginals (rows of the log-space fallback).

    Parameters
    ----------
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    marginals : (r, K) float64
    offsets : (s + 1,) int64

    Returns
    -------
    (r,) float64
    """
    r, k = marginals.shape
    ones = np.ones(k)
    out = np.zeros(r)
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        length = hi - lo
        fwd = np.zeros((length, k, k))
        bwd = np.zeros((length, k, k))
        for t in range(length - 1):
            _row_conditional(pairwise[lo + t], ones, fwd[t])
            _row_conditional(np.ascontiguousarray(pairwise[lo + t].T), ones, bwd[t + 1])
        _sequence_exact_gamma(fwd, bwd, marginals, lo, out)
    return out


@njit(**KERNEL)
def pairwise_rates(pairwise, offsets):
    """Mixing rates from pairwise marginals (rows of the log-space fallback).

    Parameters
    ----------
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    offsets : (s + 1,) int64

    Returns
    -------
    right, left : (r,) float64
        As filled by :func:`messages`.
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


@njit(cache=True, error_model="numpy")
def log_space_posterior(unary, offsets, sequences, trans, start, end):
    """Forward-backward in log space for some sequences.

    The fallback for sequences the scaled messages cannot hold (see the
    module notes): every message is a log-sum-exp, so any finite potentials
    work.

    Parameters
    ----------
    unary : (n, K) float64
    offsets : (m + 1,) int64
    sequences : (s,) int64
        Indices of the sequences to process, increasing.
    trans : (P, K, K) float64
    start, end : (K,) float64

    Returns
    -------
    log_z : (s,) float64
        ``-inf`` for a sequence with no allowed labelling (its other rows
        are then zero).
    marginals : (r, K) float64
        Node marginals of the rows of the selected sequences, in order.
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


@njit(**KERNEL)
def _sequence_viterbi(i, unary, offsets, trans, start, end, path):
    k = unary.shape[1]
    n_tab = trans.shape[0]
    lo, hi = offsets[i], offsets[i + 1]
    back = np.empty((hi - lo, k), dtype=np.int64)
    score = unary[lo] + start
    nxt = np.empty(k)
    for t in range(lo + 1, hi):
        tr = trans[table(n_tab, t)]
        for b in range(k):
            best = -np.inf
            arg = 0
            for a in range(k):
                v = score[a] + tr[a, b]
                if v > best:
                    best = v
                    arg = a
            nxt[b] = best + unary[t, b]
            back[t - lo, b] = arg
        score[:] = nxt
    score += end
    y = np.argmax(score)
    for t in range(hi - 1, lo - 1, -1):
        path[t] = y
        if t > lo:
            y = back[t - lo, y]


@njit(**PARALLEL)
def _viterbi_parallel(unary, offsets, trans, start, end, path):
    for i in prange(offsets.shape[0] - 1):
        _sequence_viterbi(i, unary, offsets, trans, start, end, path)


@njit(**KERNEL)
def _viterbi_serial(unary, offsets, trans, start, end, path):
    for i in range(offsets.shape[0] - 1):
        _sequence_viterbi(i, unary, offsets, trans, start, end, path)


def viterbi(unary, offsets, trans, start, end, parallel):
    """Most probable label path of every sequence (max-product in log space).

    Returns
    -------
    (n,) int64
    """
    path = np.empty(unary.shape[0], dtype=np.int64)
    (_viterbi_parallel if parallel else _viterbi_serial)(unary, offsets, trans, start, end, path)
    return path


@njit(**KERNEL)
def label_scores(unary, offsets, labels, trans, start, end, with_transitions, out):
    """Score of the given labelling of every sequence, summed in one sweep (no temporaries).

    ``out[i]`` gets the labels' node scores of sequence ``i`` and, when
    ``with_transitions``, its transition, start and end scores. ``unary
    (n, K)`` may be float32 or float64 in any memory layout (the engines'
    own margins); sums are float64.
    """
    n_tab = trans.shape[0]
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        total = 0.0
        for t in range(lo, hi):
            total += unary[t, labels[t]]
        if with_transitions:
            for t in range(lo + 1, hi):
                total += trans[table(n_tab, t), labels[t - 1], labels[t]]
            total += start[labels[lo]] + end[labels[hi - 1]]
        out[i] = total
