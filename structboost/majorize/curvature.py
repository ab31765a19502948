"""The bound's representation: :class:`QuadraticBound` and the low-rank curvature of Algorithm 4."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse.linalg

_RESIDUAL_RTOL = 1e-13
_PARTIAL_EIGEN = 4  # from_dense uses Lanczos when rank < d / _PARTIAL_EIGEN
_DENSE_EIGEN_DIM = 512  # ... and d is above this
#: Above this many parameters (and with a positive L2 penalty) the chain solvers stream the
#: curvature at rank :data:`DEFAULT_RANK` (Algorithm 4) instead of forming it ``d x d``.
LOW_RANK_DIM = 4096
#: Rank of the streamed curvature when :data:`LOW_RANK_DIM` is exceeded.
DEFAULT_RANK = 32


def default_rank(dim, lam):
    """:data:`DEFAULT_RANK` when ``dim > LOW_RANK_DIM`` and the L2 penalty ``lam > 0``, else None
    (dense curvature).
    """
    return DEFAULT_RANK if dim > LOW_RANK_DIM and lam > 0 else None



class LowRankCurvature:
    """Curvature ``V^T diag(s) V + diag(D)`` kept at rank ``k`` (Algorithm 4).

    Rank-one terms are added in blocks; the ``k`` largest directions are kept
    and the rest ``w w^T`` absorbed into the diagonal via
    ``w w^T <= ||w||_1 diag(|w|)``, so it stays an upper bound.

    Parameters
    ----------
    dim : int
    rank : int
        ``k``, the number of directions kept.

    Attributes
    ----------
    basis : ndarray, shape (r, d)
        ``V`` with ``r <= k`` orthonormal rows.
    scales : ndarray, shape (r,)
    diagonal : ndarray, shape (d,)
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
        """Best rank-``k`` part of a PSD ``sigma (d, d)``, the remainder bounded by its absolute row
        sums (Lanczos for large ``d``).
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
        """Add ``factors^T factors`` (``factors (b, d)``) in place, keeping the rank at most ``k``."""
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
        """An upper bound of the principal submatrix of coordinates ``index`` (bool ``(d,)`` or
        int).
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
        """Solve ``(V^T diag(s) V + diag(D) + shift I) x = rhs`` by Woodbury; ``D + shift`` must be
        positive.
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
