"""CUDA kernels (numba.cuda) for linear-chain CRFs over ragged batches.

The device twin of :mod:`structboost.inference._chain`: the same scaled
messages, tables ``(P, K, K)`` and log-space fallback criterion, so results
match the CPU kernels to float tolerance. Only
:mod:`structboost.inference.gpu` imports it (and validates the input).

Rows stay flat ``(n, K)`` C-contiguous float64 with ``offsets (m + 1,)``.
The message and rate recursions run one block of :data:`LANES` lanes (a warp)
per sequence, the ``K x K`` products spread over the lanes; the path sums
one thread per sequence; per-row kernels one thread per row;
parameter-sized sums as a tiled matrix product or one thread per label and
chunk of rows, added with atomics. No kernel allocates memory.

Only ``math`` functions and plain loops are used, so the kernels also run
under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, as the tests do
without a GPU); every ``log`` takes a normaliser already checked against
``TINY`` (the simulator's ``math.log(0)`` raises).
"""

import math

from numba import cuda, float64

from .._config import SAFE, TINY
from ._chain import EXP_FLOOR

#: Whether numba's CUDA simulator runs these kernels (``NUMBA_ENABLE_CUDASIM=1``). There
#: every thread is a Python thread, so blocks are small; the work is split finely too,
#: so that the tests' tiny inputs span several blocks, tiles and chunks.
SIMULATOR = "simulator" in cuda.is_available.__module__
#: Threads per block of every 1-D launch.
THREADS = 8 if SIMULATOR else 128
#: Side of the shared-memory tiles of :func:`outer_sums` (needs TILE >= 3).
TILE = 4 if SIMULATOR else 16
#: Rows per block of :func:`outer_sums`.
ROWS = 2 * TILE if SIMULATOR else 4096
#: Rows per thread in the atomic reductions over rows (:func:`node_sums`).
CHUNK = 2 if SIMULATOR else 128
#: Lanes per sequence (threads per block) of the recursions :func:`messages` and
#: :func:`mixing_rates`: one warp on a GPU; one in the simulator, whose barriers
#: are slow (a test runs it with more).
LANES = 1 if SIMULATOR else 32
#: Most labels whose message row :func:`messages` keeps in shared memory (more: read from
#: global memory).
ROW = 128


