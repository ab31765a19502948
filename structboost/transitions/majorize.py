"""Quadratic majorization of log-partition functions (Jebara & Choromanska, 2012).

For a log-linear family ``Z(theta) = sum_y h(y) exp(theta @ f(y))`` the paper's
Algorithm 1 finds ``(z, mu, Sigma)`` with ``z = Z(theta~)``,
``mu = grad log Z(theta~)`` and, for every ``theta``,

    log Z(theta) <= log z + (theta - theta~) @ mu
                    + 1/2 (theta - theta~) @ Sigma @ (theta - theta~).

Minimizing this bound plus an L2 penalty in closed form gives a monotone
(majorize-minimize) update of ``theta`` (Algorithm 2). This module provides

- :func:`partition_bound`: Algorithm 1 over an enumerable outcome set;
- :func:`chain_bound` and :func:`linear_chain_bound`: Algorithm 3 (the
  junction-tree form) on a linear chain, for a CRF's transition, start and
  end scores, and for those plus node scores linear in the inputs;
- :class:`LowRankCurvature`: the low-rank-plus-diagonal curvature of
  Algorithm 4 with its Woodbury solve;
- :func:`majorize_step` and :func:`fit_majorize` with the loss term
  :class:`ChainCRFTerm` (and :class:`structboost.estimators.linear.LinearChainProblem`).

All of it is numpy, with the scalar part of Algorithm 1 for the chain
bounds in a numba kernel (:mod:`structboost.transitions._bound`); ``z`` is carried as
``log z`` throughout. :func:`chain_bound` and :func:`linear_chain_bound`
return exactly the Algorithm 3 bound of the general junction-tree recursion but in
``O(K^2 d)`` per row rather than ``O(K d^2)``: their features are indicators
(or inputs times indicators), so the ``d x d`` accumulation can wait until
after the backward pass (see :func:`_indicator_recursion`). With a ``rank``
they stream the rank-one terms into a :class:`LowRankCurvature` instead
(Algorithm 4, see :func:`_low_rank_recursion`): ``O(d k)`` memory.

Notes
-----
Algorithm 1, read off the paper and checked by derivation: process the
outcomes in a fixed order; with ``alpha_k = h(y_k) exp(theta~ @ f(y_k))``,
the running sum ``z_{<k}`` and running mean ``m_{<k}`` of the outcomes before
``k``, and ``l_k = f(y_k) - m_{<k}``,

    Sigma = sum_k c(log(alpha_k / z_{<k})) l_k l_k^T,
    c(x) = tanh(x / 2) / (2 x),   c(0) = 1/4,   c(+-inf) = 0.

By induction, with ``A`` the bound on the log of the first ``k - 1`` terms
and ``B = log alpha_k + delta @ f(y_k)``, ``log(e^A + e^B) = A + log(1 +
e^(B - A))``; ``B - A`` lies below its linear part (``Sigma`` so far is PSD
and ``log(1 + e^u)`` increases), and the Jaakkola-Jordan inequality bounds
``log(1 + e^u)`` by a quadratic of curvature ``c(xi)`` at
``xi = log(alpha_k / z_{<k})``.

Algorithm 3 on a chain (the rendering of the paper drops the ``+=``): the
recursion runs from the last position back to the first; for every label
``u`` of the previous position it runs Algorithm 1 over the labels ``v`` of
the current one with ``alpha = psi(u, v) z_next(v)`` and
``g = f(u, v) + mu_next(v)``. The children's curvatures must be covered by one
matrix ``U >= Sigma_next(v)`` for all ``v``. The paper takes
``U = sum_v Sigma_next(v)``, which counts the deeper levels ``K`` times at
every level, so the curvature of position ``t`` grows like ``K^(t-1)``
(``curvature="paper"``). Every ``Sigma_next(v)`` is a shared part plus a
part of its own, so ``U = shared + sum_v own(v)`` covers all of them too; it
unrolls to the plain sum of all the rank-one terms of all levels
(``curvature="shared"``, the default). Both are valid bounds; the shared one
is never looser and grows only linearly with the length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

from . import _bound

__all__ = [
    "DEFAULT_RANK",
    "LOW_RANK_DIM",
    "ChainCRFTerm",
    "LowRankCurvature",
    "QuadraticBound",
    "chain_bound",
    "chain_features",
    "curvature_coefficient",
    "default_rank",
    "fit_majorize",
    "linear_chain_bound",
    "majorize_step",
    "partition_bound",
]

_SERIES_CUTOFF = 1e-2
_CURVATURES = ("shared", "paper")
_OUTCOME_BLOCK = 256
_RESIDUAL_RTOL = 1e-13
_MAX_LOG_MULTIPLICITY = 600.0
_PARTIAL_EIGEN = 4  # from_dense uses Lanczos when rank < d / _PARTIAL_EIGEN
_DENSE_EIGEN_DIM = 512  # ... and d is above this
_MESSAGE_BUDGET = 2**24  # floats of stored messages per batch in _indicator_chain_bound
_FACTOR_BUDGET = 2**21  # floats of one level's factor rows per batch in _low_rank_recursion
LOW_RANK_DIM = 4096
"""Above this many parameters the chain solvers default to the low-rank bound.

