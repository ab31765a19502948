"""Reference implementations of Jebara & Choromanska (2012) used only as test oracles.

- :class:`LogLinearTerm`: Algorithm 1 summed over enumerable log-linear problems
  (a ``BoundTerm`` for :func:`structboost.majorize.fit_majorize`);
- :func:`junction_chain_bound`: Algorithm 3 on one chain with arbitrary node and
  edge features, ``O(T K^2 d^2)``; :func:`structboost.majorize.chain_bound` and
  :func:`~structboost.majorize.linear_chain_bound` must reproduce it with
  indicator features.
"""

import numpy as np

from structboost.majorize import LowRankCurvature, QuadraticBound
from structboost.majorize._checks import as_float_array, check_finite, check_weights
from structboost.majorize.chain import _check_curvature, _multiplicity
from structboost.majorize.partition import (
    _check_base_scores,
    _curvature_weights,
    _partition_factors,
    _running_mean_operator,
    _stacked_matmul,
)

_FACTOR_BLOCK = 4096


class LogLinearTerm:
    """``t`` log-linear problems over enumerable outcome sets, bounded by Algorithm 1.

    Parameters
    ----------
    features : array_like, shape (t, n, d)
        ``f_{x_j}(y)`` for every problem ``j`` and outcome ``y``; problems
        with fewer outcomes pad with ``base_scores = -inf``.
    observed : array_like of int, shape (t,)
        Index of the observed outcome ``y_j`` of each problem.
    base_scores : array_like, shape (t, n), optional
        ``log h_{x_j}(y)``; zeros by default.
    weights : array_like, shape (t,), optional
        Non-negative weight of each problem; ones by default.

    Examples
    --------
    Multinomial logistic regression with 3 classes on inputs ``x`` is
    ``features[j, y] = kron(onehot(y), x_j)``.
    """

    def __init__(self, features, observed, base_scores=None, weights=None):
        features = as_float_array("features", features, 3)
        check_finite("features", features)
        t, n, d = features.shape
        observed = np.asarray(observed)
        if observed.shape != (t,) or not np.issubdtype(observed.dtype, np.integer):
            raise ValueError(f"observed must be {t} integer outcome indices, got shape {observed.shape}.")
        if np.any((observed < 0) | (observed >= n)):
            raise ValueError(f"observed outcome indices must lie in 0..{n - 1}.")
        base_scores = _check_base_scores("base_scores", base_scores, (t, n))
        rows = np.arange(t)
        if np.any(base_scores[rows, observed] == -np.inf):
            raise ValueError(
                "an observed outcome has base score -inf (probability 0); fix observed or base_scores."
            )
        self.features = features
        self.base_scores = base_scores
        self.weights = check_weights(weights, t, "problem")
        self.dim = d
        self.observed_features = self.weights @ features[rows, observed]
        self.observed_score = float(self.weights @ base_scores[rows, observed])

    def bound(self, theta, rank=None):
        """Summed Algorithm 1 bound at ``theta`` (shape (d,)); low-rank if ``rank`` is set.

        Returns
        -------
        QuadraticBound
        """
        theta = as_float_array("theta", theta, 1)
        log_z, mu, factors = _partition_factors(self.features, theta, self.base_scores)
        factors = (np.sqrt(self.weights)[:, None, None] * factors).reshape(-1, self.dim)
        if rank is None:
            curvature = factors.T @ factors
        else:
            curvature = LowRankCurvature(self.dim, rank)
            for start in range(0, factors.shape[0], _FACTOR_BLOCK):
                curvature.add_factors(factors[start : start + _FACTOR_BLOCK])
        return QuadraticBound(theta, float(self.weights @ log_z), self.weights @ mu, curvature)


def _level(log_alpha, stems, edges, weights, sigma):
    """One clique level of Algorithm 3: Algorithm 1 over ``v`` for every ``u``.

    Parameters
    ----------
    log_alpha : ndarray, shape (s, U, K)
        ``log(psi(u, v) z_next(v))`` for ``s`` chains, ``U`` separator labels
        ``u`` and ``K`` new labels ``v``.
    stems : ndarray, shape (s, K, d)
        The part of ``g(u, v)`` that does not depend on ``u``: node features
        of ``v`` plus ``mu_next(v)``.
    edges : None or ndarray, shape (s, U, K, d)
        The ``u``-dependent part of ``g(u, v)`` (edge features), if any.
    weights : ndarray, shape (s,)
        Multiplier of each chain's curvature.
    sigma : ndarray, shape (d, d)
        Curvature accumulator, updated in place.

    Returns
    -------
    log_z : ndarray, shape (s, U)
    mu : ndarray, shape (s, U, d)
    """
    d = stems.shape[-1]
    log_z, prob, deviation, coefficient = _running_mean_operator(log_alpha)
    # shape (s, U, K, K): the rank-one terms of separator label u sum to G_u^T M_u G_u
    curvature_weights = weights[:, None, None, None] * _curvature_weights(deviation, coefficient)
    outcome = np.broadcast_to(stems[:, None], prob.shape + (d,)) if edges is None else edges + stems[:, None]
    mu = np.einsum("suv,suvd->sud", prob, outcome)
    sigma += outcome.reshape(-1, d).T @ _stacked_matmul(curvature_weights, outcome).reshape(-1, d)
    return log_z, mu


