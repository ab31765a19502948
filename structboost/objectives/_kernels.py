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
    (1 - p)`` alone (see :func:`finish_hess`). ``p (r, K)`` float64,
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
def finish_hess(raw, factor, floor, row_w, h):
    """``h = max(raw * factor, floor) * w`` row by row, ``raw (r, K)`` holding ``p (1 - p)``."""
    for i in range(raw.shape[0]):
        w = row_w[i]
        f = factor[i]
        for j in range(raw.shape[1]):
            v = raw[i, j] * f
            h[i, j] = (v if v > floor else floor) * w


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