:class:`structboost.estimators.linear.LinearChainCRF` (``solver="majorize"``) and the
``transition_solver="majorize"`` refit form the ``d x d`` curvature (two of them,
256 MiB at ``d = 4096``) up to this size and stream it at rank
:data:`DEFAULT_RANK` (Algorithm 4, ``O(d k)`` memory) above it, when the L2
penalty is positive (a low-rank curvature needs it to be invertible).
"""
DEFAULT_RANK = 32
"""Rank of the streamed curvature when :data:`LOW_RANK_DIM` is exceeded."""


def default_rank(dim, lam):
    """Rank of the curvature the chain solvers use for ``dim`` parameters.

    Parameters
    ----------
    dim : int
        ``d``.
    lam : float
        L2 penalty.

    Returns
    -------
    int or None
        :data:`DEFAULT_RANK` when ``dim > LOW_RANK_DIM`` and ``lam > 0``,
        else ``None`` (the dense curvature).
    """
    return DEFAULT_RANK if dim > LOW_RANK_DIM and lam > 0 else None


def curvature_coefficient(x):
    """Curvature ``c(x) = tanh(x / 2) / (2 x)`` of the bound's rank-one terms.

    Parameters
    ----------
    x : array_like
        Log ratios ``log(alpha / z)``; may hold ``+-inf``.

    Returns
    -------
    ndarray
        ``c(x)``, same shape as ``x``: even, ``1/4`` at 0 (a Taylor series
        below ``|x| = 1e-2``) and 0 at ``+-inf``.
    """
    x = np.abs(np.asarray(x, dtype=np.float64))
    small = np.minimum(x, _SERIES_CUTOFF) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.tanh(0.5 * x) / (2.0 * x)
    return np.where(x < _SERIES_CUTOFF, 0.25 - small / 48.0 + small * small / 480.0, ratio)


def _running_mean_operator(log_alpha):
    """Scalar part of Algorithm 1 for outcomes taken in their array order.

    Parameters
    ----------
    log_alpha : ndarray, shape (..., n)
        ``log(h(y) exp(theta~ @ f(y)))``; ``-inf`` marks an outcome with
        ``h(y) = 0``.

    Returns
    -------
    log_z : ndarray, shape (...)
        Log of the sum of ``alpha``.
    prob : ndarray, shape (..., n)
        ``alpha / z``.
    deviation : ndarray, shape (..., n, n)
        Lower-triangular ``A`` with ``l_k = sum_i A[k, i] g_i`` for outcome
        vectors ``g``: ``A[k, k] = 1`` and ``A[k, i] = -alpha_i / z_{<k}`` for
        ``i < k``.
    coefficient : ndarray, shape (..., n)
        ``c(log(alpha_k / z_{<k}))``; 0 for the first present outcome and for
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


