"""Numba kernel of the scalar part of Algorithm 1 (Jebara & Choromanska, 2012).

The curvature is ``G^T M G`` with ``M = A^T diag(c) A`` (see
:func:`structboost.majorize.partition.outcome_curvature`); for ``i <= j``::

    M[i, j] = (alpha_i / z_(<=j)) (alpha_j / z_(<=j)) Q_j - [i < j] c_j alpha_i / z_(<j)
              + [i = j] c_j,
    Q_j = sum_(k > j) c_k (z_(<=j) / z_(<k))^2 = c_(j+1) + (z_(<=j) / z_(<=j+1))^2 Q_(j+1),

``O(n^2)`` work, every ratio at most one (no overflow). Nothing here
validates input.
"""

import numpy as np

from .._config import CACHE, njit

_SERIES_CUTOFF = 1e-2


@njit(cache=CACHE)
def _coefficient(x):
    """``tanh(x / 2) / (2 x)`` (``1/4`` at 0, a Taylor series near 0)."""
    x = abs(x)
    if x < _SERIES_CUTOFF:
        small = x * x
        return 0.25 - small / 48.0 + small * small / 480.0
    return np.tanh(0.5 * x) / (2.0 * x)


@njit(cache=CACHE)
def running_curvature(log_alpha, weights, log_z, prob, curvature, curvature_sum):
    """Log-sum, probabilities and curvature weights of Algorithm 1, per problem.

    Parameters
    ----------
    log_alpha : (s, U, n) float64
        ``-inf`` marks an absent outcome; a problem with none finite gets
        ``log_z = -inf`` and zeros.
    weights : (s,) float64
        Multiplier of the curvature of the problems ``[j, :]``.
    log_z : (s, U) float64, out
    prob : (s, U, n) float64, out
    curvature : (s, n, U, n) float64, out
        ``curvature[j, w, u, v] = weights[j] * M_(j, u)[v, w]``.
    curvature_sum : (s, n, n) float64, out
        Its sum over ``u``.
    """
    s_count, u_count, n = log_alpha.shape
    inclusive = np.empty(n)
    coefficient = np.empty(n)
    step = np.zeros(n)  # z_(<=j-1) / z_(<=j)
    ratio = np.zeros((n, n))  # [j, i] = alpha_i / z_(<=j) for i <= j
    tail = np.empty(n)  # Q_j
    lower = np.empty((n, n))  # [j, i] = M[i, j] for i <= j
    for s in range(s_count):
        curvature_sum[s] = 0.0
        for u in range(u_count):
            row = log_alpha[s, u]
            total = -np.inf
            for j in range(n):
                x = row[j]
                if x == -np.inf or total == -np.inf:
                    coefficient[j] = 0.0
                    if x > total:
                        total = x
                else:
                    coefficient[j] = _coefficient(x - total)
                    top = max(total, x)
                    total = top + np.log1p(np.exp(-abs(total - x)))
                inclusive[j] = total
            log_z[s, u] = total
            for j in range(n):
                prob[s, u, j] = np.exp(row[j] - total) if total > -np.inf else 0.0
                if inclusive[j] == -np.inf:
                    step[j] = 0.0
                    diagonal = 0.0
                else:
                    step[j] = np.exp(inclusive[j - 1] - inclusive[j]) if j > 0 else 0.0
                    diagonal = np.exp(row[j] - inclusive[j])
                for i in range(j):
                    ratio[j, i] = ratio[j - 1, i] * step[j]
                ratio[j, j] = diagonal
            tail[n - 1] = 0.0
            for j in range(n - 2, -1, -1):
                tail[j] = coefficient[j + 1] + step[j + 1] * step[j + 1] * tail[j + 1]
            weight = weights[s]
            for j in range(n):
                scale = ratio[j, j] * tail[j]
                lower[j, j] = weight * (coefficient[j] + ratio[j, j] * scale)
                for i in range(j):
                    lower[j, i] = weight * (ratio[j, i] * scale - coefficient[j] * ratio[j - 1, i])
            for w in range(n):
                for v in range(w + 1):
                    curvature[s, w, u, v] = lower[w, v]
                    curvature_sum[s, w, v] += lower[w, v]
                for v in range(w + 1, n):
                    curvature[s, w, u, v] = lower[v, w]
                    curvature_sum[s, w, v] += lower[v, w]


@njit(cache=CACHE)
def add_weighted_rows(weights, rows, out):
    """``out[v, w] += sum_j weights[j, v, w] * rows[j, v]`` (``(s, K, K)``, ``(s, K, d)`` into ``(K,
    K, d)``), off threaded BLAS.
    """
    s_count, k, _ = weights.shape
    d = rows.shape[2]
    for v in range(k):
        for j in range(s_count):
            for w in range(k):
                weight = weights[j, v, w]
                for x in range(d):
                    out[v, w, x] += weight * rows[j, v, x]
