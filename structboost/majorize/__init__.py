"""Quadratic majorization of log-partition functions (Jebara & Choromanska, 2012).

For a log-linear family ``Z(theta) = sum_y h(y) exp(theta @ f(y))`` the paper's
Algorithm 1 finds ``(z, mu, Sigma)`` with ``z = Z(theta~)``,
``mu = grad log Z(theta~)`` and, for every ``theta``,

    log Z(theta) <= log z + (theta - theta~) @ mu
                    + 1/2 (theta - theta~) @ Sigma @ (theta - theta~).

Minimizing this bound plus an L2 penalty in closed form gives a monotone
(majorize-minimize) update of ``theta`` (Algorithm 2). This package provides

- :mod:`.partition`: :func:`partition_bound`, Algorithm 1 over an
  enumerable outcome set, and :func:`outcome_curvature`, its scalar part
  for outcome features of any layout (the latent model's);
- :mod:`.chain`: :func:`chain_bound` and :func:`linear_chain_bound`,
  Algorithm 3 (the junction-tree form) on a linear chain, for a CRF's
  transition, start and end scores, and for those plus node scores linear
  in the inputs; the loss term :class:`ChainCRFTerm`;
- :mod:`.curvature`: :class:`QuadraticBound` and
  :class:`LowRankCurvature`, the low-rank-plus-diagonal curvature of
  Algorithm 4 with its Woodbury solve;
- :mod:`.solve`: :func:`majorize_step` and :func:`fit_majorize` over
  :class:`BoundTerm` loss terms.

Its clients: the ``transition_solver="majorize"`` refit
(:mod:`structboost.transitions.chain`),
:class:`structboost.LinearChainCRF` (``solver="majorize"``) and
:class:`structboost.LatentLogLinearClassifier` (``solver="bound"``).

All of it is numpy, with the scalar part of Algorithm 1 for the chain
bounds in a numba kernel (:mod:`._bound`); ``z`` is carried as ``log z``
throughout.

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