def _partition_factors(features, theta, base_scores):
    """Algorithm 1 in factored form: ``Sigma = factors^T factors`` per problem.

    Outcomes are taken in blocks; each block starts with a pseudo-outcome
    carrying the sum and mean of the outcomes before it, which reproduces the
    sequential algorithm exactly in ``O(n * block)`` memory.

    Parameters
    ----------
    features : ndarray, shape (..., n, d)
    theta : ndarray, shape (d,)
    base_scores : ndarray, shape (..., n)
        ``log h(y)``.

    Returns
    -------
    log_z : ndarray, shape (...)
    mu : ndarray, shape (..., d)
    factors : ndarray, shape (..., n, d)
        Rows ``sqrt(c_k) l_k``.
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


def _as_float_array(name, value, ndim):
    array = np.ascontiguousarray(value, dtype=np.float64)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {array.shape}.")
    return array


def _check_finite(name, array):
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds NaN or infinite values; pass finite numbers.")


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
    theta = _as_float_array("theta", theta, 1)
    if theta.shape[0] != features.shape[-1]:
        raise ValueError(
            f"theta has {theta.shape[0]} entries but features have d = {features.shape[-1]}."
        )
    _check_finite("features", features)
    _check_finite("theta", theta)
    base_scores = _check_base_scores("base_scores", base_scores, features.shape[:-1])
    log_z, mu, factors = _partition_factors(features, theta, base_scores)
    sigma = np.swapaxes(factors, -1, -2) @ factors
    return (float(log_z) if features.ndim == 2 else log_z), mu, sigma


class LowRankCurvature:
    """Curvature ``V^T diag(s) V + diag(D)`` kept at rank ``k`` (Algorithm 4).

    Rank-one terms ``x x^T`` are added in blocks; after each block the
    ``k`` largest directions are kept and the rest ``w w^T`` (each scaled by
    its eigenvalue) is absorbed into the diagonal through
    ``w w^T <= ||w||_1 diag(|w|)``, so the result stays an upper bound of
    the exact sum. With blocks of one row this is Algorithm 4.

    Parameters
    ----------
    dim : int
        ``d``.
    rank : int
        ``k``, the number of directions kept.

    Attributes
    ----------
    basis : ndarray, shape (r, d)
        ``V`` with ``r <= k`` orthonormal rows.
    scales : ndarray, shape (r,)
        ``s >= 0``.
    diagonal : ndarray, shape (d,)
        ``D >= 0``.
    """

    def __init__(self, dim, rank):
        if int(rank) != rank or rank < 1:
            raise ValueError(f"rank must be a positive integer, got {rank!r}.")
        self.rank = int(rank)
        self.basis = np.zeros((0, dim))
        self.scales = np.zeros(0)
        self.diagonal = np.zeros(dim)

    @classmethod
    def from_dense(cls, sigma, rank):
        """Best rank-``k`` part of a PSD ``sigma``, the remainder bounded by a diagonal.

        Parameters
        ----------
        sigma : ndarray, shape (d, d)
        rank : int

        Returns
        -------
        LowRankCurvature
            ``V^T diag(s) V + diag(D) >= sigma``, with ``D`` the absolute row
            sums of ``sigma - V^T diag(s) V``.

        Notes
        -----
        With ``d > 512`` and ``rank`` under a quarter of it the top eigenpairs come from
        Lanczos iterations (:func:`scipy.sparse.linalg.eigsh`), ``O(d^2)``
        per iteration, instead of a full ``O(d^3)`` eigendecomposition.
        """
        d = sigma.shape[0]
        curvature = cls(d, rank)
        if d > _DENSE_EIGEN_DIM and _PARTIAL_EIGEN * curvature.rank < d:
            # Lanczos for the top directions; the remainder below is exact whatever their accuracy
            start = np.random.default_rng(0).standard_normal(d)
            eigenvalues, eigenvectors = scipy.sparse.linalg.eigsh(sigma, k=curvature.rank, which="LA", v0=start)
        else:
            eigenvalues, eigenvectors = np.linalg.eigh(sigma)
        keep = np.argsort(eigenvalues)[::-1][: curvature.rank]
        curvature.scales = np.clip(eigenvalues[keep], 0.0, None)
        curvature.basis = eigenvectors[:, keep].T
        remainder = sigma - curvature.basis.T @ (curvature.scales[:, None] * curvature.basis)
        curvature.diagonal = np.abs(remainder).sum(axis=1)
        return curvature

    def add_factors(self, factors):
        """Add ``factors^T factors`` in place, keeping the rank at most ``k``.

        Parameters
        ----------
        factors : ndarray, shape (b, d)
            Rows ``x`` of the rank-one terms ``x x^T``.
        """
        for start in range(0, factors.shape[0], self.rank):
            self._add_block(factors[start : start + self.rank])

    def _add_block(self, block):
        projection = block @ self.basis.T  # shape (b, r)
        residual = block - projection @ self.basis  # shape (b, d), orthogonal to V
        _, singular, right = np.linalg.svd(residual, full_matrices=False)
        # the residual's directions, shape (q, d)
        fresh = right[singular > _RESIDUAL_RTOL * max(singular.max(initial=0.0), 1.0)]
        frame = np.vstack([self.basis, fresh])  # shape (r + q, d); block = coords @ frame
        coords = np.hstack([projection, residual @ fresh.T])
        inner = coords.T @ coords
        inner[: self.scales.size, : self.scales.size] += np.diag(self.scales)
        eigenvalues, rotation = np.linalg.eigh(inner)
        eigenvalues = np.clip(eigenvalues[::-1], 0.0, None)
        directions = rotation[:, ::-1].T @ frame
        kept = self.rank
        dropped = np.abs(directions[kept:])
        # w w^T <= ||w||_1 diag(|w|) for every dropped direction w
        self.diagonal += (eigenvalues[kept:] * dropped.sum(axis=1)) @ dropped
        self.basis = directions[:kept]
        self.scales = eigenvalues[:kept]

    def add(self, other):
        """Add another low-rank curvature in place (its directions as factors)."""
        self.diagonal += other.diagonal
        self.add_factors(np.sqrt(other.scales)[:, None] * other.basis)

    def take(self, index):
        """The curvature on a subset of the coordinates (a principal submatrix).

        Parameters
        ----------
        index : ndarray of bool, shape (d,), or of int
            Coordinates kept.

        Returns
        -------
        LowRankCurvature
            An upper bound of the same submatrix of the bounded curvature. Its
            basis rows stay orthonormal when they vanish on the dropped
            coordinates (as for forbidden transitions); :meth:`solve` and
            :meth:`matvec` do not need them to.
        """
        part = LowRankCurvature(self.diagonal[index].size, self.rank)
        part.basis = self.basis[:, index]
        part.scales = self.scales.copy()
        part.diagonal = self.diagonal[index]
        return part

    def matvec(self, x):
        """``(V^T diag(s) V + diag(D)) x`` for ``x`` of shape (d,)."""
        return self.basis.T @ (self.scales * (self.basis @ x)) + self.diagonal * x

    def to_dense(self):
        """The represented matrix, shape (d, d)."""
        return self.basis.T @ (self.scales[:, None] * self.basis) + np.diag(self.diagonal)

    def solve(self, rhs, shift):
        """Solve ``(V^T diag(s) V + diag(D) + shift I) x = rhs`` by Woodbury.

        Parameters
        ----------
        rhs : ndarray, shape (d,)
        shift : float
            Must make ``D + shift`` positive (``lam > 0`` in practice).

        Returns
        -------
        ndarray, shape (d,)
        """
        inverse_diagonal = 1.0 / (self.diagonal + shift)
        root = np.sqrt(self.scales)
        scaled = root[:, None] * self.basis  # shape (r, d): S^(1/2) V
        capacitance = np.eye(root.size) + (scaled * inverse_diagonal) @ scaled.T
        y = inverse_diagonal * rhs
        return y - inverse_diagonal * (scaled.T @ np.linalg.solve(capacitance, scaled @ y))


@dataclass(frozen=True)
class QuadraticBound:
    """A summed bound ``log Z(theta) <= log_z + delta @ mu + delta @ curvature @ delta / 2``.

    Attributes
    ----------
    theta : ndarray, shape (d,)
        Expansion point ``theta~``; ``delta = theta - theta~``.
    log_z : float
        Sum of the (weighted) ``log Z`` at ``theta~``: exact, not a bound.
    mu : ndarray, shape (d,)
        Sum of the (weighted) gradients of ``log Z`` at ``theta~``.
    curvature : ndarray, shape (d, d), or LowRankCurvature
    """

    theta: np.ndarray
    log_z: float
    mu: np.ndarray
    curvature: np.ndarray | LowRankCurvature

    def value(self, theta):
        """The bound at ``theta`` (shape (d,)), a float."""
        delta = np.asarray(theta, dtype=np.float64) - self.theta
        if isinstance(self.curvature, LowRankCurvature):
            curved = self.curvature.matvec(delta)
        else:
            curved = self.curvature @ delta
        return float(self.log_z + delta @ self.mu + 0.5 * delta @ curved)


class BoundTerm(Protocol):
    """What :func:`fit_majorize` needs from a loss term.

    A term is ``sum_j w_j (log Z_j(theta) - theta @ f_j(y_j) - log h_j(y_j))``.
    """

    dim: int
    observed_features: np.ndarray  # shape (d,): sum_j w_j f_j(y_j)
    observed_score: float  # sum_j w_j log h_j(y_j)

    def bound(self, theta: np.ndarray, rank: int | None = None) -> QuadraticBound: ...


def _check_weights(weights, count, what):
    if weights is None:
        return np.ones(count)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (count,):
        raise ValueError(f"weights must have shape ({count},), one per {what}, got {weights.shape}.")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be finite and non-negative.")
    return weights


def _multiplicity(curvature, num_labels, t):
    """Weight of the curvature of the level joining positions ``t - 1`` and ``t``."""
    return 1.0 if curvature == "shared" else float(num_labels) ** (t - 1)


def _backward_pass(log_node, inputs, theta_T, weights, curvature, visit):
    """The backward recursion of Algorithm 3 on ``s`` chains with indicator features.

    The features of labelling ``y`` are, in this order, ``x_t (x) e_(y_t)``
    summed over positions (``index j * K + v`` for input ``j`` and label
    ``v``), the transition counts (``p K + a K + b``), the start label
    (``p K + K^2 + v``) and the end label (``p K + K^2 + K + v``):
    ``d = p K + K^2 + 2 K``. Level ``t`` (last position first) runs
    Algorithm 1 over the labels ``v`` of position ``t`` for every label ``u``
    of position ``t - 1`` (one separator at ``t = 0``), with outcome rows
    ``g(u, v) = B_t[v] + e_(edge(u, v))``: the stems ``B_t`` (``K x d``, the
    node features of ``t`` plus the expected features of the suffix) and the
    transition indicator.

    Parameters
    ----------
    log_node : ndarray, shape (s, T, K)
        Node scores at ``theta~`` (base scores, ``x_t @ W`` and the start and
        end scores).
    inputs : ndarray, shape (s, T, p)
        ``x_t``; ``p`` may be 0.
    theta_T : ndarray, shape (K, K)
    weights : ndarray, shape (s,)
    curvature : {"shared", "paper"}
    visit : callable
        Called per level as ``visit(t, stems, prob, blocks, block_sum)`` with
        ``stems (s, K, d)`` (read only), ``prob (s, U, K)`` the conditional
        probabilities ``P(v | u)``, ``blocks (s, K, U, K)`` with
        ``blocks[j, w, u, v] = weights_t[j] M_u[v, w]`` (the curvature of
        separator ``u`` is ``G_u^T M_u G_u``; ``visit`` may overwrite it) and
        ``block_sum (s, K, K)`` its sum over ``u``.

    Returns
    -------
    log_z : ndarray, shape (s,)
    mu : ndarray, shape (s, d)
    """
    s, length, k = log_node.shape
    p = inputs.shape[-1]
    d = p * k + k * k + 2 * k
    labels = np.arange(k)
    node_index = np.arange(p)[:, None] * k + labels  # shape (p, K)
    edges = p * k + labels[:, None] * k + labels  # shape (K, K)
    start_index, end_index = p * k + k * k + labels, p * k + k * k + k + labels
    mu = np.zeros((s, k, d))
    log_z = np.zeros((s, k))
    for t in range(length - 1, -1, -1):
        stems = mu  # B_t: mu plus the node features of position t, in place
        stems[:, labels, node_index] += inputs[:, t, :, None]
        if t == 0:
            stems[:, labels, start_index] += 1.0
            log_alpha = (log_node[:, 0] + log_z)[:, None, :]
        else:
            log_alpha = theta_T + (log_node[:, t] + log_z)[:, None, :]
        if t == length - 1:
            stems[:, labels, end_index] += 1.0
        separators = log_alpha.shape[1]
        log_z = np.empty((s, separators))
        prob = np.empty((s, separators, k))
        blocks = np.empty((s, k, separators, k))  # [j, w, u, v] = M_u[v, w] of chain j
        block_sum = np.empty((s, k, k))  # N_t
        weight = weights if t == 0 else _multiplicity(curvature, k, t) * weights
        _bound.running_curvature(np.ascontiguousarray(log_alpha), weight, log_z, prob, blocks, block_sum)
        visit(t, stems, prob, blocks, block_sum)
        mu = prob @ stems
        if t > 0:
            mu[:, labels[:, None], edges] += prob
    return log_z[:, 0], mu[:, 0]


def _indicator_recursion(log_node, inputs, theta_T, weights, curvature, sigma, cross):
    """Algorithm 3 for a CRF with linear node scores and indicator transitions, dense curvature.

    This gives the same ``log_z``, ``mu`` and ``sigma`` as the general
    junction-tree recursion with the features of :func:`_backward_pass`, in
    ``O(K^2 d + K^4)`` per position instead of ``O(K d^2)``. Level ``t`` adds
    ``sym(B_t^T C_t) + E^T M E`` with ``B_t`` (``K x d``) the stems,
    ``C_t = N_t B_t + 2 X_t^T`` and ``E^T M E`` a ``K^2 x K^2`` block on the
    transition indices. The stems follow
    ``B_t = S_t + P_(t+1) B_(t+1)`` with ``P`` the conditional probabilities
    of a level and ``S_t`` the sparse local features (the node features of
    ``t`` plus the transitions out of ``t``, weighted by ``P_(t+1)``), so
    ``sum_t B_t^T C_t = sum_t S_t^T Z_t`` with the forward recursion
    ``Z_t = C_t + P_t^T Z_(t-1)``. The ``C_t`` are stored on the way back
    and turned into the ``Z_t`` on the way forward; the dense products are
    ``K x K`` by ``K x d`` per chain, plus one ``p x (s T)`` by
    ``(s T) x K d`` product per batch for the node rows.

    Parameters
    ----------
    log_node, inputs, theta_T, weights, curvature
        As in :func:`_backward_pass`.
    sigma : ndarray, shape (d, d)
        Accumulator of the symmetric part, updated in place.
    cross : ndarray, shape (d, d)
        Accumulator of ``sum S_t^T Z_t``, updated in place; the curvature is
        ``sigma + sym(cross)``.

    Returns
    -------
    log_z : ndarray, shape (s,)
    mu : ndarray, shape (s, d)
    """
    s, length, k = log_node.shape
    p = inputs.shape[-1]
    d = sigma.shape[0]
    labels = np.arange(k)
    edges = p * k + labels[:, None] * k + labels  # shape (K, K)
    transitions = slice(p * k, p * k + k * k)
    start_index, end_index = p * k + k * k + labels, p * k + k * k + k + labels
    probs = [None] * length
    messages = np.empty((length, s, k, d))  # C_t on the way back, then Z_t

    def visit(t, stems, prob, blocks, block_sum):
        np.matmul(block_sum, stems, out=messages[t])  # C_t = N_t B_t + 2 X_t^T
        if t > 0:
            sigma[edges[:, :, None], edges[:, None, :]] += blocks.sum(axis=0).transpose(1, 2, 0)
            blocks *= 2.0
            messages[t][:, :, transitions] += blocks.reshape(s, k, k * k)
        probs[t] = prob

    log_z, mu = _backward_pass(log_node, inputs, theta_T, weights, curvature, visit)
    for t in range(length):
        if t > 0:
            messages[t] += np.swapaxes(probs[t], 1, 2) @ messages[t - 1]  # Z_t
        if t < length - 1:
            # row (v, w) of the transitions: sum over chains of P_(t+1)[v, w] Z_t[v]
            _bound.add_weighted_rows(probs[t + 1], messages[t], cross[transitions].reshape(k, k, d))
    cross[start_index] += messages[0].sum(axis=0)
    cross[end_index] += messages[-1].sum(axis=0)
    if p:
        # rows (j, v) of the node weights: sum over chains and positions of x_t[j] Z_t[v]
        rows = np.swapaxes(inputs, 0, 1).reshape(length * s, p)
        cross[: p * k] += (rows.T @ messages.reshape(length * s, k * d)).reshape(p * k, d)
    return log_z, mu


def _low_rank_recursion(log_node, inputs, theta_T, weights, curvature, low_rank):
    """Algorithm 3 with the rank-one terms streamed into a low-rank curvature (Algorithm 4).

    Level ``t`` of chain ``j`` adds ``sum_u G_u^T M_u G_u`` (the rank-one
    terms of Algorithm 1 over ``v`` for each separator ``u``, see
    :func:`_backward_pass`). With ``M_u = L_u L_u^T`` (an eigendecomposition
    of the ``K x K`` matrix), the rows of ``L_u^T G_u`` are ``K`` exact
    factors per separator; they go straight into ``low_rank`` in blocks, so
    no ``d x d`` matrix is formed. Without truncation the sum equals the
    dense curvature of :func:`_indicator_recursion` (same ``"shared"`` or
    ``"paper"`` combination).

    Parameters
    ----------
    log_node, inputs, theta_T, weights, curvature
        As in :func:`_backward_pass`.
    low_rank : LowRankCurvature
        Accumulator, updated in place.

    Returns
    -------
    log_z : ndarray, shape (s,)
    mu : ndarray, shape (s, d)

    Notes
    -----
    ``O(K^2 d)`` work to form the factors and ``O(K^2 d r)`` to stream them
    per position (``r`` the rank), ``O(s K^2 d)`` temporary memory.
    """
    k = log_node.shape[2]
    p = inputs.shape[-1]
    transitions = slice(p * k, p * k + k * k)

    def visit(t, stems, prob, blocks, block_sum):
        eigenvalues, eigenvectors = np.linalg.eigh(blocks.transpose(0, 2, 3, 1))  # M_u[v, w]
        # shape (s, U, r, v): row r of L_u^T
        factor = np.swapaxes(eigenvectors * np.sqrt(np.clip(eigenvalues, 0.0, None))[:, :, None, :], 2, 3)
        rows = factor @ stems[:, None]  # shape (s, U, K, d): L_u^T B_t
        if t > 0:
            # L_u^T E_u: entry (r, edge(u, v)) is L_u[v, r]
            edge_part = rows[..., transitions].reshape(rows.shape[:3] + (k, k))
            for u in range(k):
                edge_part[:, u, :, u, :] += factor[:, u]
            rows[..., transitions] = edge_part.reshape(rows.shape[:3] + (k * k,))
        low_rank.add_factors(rows[eigenvalues > 0])  # M_u has rank <= K - 1: skip the zero rows

    return _backward_pass(log_node, inputs, theta_T, weights, curvature, visit)


def _check_curvature(curvature, num_labels=1, max_length=1):
    if curvature not in _CURVATURES:
        raise ValueError(f"curvature must be one of {_CURVATURES}, got {curvature!r}.")
    if curvature == "paper" and (max_length - 2) * np.log(num_labels) > _MAX_LOG_MULTIPLICITY:
        raise ValueError(
            f'curvature="paper" weighs position t by K^(t-1), which overflows for K = {num_labels} '
            f'and length {max_length}; use curvature="shared".'
        )


def _check_chain_data(unary, lengths):
    unary = _as_float_array("unary", unary, 2)
    _check_finite("unary", unary)
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(
            f"lengths must be a 1-d integer array, got dtype {lengths.dtype} and shape {lengths.shape}."
        )
    if np.any(lengths < 1):
        raise ValueError("lengths holds an empty or negative sequence length; every sequence needs >= 1 row.")
    if lengths.sum() != unary.shape[0]:
        raise ValueError(
            f"lengths sum to {lengths.sum()} but unary has {unary.shape[0]} rows; they must match."
        )
    return unary, lengths.astype(np.int64)


def _check_chain_parameters(k, theta_T, theta_start, theta_end):
    theta_T = _as_float_array("theta_T", theta_T, 2)
    theta_start = _as_float_array("theta_start", theta_start, 1)
    theta_end = _as_float_array("theta_end", theta_end, 1)
    if theta_T.shape != (k, k) or theta_start.shape != (k,) or theta_end.shape != (k,):
        raise ValueError(
            f"with K = {k} labels theta_T must be ({k}, {k}) and theta_start, theta_end ({k},); "
            f"got {theta_T.shape}, {theta_start.shape}, {theta_end.shape}."
        )
    for name, array in (("theta_T", theta_T), ("theta_start", theta_start), ("theta_end", theta_end)):
        if np.isnan(array).any() or np.isposinf(array).any():
            raise ValueError(f"{name} holds NaN or +inf; pass finite scores (-inf for a forbidden move).")
    return theta_T, theta_start, theta_end


def _take_rows(inputs, rows):
    """Rows of a dense or scipy sparse ``(n, p)`` matrix as a dense array."""
    taken = inputs[rows]
    return taken.toarray() if scipy.sparse.issparse(taken) else np.asarray(taken)


def _indicator_chain_bound(
    unary, inputs, lengths, theta_T, theta_start, theta_end, weights, curvature, batch_size, rank=None
):
    """Bound of a batch of chains, grouped by length.

    ``unary (n, K)`` holds the node scores at ``theta~`` (with ``inputs @ W``),
    ``inputs`` is ``(n, p)`` dense or sparse; everything is validated. With
    ``rank`` None the curvature is dense (:func:`_indicator_recursion`),
    otherwise a :class:`LowRankCurvature` streamed by :func:`_low_rank_recursion`.
    """
    k = unary.shape[1]
    p = inputs.shape[1]
    d = p * k + k * k + 2 * k
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    log_z = np.empty(lengths.size)
    mu = np.zeros(d)
    if rank is None:
        sigma = np.zeros((d, d))
        cross = np.zeros((d, d))
    else:
        low_rank = LowRankCurvature(d, rank)
    for length in np.unique(lengths):
        members = np.flatnonzero(lengths == length)
        if batch_size is not None:
            step = batch_size
        elif rank is None:  # the stored messages
            step = max(1, _MESSAGE_BUDGET // (length * k * d))
        else:  # one level's factor rows
            step = max(1, _FACTOR_BUDGET // (k * k * d))
        for start in range(0, members.size, step):
            batch = members[start : start + step]
            rows = offsets[batch][:, None] + np.arange(length)  # shape (s, T)
            log_node = unary[rows]
            log_node[:, 0] += theta_start
            log_node[:, -1] += theta_end
            batch_inputs = _take_rows(inputs, rows.ravel()).reshape(batch.size, length, p)
            if rank is None:
                batch_log_z, batch_mu = _indicator_recursion(
                    log_node, batch_inputs, theta_T, weights[batch], curvature, sigma, cross
                )
            else:
                batch_log_z, batch_mu = _low_rank_recursion(
                    log_node, batch_inputs, theta_T, weights[batch], curvature, low_rank
                )
            log_z[batch] = batch_log_z
            mu += weights[batch] @ batch_mu
    if rank is None:
        sigma += 0.5 * (cross + cross.T)
        return log_z, mu, sigma
    return log_z, mu, low_rank


def _check_rank(rank):
    if rank is not None and (int(rank) != rank or rank < 1):
        raise ValueError(f"rank must be a positive integer or None, got {rank!r}.")


def _check_batch_size(batch_size):
    if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}.")


def chain_bound(
    unary, lengths, theta_T, theta_start, theta_end, *,
    weights=None, curvature="shared", batch_size=None, rank=None,
):
    """Algorithm 3 bound on a linear-chain CRF's log-partition in its transition scores.

    Sequence ``j`` with labels ``y`` scores ``sum_t unary[t, y_t] +
    sum_t theta_T[y_(t-1), y_t] + theta_start[y_0] + theta_end[y_last]``.
    The unary scores are fixed base scores; the parameters are
    ``theta = [theta_T.ravel(), theta_start, theta_end]`` (``d = K^2 + 2K``).

    Parameters
    ----------
    unary : array_like, shape (n, K)
        Node scores of all rows, sequences contiguous.
    lengths : array_like of int, shape (m,)
        Rows per sequence; sums to ``n``.
    theta_T : array_like, shape (K, K)
        ``theta_T[a, b]`` scores label ``a`` followed by label ``b``;
        ``-inf`` forbids the move (as in ``theta_start``, ``theta_end``):
        its entries of ``mu`` and rows of ``sigma`` are zero, so the bound
        holds on the remaining coordinates.
    theta_start, theta_end : array_like, shape (K,)
    weights : array_like, shape (m,), optional
        Non-negative weight of each sequence in ``mu`` and ``sigma``.
    curvature : {"shared", "paper"}
        ``"paper"`` combines children as the paper's Algorithm 3 does
        (curvature growing like ``K^T``); see the module notes.
    batch_size : int, optional
        Sequences processed together; by default as many as keep the stored
        messages (``batch_size * T * K * d`` floats) near 128 MB, or with
        ``rank`` the ``batch_size * K^2 * d`` factor rows of one position
        near 16 MB (at least one sequence).
    rank : int, optional
        Stream the curvature's rank-one terms into a :class:`LowRankCurvature`
        with this many directions (Algorithm 4): ``O(d rank)`` memory, never a
        ``d x d`` matrix; the result is still an upper bound. ``None``: the
        exact dense curvature.

    Returns
    -------
    log_z : ndarray, shape (m,)
        ``log Z`` of each sequence at the given parameters.
    mu : ndarray, shape (d,)
        Weighted sum over sequences of the expected features.
    sigma : ndarray, shape (d, d), or LowRankCurvature
        Weighted sum of the per-sequence bound curvatures (an upper bound of
        it, at low rank, with ``rank``).

    Notes
    -----
    ``mu`` is the gradient of the weighted sum of ``log Z``. The result is
    that of the general Algorithm 3 recursion with indicator features, computed
    in ``O(K^2 d + K^4)`` per row (``O(K^4)``) instead of ``O(K d^2)``.
    """
    unary, lengths = _check_chain_data(unary, lengths)
    k = unary.shape[1]
    _check_curvature(curvature, k, lengths.max())
    theta_T, theta_start, theta_end = _check_chain_parameters(k, theta_T, theta_start, theta_end)
    weights = _check_weights(weights, lengths.size, "sequence")
    _check_batch_size(batch_size)
    _check_rank(rank)
    return _indicator_chain_bound(
        unary, np.zeros((unary.shape[0], 0)), lengths, theta_T, theta_start, theta_end, weights, curvature,
        batch_size, rank,
    )


def linear_chain_bound(
    X, lengths, coef, theta_T, theta_start, theta_end, *,
    weights=None, curvature="shared", batch_size=None, rank=None,
):
    """Algorithm 3 bound on a linear-chain CRF with node scores linear in the inputs.

    Sequence ``j`` with labels ``y`` scores ``sum_t X[t] @ coef[:, y_t] +
    sum_t theta_T[y_(t-1), y_t] + theta_start[y_0] + theta_end[y_last]``;
    the parameters are ``theta = [coef.ravel(), theta_T.ravel(),
    theta_start, theta_end]`` (``d = p K + K^2 + 2K``). A column of ones in
    ``X`` gives per-label biases.

    Parameters
    ----------
    X : array_like or scipy sparse matrix, shape (n, p)
        Inputs of all rows, sequences contiguous.
    lengths : array_like of int, shape (m,)
    coef : array_like, shape (p, K)
    theta_T : array_like, shape (K, K)
    theta_start, theta_end : array_like, shape (K,)
    weights : array_like, shape (m,), optional
    curvature : {"shared", "paper"}
    batch_size, rank : int, optional
        As in :func:`chain_bound`.

    Returns
    -------
    log_z : ndarray, shape (m,)
    mu : ndarray, shape (d,)
    sigma : ndarray, shape (d, d), or LowRankCurvature

    Notes
    -----
    Cost ``O(K^2 d + K p d + K^4)`` per row and ``d^2`` memory; with
    ``rank`` ``O(K^2 d rank)`` per row and ``O(d rank)`` memory.
    """
    X = _check_inputs(X)
    coef = _as_float_array("coef", coef, 2)
    _check_finite("coef", coef)
    if coef.shape[0] != X.shape[1]:
        raise ValueError(f"coef has {coef.shape[0]} rows but X has {X.shape[1]} columns; they must match.")
    unary, lengths = _check_chain_data(np.asarray(X @ coef), lengths)
    k = unary.shape[1]
    _check_curvature(curvature, k, lengths.max())
    theta_T, theta_start, theta_end = _check_chain_parameters(k, theta_T, theta_start, theta_end)
    weights = _check_weights(weights, lengths.size, "sequence")
    _check_batch_size(batch_size)
    _check_rank(rank)
    return _indicator_chain_bound(
        unary, X, lengths, theta_T, theta_start, theta_end, weights, curvature, batch_size, rank
    )


def _check_inputs(X):
    """``X`` as a float64 dense array or CSR matrix with finite entries."""
    if scipy.sparse.issparse(X):
        X = scipy.sparse.csr_matrix(X, dtype=np.float64)
        values = X.data
    else:
        X = _as_float_array("X", X, 2)
        values = X
    _check_finite("X", values)
    return X


def chain_features(labels, lengths, num_labels, weights=None):
    """Weighted counts of transitions, start and end labels of labelled sequences.

    Parameters
    ----------
    labels : array_like of int, shape (n,)
        Labels ``0..K-1`` of all rows, sequences contiguous.
    lengths : array_like of int, shape (m,)
    num_labels : int
        ``K``.
    weights : array_like, shape (m,), optional

    Returns
    -------
    ndarray, shape (K^2 + 2K,)
        ``sum_j w_j f(y_j)`` in the order of :func:`chain_bound`'s ``theta``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"labels must be a 1-d integer array, got dtype {labels.dtype} and shape {labels.shape}."
        )
    k = int(num_labels)
    if np.any((labels < 0) | (labels >= k)):
        raise ValueError(f"labels must lie in 0..{k - 1}.")
    if np.sum(lengths) != labels.size:
        raise ValueError(f"lengths sum to {np.sum(lengths)} but there are {labels.size} labels; they must match.")
    _, lengths = _check_chain_data(np.zeros((labels.size, 1)), lengths)
    weights = _check_weights(weights, lengths.size, "sequence")
    ends = np.cumsum(lengths)
    starts = ends - lengths
    row_weights = np.repeat(weights, lengths)
    inner = np.ones(labels.size, dtype=bool)
    inner[starts] = False  # rows that have a predecessor in their sequence
    rows = np.flatnonzero(inner)
    pairs = labels[rows - 1] * k + labels[rows]
    transitions = np.bincount(pairs, weights=row_weights[rows], minlength=k * k)
    start = np.bincount(labels[starts], weights=weights, minlength=k)
    end = np.bincount(labels[ends - 1], weights=weights, minlength=k)
    return np.concatenate([transitions, start, end])


