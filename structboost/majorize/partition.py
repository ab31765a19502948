"""Algorithm 1 of Jebara & Choromanska (2012): the bound over an enumerable outcome set.

See the notes of :mod:`structboost.majorize` for the algorithm as read off the paper.
"""

import numpy as np

from ._checks import as_float_array, check_finite

_SERIES_CUTOFF = 1e-2
_OUTCOME_BLOCK = 256


def curvature_coefficient(x):
    """Curvature ``c(x) = tanh(x / 2) / (2 x)`` of the bound's rank-one terms, elementwise over
    log ratios ``x = log(alpha / z)`` (``1/4`` at 0, 0 at ``+-inf``).
    """
    x = np.abs(np.asarray(x, dtype=np.float64))
    small = np.minimum(x, _SERIES_CUTOFF) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.tanh(0.5 * x) / (2.0 * x)
    return np.where(x < _SERIES_CUTOFF, 0.25 - small / 48.0 + small * small / 480.0, ratio)


def _running_mean_operator(log_alpha):
    """Scalar part of Algorithm 1 for ``log_alpha (..., n)`` in array order (see
    :func:`outcome_curvature`).

    Returns
    -------
    log_z : ndarray, shape (...)
    prob : ndarray, shape (..., n)
    deviation : ndarray, shape (..., n, n)
        Lower-triangular ``A`` with ``A[k, k] = 1`` and
        ``A[k, i] = -alpha_i / z_{<k}`` for ``i < k``.
    coefficient : ndarray, shape (..., n)
        ``c(log(alpha_k / z_{<k}))``; 0 for the first present outcome and
        absent ones.
    """
    n = log_alpha.shape[-1]
    inclusive = np.logaddexp.accumulate(log_alpha, axis=-1)
    log_z = inclusive[..., -1]
    before = np.concatenate(
        [np.full(log_alpha.shape[:-1] + (1,), -np.inf), inclusive[..., :-1]], axis=-1
    )
    present = log_alpha > -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        prob = np.where(present, np.exp(log_alpha - log_z[..., None]), 0.0)
        coefficient = np.where(present, curvature_coefficient(log_alpha - before), 0.0)
    # before[k] = -inf only if every alpha_i, i < k, is 0: any finite stand-in gives ratio 0
    before = np.where(before == -np.inf, 0.0, before)
    # shape (..., k, i): -alpha_i / z_{<k} (<= 1 in size) where i < k, then 1 on the diagonal;
    # the clamp only touches i >= k, which the mask then zeroes
    deviation = log_alpha[..., None, :] - before[..., :, None]
    np.minimum(deviation, 0.0, out=deviation)
    np.exp(deviation, out=deviation)
    deviation *= -np.tri(n, n, -1)
    deviation += np.eye(n)
    return log_z, prob, deviation, coefficient


def _stacked_matmul(a, b):
    """``a @ b`` over stacks of small wide matrices (faster than numpy's stacked matmul)."""
    return np.einsum("...ij,...jk->...ik", a, b, optimize=True)


def _curvature_weights(deviation, coefficient):
    """``A^T diag(c) A``: the rank-one terms' sum is ``G^T M G``, shape (..., n, n)."""
    return np.swapaxes(deviation, -1, -2) @ (coefficient[..., :, None] * deviation)


def outcome_curvature(log_alpha):
    """Algorithm 1's scalar part: ``log Z``, the outcome probabilities and ``M``.

    For outcome feature rows ``G`` (one per outcome) the curvature is
    ``G^T M G`` and the gradient ``prob @ G``, so structured features need no
    loop over outcomes.

    Parameters
    ----------
    log_alpha : ndarray, shape (..., n)
        ``log(h(y) exp(theta~ @ f(y)))``; ``-inf`` where ``h(y) = 0``.

    Returns
    -------
    log_z : ndarray, shape (...)
    prob : ndarray, shape (..., n)
        ``alpha / z``.
    weights : ndarray, shape (..., n, n)
        ``M = A^T diag(c) A`` (symmetric PSD; :mod:`structboost.majorize`).
    """
    log_z, prob, deviation, coefficient = _running_mean_operator(log_alpha)
    return log_z, prob, _curvature_weights(deviation, coefficient)


