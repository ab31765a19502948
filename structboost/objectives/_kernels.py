"""The objective's row loops: G and H from marginals, and the adaptive step's sums.

Each reads its arrays once and writes its results straight into the
engine's buffers (float32 or float64, either memory order), where numpy
would make several full-size temporaries.
"""

import numpy as np
from numba import njit

from .._config import KERNEL


@njit(**KERNEL)
def node_grad_hess(p, labels, row_w, factor, unit, floor, finish, g, h):
    """Weighted G and H of some rows, written into ``g`` and ``h`` ``(r, K)``.

    ``g = (p - onehot(labels)) * w``. With ``finish``, ``h = max(q, floor) *
    w`` where ``q = 1`` if ``unit`` else ``p (1 - p) factor``; without, ``h = p
    (1 - p)`` alone (see :func:`finish_bound_hess`). ``p (r, K)`` float64,
    ``labels (r,)``, ``row_w (r,)`` and ``factor (r,)`` float64.
    """
    for i in range(p.shape[0]):
        w = row_w[i]
        f = factor[i]
        for j in range(p.shape[1]):
            q = p[i, j]
            g[i, j] = (q - 1.0 if j == labels[i] else q) * w
            var = q * (1.0 - q)
            if not finish:
                h[i, j] = var
            else:
                v = 1.0 if unit else var * f
                h[i, j] = (v if v > floor else floor) * w


@njit(**KERNEL)
def finish_bound_hess(raw, gamma, scale, floor, offsets, seq_weight, h):
    """``h = max(raw * f, floor) * w`` row by row, ``raw (n, K)`` holding ``p (1 - p)``.

    ``f`` is the GBCRF factor of :func:`~.step.bound_factor` (``gamma (n,)``
    the node bound, ``scale`` the adaptive step's) and ``w`` the weight of
    the row's sequence (``offsets (m + 1,)``, ``seq_weight (m,)``). ``raw``
    may be ``h`` itself (read before written); products in float64.
    """
    for s in range(seq_weight.shape[0]):
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


@njit(**KERNEL)
def all_within(flat, limit):
    """Whether every value of ``flat (N,)`` has ``|v| <= limit`` (NaN fails); one read.

    Counts the failures instead of stopping at the first: the loop vectorises
    (4x faster on float32 margins; a failure is an error, never the hot path).
    """
    bad = 0
    for i in range(flat.shape[0]):
        bad += not abs(flat[i]) <= limit
    return bad == 0


@njit(**KERNEL)
def _step_sums(new, old, grad, hess, with_hess):
    """``(grad . d, d' hess d)`` over flat arrays ``(N,)``, ``d = new - old`` in float64."""
    slope = 0.0
    model = 0.0
    for i in range(new.shape[0]):
        d = np.float64(new[i]) - np.float64(old[i])
        slope += np.float64(grad[i]) * d
        if with_hess:
            model += np.float64(hess[i]) * d * d
    return slope, model


def step_sums(new, old, grad, hess=None):
    """``[grad . d, d' hess d]`` (0 without ``hess``) with ``d = new - old``, all ``(n, K)``.

    Any float dtypes and memory orders: the arrays are read in the order of
    ``new`` (copied only if one of them is in the other order).

    Returns
    -------
    list of float
    """
    order = "F" if new.flags.f_contiguous and not new.flags.c_contiguous else "C"
    flat = [np.ravel(a, order=order) for a in (new, old, grad, grad if hess is None else hess)]
    return list(_step_sums(*flat, hess is not None))