class ChainCRFTerm:
    """Linear-chain CRF NLL in its transition, start and end scores, bounded by Algorithm 3.

    Parameters
    ----------
    unary : array_like, shape (n, K)
        Fixed node scores (for boosting: the current margins).
    lengths : array_like of int, shape (m,)
    labels : array_like of int, shape (n,)
    weights : array_like, shape (m,), optional
    curvature : {"shared", "paper"}
    batch_size : int, optional
        As in :func:`chain_bound`.

    Notes
    -----
    ``theta = [theta_T.ravel(), theta_start, theta_end]``. With ``rank`` the
    curvature is streamed at that rank (:func:`chain_bound`, Algorithm 4).
    """

    def __init__(self, unary, lengths, labels, weights=None, curvature="shared", batch_size=None):
        self.unary, self.lengths = _check_chain_data(unary, lengths)
        k = self.unary.shape[1]
        _check_curvature(curvature, k, self.lengths.max())
        self.num_labels = k
        self.weights = _check_weights(weights, self.lengths.size, "sequence")
        self.dim = k * k + 2 * k
        self.observed_features = chain_features(labels, self.lengths, k, self.weights)
        labels = np.asarray(labels)
        gold = self.unary[np.arange(labels.size), labels]
        per_sequence = np.add.reduceat(gold, np.cumsum(self.lengths) - self.lengths)
        self.observed_score = float(per_sequence @ self.weights)
        self.curvature = curvature
        self.batch_size = batch_size

    def split(self, theta):
        """``theta`` (d,) -> ``(theta_T (K, K), theta_start (K,), theta_end (K,))``."""
        k = self.num_labels
        return theta[: k * k].reshape(k, k), theta[k * k : k * k + k], theta[k * k + k :]

    def bound(self, theta, rank=None):
        """Summed Algorithm 3 bound at ``theta`` (shape (d,)).

        Returns
        -------
        QuadraticBound
        """
        theta = _as_float_array("theta", theta, 1)
        log_z, mu, curvature = chain_bound(
            self.unary,
            self.lengths,
            *self.split(theta),
            weights=self.weights,
            curvature=self.curvature,
            batch_size=self.batch_size,
            rank=rank,
        )
        return QuadraticBound(theta, float(self.weights @ log_z), mu, curvature)


