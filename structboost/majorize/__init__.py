"""Quadratic majorization of log-partition functions (Jebara & Choromanska, 2012).

For ``Z(theta) = sum_y h(y) exp(theta @ f(y))`` Algorithm 1 finds
``(z, mu, Sigma)`` with ``z = Z(theta~)``, ``mu = grad log Z(theta~)`` and

    log Z(theta) <= log z + (theta - theta~) @ mu
                    + 1/2 (theta - theta~) @ Sigma @ (theta - theta~).

Minimizing it plus an L2 penalty gives a monotone update (Algorithm 2).
:mod:`.partition` has Algorithm 1 over enumerable outcomes, :mod:`.chain`
Algorithm 3 on linear chains, :mod:`.curvature` the low-rank curvature of
Algorithm 4, :mod:`.solve` the update and its loop.

Notes
-----
Algorithm 1: with outcomes in a fixed order, ``alpha_k = h(y_k) exp(theta~ @
f(y_k))``, running sum ``z_{<k}``, running mean ``m_{<k}`` and ``l_k = f(y_k) -
m_{<k}``,

    Sigma = sum_k c(log(alpha_k / z_{<k})) l_k l_k^T,
    c(x) = tanh(x / 2) / (2 x),   c(0) = 1/4,   c(+-inf) = 0.

By induction, ``log(e^A + e^B) = A + log(1 + e^(B - A))`` and the
Jaakkola-Jordan inequality bounds ``log(1 + e^u)`` by a quadratic of
curvature ``c(xi)`` at ``xi = log(alpha_k / z_{<k})``.
"""

from .chain import ChainCRFTerm, chain_bound, chain_features, linear_chain_bound
from .curvature import DEFAULT_RANK, LOW_RANK_DIM, LowRankCurvature, QuadraticBound, default_rank
from .partition import curvature_coefficient, outcome_curvature, partition_bound
from .solve import BoundTerm, fit_majorize, majorize_step

__all__ = [
    "BoundTerm",
    "ChainCRFTerm",
    "DEFAULT_RANK",
    "LOW_RANK_DIM",
    "LowRankCurvature",
    "QuadraticBound",
    "chain_bound",
    "chain_features",
    "curvature_coefficient",
    "default_rank",
    "fit_majorize",
    "linear_chain_bound",
    "majorize_step",
    "outcome_curvature",
    "partition_bound",
]