def blocks(count):
    """Blocks of :data:`THREADS` threads that cover ``count`` threads (at least one)."""
    return max(1, (int(count) + THREADS - 1) // THREADS)


@cuda.jit(device=True)
def _table(n_tables, t):
    """Index of the transition table of position ``t`` (as
    :func:`structboost.inference._chain.table`).
    """
    return t if n_tables > 1 else 0


@cuda.jit(device=True)
def _sequence_rows(offsets):
    """Rows ``lo:hi`` of this thread's sequence; ``lo == hi`` for threads past the last one."""
    i = cuda.grid(1)
    if i >= offsets.shape[0] - 1:
        return 0, 0
    return offsets[i], offsets[i + 1]


@cuda.jit
def prepare_rows(margins, unary, w, row_max, bad):
    """Per row: float64 copy, ``exp(u - max(u))`` (below ``exp(EXP_FLOOR)``: zero, as on the CPU),
    the maximum.

    Parameters
    ----------
    margins : (n, K) float32 or float64
    unary, w : (n, K) float64, written
    row_max : (n,) float64, written
    bad : (1,) or more float64
        ``bad[0]`` incremented once per row holding NaN or +-inf.
    """
    t = cuda.grid(1)
    if t >= unary.shape[0]:
        return
    top = -math.inf
    finite = True
    for j in range(unary.shape[1]):
        v = float(margins[t, j])
        unary[t, j] = v
        if math.isnan(v) or math.isinf(v):
            finite = False
        elif v > top:
            top = v
    if not finite:
        cuda.atomic.add(bad, 0, 1.0)
        top = 0.0
    row_max[t] = top
    for j in range(unary.shape[1]):
        d = unary[t, j] - top
        w[t, j] = math.exp(d) if finite and d > EXP_FLOOR else 0.0


@cuda.jit
def softmax_rows(w, out):
    """``out[t] = w[t] / sum(w[t])``: the softmax, from :func:`prepare_rows`' ``w``."""
    t = cuda.grid(1)
    if t >= w.shape[0]:
        return
    total = 0.0
    for j in range(w.shape[1]):
        total += w[t, j]
    for j in range(w.shape[1]):
        out[t, j] = w[t, j] / total


@cuda.jit(device=True)
def _sync():
    """``syncthreads`` where the block has more than one lane."""
    if cuda.blockDim.x > 1:
        cuda.syncthreads()


@cuda.jit(device=True)
def _row_dot(x, y, t, k):
    """``sum_j x[t, j] y[t, j]`` in label order (every lane of a block alike)."""
    s = 0.0
    for j in range(k):
        s += x[t, j] * y[t, j]
    return s


@cuda.jit(device=True)
def _sweeps(i, w, row_max, offsets, emat, emax, start_e, start_max, end_e, end_max,
            log_z, alpha, beta, r, into, beta_scale, marg, overlap):
    """Both sweeps of sequence ``i`` by the block's lanes, as
    :func:`structboost.inference._chain._chunk_messages` without the rates (same
    arithmetic, same order); False at once when lost.

    Lane ``l`` computes labels ``l, l + LANES, ...`` of each row's product,
    reading the last row from shared memory where ``K <= ROW``; every lane sums
    a row's normaliser in label order (so all agree on it and on leaving).
    Unnormalised rows wait in ``into`` (forward) and ``r`` (backward) while
    the lanes read them.
    """
    row = cuda.shared.array(ROW, float64)
    lo = offsets[i]
    hi = offsets[i + 1]
    k = w.shape[1]
    n_tab = emat.shape[0]
    lane = cuda.threadIdx.x
    lanes = cuda.blockDim.x
    fits = k <= ROW
    for j in range(lane, k, lanes):
        into[lo, j] = start_e[j]
    acc = 0.0
    for t in range(lo, hi):
        p = _table(n_tab, t)
        if t > lo:
            for b in range(lane, k, lanes):
                m = 0.0
                for a in range(k):
                    m += (row[a] if fits else alpha[t - 1, a]) * emat[p, a, b]
                into[t, b] = m
        _sync()
        s = _row_dot(into, w, t, k)
        if not s >= TINY:
            return False
        if lane == 0:
            overlap[t] = s
        if t > lo:
            acc += emax[p] + row_max[t] + math.log(s)
        else:
            acc = start_max + row_max[lo] + math.log(s)
        for j in range(lane, k, lanes):
            alpha[t, j] = into[t, j] * w[t, j] / s
            if fits:
                row[j] = alpha[t, j]
        _sync()
    s = 0.0
    e_sum = 0.0
    for j in range(k):
        s += alpha[hi - 1, j] * end_e[j]
        e_sum += end_e[j]
    if not s >= TINY:
        return False
    if lane == 0:
        log_z[i] = acc + end_max + math.log(s)
        beta_scale[hi - 1] = e_sum
    for j in range(lane, k, lanes):
        beta[hi - 1, j] = end_e[j] / e_sum
    _sync()
    for t in range(hi - 1, lo - 1, -1):
        ov = _row_dot(alpha, beta, t, k)
        s = _row_dot(beta, w, t, k)
        if not (overlap[t] * ov >= SAFE and beta_scale[t] * ov >= SAFE and s >= TINY):
            return False
        for j in range(lane, k, lanes):
            r[t, j] = beta[t, j] * w[t, j] / s
            marg[t, j] = alpha[t, j] * beta[t, j] / ov
            if fits:
                row[j] = r[t, j]
        _sync()  # (every lane has read overlap[t] and r[t] is whole)
        if lane == 0:
            overlap[t] = ov
        if t == lo:
            break
        p = _table(n_tab, t)
        for a in range(lane, k, lanes):
            acc_a = 0.0
            for b in range(k):
                acc_a += emat[p, a, b] * (row[b] if fits else r[t, b])
            r[t - 1, a] = acc_a
        _sync()
        s = 0.0
        for a in range(k):
            s += r[t - 1, a]
        if not s >= TINY:
            return False
        if lane == 0:
            beta_scale[t - 1] = s
        for a in range(lane, k, lanes):
            beta[t - 1, a] = r[t - 1, a] / s
        _sync()
    return True


@cuda.jit
def messages(w, row_max, offsets, emat, emax, start_e, start_max, end_e, end_max,
             log_z, alpha, beta, r, into, beta_scale, marg, overlap, lost, n_lost):
    """Scaled forward-backward messages and node marginals, one block of :data:`LANES` lanes per
    sequence.

    The twin of :func:`structboost.inference._chain.messages` without
    the rates (:func:`mixing_rates`): a sequence is lost once a normaliser
    falls below ``TINY`` or a normaliser times the overlap below ``SAFE``.

    Parameters
    ----------
    w : (n, K) float64
        ``exp(unary - row_max)``.
    row_max : (n,) float64
    offsets : (m + 1,) int64
    emat, emax : (P, K, K), (P,) float64
    start_e, end_e : (K,) float64
    start_max, end_max : float
    log_z : (m,) float64, written
    alpha, beta, r, into, marg : (n, K) float64, written
    beta_scale, overlap : (n,) float64, written
    lost : (m,) int8, written
        1 where the sequence must be recomputed in log space.
    n_lost : (1,) float64
        Incremented once per lost sequence.
    """
    i = cuda.blockIdx.x
    if i >= log_z.shape[0]:
        return
    held = _sweeps(i, w, row_max, offsets, emat, emax, start_e, start_max, end_e, end_max,
                   log_z, alpha, beta, r, into, beta_scale, marg, overlap)
    if cuda.threadIdx.x == 0:
        lost[i] = 0 if held else 1
        if not held:
            cuda.atomic.add(n_lost, 0, 1.0)


@cuda.jit
def scatter_rows(dst, rows, src):
    """``dst[rows[e]] = src[e]`` for ``(n, K)`` ``dst`` and ``(e, K)`` ``src``."""
    e = cuda.grid(1)
    if e >= rows.shape[0]:
        return
    for j in range(dst.shape[1]):
        dst[rows[e], j] = src[e, j]


@cuda.jit
def scatter(dst, index, src):
    """``dst[index[e]] = src[e]`` on 1-D arrays."""
    e = cuda.grid(1)
    if e < index.shape[0]:
        dst[index[e]] = src[e]


@cuda.jit
def mixing_rates(alpha, beta, r, into, beta_scale, offsets, emat, right, left):
    """Dobrushin coefficients of both conditional chains, one block of :data:`LANES` lanes per
    sequence (labels ``j`` spread over the lanes).

    ``right[t] = 1 - sum_b min_a P(y_{t+1} = b | y_t = a)`` over possible
    ``a``, zero on last rows; ``left[t]`` the same for ``P(y_{t-1} | y_t)``,
    zero on first rows.
    """
    part = cuda.shared.array((LANES, 2), float64)
    i = cuda.blockIdx.x
    if i >= offsets.shape[0] - 1:
        return
    lo = offsets[i]
    hi = offsets[i + 1]
    k = alpha.shape[1]
    n_tab = emat.shape[0]
    lane = cuda.threadIdx.x
    if lane == 0:
        right[hi - 1] = 0.0
        left[lo] = 0.0
    for t in range(lo, hi - 1):
        p = _table(n_tab, t + 1)
        total_r = 0.0
        total_l = 0.0
        for j in range(lane, k, cuda.blockDim.x):
            low_r = math.inf
            low_l = math.inf
            for a in range(k):
                if alpha[t, a] * beta[t, a] > 0.0:
                    low_r = min(low_r, emat[p, a, j] / (beta_scale[t] * beta[t, a]))
                if alpha[t + 1, a] * beta[t + 1, a] > 0.0:
                    low_l = min(low_l, emat[p, j, a] / into[t + 1, a])
            if low_r < math.inf:
                total_r += low_r * r[t + 1, j]
            if low_l < math.inf:
                total_l += low_l * alpha[t, j]
        part[lane, 0] = total_r
        part[lane, 1] = total_l
        _sync()
        if lane == 0:
            for other in range(1, cuda.blockDim.x):
                total_r += part[other, 0]
                total_l += part[other, 1]
            right[t] = max(0.0, 1.0 - total_r)
            left[t + 1] = max(0.0, 1.0 - total_l)
        _sync()


@cuda.jit
def path_gamma(right, left, offsets, node_gamma, edge_gamma):
    """Node and edge bounds from the Eq. 17 path sums, one thread per sequence (``right``
    overwritten).

    ``node_gamma[t] = 2 (1 + to_right[t] + to_left[t])`` (Theorem 4.1) and
    ``edge_gamma[t] = 2 (3 + to_left[t] + to_right[t + 1])`` (Theorem 4.2,
    zero on last rows).
    """
    lo, hi = _sequence_rows(offsets)
    if lo == hi:
        return
    right[hi - 1] = 0.0
    for t in range(hi - 2, lo - 1, -1):
        right[t] = right[t] * (1.0 + right[t + 1])
    to_left = 0.0
    for t in range(lo, hi):
        if t > lo:
            to_left = left[t] * (1.0 + to_left)
        node_gamma[t] = 2.0 * (1.0 + right[t] + to_left)
        edge_gamma[t] = 2.0 * (3.0 + to_left + right[t + 1]) if t < hi - 1 else 0.0


@cuda.jit
def length_gamma(offsets, out):
    """``out[t] = 2 * length`` of the sequence of row ``t`` (Corollary 4.1)."""
    lo, hi = _sequence_rows(offsets)
    for t in range(lo, hi):
        out[t] = 2.0 * (hi - lo)


@cuda.jit
def edge_weights(beta_scale, overlap, row_weight, edge_gamma, last, coef):
    """``coef[t] = (w_t / z_t, g_t / z_t, g_t / z_t^2)`` for :func:`outer_sums`, zero where
    ``last[t]``.

    ``z_t = beta_scale[t] overlap[t]``, ``w_t = row_weight[t]``,
    ``g_t = w_t edge_gamma[t]``.
    """
    t = cuda.grid(1)
    if t >= coef.shape[0]:
        return
    if last[t]:
        coef[t, 0] = 0.0
        coef[t, 1] = 0.0
        coef[t, 2] = 0.0
        return
    z = beta_scale[t] * overlap[t]
    coef[t, 0] = row_weight[t] / z
    coef[t, 1] = row_weight[t] * edge_gamma[t] / z
    coef[t, 2] = coef[t, 1] / z


@cuda.jit
def outer_sums(alpha, r, coef, emat, with_curvature, total, curvature):
    """Expected transition counts and their curvature bound, summed over all edges.

    With ``P_t(a, b) = alpha[t, a] E[a, b] r[t + 1, b] / z_t`` (one shared
    table)::

        total[a, b]     += sum_t w_t P_t(a, b)
        curvature[a, b] += sum_t g_t P_t(a, b) (1 - P_t(a, b))

    as a tiled matrix product: ``(TILE, TILE)`` blocks on the grid
    :func:`outer_grid`, rows staged in shared memory, sums added with
    atomics. Outputs must start at zero.
    """
    n, k = alpha.shape
    sa = cuda.shared.array((TILE, TILE), float64)
    sr = cuda.shared.array((TILE, TILE), float64)
    sc = cuda.shared.array((3, TILE), float64)
    x = cuda.threadIdx.x
    y = cuda.threadIdx.y
    a = cuda.blockIdx.x * TILE + x
    b = cuda.blockIdx.y * TILE + y
    lo = cuda.blockIdx.z * ROWS
    hi = min(lo + ROWS, n - 1)
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for t0 in range(lo, hi, TILE):
        t = t0 + y
        col_b = cuda.blockIdx.y * TILE + x
        inside = t < hi
        sa[y, x] = alpha[t, a] if inside and a < k else 0.0
        sr[y, x] = r[t + 1, col_b] if inside and col_b < k else 0.0
        if x < 3:
            sc[x, y] = coef[t, x] if inside else 0.0
        cuda.syncthreads()
        for j in range(TILE):
            v = sa[j, x] * sr[j, y]
            s1 += sc[0, j] * v
            if with_curvature:
                s2 += sc[1, j] * v
                s3 += sc[2, j] * v * v
        cuda.syncthreads()
    if a < k and b < k:
        e = emat[0, a, b]
        cuda.atomic.add(total, (a, b), e * s1)
        if with_curvature:
            cuda.atomic.add(curvature, (a, b), e * s2 - e * e * s3)


def outer_grid(n, k):
    """Grid of :func:`outer_sums` for ``n`` rows and ``k`` labels."""
    tiles = (k + TILE - 1) // TILE
    return (tiles, tiles, max(1, (n - 1 + ROWS - 1) // ROWS))


@cuda.jit
def node_sums(marg, rows, weight, gamma, with_curvature, total, curvature):
    """``total[j] += sum_e weight[e] p[rows[e], j]`` and the curvature ``weight gamma p (1 - p)``,
    with atomics.

    One thread per label and chunk of :data:`CHUNK` rows; launch
    ``K * ceil(len(rows) / CHUNK)`` threads on zeroed outputs.
    """
    g = cuda.grid(1)
    k = marg.shape[1]
    count = rows.shape[0]
    if g >= k * ((count + CHUNK - 1) // CHUNK):
        return
    j = g % k
    lo = (g // k) * CHUNK
    s1 = 0.0
    s2 = 0.0
    for e in range(lo, min(lo + CHUNK, count)):
        t = rows[e]
        p = marg[t, j]
        s1 += weight[e] * p
        if with_curvature:
            s2 += weight[e] * gamma[t] * p * (1.0 - p)
    cuda.atomic.add(total, j, s1)
    if with_curvature:
        cuda.atomic.add(curvature, j, s2)


#: Most blocks of the grid-stride reductions (:func:`step_sums`, :func:`label_scores`).
MAX_BLOCKS = 4 if SIMULATOR else 2048


def reduction_blocks(n):
    """Blocks of the grid-stride reductions over ``n`` rows."""
    return min(blocks(n), MAX_BLOCKS)


@cuda.jit(device=True)
def _block_add(value, out, j):
    """Sum ``value`` over the block's threads; thread 0 adds it to ``out[j]``."""
    buf = cuda.shared.array(THREADS, float64)
    tid = cuda.threadIdx.x
    buf[tid] = value
    cuda.syncthreads()
    if tid == 0:
        for i in range(1, cuda.blockDim.x):
            value += buf[i]
        cuda.atomic.add(out, j, value)
    cuda.syncthreads()


@cuda.jit
def step_sums(new, old, a, b, c, out):
    """``out += [sum a d, sum b d^2, sum c d]``, ``d = new - old`` over ``(n, K)``: the secant's
    sums.

    Launch :func:`reduction_blocks` blocks of :data:`THREADS` threads on a
    zeroed ``out (3,)``.
    """
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for t in range(cuda.grid(1), new.shape[0], cuda.gridsize(1)):
        for j in range(new.shape[1]):
            d = new[t, j] - old[t, j]
            s1 += a[t, j] * d
            s2 += b[t, j] * d * d
            s3 += c[t, j] * d
    _block_add(s1, out, 0)
    _block_add(s2, out, 1)
    _block_add(s3, out, 2)


@cuda.jit
def fill(a, value):
    """``a[:] = value`` on a 1-D array."""
    t = cuda.grid(1)
    if t < a.shape[0]:
        a[t] = value


@cuda.jit
def copy_rows(src, dst):
    """``dst[t] = src[t]`` (with ``dst``'s dtype), one thread per row of ``(n, K)``."""
    t = cuda.grid(1)
    if t >= src.shape[0]:
        return
    for j in range(src.shape[1]):
        dst[t, j] = src[t, j]


@cuda.jit
def label_scores(unary, labels, row_weight, out):
    """``out[1] += sum_t row_weight[t] unary[t, labels[t]]`` (launched as :func:`step_sums`)."""
    s1 = 0.0
    for t in range(cuda.grid(1), unary.shape[0], cuda.gridsize(1)):
        s1 += row_weight[t] * unary[t, labels[t]]
    _block_add(s1, out, 1)


@cuda.jit(device=True)
def _hess_factor(gamma, t, scale):
    """The GBCRF factor of row ``t``: ``gamma[t]``, ``max(scale gamma[t], 2)`` below scale 1; 2
    without ``gamma``.
    """
    if gamma.shape[0] == 0:
        return 2.0
    f = gamma[t]
    if scale < 1.0:
        f = max(scale * f, 2.0)
    return f


@cuda.jit
def grad_hess(p, labels, row_weight, gamma, scale, unit, floor, finish, grad, hess,
              new, old, old_g, old_h, sums):
    """Weighted G and H of one round (:func:`structboost.objectives._kernels.node_grad_hess`'s
    arithmetic) and, in the same read, the secant's sums.

    Rows in a grid-stride loop; launch :func:`reduction_blocks` blocks of
    :data:`THREADS` threads. With ``new``, ``old``, ``old_g``, ``old_h`` ``(n, K)``
    (else empty) adds ``[sum old_g d, sum old_h d^2, sum grad d]``,
    ``d = new - old``, to the zeroed ``sums (3,)``.
    """
    summed = old.shape[0] > 0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for t in range(cuda.grid(1), p.shape[0], cuda.gridsize(1)):
        w = row_weight[t]
        f = _hess_factor(gamma, t, scale)
        for j in range(p.shape[1]):
            q = p[t, j]
            var = q * (1.0 - q)
            g = (q - 1.0 if j == labels[t] else q) * w
            grad[t, j] = g
            hess[t, j] = _floored(1.0 if unit else var * f, floor, w) if finish else var
            if summed:
                d = new[t, j] - old[t, j]
                s1 += old_g[t, j] * d
                s2 += old_h[t, j] * d * d
                s3 += g * d
    if summed:
        _block_add(s1, sums, 0)
        _block_add(s2, sums, 1)
        _block_add(s3, sums, 2)


@cuda.jit(device=True)
def _floored(v, floor, w):
    """``w max(v, floor)``, as the host kernels write it."""
    return (v if v > floor else floor) * w


@cuda.jit
def finish_hess(raw, gamma, scale, floor, row_weight, hess):
    """``hess = w max(raw f, floor)`` per row, ``raw`` holding ``p (1 - p)``, ``f`` the
    :func:`_hess_factor`.
    """
    t = cuda.grid(1)
    if t < raw.shape[0]:
        f = _hess_factor(gamma, t, scale)
        for j in range(raw.shape[1]):
            hess[t, j] = _floored(raw[t, j] * f, floor, row_weight[t])


@cuda.jit
def viterbi(unary, offsets, transitions, start, end, score, back, path):
    """Most probable label path of every sequence, one thread per sequence (ties to the lowest
    label).

    ``score (n, K)`` float64 and ``back (n, K)`` int32 are scratch; writes
    ``path (n,)`` int64.
    """
    lo, hi = _sequence_rows(offsets)
    if lo == hi:
        return
    k = unary.shape[1]
    n_tab = transitions.shape[0]
    for b in range(k):
        score[lo, b] = unary[lo, b] + start[b]
    for t in range(lo + 1, hi):
        p = _table(n_tab, t)
        for b in range(k):
            best = -math.inf
            arg = 0
            for a in range(k):
                v = score[t - 1, a] + transitions[p, a, b]
                if v > best:
                    best = v
                    arg = a
            score[t, b] = best + unary[t, b]
            back[t, b] = arg
    best = -math.inf
    y = 0
    for b in range(k):
        v = score[hi - 1, b] + end[b]
        if v > best:
            best = v
            y = b
    for t in range(hi - 1, lo - 1, -1):
        path[t] = y
        if t > lo:
            y = back[t, y]