def _penalized_nll(bound, observed_features, observed_score, lam):
    theta = bound.theta
    return bound.log_z - theta @ observed_features - observed_score + 0.5 * lam * theta @ theta


def majorize_step(bound, observed_features, lam):
    """One majorization update (Algorithm 2 without constraints).

    Minimizes ``bound(theta) - theta @ observed_features + lam/2 ||theta||^2``:

        theta <- theta~ - (Sigma + lam I)^-1 (mu - observed_features + lam theta~).

    Parameters
    ----------
    bound : QuadraticBound
        Summed bound at ``theta~ = bound.theta``.
    observed_features : ndarray, shape (d,)
        ``sum_j w_j f_j(y_j)``.
    lam : float
        L2 penalty, ``>= 0`` (``> 0`` for a low-rank curvature).

    Returns
    -------
    ndarray, shape (d,)
        The new parameters; the penalized NLL does not increase.
    """
    if not lam >= 0:
        raise ValueError(f"lam must be >= 0, got {lam!r}.")
    theta = bound.theta
    gradient = bound.mu - observed_features + lam * theta
    curvature = bound.curvature
    if isinstance(curvature, LowRankCurvature):
        if lam <= 0 and np.any(curvature.diagonal <= 0):
            raise ValueError("a low-rank curvature needs lam > 0 to be invertible; pass a positive lam.")
        return theta - curvature.solve(gradient, lam)
    system = curvature + lam * np.eye(theta.size)
    try:
        step = scipy.linalg.cho_solve(scipy.linalg.cho_factor(system), gradient)
    except np.linalg.LinAlgError:
        # singular without penalty: the minimum-norm minimizer still decreases the bound
        step = np.linalg.lstsq(system, gradient, rcond=None)[0]
    return theta - step


