"""Algorithm 2 of Jebara & Choromanska (2012): majorize-minimize steps on a summed bound."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np
import scipy.linalg

from ._checks import as_float_array
from .curvature import LowRankCurvature, QuadraticBound


class BoundTerm(Protocol):
    """What :func:`fit_majorize` needs from a loss term.

    A term is ``sum_j w_j (log Z_j(theta) - theta @ f_j(y_j) - log h_j(y_j))``.
    """

    dim: int
    observed_features: np.ndarray  # shape (d,): sum_j w_j f_j(y_j)
    observed_score: float  # sum_j w_j log h_j(y_j)

    def bound(self, theta: np.ndarray, rank: int | None = None) -> QuadraticBound: ...


def _penalized_nll(bound, observed_features, observed_score, lam):
    theta = bound.theta
    return bound.log_z - theta @ observed_features - observed_score + 0.5 * lam * theta @ theta


def majorize_step(bound, observed_features, lam):
    """One majorization update (Algorithm 2 without constraints): the new parameters ``(d,)``.

    Minimizes ``bound(theta) - theta @ observed_features + lam/2 ||theta||^2``::

        theta <- theta~ - (Sigma + lam I)^-1 (mu - observed_features + lam theta~).

    Parameters
    ----------
    bound : QuadraticBound
        Summed bound at ``theta~ = bound.theta``.
    observed_features : ndarray, shape (d,)
    lam : float
        L2 penalty, ``>= 0`` (``> 0`` for a low-rank curvature).
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
    """Minimize a penalized log-linear NLL by majorization (Algorithms 2 and 4); ``J`` never
    increases.

    ``J(theta) = sum over terms of sum_j w_j (log Z_j(theta) - theta @ f_j(y_j)
    - log h_j(y_j)) + lam/2 ||theta||^2``.

    Parameters
    ----------
    loss_terms : sequence of BoundTerm
        All of dimension ``d``.
    theta0 : array_like, shape (d,)
    lam : float
        L2 penalty (``> 0`` with ``rank``).
    max_iter : int
    tol : float
        Stop when an update lowers ``J`` by at most ``tol * max(1, |J|)``.
    rank : int, optional
        Low-rank curvature of Algorithm 4.
    callback : callable, optional
        ``callback(iteration, theta, J)`` after each evaluation.

    Returns
    -------
    theta : ndarray, shape (d,)
    history : ndarray, shape (iterations + 1,)
        ``J`` at ``theta0`` and after every update.
    """
    terms: Sequence[BoundTerm] = list(loss_terms)
    if not terms:
        raise ValueError("loss_terms is empty; pass at least one term.")
    theta = as_float_array("theta0", theta0, 1)
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
