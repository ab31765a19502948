"""Algorithm 3 of Jebara & Choromanska (2012) on linear chains, for CRF parameters.

:func:`chain_bound` and :func:`linear_chain_bound` return the Algorithm 3
bound of the general junction-tree recursion in ``O(K^2 d)`` per row instead
of ``O(K d^2)``: the features are indicators (or inputs times indicators), so
the ``d x d`` accumulation waits until after the backward pass. With a
``rank`` the rank-one terms stream into a
:class:`~structboost.majorize.curvature.LowRankCurvature` (Algorithm 4).

Notes
-----
For every label ``u`` of the previous position the recursion runs
Algorithm 1 over the labels ``v`` of the current one with
``alpha = psi(u, v) z_next(v)`` and ``g = f(u, v) + mu_next(v)``; one matrix
``U >= Sigma_next(v)`` must cover the children. The paper's
``U = sum_v Sigma_next(v)`` grows like ``K^(t-1)`` (``curvature="paper"``);
``U = shared + sum_v own(v)`` unrolls to the plain sum of all rank-one terms
(``curvature="shared"``, the default), never looser and linear in the length.
"""

import numpy as np
import scipy.sparse

from ..sequences import check_labels, check_lengths, check_unary
from . import _bound
from ._checks import as_float_array, check_finite, check_weights
from .curvature import LowRankCurvature, QuadraticBound

_CURVATURES = ("shared", "paper")
_MAX_LOG_MULTIPLICITY = 600.0
_MESSAGE_BUDGET = 2**24  # floats of stored messages per batch in _indicator_chain_bound
_FACTOR_BUDGET = 2**21  # floats of one level's factor rows per batch in _low_rank_recursion


def _multiplicity(curvature, num_labels, t):
    """Weight of the curvature of the level joining positions ``t - 1`` and ``t``."""
    return 1.0 if curvature == "shared" else float(num_labels) ** (t - 1)


def _backward_pass(log_node, inputs, theta_T, weights, curvature, visit):
    """Backward recursion of Algorithm 3 on ``s`` chains with indicator features.

    Features, in order: ``x_t (x) e_(y_t)`` summed over positions (index
    ``j K + v``), transition counts (``p K + a K + b``), start label
    (``p K + K^2 + v``), end label (``p K + K^2 + K + v``); ``d = p K + K^2 + 2 K``.
    Level ``t`` runs Algorithm 1 over ``v`` for each separator ``u`` with outcome
    rows ``g(u, v) = B_t[v] + e_(edge(u, v))`` (``B_t``, ``K x d``: the node
    features of ``t`` plus the expected features of the suffix).

    ``log_node (s, T, K)`` are the node scores at ``theta~``, ``inputs (s, T,
    p)`` the ``x_t`` (``p`` may be 0). ``visit(t, stems (s, K, d), prob (s, U,
    K), blocks (s, K, U, K), block_sum (s, K, K))`` runs per level: ``prob`` is
    ``P(v | u)``, ``blocks[j, w, u, v] = weights_t[j] M_u[v, w]`` (may be
    overwritten), ``block_sum`` its sum over ``u``. Returns ``log_z (s,)`` and
    ``mu (s, d)``.
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
    """Algorithm 3 with dense curvature, in ``O(K^2 d + K^4)`` per position; ``(log_z, mu)`` as
    :func:`_backward_pass`.

    Level ``t`` adds ``sym(B_t^T C_t) + E^T M E`` with ``C_t = N_t B_t + 2 X_t^T``
    and ``E^T M E`` a block on the transition indices. As
    ``B_t = S_t + P_(t+1) B_(t+1)`` (``S_t`` the sparse local features),
    ``sum_t B_t^T C_t = sum_t S_t^T Z_t`` with ``Z_t = C_t + P_t^T Z_(t-1)``:
    the ``C_t`` are stored on the way back and turned into ``Z_t`` on the way
    forward. ``sigma`` and ``cross`` ``(d, d)`` are accumulators, updated in
    place; the curvature is ``sigma + sym(cross)``. The other arguments are
    :func:`_backward_pass`'s.
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
    """Algorithm 3 with the rank-one terms streamed into ``low_rank`` (Algorithm 4).

    With ``M_u = L_u L_u^T`` the rows of ``L_u^T G_u`` are exact factors of
    level ``t``'s ``sum_u G_u^T M_u G_u``; no ``d x d`` matrix is formed.
    Arguments and returns as :func:`_indicator_recursion`, with ``low_rank`` a
    :class:`LowRankCurvature` updated in place.
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
    unary = check_unary(unary)
    return unary, check_lengths(lengths, unary.shape[0])


def _check_chain_parameters(k, theta_T, theta_start, theta_end):
    theta_T = as_float_array("theta_T", theta_T, 2)
    theta_start = as_float_array("theta_start", theta_start, 1)
    theta_end = as_float_array("theta_end", theta_end, 1)
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
    """Bound of validated chains grouped by length: ``unary (n, K)`` at ``theta~``, ``inputs (n,
    p)`` dense or sparse.
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


def _check_count(name, value):
    if value is not None and (int(value) != value or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}.")


