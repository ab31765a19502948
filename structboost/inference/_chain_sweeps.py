"""The scaled forward and backward sweeps of linear-chain CRFs (see :mod:`._chain`).

Messages are scaled probabilities, so the inner loops are multiply-adds
without ``exp``/``log``:

* ``alpha[t]`` ~ the forward message *including* position ``t``'s unary
  factor, summing to one;
* ``into[t] = alpha[t - 1] @ E_t``, the forward message entering ``t``
  (never stored);
* ``beta[t]`` ~ the backward message *excluding* position ``t``, summing to
  one; ``E_{t+1} @ r[t + 1] = beta_scale[t] * beta[t]``;
* ``r[t]`` ~ ``exp(unary[t]) * beta[t]``, summing to one.

Hence ``P(y_t = k) ~ alpha[t, k] * beta[t, k]`` and
``P(y_t = a, y_{t+1} = b) ~ alpha[t, a] * E_{t+1}[a, b] * r[t + 1, b]``.
The sweeps run a chunk's sequences in lockstep, as the lanes of
:mod:`structboost.inference._chain_lanes`.
"""

from typing import NamedTuple

import numpy as np
from numba import get_num_threads, prange

from .._config import KERNEL, PARALLEL, SAFE, TINY, njit
from ._chain import CHUNK, shifted_exp
from ._chain_lanes import (
    _ACC, _BS, _FIRST, _FS, _IN, _INV, _LEN, _MARG, _MSG, _OV, _PLANES, _PREV, _R, _R2, _ROW,
    _RUN, _SEQ, _SUM, _TAB, _VECS, _W,
    _gather, _lanes_edges, _lanes_rates, _lanes_sums, _lanes_times, _prefetch_rows, _scatter,
    _set_rows,
)
from ._chain_stats import Messages

# log Z adds the logarithm of a running product of the normalisers once the
# product leaves [LOG_LO, LOG_HI], not one logarithm per position; a
# normaliser below LOG_LO (at least TINY) is logged alone, so that the
# product never leaves float64's normal range.
LOG_LO = 1e-100
LOG_HI = 1e100
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
    seq_weight : (m,) float64
        The sequences' weights in ``edges`` (empty: no edge sums).
    edges : (T, K, K) float64, output
        Task ``t``'s sum of ``seq_weight[i] alpha[t] r[t + 1]' / (beta_scale[t]
        overlap[t])`` over the edges of the sequences not lost (one shared
        table only; see :func:`messages`); ``(0, K, K)`` when not asked for.
    keep : bool
        Store ``alpha`` and ``r`` of every row (see :func:`messages`).
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
    vec : (8, lanes) float64
    idx : (5, lanes) int64
    w_at, alpha_at : (cap, K, lanes) float64
        The forward sweep's planes of ``w`` and ``alpha`` at the positions
        ``j < cap``, which the backward sweep reads instead of gathering
        their rows again (:func:`_cached_positions`).
    edges : (2, K, K) float64
        The edge sums (``Nodes.edges``) of the current chunk and of the
        task's chunks before it.
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

    The sequences, longest first, are the lanes (innermost axis) of the
    scratch; at position ``j`` the lanes longer than ``j`` are a prefix. A lost
    lane goes on computing (its rows unspecified). The forward sweep keeps
    ``w`` and ``alpha`` at the first ``cap`` positions in ``Scratch.w_at`` and
    ``Scratch.alpha_at`` for the backward sweep. The backward sweep computes
    the rates with ``rates`` (:func:`_lanes_rates`) and each edge's product
    when ``nodes.edges`` is asked for (:func:`_lanes_edges`; from stored rows
    in a chunk with a lost sequence). Without ``keep`` only the rows of
    ``alpha`` past ``cap`` are stored and no ``r``; a chunk that would then need
    stored rows returns False, having added nothing (True otherwise).
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
        if keep or j >= cap:
            _scatter(aj, idx, 0, act, alpha)
        if j + 1 < top:
            if keep or j + 1 >= cap:
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
            if keep:
                _prefetch_rows(idx, act, -1, r)
            _prefetch_rows(idx, act, -1, marg)
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
    and into log Z's running sum and product (see :data:`LOG_LO`); lanes whose
    sequence ends at ``j`` get their ``log_z``.
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

    Parameters
    ----------
    ws : Workspace-like
        Holds ``w, row_max`` (:func:`~structboost.inference._chain.exp_rows`),
        ``offsets`` and the outputs ``log_z (m,)``, ``alpha, beta, r, marg
        (n, K)``, ``beta_scale, overlap, right, left (n,)``, ``lost (m,)`` bool.
    emat, emax : (P, K, K), (P,) float64
        From :func:`~structboost.inference._chain.exp_tables`.
    start, end : (K,) float64
    with_rates : bool
        Fill ``right[t] = alpha_{t, t+1}`` (zero on last rows) and
        ``left[t] = alpha_{t, t-1}`` (zero on first rows).
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

    Notes
    -----
    ``overlap[t] = alpha[t] @ beta[t]``, so ``alpha[t] @ E @ r[t + 1] =
    beta_scale[t] * overlap[t]``. ``beta`` is stored on each sequence's last
    row only. Rows of ``lost`` sequences are unspecified.
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
