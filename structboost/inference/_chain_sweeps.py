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
from numba import get_num_threads, njit, prange, types
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
# alpha and w (at the positions past the cached ones, ``Scratch.w_at``), r
# and the marginals; the mixing rates' alpha of the previous position (past
# the cached ones), second r, inverses and penalties (:func:`_lanes_rates`).
_IN, _MSG, _W, _R, _MARG, _PREV, _R2, _RINV, _RPEN = 0, 1, 2, 3, 4, 5, 6, 7, 8
_PLANES = 9
# Rows of ``vec (8, lanes)``: sums, their inverses, overlaps, log Z's
# running sum and running product of normalisers, beta_scale, the rates'
# totals and the forward sweep's normaliser.
_SUM, _INV, _OV, _ACC, _RUN, _BS, _TOT, _FS = 0, 1, 2, 3, 4, 5, 6, 7
_VECS = 8
# Rows of ``idx (5, lanes)`` int64: sequence, first row, length, current row, table.
_SEQ, _FIRST, _LEN, _ROW, _TAB = 0, 1, 2, 3, 4
# Entries of each of a task's arrays of cached planes (``Scratch.w_at``,
# ``Scratch.alpha_at``): 256 KiB, so that both stay in a core's cache.
_CACHE_ENTRIES = 1 << 15
#: What a chunk's task does (:func:`_chunk_pass`): both sweeps; both sweeps
#: and the rates; the rates of swept messages.
SWEEPS, SWEEPS_RATES, RATES = 0, 1, 2
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
    """``dst[b, s] = sum_a src[a, s] mat[tab_s, a, b]`` for the first ``act`` lanes.

    ``src`` and ``dst`` are ``(K, lanes)`` planes. One shared table: each
    entry is loaded once for all lanes, and the lanes are the vector
    dimension (no horizontal sums), four rows of the table per pass over
    ``dst``, the first pass storing and the last one's missing rows
    (``K`` not a multiple of four) weighted zero. Per-position tables
    (``mat`` may be a transposed view) are read lane by lane.
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
    """``dst[b, s] = min_a (mat[tab_s + shift, a, b] inv[a, s] + pen[a, s])``.

    For the first ``act`` lanes of the ``(K, lanes)`` planes:
    :func:`_lanes_times` with ``min`` for the sum (the last pass's missing
    rows repeat row ``K - 1``, which leaves the minimum as it is) and the
    penalty of excluded labels added (``shift`` picks the next position's
    table when tables are per position). Without ``penalised`` (no label of
    these lanes is excluded: every penalty is zero) the penalties are not
    read.
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
    """``out[row_s] = max(0, 1 - sum_b weights[b, s] kept(mins[b, s]) / d_s)``.

    For the first ``act`` lanes of the ``(K, lanes)`` planes, ``d_s =
    vec[_BS, s]`` if ``scaled``, else 1; ``kept`` drops the minima that
    every label excluded (:data:`_EXCLUDE`).
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

    On entry, for the first ``act`` lanes, the ``(K, lanes)`` planes
    ``am`` and ``buf[_IN]`` hold ``alpha[t]`` and ``beta[t]``
    (normalised) of their row ``t``, ``pm`` holds ``alpha[t - 1]`` (``j >
    0``), and for the first ``new`` of them (those whose sequence goes on
    past ``t``) ``ro`` holds ``r[t + 1]`` and ``vec[_BS]``
    ``beta_scale[t]``.
    ``right[t] = 1 - sum_b min_a P(y_{t+1} = b | y_t = a)`` over labels
    ``a`` of nonzero marginal, from ``P(b | a) = E[a, b] r[t + 1, b] /
    (beta_scale[t] beta[t, a])`` (``1 / beta_scale[t]`` applied to the sum,
    so that no reciprocal of a product of two small numbers overflows),
    zero where ``t`` is last;
    ``left[t] = 1 - sum_a min_b P(y_{t-1} = a | y_t = b)`` over labels
    ``b`` of nonzero marginal, from ``P(a | b) = alpha[t - 1, a] E[a, b] /
    into[t, b]`` with ``into[t] = alpha[t - 1] @ E_t``, zero where ``t`` is
    first (``j == 0``). Within the sweep (``swept``: the plane ``wj`` holds
    ``w[t]`` and ``vec[_FS]`` the forward normaliser ``s_t`` of ``alpha[t]
    = into[t] w[t] / s_t``) ``1 / into[t, b] = w[t, b] / (alpha[t, b]
    s_t)``, one division instead of a product; otherwise ``into[t]`` is the
    forward sweep's product, recomputed. Labels of zero probability add
    nothing to the total variation of Theorem 3.1; they get ``inv = 0`` and
    the penalty ``_EXCLUDE`` (branch-free, so that the divisions
    vectorise). Uses the planes ``_RINV``, ``_RPEN`` and ``_MARG``.
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
    vec : (8, lanes) float64
    idx : (5, lanes) int64
    w_at, alpha_at : (cap, K, lanes) float64
        The forward sweep's planes of ``w`` and ``alpha`` at the positions
        ``j < cap``, which the backward sweep reads instead of gathering
        their rows again (:func:`_cached_positions`).
    """

    buf: np.ndarray
    vec: np.ndarray
    idx: np.ndarray
    w_at: np.ndarray
    alpha_at: np.ndarray


@njit(**KERNEL)
def _scratch(k, cap):
    """A fresh :class:`Scratch` for ``k`` labels, :data:`CHUNK` lanes and ``cap`` cached positions."""
    return Scratch(
        np.empty((_PLANES, k, CHUNK)), np.empty((_VECS, CHUNK)), np.empty((5, CHUNK), dtype=np.int64),
        np.empty((cap, k, CHUNK)), np.empty((cap, k, CHUNK)),
    )


