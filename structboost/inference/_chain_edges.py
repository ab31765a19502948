"""Numba kernel of the weighted edge sums of a chain posterior with one shared table.

:meth:`structboost.inference.chain.ChainPosterior.edge_sums` writes the
weighted sum of the pairwise marginals over some edges as ``E * (A'
diag(c) R)`` (and its curvature part as ``E * (A' diag(c') R) - E^2 *
((A^2)' diag(c'') R^2)``), with ``A`` the scaled forward messages of the
edges' rows, ``R`` the ``r`` rows one ahead and per-edge coefficients from
the weights and the normalisers. :func:`edge_products` takes those products
in one read of ``alpha`` and ``r``, the coefficients computed on the way
(no coefficient arrays, no gathers), in tasks of a fixed number of edges
whose partial sums are added in order: the same result on one thread or
many (see :mod:`structboost.inference._chain`).
"""

import numpy as np
from numba import njit, prange

from .._config import KERNEL, PARALLEL


@njit(**KERNEL)
def _edge_task(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, c, partial):
    """Task ``c`` of :func:`edge_products` into ``partial[c]``."""
    k = alpha.shape[1]
    curv = curv_weights.shape[0] > 0
    acc = partial[c]
    acc[:] = 0.0
    lo = c * per_task
    for e in range(lo, min(edges.shape[0], lo + per_task)):
        t = edges[e]
        z = beta_scale[t] * overlap[t]
        c0 = weights[e] / z
        c1 = curv_weights[e] / z if curv else 0.0
        c2 = c1 / z
        for a in range(k):
            x = alpha[t, a]
            x0 = x * c0
            for b in range(k):
                acc[0, a, b] += x0 * r[t + 1, b]
            if curv:
                x1 = x * c1
                x2 = x * x * c2
                for b in range(k):
                    y = r[t + 1, b]
                    acc[1, a, b] += x1 * y
                    acc[2, a, b] += x2 * y * y


@njit(**PARALLEL)
def _edges_parallel(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, partial):
    for c in prange(partial.shape[0]):
        _edge_task(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, c, partial)


@njit(**KERNEL)
def _edges_serial(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, partial):
    for c in range(partial.shape[0]):
        _edge_task(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, c, partial)


def edge_products(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, parallel):
    """Weighted products of the scaled messages over some edges, summed task by task.

    With ``z_t = beta_scale[t] overlap[t]``: ``sum_t (w_t / z_t) alpha_t
    r_(t+1)'`` and, with ``curv_weights`` ``g``, also ``sum_t (g_t / z_t)
    alpha_t r_(t+1)'`` and ``sum_t (g_t / z_t^2) (alpha_t^2) (r_(t+1)^2)'``
    (squares elementwise).

    Parameters
    ----------
    alpha, r : (n, K) float64
        The posterior's scaled messages.
    beta_scale, overlap : (n,) float64
    edges : (e,) int64
        Rows ``t`` of the edges ``(t, t + 1)``, none last in its sequence.
    weights : (e,) float64
    curv_weights : (e,) or (0,) float64
        Empty: the first product alone.
    per_task : int
        Edges per task (and per partial sum).
    parallel : bool
        The ``prange`` driver.

    Returns
    -------
    (1, K, K) or (3, K, K) float64
    """
    k = alpha.shape[1]
    tasks = max(1, -(-edges.shape[0] // per_task))
    partial = np.empty((tasks, 3 if curv_weights.shape[0] else 1, k, k))
    kernel = _edges_parallel if parallel else _edges_serial
    kernel(alpha, r, beta_scale, overlap, edges, weights, curv_weights, per_task, partial)
    return np.add.reduce(partial, axis=0)
