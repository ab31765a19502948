"""The scaled forward and backward sweeps of linear-chain CRFs (see :mod:`._chain`).

Messages
--------
Messages are kept in scaled probability space, so the inner loops are plain
multiply-adds with no ``exp``/``log``; ``exp`` runs once per round over all
node scores (:func:`~structboost.inference._chain.exp_rows`, a
vectorisable polynomial):

* ``alpha[t]`` is proportional to the forward message *including* the unary
  factor of position ``t`` and sums to one;
* ``into[t] = alpha[t - 1] @ E_t`` is the forward message entering ``t``
  (never stored: the rates derive it, :func:`_lanes_rates`);
* ``beta[t]`` is proportional to the backward message *excluding* position
  ``t`` and sums to one; ``E_{t+1} @ r[t + 1] = beta_scale[t] * beta[t]``;
* ``r[t]`` is proportional to ``exp(unary[t]) * beta[t]`` and sums to one.

Hence ``P(y_t = k) ~ alpha[t, k] * beta[t, k]`` and
``P(y_t = a, y_{t+1} = b) ~ alpha[t, a] * E_{t+1}[a, b] * r[t + 1, b]``.
One forward and one backward sweep (:func:`messages`) give log Z, the node
marginals and, on request, both Dobrushin mixing rates of every edge.
A sequence these messages cannot hold is marked lost by the criterion of
:mod:`structboost.inference._chain` and recomputed in log space by the caller.
"""

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .._config import FINITE, KERNEL, PARALLEL, SAFE, TINY
from ._chain import CHUNK, shifted_exp, table
from ._chain_stats import Messages