@njit(**KERNEL)
def _cached_positions(offsets, k, task):
    """Positions whose planes a chunk's sweeps keep (``Scratch.w_at``): ``cap``.

    The longest sequence's length, at most :data:`_CACHE_ENTRIES` entries a
    plane array; none for the rates of swept messages, which sweep once.
    """
    if task == RATES:
        return 0
    longest = 0
    for i in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    return min(longest, max(1, _CACHE_ENTRIES // (k * CHUNK)))


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
    scratch ``buf (9, K, lanes)``, ``vec (8, lanes)`` and ``idx (5, lanes)``
    (lanes innermost), so that every pass over the labels and every product
    runs over all lanes at once with no horizontal sums. At position ``j``
    the lanes of the sequences longer than ``j`` are a prefix; the backward
    sweep starts a lane with ``end`` at its last row. Each lane's arithmetic
    is that of its sequence alone. A lane that the criterion of
    :mod:`structboost.inference._chain` marks lost goes on computing (its
    rows are unspecified). The forward sweep gathers the rows of ``w`` and
    computes ``alpha`` in the planes of ``Scratch.w_at`` and
    ``Scratch.alpha_at`` at the first ``cap`` positions (in ``buf`` past
    them), which the backward sweep reads back instead of gathering the
    rows again. With ``rates``, the backward sweep computes the mixing
    rates of each position from its planes (:func:`_lanes_rates`), with
    ``r`` in two planes by turns. The arrays come from ``msg``
    (``Messages``), ``nodes`` (:class:`Nodes`), ``tab`` (:class:`Tables`)
    and ``scratch`` (:class:`Scratch`), unpacked once per chunk.
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
    for s in range(lanes):
        lost[idx[_SEQ, s]] = False
        vec[_ACC, s] = start_max
        vec[_RUN, s] = 1.0
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
        _scatter(aj, idx, 0, act, alpha)
        if j + 1 < top:
            _prefetch_rows(idx, act, 1, alpha)
            _prefetch_rows(idx, act, 1, w)
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
        _scatter(rn, idx, 0, act, r)
        _scatter(mg, idx, 0, act, marg)
        if rates:
            pm = buf[_PREV]
            if 0 < j <= cap:
                pm = alpha_at[j - 1]
            elif j > 0:
                _gather(alpha, idx, 0, act, -1, pm)
            _lanes_rates(j, new, act, am, pm, ro, wj, True, tab, scratch, msg.right, msg.left)
            rn, ro = ro, rn
        if j > 0:
            _prefetch_rows(idx, act, -1, r)
            _prefetch_rows(idx, act, -1, marg)
            _lanes_times(ro if rates else rn, into, emat_t, idx, act)
            _lanes_sums(into, act, sums)


@njit(**KERNEL)
def _forward_log_z(j, act, aj, vec, idx, nodes, tab):
    """The forward sweep's bookkeeping at position ``j`` of the first ``act`` lanes.

    ``vec[_SUM]`` holds the normalisers ``s_t`` of ``alpha[t]`` (the plane
    ``aj``), kept in ``nodes.overlap[t]`` for the backward sweep; log Z's
    running sum ``vec[_ACC]`` and product ``vec[_RUN]`` take them in (see
    :data:`LOG_LO`), and the lanes whose sequence ends at ``j`` get their
    ``log_z``. Branch-free but for the lanes whose product leaves its range
    (or whose normaliser is below ``LOG_LO``), redone alone.
    """
    row_max, log_z, overlap, lost = nodes.row_max, nodes.log_z, nodes.overlap, nodes.lost
    emax, end_e, end_max = tab.emax, tab.end_e, tab.end_max
    odd = False
    for s in range(act):
        row = idx[_ROW, s]
        sm = vec[_SUM, s]
        overlap[row] = sm
        vec[_ACC, s] = vec[_ACC, s] + row_max[row] + (emax[idx[_TAB, s]] if j > 0 else 0.0)
        run = vec[_RUN, s] * sm
        plain = (sm >= LOG_LO) & (run >= LOG_LO) & (run <= LOG_HI)
        vec[_RUN, s] = run if plain else vec[_RUN, s]
        vec[_OV, s] = 0.0 if plain else 1.0
        odd |= not plain
    if odd:
        for s in range(act):
            if vec[_OV, s] == 0.0:
                continue
            sm = vec[_SUM, s]
            if not sm >= TINY:
                lost[idx[_SEQ, s]] = True
            acc, run = vec[_ACC, s], vec[_RUN, s]
            if sm >= LOG_LO:
                run *= sm
            else:
                acc += np.log(sm)
            if not LOG_LO <= run <= LOG_HI:
                acc += np.log(run)
                run = 1.0
            vec[_ACC, s] = acc
            vec[_RUN, s] = run
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
        log_z[i] = vec[_ACC, s] + np.log(vec[_RUN, s]) + end_max + np.log(last)


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
    else:
        _chunk_messages(c, msg, nodes, tab, task == SWEEPS_RATES, scratch)


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


@njit(**KERNEL)
def _pass_serial(msg, nodes, tab, task):
    k = tab.emat.shape[1]
    scratch = _scratch(k, _cached_positions(msg.offsets, k, task))
    for c in range((msg.offsets.shape[0] + CHUNK - 2) // CHUNK):
        _chunk_pass(c, msg, nodes, tab, task, scratch)


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
    _run(Messages.of(ws), nodes, tab, task, parallel)


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
    _run(msg, nodes, tab, RATES, parallel)