def _checked_bound(unary, inputs, lengths, theta_T, theta_start, theta_end, weights, curvature, batch_size,
                   rank):  # fmt: skip
    """Validate the arguments of :func:`chain_bound` (``inputs`` None: no inputs) and compute it."""
    unary, lengths = _check_chain_data(unary, lengths)
    k = unary.shape[1]
    _check_curvature(curvature, k, lengths.max())
    theta_T, theta_start, theta_end = _check_chain_parameters(k, theta_T, theta_start, theta_end)
    weights = check_weights(weights, lengths.size, "sequence")
    _check_count("batch_size", batch_size)
    _check_count("rank", rank)
    inputs = np.zeros((unary.shape[0], 0)) if inputs is None else inputs
    return _indicator_chain_bound(
        unary, inputs, lengths, theta_T, theta_start, theta_end, weights, curvature, batch_size, rank
    )


def chain_bound(unary, lengths, theta_T, theta_start, theta_end, *,
                weights=None, curvature="shared", batch_size=None, rank=None):
    """Algorithm 3 bound on a linear-chain CRF's log-partition in its transition scores.

    Sequence ``j`` with labels ``y`` scores ``sum_t unary[t, y_t] +
    sum_t theta_T[y_(t-1), y_t] + theta_start[y_0] + theta_end[y_last]``; the
    parameters are ``theta = [theta_T.ravel(), theta_start, theta_end]``
    (``d = K^2 + 2K``).

    Parameters
    ----------
    unary : array_like, shape (n, K)
        Fixed node scores of all rows, sequences contiguous.
    lengths : array_like of int, shape (m,)
    theta_T, theta_start, theta_end : array_like, shape (K, K), (K,), (K,)
        ``-inf`` forbids a move; its entries of ``mu`` and ``sigma`` are zero.
    weights : array_like, shape (m,), optional
        Non-negative weight of each sequence.
    curvature : {"shared", "paper"}
        How children are combined (module notes).
    batch_size : int, optional
        Sequences processed together (default: about 128 MB of messages).
    rank : int, optional
        Stream the curvature into a :class:`LowRankCurvature` of this rank
        (Algorithm 4); None: exact dense curvature.

    Returns
    -------
    log_z : ndarray, shape (m,)
    mu : ndarray, shape (d,)
        Weighted sum of the expected features (gradient of ``sum w log Z``).
    sigma : ndarray, shape (d, d), or LowRankCurvature
        Weighted sum of the per-sequence bound curvatures.
    """
    return _checked_bound(unary, None, lengths, theta_T, theta_start, theta_end, weights, curvature,
                          batch_size, rank)  # fmt: skip


def linear_chain_bound(X, lengths, coef, theta_T, theta_start, theta_end, *,
                       weights=None, curvature="shared", batch_size=None, rank=None):
    """Algorithm 3 bound on a linear-chain CRF with node scores linear in the inputs.

    Node scores are ``X[t] @ coef[:, y_t]``; ``theta = [coef.ravel(),
    theta_T.ravel(), theta_start, theta_end]`` (``d = p K + K^2 + 2K``).

    Parameters
    ----------
    X : array_like or scipy sparse matrix, shape (n, p)
    lengths : array_like of int, shape (m,)
    coef : array_like, shape (p, K)
    theta_T, theta_start, theta_end, weights, curvature, batch_size, rank
        As in :func:`chain_bound`.

    Returns
    -------
    log_z : ndarray, shape (m,)
    mu : ndarray, shape (d,)
    sigma : ndarray, shape (d, d), or LowRankCurvature
    """
    X = _check_inputs(X)
    coef = as_float_array("coef", coef, 2)
    check_finite("coef", coef)
    if coef.shape[0] != X.shape[1]:
        raise ValueError(f"coef has {coef.shape[0]} rows but X has {X.shape[1]} columns; they must match.")
    return _checked_bound(np.asarray(X @ coef), X, lengths, theta_T, theta_start, theta_end, weights,
                          curvature, batch_size, rank)  # fmt: skip


def _check_inputs(X):
    """``X`` as a float64 dense array or CSR matrix with finite entries."""
    if scipy.sparse.issparse(X):
        X = scipy.sparse.csr_matrix(X, dtype=np.float64)
        values = X.data
    else:
        X = as_float_array("X", X, 2)
        values = X
    check_finite("X", values)
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
    k = int(num_labels)
    labels = check_labels(labels, k, np.size(labels))
    if np.sum(lengths) != labels.size:
        raise ValueError(f"lengths sum to {np.sum(lengths)} but there are {labels.size} labels; they must match.")
    lengths = check_lengths(lengths, labels.size)
    weights = check_weights(weights, lengths.size, "sequence")
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
    """Linear-chain CRF NLL in ``theta = [theta_T.ravel(), theta_start, theta_end]``, bounded by
    Algorithm 3.

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
    """

    def __init__(self, unary, lengths, labels, weights=None, curvature="shared", batch_size=None):
        self.unary, self.lengths = _check_chain_data(unary, lengths)
        k = self.unary.shape[1]
        _check_curvature(curvature, k, self.lengths.max())
        self.num_labels = k
        self.weights = check_weights(weights, self.lengths.size, "sequence")
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
        """Summed Algorithm 3 bound (a :class:`QuadraticBound`) at ``theta (d,)``."""
        theta = as_float_array("theta", theta, 1)
        log_z, mu, curvature = chain_bound(
            self.unary, self.lengths, *self.split(theta), weights=self.weights,
            curvature=self.curvature, batch_size=self.batch_size, rank=rank
        )
        return QuadraticBound(theta, float(self.weights @ log_z), mu, curvature)

