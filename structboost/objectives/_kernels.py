"""The objective's row loops: G and H from marginals, the margin check and the adaptive step's sums.

Each reads its arrays once and writes straight into the engine's buffers
(float32 or float64, either order). Each has a ``prange`` driver and a
serial one over the same tasks of :data:`TASK_ENTRIES`, with partial sums
added in task order, so results do not depend on the driver or the number
of threads.
"""

import numpy as np
from numba import prange

from .._config import KERNEL, PARALLEL, njit

#: Entries per task (and per partial sum) of the flat reductions.
TASK_ENTRIES = 1 << 14


@njit(**KERNEL)
def _tasks(size, per_task):
    """Number of tasks of ``per_task`` items that cover ``size`` items (at least 1)."""
    return max(1, (size + per_task - 1) // per_task)


@njit(**KERNEL)
def _grad_hess_task(p, labels, row_w, gamma, scale, unit, floor, finish, g, h, rows, last, c):
    """Task ``c`` (rows ``c * rows`` on) of :func:`node_grad_hess`; ``new`` empty: no sums."""
    new, old, old_g, old_h, bits, partial, checksums = last
    lo = c * rows
    hi = min(p.shape[0], lo + rows)
    k = p.shape[1]
    bound = gamma.shape[0] > 0
    measure = new.shape[0] > 0
    # the task's rows as views, so that loops start at zero (no negative-index checks)
    p, labels, row_w, g, h = p[lo:hi], labels[lo:hi], row_w[lo:hi], g[lo:hi], h[lo:hi]
    if bound:
        gamma = gamma[lo:hi]
    if measure:
        new, old, bits = new[lo:hi], old[lo:hi], bits[lo:hi]
        old_g, old_h = old_g[lo:hi], old_h[lo:hi]
    slope = 0.0
    model = 0.0
    new_slope = 0.0
    total = np.uint64(0)
    for i in range(p.shape[0]):
        if measure:  # the old G and H first: they may be the buffers written below
            for j in range(k):
                d = np.float64(new[i, j]) - np.float64(old[i, j])
                slope += np.float64(old_g[i, j]) * d
                model += np.float64(old_h[i, j]) * d * d
                total += np.uint64(bits[i, j])
        w = row_w[i]
        f = 2.0
        if bound:  # the GBCRF factor: max(scale gamma, 2) below scale 1
            f = gamma[i]
            if scale < 1.0:
                f = scale * f
                if f < 2.0:
                    f = 2.0
        for j in range(k):
            q = p[i, j]
            g[i, j] = (q - 1.0 if j == labels[i] else q) * w
            var = q * (1.0 - q)
            if not finish:
                h[i, j] = var
            else:
                v = 1.0 if unit else var * f
                h[i, j] = (v if v > floor else floor) * w
        if measure:  # along the new G as written (in its dtype)
            for j in range(k):
                new_slope += np.float64(g[i, j]) * (np.float64(new[i, j]) - np.float64(old[i, j]))
    if measure:
        partial[c, 0] = slope
        partial[c, 1] = model
        partial[c, 2] = new_slope
        checksums[c] = total


@njit(**PARALLEL)
def _grad_hess_parallel(p, labels, row_w, gamma, scale, unit, floor, finish, g, h, rows, last):
    for c in prange(_tasks(p.shape[0], rows)):
        _grad_hess_task(p, labels, row_w, gamma, scale, unit, floor, finish, g, h, rows, last, c)


@njit(**KERNEL)
def _grad_hess_serial(p, labels, row_w, gamma, scale, unit, floor, finish, g, h, rows, last):
    for c in range(_tasks(p.shape[0], rows)):
        _grad_hess_task(p, labels, row_w, gamma, scale, unit, floor, finish, g, h, rows, last, c)


def node_grad_hess(p, labels, row_w, gamma, scale, unit, floor, finish, out, parallel, rows,
                   last=None):  # fmt: skip
    """Weighted G and H of some rows, written into ``out = (g, h)``, each ``(r, K)``.

    ``g = (p - onehot(labels)) w``. With ``finish``, ``h = max(q, floor) w``
    with ``q = 1`` if ``unit`` (TreeCRF) else ``p (1 - p) f``, ``f`` the GBCRF
    factor: ``max(scale gamma, 2)`` below scale 1, ``gamma`` at 1, 2 where
    ``gamma`` is empty (LogitBoost); without ``finish``, ``h = p (1 - p)``.

    Parameters
    ----------
    p : (r, K) float64
    labels, row_w, gamma : (r,) int64, (r,) float64, (r,) or (0,) float64
    out : tuple of two (r, K) float32 or float64 arrays, output
    rows : int
        Rows per task.
    last : tuple of four (r, K) arrays, optional
        ``(new, old, old_g, old_h)``: also take the adaptive step's sums
        (``old`` float32; ``old_g``, ``old_h`` read before ``out`` is written).

    Returns
    -------
    None, or with ``last``:
    sums : (t, 3) float64
        Per task ``old_g . d``, ``d' old_h d`` and ``g . d``, ``d = new - old``.
    checksums : (t,) uint64
        Per task, the sum of ``old``'s bit patterns (:func:`scan_values`).
    """
    tasks = _tasks(p.shape[0], rows)
    if last is None:
        empty = np.zeros((0, 0))
        arrays = (empty, empty, empty, empty, np.zeros((0, 0), np.uint32))
        partial, checksums = np.zeros((0, 3)), np.zeros(0, np.uint64)
    else:
        arrays = (*last, last[1].view(np.uint32))
        partial, checksums = np.empty((tasks, 3)), np.empty(tasks, np.uint64)
    kernel = _grad_hess_parallel if parallel else _grad_hess_serial
    kernel(p, labels, row_w, gamma, scale, unit, floor, finish, *out, rows,
           (*arrays, partial, checksums))  # fmt: skip
    return None if last is None else (partial, checksums)


@njit(**KERNEL)
def _finish_rows(raw, gamma, scale, floor, offsets, seq_weight, h, s0, s1):
    """Sequences ``s0:s1`` of :func:`finish_bound_hess`."""
    for s in range(s0, s1):
        w = seq_weight[s]
        for i in range(offsets[s], offsets[s + 1]):
            f = gamma[i]
            if scale < 1.0:  # np.maximum(scale * gamma, 2.0)
                f = scale * f
                if f < 2.0:
                    f = 2.0
            for j in range(raw.shape[1]):
                v = np.float64(raw[i, j]) * f
                h[i, j] = (v if v > floor else floor) * w


#: Sequences per task of :func:`finish_bound_hess`'s parallel driver.
FINISH_SEQUENCES = 256


@njit(**PARALLEL)
def _finish_parallel(raw, gamma, scale, floor, offsets, seq_weight, h):
    m = seq_weight.shape[0]
    for c in prange(_tasks(m, FINISH_SEQUENCES)):
        s0 = c * FINISH_SEQUENCES
        _finish_rows(raw, gamma, scale, floor, offsets, seq_weight, h, s0,
                     min(m, s0 + FINISH_SEQUENCES))  # fmt: skip


@njit(**KERNEL)
def _finish_serial(raw, gamma, scale, floor, offsets, seq_weight, h):
    _finish_rows(raw, gamma, scale, floor, offsets, seq_weight, h, 0, seq_weight.shape[0])


def finish_bound_hess(raw, gamma, scale, floor, offsets, seq_weight, h, parallel):
    """``h = max(raw f, floor) w`` row by row, ``raw (n, K)`` holding ``p (1 - p)`` (may be ``h``).

    ``f`` is :func:`node_grad_hess`'s GBCRF factor of ``gamma (n,)`` and
    ``scale``; ``w`` the row's sequence weight (``offsets (m + 1,)``,
    ``seq_weight (m,)``).
    """
    kernel = _finish_parallel if parallel else _finish_serial
    kernel(raw, gamma, scale, floor, offsets, seq_weight, h)


@njit(**KERNEL)
def _bit_sum(bits, lo, hi):
    """Sum of ``bits[lo:hi]`` (uint32) modulo ``2 ** 64``; 0 if ``bits`` is empty."""
    total = np.uint64(0)
    if bits.shape[0]:
        part = bits[lo:hi]  # (a view: loops from zero vectorise)
        for i in range(part.shape[0]):
            total += np.uint64(part[i])
    return total


@njit(**KERNEL)
def _scan_task(flat, bits, limit, c, partial):
    """Task ``c`` of :func:`scan_values`: ``partial[c] = (failures, bit sum)``."""
    lo = c * TASK_ENTRIES
    hi = min(flat.shape[0], lo + TASK_ENTRIES)
    bad = 0
    part = flat[lo:hi]
    for i in range(part.shape[0]):
        bad += not abs(part[i]) <= limit
    total = _bit_sum(bits, lo, hi)
    partial[c, 0] = bad
    partial[c, 1] = total


@njit(**PARALLEL)
def _scan_parallel(flat, bits, limit, partial):
    for c in prange(partial.shape[0]):
        _scan_task(flat, bits, limit, c, partial)


@njit(**KERNEL)
def _scan_serial(flat, bits, limit, partial):
    for c in range(partial.shape[0]):
        _scan_task(flat, bits, limit, c, partial)


def scan_values(flat, limit, parallel):
    """Whether every ``|v| <= limit`` in ``flat (N,)`` (NaN fails), and a checksum, in one read.

    Returns
    -------
    within : bool
    checksum : int or None
        For float32 ``flat`` the sum of its bit patterns modulo ``2 ** 64``
        (the adaptive step's stamp); None for other dtypes.
    """
    bits = flat.view(np.uint32) if flat.dtype == np.float32 else np.zeros(0, np.uint32)
    partial = np.empty((_tasks(flat.shape[0], TASK_ENTRIES), 2), dtype=np.uint64)
    (_scan_parallel if parallel else _scan_serial)(flat, bits, limit, partial)
    checksum = int(np.add.reduce(partial[:, 1], dtype=np.uint64)) if bits.shape[0] else None
    return not partial[:, 0].any(), checksum


@njit(**KERNEL)
def _step_task(new, old, bits, grad, hess, with_hess, c, partial, checksums):
    """Task ``c`` of :func:`step_sums`: ``partial[c] = (grad . d, d' hess d)``, ``checksums[c]``."""
    lo = c * TASK_ENTRIES
    hi = min(new.shape[0], lo + TASK_ENTRIES)
    slope = 0.0
    model = 0.0
    a, b, ga, ha = new[lo:hi], old[lo:hi], grad[lo:hi], hess[lo:hi]
    for i in range(a.shape[0]):
        d = np.float64(a[i]) - np.float64(b[i])
        slope += np.float64(ga[i]) * d
        if with_hess:
            model += np.float64(ha[i]) * d * d
    total = _bit_sum(bits, lo, hi)
    partial[c, 0] = slope
    partial[c, 1] = model
    checksums[c] = total


@njit(**PARALLEL)
def _step_parallel(new, old, bits, grad, hess, with_hess, partial, checksums):
    for c in prange(partial.shape[0]):
        _step_task(new, old, bits, grad, hess, with_hess, c, partial, checksums)


@njit(**KERNEL)
def _step_serial(new, old, bits, grad, hess, with_hess, partial, checksums):
    for c in range(partial.shape[0]):
        _step_task(new, old, bits, grad, hess, with_hess, c, partial, checksums)


def step_sums(new, old, grad, hess=None, parallel=False):
    """``[grad . d, d' hess d]`` (0 without ``hess``), ``d = new - old``, and ``old``'s float32
    checksum, all ``(n, K)``.
    """
    order = "F" if new.flags.f_contiguous and not new.flags.c_contiguous else "C"
    flat = [np.ravel(a, order=order) for a in (new, old, grad, grad if hess is None else hess)]
    bits = flat[1].view(np.uint32) if flat[1].dtype == np.float32 else np.zeros(0, np.uint32)
    tasks = _tasks(flat[0].shape[0], TASK_ENTRIES)
    partial = np.empty((tasks, 2))
    checksums = np.empty(tasks, dtype=np.uint64)
    kernel = _step_parallel if parallel else _step_serial
    kernel(flat[0], flat[1], bits, flat[2], flat[3], hess is not None, partial, checksums)
    checksum = int(np.add.reduce(checksums, dtype=np.uint64)) if bits.shape[0] else None
    return [float(x) for x in np.add.reduce(partial, axis=0)], checksum