def _chain_recursion(log_node, log_edge, node_features, edge_features, weights, curvature, sigma):
    """Algorithm 3 on ``s`` chains of equal length ``T``, last position first.

    Parameters
    ----------
    log_node : ndarray, shape (s, T, K)
        ``log h + theta~ @ f`` of the node cliques.
    log_edge : ndarray, shape (s, T - 1, K, K)
        The same for the edge cliques; ``[:, t - 1, u, v]`` joins positions
        ``t - 1`` and ``t``.
    node_features : ndarray, shape (s, T, K, d)
    edge_features : ndarray, shape (s, T - 1, K, K, d)
    weights : ndarray, shape (s,)
    curvature : {"shared", "paper"}
    sigma : ndarray, shape (d, d)
        Accumulator, updated in place.

    Returns
    -------
    log_z : ndarray, shape (s,)
    mu : ndarray, shape (s, d)
    """
    s, length, k = log_node.shape
    # the junction tree: root clique {y_0}, then {y_(t-1), y_t} whose separator is y_(t-1)
    log_z = np.zeros((s, k))
    mu = np.zeros((s, k, sigma.shape[0]))
    for t in range(length - 1, 0, -1):
        log_alpha = log_edge[:, t - 1] + (log_node[:, t] + log_z)[:, None, :]
        stems = node_features[:, t] + mu
        weight = _multiplicity(curvature, k, t) * weights
        log_z, mu = _level(log_alpha, stems, edge_features[:, t - 1], weight, sigma)
    log_alpha = (log_node[:, 0] + log_z)[:, None, :]
    log_z, mu = _level(log_alpha, node_features[:, 0] + mu, None, weights, sigma)
    return log_z[:, 0], mu[:, 0]


def junction_chain_bound(
    node_features, edge_features, theta, node_scores=None, edge_scores=None, curvature="shared"
):
    """Quadratic bound on ``log Z`` of one chain model by Algorithm 3.

    The model is ``Z(theta) = sum_y prod_t h_t(y_t) exp(theta @ f_t(y_t))
    prod_t h_(t-1,t)(y_(t-1), y_t) exp(theta @ f_(t-1,t)(y_(t-1), y_t))``.

    Parameters
    ----------
    node_features : array_like, shape (T, K, d)
    edge_features : array_like, shape (T - 1, K, K, d)
        ``[t - 1, u, v]`` is the feature of labels ``u`` at ``t - 1`` and ``v`` at ``t``.
    theta : array_like, shape (d,)
    node_scores : array_like, shape (T, K), optional
        ``log h_t``; zeros by default.
    edge_scores : array_like, shape (T - 1, K, K), optional
        ``log h_(t-1,t)``; zeros by default.
    curvature : {"shared", "paper"}
        How the children's curvatures are combined (module notes).

    Returns
    -------
    log_z : float
    mu : ndarray, shape (d,)
    sigma : ndarray, shape (d, d)

    Notes
    -----
    ``log_z`` and ``mu`` equal those of :func:`partition_bound` over all
    ``K^T`` labellings; ``sigma`` differs but is a valid bound. Cost
    ``O(T K^2 d^2)``.
    """
    node_features = as_float_array("node_features", node_features, 3)
    length, k, d = node_features.shape
    _check_curvature(curvature, k, length)
    edge_features = as_float_array("edge_features", edge_features, 4)
    if edge_features.shape != (length - 1, k, k, d):
        raise ValueError(
            f"edge_features must have shape {(length - 1, k, k, d)}, got {edge_features.shape}."
        )
    theta = as_float_array("theta", theta, 1)
    if theta.shape != (d,):
        raise ValueError(f"theta must have shape ({d},), got {theta.shape}.")
    check_finite("node_features", node_features)
    check_finite("edge_features", edge_features)
    check_finite("theta", theta)
    log_node = _check_base_scores("node_scores", node_scores, (length, k)) + node_features @ theta
    log_edge = _check_base_scores("edge_scores", edge_scores, (length - 1, k, k)) + edge_features @ theta
    sigma = np.zeros((d, d))
    log_z, mu = _chain_recursion(
        log_node[None], log_edge[None], node_features[None], edge_features[None], np.ones(1), curvature, sigma
    )
    return float(log_z[0]), mu[0], sigma