def _partition_factors(features, theta, base_scores):
    """Algorithm 1 in factored form, ``Sigma = factors^T factors``: ``(log_z, mu, factors (..., n,
    d))``.

    Outcomes go in blocks, each led by a pseudo-outcome carrying the sum and
    mean of those before, which is exact in ``O(n * block)`` memory.
    """
    log_alpha = base_scores + features @ theta
    n = log_alpha.shape[-1]
    factors = np.empty_like(features)
    for start in range(0, n, _OUTCOME_BLOCK):
        stop = min(start + _OUTCOME_BLOCK, n)
        block_alpha, block_features = log_alpha[..., start:stop], features[..., start:stop, :]
        if start > 0:
            block_alpha = np.concatenate([log_z[..., None], block_alpha], axis=-1)
            block_features = np.concatenate([mu[..., None, :], block_features], axis=-2)
        log_z, prob, deviation, coefficient = _running_mean_operator(block_alpha)
        mu = np.einsum("...n,...nd->...d", prob, block_features)
        rows = np.sqrt(coefficient)[..., None] * _stacked_matmul(deviation, block_features)
        factors[..., start:stop, :] = rows[..., rows.shape[-2] - (stop - start) :, :]
    return log_z, mu, factors


def _check_base_scores(name, base_scores, shape):
    if base_scores is None:
        return np.zeros(shape)
    base_scores = np.asarray(base_scores, dtype=np.float64)
    if base_scores.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {base_scores.shape}.")
    if np.any(np.isnan(base_scores)) or np.any(base_scores == np.inf):
        raise ValueError(f"{name} holds NaN or +inf; use finite log-weights (-inf for h = 0).")
    if np.any(np.all(base_scores == -np.inf, axis=-1)):
        raise ValueError(f"{name} is -inf for every outcome of a problem; Z would be 0.")
    return base_scores


def partition_bound(features, theta, base_scores=None):
    """Quadratic upper bound on ``log Z`` over an enumerable set (Algorithm 1).

    Parameters
    ----------
    features : array_like, shape (n, d) or (t, n, d)
        ``f(y)`` of each of the ``n`` outcomes (of each of ``t`` problems).
    theta : array_like, shape (d,)
        Expansion point ``theta~``.
    base_scores : array_like, shape (n,) or (t, n), optional
        ``log h(y)`` (``-inf`` for ``h(y) = 0``); zeros by default.

    Returns
    -------
    log_z : float or ndarray, shape (t,)
        ``log Z(theta~)``.
    mu : ndarray, shape (d,) or (t, d)
        ``grad log Z(theta~)``.
    sigma : ndarray, shape (d, d) or (t, d, d)
        Curvature such that ``log Z(theta) <= log_z + delta @ mu
        + delta @ sigma @ delta / 2`` with ``delta = theta - theta~``.

    Notes
    -----
    The outcomes are taken in array order; the order changes ``sigma`` (every
    order gives a valid bound) but not ``log_z`` or ``mu``. Cost
    ``O(n d^2)`` per problem.

    Examples
    --------
    >>> f = np.array([[0.0], [1.0]])
    >>> log_z, mu, sigma = partition_bound(f, np.zeros(1))
    >>> round(float(log_z), 4), mu.round(2), sigma.round(3)
    (0.6931, array([0.5]), array([[0.25]]))
    """
    features = np.asarray(features, dtype=np.float64)
    if features.ndim not in (2, 3) or features.shape[-2] == 0:
        raise ValueError(
            f"features must have shape (n, d) or (t, n, d) with n >= 1, got {features.shape}."
        )
    theta = as_float_array("theta", theta, 1)
    if theta.shape[0] != features.shape[-1]:
        raise ValueError(
            f"theta has {theta.shape[0]} entries but features have d = {features.shape[-1]}."
        )
    check_finite("features", features)
    check_finite("theta", theta)
    base_scores = _check_base_scores("base_scores", base_scores, features.shape[:-1])
    log_z, mu, factors = _partition_factors(features, theta, base_scores)
    sigma = np.swapaxes(factors, -1, -2) @ factors
    return (float(log_z) if features.ndim == 2 else log_z), mu, sigma