def _summed_bound(terms, theta, rank):
    bounds = [term.bound(theta, rank) for term in terms]
    if rank is None:
        curvature = sum(b.curvature for b in bounds)
    else:
        curvature = bounds[0].curvature
        for b in bounds[1:]:
            curvature.add(b.curvature)
    return QuadraticBound(theta, sum(b.log_z for b in bounds), sum(b.mu for b in bounds), curvature)


def fit_majorize(loss_terms, theta0, lam, max_iter=100, tol=1e-9, rank=None, callback=None):
    """Minimize a penalized log-linear NLL by majorization (Algorithms 2 and 4).

    The objective is ``J(theta) = sum over terms of sum_j w_j (log Z_j(theta)
    - theta @ f_j(y_j) - log h_j(y_j)) + lam/2 ||theta||^2``. Each iteration
    bounds every term at the current ``theta`` and jumps to the bound's
    minimizer, so ``J`` never increases.

    Parameters
    ----------
    loss_terms : sequence of BoundTerm
        E.g. :class:`ChainCRFTerm`, :class:`structboost.estimators.linear.LinearChainProblem`;
        all of dimension ``d``.
    theta0 : array_like, shape (d,)
    lam : float
        L2 penalty (``> 0`` with ``rank``).
    max_iter : int
        Most updates.
    tol : float
        Stop when an update lowers ``J`` by at most ``tol * max(1, |J|)``.
    rank : int, optional
        Use the low-rank curvature of Algorithm 4 with this many directions.
    callback : callable, optional
        Called as ``callback(iteration, theta, J)`` after each evaluation.

    Returns
    -------
    theta : ndarray, shape (d,)
    history : ndarray, shape (iterations + 1,)
        ``J`` at ``theta0`` and after every update; the last entry belongs to
        the returned ``theta``.
    """
    terms: Sequence[BoundTerm] = list(loss_terms)
    if not terms:
        raise ValueError("loss_terms is empty; pass at least one term.")
    theta = _as_float_array("theta0", theta0, 1)
    if any(term.dim != theta.size for term in terms):
        raise ValueError(
            f"every term must have dimension {theta.size} (theta0), got {[t.dim for t in terms]}."
        )
    if rank is not None and not lam > 0:
        raise ValueError(f"low-rank majorization needs lam > 0, got {lam!r}.")
    observed_features = sum(term.observed_features for term in terms)
    observed_score = sum(term.observed_score for term in terms)
    history = []
    for iteration in range(max_iter + 1):
        bound = _summed_bound(terms, theta, rank)
        objective = _penalized_nll(bound, observed_features, observed_score, lam)
        history.append(objective)
        if callback is not None:
            callback(iteration, theta, objective)
        converged = iteration > 0 and history[-2] - objective <= tol * max(1.0, abs(objective))
        if converged or iteration == max_iter:
            break
        theta = majorize_step(bound, observed_features, lam)
    return theta, np.asarray(history)