# log Z adds the logarithm of a running product of the normalisers once the
# product leaves [LOG_LO, LOG_HI], not one logarithm per position; a
# normaliser below LOG_LO (at least TINY) is logged alone, so that the
# product never leaves float64's normal range.
LOG_LO = 1e-100
LOG_HI = 1e100
# Planes of the chunk's scratch ``buf (9, K, lanes)``: the incoming message,
# alpha (forward) or its stored rows (backward), w, r and the marginals; the
# mixing rates' alpha of the previous position, second r, inverses and
# penalties (:func:`_lanes_rates`).
_IN, _MSG, _W, _R, _MARG, _PREV, _R2, _RINV, _RPEN = 0, 1, 2, 3, 4, 5, 6, 7, 8
_PLANES = 9
# Rows of ``vec (8, lanes)``: sums, their inverses, overlaps, log Z's
# running sum and running product of normalisers, beta_scale, the rates'
# totals and the forward sweep's normaliser.
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
    """``min(a, b)`` of two float64 as LLVM's ``minnum``, which LLVM vectorises.

    numba's ``min`` lowers to a compare and select that LLVM keeps scalar
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


@njit(**KERNEL)
def _gather(src, idx, lo, act, step, buf, q):
    """``buf[q, a, s] = src[row_s + step, a]`` for the lanes ``lo <= s < act``."""
    for s in range(lo, act):
        row = idx[_ROW, s] + step
        for a in range(src.shape[1]):
            buf[q, a, s] = src[row, a]


@njit(**KERNEL)
def _scatter(buf, q, idx, lo, act, dst):
    """``dst[row_s, a] = buf[q, a, s]`` for the lanes ``lo <= s < act``."""
    for s in range(lo, act):
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


@njit(**FINITE)
def _lanes_min(buf, dst, mat, idx, act, shift, penalised):
    """``buf[dst, b, s] = min_a (mat[tab_s + shift, a, b] buf[_RINV, a, s] + buf[_RPEN, a, s])``.

    For the first ``act`` lanes: :func:`_lanes_times` with ``min`` for the
    sum and the penalty of excluded labels added (``shift`` picks the
    next position's table when tables are per position). Without
    ``penalised`` (no label of these lanes is excluded: every penalty is
    zero) the penalties are not read.
    """
    k = mat.shape[1]
    for b in range(k):
        for s in range(act):
            buf[dst, b, s] = _EXCLUDE
    if mat.shape[0] == 1 and not penalised:
        top = k - k % 4
        for a in range(0, top, 4):
            for b in range(k):
                e0, e1, e2, e3 = mat[0, a, b], mat[0, a + 1, b], mat[0, a + 2, b], mat[0, a + 3, b]
                for s in range(act):
                    m01 = _fmin(buf[_RINV, a, s] * e0, buf[_RINV, a + 1, s] * e1)
                    m23 = _fmin(buf[_RINV, a + 2, s] * e2, buf[_RINV, a + 3, s] * e3)
                    buf[dst, b, s] = _fmin(buf[dst, b, s], _fmin(m01, m23))
        for a in range(top, k):
            for b in range(k):
                e0 = mat[0, a, b]
                for s in range(act):
                    buf[dst, b, s] = _fmin(buf[dst, b, s], buf[_RINV, a, s] * e0)
    elif mat.shape[0] == 1:
        top = k - k % 4
        for a in range(0, top, 4):
            for b in range(k):
                e0, e1, e2, e3 = mat[0, a, b], mat[0, a + 1, b], mat[0, a + 2, b], mat[0, a + 3, b]
                for s in range(act):
                    m01 = _fmin(buf[_RINV, a, s] * e0 + buf[_RPEN, a, s],
                                buf[_RINV, a + 1, s] * e1 + buf[_RPEN, a + 1, s])
                    m23 = _fmin(buf[_RINV, a + 2, s] * e2 + buf[_RPEN, a + 2, s],
                                buf[_RINV, a + 3, s] * e3 + buf[_RPEN, a + 3, s])
                    buf[dst, b, s] = _fmin(buf[dst, b, s], _fmin(m01, m23))
        for a in range(top, k):
            for b in range(k):
                e0 = mat[0, a, b]
                for s in range(act):
                    buf[dst, b, s] = _fmin(buf[dst, b, s], buf[_RINV, a, s] * e0 + buf[_RPEN, a, s])
    else:
        for a in range(k):
            for b in range(k):
                for s in range(act):
                    v = buf[_RINV, a, s] * mat[idx[_TAB, s] + shift, a, b] + buf[_RPEN, a, s]
                    buf[dst, b, s] = _fmin(buf[dst, b, s], v)


@njit(**KERNEL)
def _lanes_rate(buf, weights, mins, act, vec, scaled, idx, out):
    """``out[row_s] = max(0, 1 - sum_b buf[weights, b, s] kept(buf[mins, b, s]) / d_s)``.

    For the first ``act`` lanes, ``d_s = vec[_BS, s]`` if ``scaled``, else 1;
    ``kept`` drops the minima that every label excluded (:data:`_EXCLUDE`).
    """
    for s in range(act):
        vec[_TOT, s] = 0.0
    for b in range(buf.shape[1]):
        for s in range(act):
            m = buf[mins, b, s]
            vec[_TOT, s] += buf[weights, b, s] * (m if m < _EXCLUDE else 0.0)
    for s in range(act):
        tot = vec[_TOT, s] / vec[_BS, s] if scaled else vec[_TOT, s]
        out[idx[_ROW, s]] = max(0.0, 1.0 - tot)


@njit(**KERNEL)
def _lanes_rates(j, new, act, am, pm, ro, swept, alpha, tab, scratch, right, left):
    """The mixing rates of the edges at position ``j`` of the lanes, into ``right`` and ``left``.

    On entry, for the first ``act`` lanes, ``buf[am]`` holds ``alpha[t]``
    and ``buf[_IN]`` ``beta[t]`` (normalised) of their row ``t``, and for
    the first ``new`` of them (those whose sequence goes on past ``t``)
    ``buf[ro]`` holds ``r[t + 1]`` and ``vec[_BS]`` ``beta_scale[t]``.
    ``right[t] = 1 - sum_b min_a P(y_{t+1} = b | y_t = a)`` over labels
    ``a`` of nonzero marginal, from ``P(b | a) = E[a, b] r[t + 1, b] /
    (beta_scale[t] beta[t, a])`` (``1 / beta_scale[t]`` applied to the sum,
    so that no reciprocal of a product of two small numbers overflows),
    zero where ``t`` is last;
    ``left[t] = 1 - sum_a min_b P(y_{t-1} = a | y_t = b)`` over labels
    ``b`` of nonzero marginal, from ``P(a | b) = alpha[t - 1, a] E[a, b] /
    into[t, b]`` with ``into[t] = alpha[t - 1] @ E_t``, zero where ``t`` is
    first (``j == 0``). Within the sweep (``swept``: ``buf[_W]`` holds
    ``w[t]`` and ``vec[_FS]`` the forward normaliser ``s_t`` of ``alpha[t]
    = into[t] w[t] / s_t``) ``1 / into[t, b] = w[t, b] / (alpha[t, b]
    s_t)``, one division instead of a product; otherwise ``into[t]`` is the
    forward sweep's product, recomputed. Labels of zero probability add
    nothing to the total variation of Theorem 3.1; they get ``inv = 0`` and
    the penalty ``_EXCLUDE`` (branch-free, so that the divisions
    vectorise). Leaves ``alpha[t - 1]`` in ``buf[pm]`` (``j > 0``); uses
    the planes ``_RINV``, ``_RPEN`` and ``_MARG``.
    """
    buf, vec, idx = scratch.buf, scratch.vec, scratch.idx
    emat, emat_t = tab.emat, tab.emat_t
    k = buf.shape[1]
    excluded = 0
    for a in range(k):
        for s in range(act):
            ok = buf[am, a, s] * buf[_IN, a, s] > 0.0
            x = min(1.0 / buf[_IN, a, s], _HUGE)
            buf[_RINV, a, s] = x if ok else 0.0
            buf[_RPEN, a, s] = 0.0 if ok else _EXCLUDE
            excluded += 0 if ok else 1
    pen = excluded > 0
    if new > 0:
        _lanes_min(buf, _MARG, emat, idx, new, 1 if emat.shape[0] > 1 else 0, pen)
        _lanes_rate(buf, ro, _MARG, new, vec, True, idx, right)
    for s in range(new, act):
        right[idx[_ROW, s]] = 0.0
    if j == 0:
        for s in range(act):
            left[idx[_ROW, s]] = 0.0
        return
    _gather(alpha, idx, 0, act, -1, buf, pm)
    if swept:
        for b in range(k):
            for s in range(act):
                x = min(buf[_W, b, s] / (buf[am, b, s] * vec[_FS, s]), _HUGE)
                buf[_RINV, b, s] = x if buf[_RPEN, b, s] == 0.0 else 0.0
    else:
        _lanes_times(buf, pm, _MARG, emat, idx, act, vec)
        for b in range(k):
            for s in range(act):
                x = min(1.0 / buf[_MARG, b, s], _HUGE)
                buf[_RINV, b, s] = x if buf[_RPEN, b, s] == 0.0 else 0.0
    _lanes_min(buf, _MARG, emat_t, idx, act, 0, pen)
    _lanes_rate(buf, pm, _MARG, act, vec, False, idx, left)


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


class Tables(NamedTuple):
    """The factors of a pass besides the node scores.

    Attributes
    ----------
    emat : (P, K, K) float64
        ``exp(trans - emax)`` (:func:`~structboost.inference._chain.exp_tables`).
    emat_t : (P, K, K) float64
        Its transpose (the backward product): C-contiguous for one table, a
        view of ``emat`` for per-position tables.
    emax : (P,) float64
    start_e, end_e : (K,) float64
        ``exp(start - start_max)``, ``exp(end - end_max)``
        (:func:`~structboost.inference._chain.shifted_exp`).
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
    w : (n, K) float64
        ``exp(unary - row_max)`` (:func:`~structboost.inference._chain.exp_rows`).
    row_max : (n,) float64
    log_z : (m,) float64, output
    marg : (n, K) float64, output
        The node marginals.
    overlap : (n,) float64, output
        ``alpha[t] @ beta[t]``.
    lost : (m,) bool, output
        The sequences the scaled messages cannot hold.
    """

    w: np.ndarray
    row_max: np.ndarray
    log_z: np.ndarray
    marg: np.ndarray
    overlap: np.ndarray
    lost: np.ndarray


class Scratch(NamedTuple):
    """One task's scratch of the lockstep sweeps (:func:`_chunk_messages`).

    Attributes
    ----------
    buf : (9, K, lanes) float64
    vec : (7, lanes) float64
    idx : (5, lanes) int64
    """

    buf: np.ndarray
    vec: np.ndarray
    idx: np.ndarray


@njit(**KERNEL)
def _scratch(k):
    """A fresh :class:`Scratch` for ``k`` labels and :data:`CHUNK` lanes."""
    return Scratch(
        np.empty((_PLANES, k, CHUNK)), np.empty((_VECS, CHUNK)), np.empty((5, CHUNK), dtype=np.int64)
    )


@njit(**KERNEL)
def _chunk_lanes(c, offsets, idx):
    """Point the lanes of ``idx`` at the sequences of chunk ``c``, longest first; their count.

    Fills the rows ``_SEQ``, ``_FIRST`` and ``_LEN`` of ``idx (5, lanes)``.
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
def _chunk_messages(c, msg, nodes, tab, rates, scratch):
    """Both sweeps of the sequences of chunk ``c`` (see :func:`messages`), in lockstep.

    The chunk's sequences, sorted longest first, are the lanes of the
    scratch ``buf (9, K, lanes)``, ``vec (7, lanes)`` and ``idx (5, lanes)``
    (lanes innermost), so that every pass over the labels and every product
    runs over all lanes at once with no horizontal sums. At position ``j``
    the lanes of the sequences longer than ``j`` are a prefix; the backward
    sweep starts a lane with ``end`` at its last row. Each lane's arithmetic
    is that of its sequence alone. A lane that the criterion of
    :mod:`structboost.inference._chain` marks lost goes on computing (its
    rows are unspecified). With ``rates``, the backward sweep computes the
    mixing rates of each position from its planes (:func:`_lanes_rates`);
    it then keeps ``alpha[t - 1]``, which the rates gather, for the next
    position, and ``r`` in two planes by turns. The arrays come from
    ``msg`` (``Messages``), ``nodes`` (:class:`Nodes`), ``tab``
    (:class:`Tables`) and ``scratch`` (:class:`Scratch`), unpacked once per
    chunk.
    """
    offsets, alpha, beta, r = msg.offsets, msg.alpha, msg.beta, msg.r
    beta_scale = msg.beta_scale
    w, row_max, log_z, marg = nodes.w, nodes.row_max, nodes.log_z, nodes.marg
    overlap, lost = nodes.overlap, nodes.lost
    emat, emat_t, emax = tab.emat, tab.emat_t, tab.emax
    start_e, start_max, end_e, end_max = tab.start_e, tab.start_max, tab.end_e, tab.end_max
    buf, vec, idx = scratch.buf, scratch.vec, scratch.idx
    k = w.shape[1]
    n_tab = emat.shape[0]
    lanes = _chunk_lanes(c, offsets, idx)
    for s in range(lanes):
        lost[idx[_SEQ, s]] = False
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
        _gather(w, idx, 0, act, 0, buf, _W)
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
        _scatter(buf, _MSG, idx, 0, act, alpha)
        if j + 1 < top:
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
    # Backward: buf[_IN] = E_{t+1} @ r[t + 1] (or end) with its sums in
    # vec[_SUM]; buf[am] = alpha[t]; buf[rn] = r[t], buf[ro] = r[t + 1].
    am, pm, rn, ro = _MSG, _PREV, _R, _R2
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
        _gather(alpha, idx, new if rates else 0, act, 0, buf, am)
        _gather(w, idx, 0, act, 0, buf, _W)
        for s in range(act):
            vec[_INV, s] = 1.0 / vec[_SUM, s]
            vec[_OV, s] = 0.0
        for a in range(k):
            for s in range(act):
                b = buf[_IN, a, s] * vec[_INV, s]
                buf[_IN, a, s] = b
                vec[_OV, s] += buf[am, a, s] * b
                buf[rn, a, s] = b * buf[_W, a, s]
        for s in range(act):
            row = idx[_ROW, s]
            bs, ov = vec[_SUM, s], vec[_OV, s]
            if not (bs >= TINY and overlap[row] * ov >= SAFE and bs * ov >= SAFE):
                lost[idx[_SEQ, s]] = True
            beta_scale[row] = bs
            vec[_BS, s] = bs
            vec[_FS, s] = overlap[row]
            overlap[row] = ov
            vec[_INV, s] = 1.0 / ov
            vec[_SUM, s] = 0.0
        for a in range(k):
            for s in range(act):
                buf[_MARG, a, s] = buf[am, a, s] * buf[_IN, a, s] * vec[_INV, s]
                vec[_SUM, s] += buf[rn, a, s]
        for s in range(act):
            if not vec[_SUM, s] >= TINY:
                lost[idx[_SEQ, s]] = True
            vec[_INV, s] = 1.0 / vec[_SUM, s]
        for a in range(k):
            for s in range(act):
                buf[rn, a, s] *= vec[_INV, s]
        _scatter(buf, _IN, idx, new, act, beta)
        _scatter(buf, rn, idx, 0, act, r)
        _scatter(buf, _MARG, idx, 0, act, marg)
        if rates:
            _lanes_rates(j, new, act, am, pm, ro, True, alpha, tab, scratch, msg.right, msg.left)
            am, pm, rn, ro = pm, am, ro, rn
        if j > 0:
            _prefetch_rows(idx, act, -1, r)
            _prefetch_rows(idx, act, -1, marg)
            _lanes_times(buf, ro if rates else rn, _IN, emat_t, idx, act, vec)


@njit(**KERNEL)
def _chunk_late_rates(c, msg, tab, scratch):
    """The mixing rates of the sequences of chunk ``c`` from their stored messages.

    A backward sweep in the lanes of :func:`_chunk_messages` without the
    exponentials and the marginals: ``beta[t] = (E_{t+1} @ r[t + 1]) /
    beta_scale[t]`` from the stored ``r`` (the sweep's own product, so the
    values are those of the sweep; ``beta`` is read on each sequence's last
    row alone), ``alpha`` gathered, then :func:`_lanes_rates` at each
    position: the rates of the sweep with the rates, to rounding (``into``
    here is the forward sweep's product, recomputed, where the sweep
    derives its inverse from ``w``).
    """
    offsets, alpha, beta, r = msg.offsets, msg.alpha, msg.beta, msg.r
    emat_t = tab.emat_t
    buf, vec, idx = scratch.buf, scratch.vec, scratch.idx
    k = emat_t.shape[1]
    n_tab = emat_t.shape[0]
    lanes = _chunk_lanes(c, offsets, idx)
    am, pm = _MSG, _PREV
    act = 0
    for j in range(idx[_LEN, 0] - 1, -1, -1):
        new = act
        while act < lanes and idx[_LEN, act] > j:
            act += 1
        _set_rows(j, idx, act, n_tab)
        _gather(beta, idx, new, act, 0, buf, _IN)
        _gather(alpha, idx, new, act, 0, buf, am)
        _lanes_rates(j, new, act, am, pm, _R, False, alpha, tab, scratch, msg.right, msg.left)
        am, pm = pm, am
        if j > 0:
            _gather(r, idx, 0, act, 0, buf, _R)
            _lanes_times(buf, _R, _IN, emat_t, idx, act, vec)
            for s in range(act):
                vec[_BS, s] = vec[_SUM, s]
                vec[_INV, s] = 1.0 / vec[_SUM, s]
            for a in range(k):
                for s in range(act):
                    buf[_IN, a, s] *= vec[_INV, s]


#: What a chunk's task does (:func:`_chunk_pass`): both sweeps; both sweeps
#: and the rates; the rates of swept messages.
SWEEPS, SWEEPS_RATES, RATES = 0, 1, 2


@njit(**KERNEL)
def _chunk_pass(c, msg, nodes, tab, task, scratch):
    """The ``task`` of chunk ``c``."""
    if task == RATES:
        _chunk_late_rates(c, msg, tab, scratch)
    else:
        _chunk_messages(c, msg, nodes, tab, task == SWEEPS_RATES, scratch)


@njit(**PARALLEL)
def _pass_parallel(msg, nodes, tab, task):
    k = tab.emat.shape[1]
    for c in prange((msg.offsets.shape[0] + CHUNK - 2) // CHUNK):
        _chunk_pass(c, msg, nodes, tab, task, _scratch(k))


@njit(**KERNEL)
def _pass_serial(msg, nodes, tab, task):
    scratch = _scratch(tab.emat.shape[1])
    for c in range((msg.offsets.shape[0] + CHUNK - 2) // CHUNK):
        _chunk_pass(c, msg, nodes, tab, task, scratch)


def _tables(emat, emax, start, end):
    """The :class:`Tables` of a pass."""
    # The backward product is the forward one with the tables transposed.
    emat_t = emat.transpose(0, 2, 1)
    if emat.shape[0] == 1:
        emat_t = np.ascontiguousarray(emat_t)
    start_e, s_max = shifted_exp(start)
    end_e, e_max = shifted_exp(end)
    return Tables(emat, emat_t, emax, start_e, s_max, end_e, e_max)


def messages(ws, emat, emax, start, end, with_rates, parallel):
    """Scaled forward-backward messages, marginals and mixing rates of every sequence.

    Parameters
    ----------
    ws : Workspace-like
        Holds ``w, row_max`` (from
        :func:`~structboost.inference._chain.exp_rows`) and ``offsets``, and
        the output buffers ``log_z (m,)``, ``alpha, beta, r, marg (n, K)``,
        ``beta_scale, overlap, right, left (n,)`` and ``lost (m,)`` bool.
    emat, emax : (P, K, K), (P,) float64
        From :func:`~structboost.inference._chain.exp_tables`.
    start, end : (K,) float64
    with_rates : bool
        Fill ``right[t] = alpha_{t, t+1}`` (zero on last rows) and
        ``left[t] = alpha_{t, t-1}`` (zero on first rows), within the
        backward sweep (:func:`_lanes_rates`).
    parallel : bool

    Notes
    -----
    ``marg`` holds the node marginals, ``overlap[t] = alpha[t] @ beta[t]``
    (so that ``alpha[t] @ E @ r[t + 1] = beta_scale[t] * overlap[t]``).
    The sweeps store ``beta`` on each sequence's last row alone (what
    :func:`late_rates` needs beside ``alpha``, ``r`` and ``beta_scale``).
    Rows of sequences with ``lost[i]`` set are unspecified: the caller
    recomputes them in log space. The sweeps run the sequences of a chunk
    in lockstep (:func:`_chunk_messages`).
    """
    tab = _tables(emat, emax, start, end)
    nodes = Nodes(
        w=ws.w, row_max=ws.row_max, log_z=ws.log_z, marg=ws.marg, overlap=ws.overlap, lost=ws.lost
    )
    task = SWEEPS_RATES if with_rates else SWEEPS
    (_pass_parallel if parallel else _pass_serial)(Messages.of(ws), nodes, tab, task)


def late_rates(msg, emat, parallel):
    """The mixing rates of messages swept without them, into ``msg.right`` and ``msg.left``.

    Those :func:`messages` computes with ``with_rates``, for a posterior
    that asks for them later: a backward sweep per chunk over the stored
    ``alpha``, ``r``, ``beta_scale`` and last rows of ``beta``
    (:func:`_chunk_late_rates`). Rows of sequences that the sweep marked
    lost are unspecified.

    Parameters
    ----------
    msg : Messages
        Of :func:`messages` without ``with_rates``.
    emat : (P, K, K) float64
        From :func:`~structboost.inference._chain.exp_tables`.
    parallel : bool
    """
    k = msg.alpha.shape[1]
    none = np.zeros(k)
    tab = _tables(emat, np.zeros(emat.shape[0]), none, none)
    rows = np.empty((0, k))
    nodes = Nodes(w=rows, row_max=none, log_z=none, marg=rows, overlap=none, lost=np.empty(0, dtype=bool))
    (_pass_parallel if parallel else _pass_serial)(msg, nodes, tab, RATES)
