"""Numba kernels for linear-chain CRFs over ragged batches of sequences.

Every kernel takes flat, C-contiguous float64 rows of all sequences and
``offsets (m + 1,)`` int64 with ``offsets[i]:offsets[i + 1]`` the rows of
sequence ``i``. Nothing here validates input: :mod:`structboost.inference.chain`
does that once.

Messages are kept in scaled probability space, so the inner loops are plain
multiply-adds with no ``exp``/``log``:

* ``alpha[t]`` is proportional to the forward message *including* the unary
  factor of position ``t`` and sums to one;
* ``beta[t]`` is proportional to the backward message *excluding* position
  ``t`` and sums to one;
* ``r[t]`` is proportional to ``exp(unary[t]) * beta[t]`` (the message that
  position ``t`` sends to its left neighbour) and sums to one.

Hence ``P(y_t = k) ~ alpha[t, k] * beta[t, k]`` and
``P(y_t = a, y_{t+1} = b) ~ alpha[t, a] * E[a, b] * r[t + 1, b]`` with
``E = exp(transitions - max(transitions))``. Unary rows are exponentiated
after subtracting their maximum; a product that underflows (possible only
with forbidden, ``-inf``, transitions and extreme margins) is redone in log
space for that step. Where forbidden moves and node potentials hundreds of
units apart put the relevant labellings beyond float64's range of one
another, no scaling of the messages can hold the posterior:
:func:`log_space_posterior` recomputes such sequences in log space, and
:func:`pairwise_rates` / :func:`exact_gamma_pairwise` derive their bounds
from its pairwise marginals.
"""

import numpy as np
from numba import njit, prange

_TINY = 1e-280
# Reassociation lets LLVM vectorise the K-long reductions; no "nnan"/"ninf",
# because forbidden (-inf) transitions are legal input.
_FAST = {"reassoc", "contract", "arcp"}


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _scaled_product(m, u_row, w_row, row_max, out):
    """``out = m * exp(u_row)`` normalised to sum one; returns the log of the factor removed.

    ``w_row = exp(u_row - row_max)``. Falls back to log space when the
    product underflows.
    """
    k = m.shape[0]
    s = 0.0
    for j in range(k):
        v = m[j] * w_row[j]
        out[j] = v
        s += v
    if s > _TINY:
        inv = 1.0 / s
        for j in range(k):
            out[j] *= inv
        return row_max + np.log(s)
    top = -np.inf
    for j in range(k):
        v = np.log(m[j]) + u_row[j] if m[j] > 0.0 else -np.inf
        out[j] = v
        if v > top:
            top = v
    s = 0.0
    for j in range(k):
        v = np.exp(out[j] - top)
        out[j] = v
        s += v
    for j in range(k):
        out[j] /= s
    return top + np.log(s)


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _exp_shifted(x, out):
    """``out = exp(x - max(x))``; returns ``max(x)``."""
    top = -np.inf
    for j in range(x.shape[0]):
        if x[j] > top:
            top = x[j]
    for j in range(x.shape[0]):
        out[j] = np.exp(x[j] - top)
    return top


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _normalise(v):
    s = v.sum()
    for j in range(v.shape[0]):
        v[j] /= s


@njit(cache=True, parallel=True, fastmath=_FAST, error_model="numpy")
def exp_rows(unary):
    """Row-wise ``exp(unary - max)`` and the maxima.

    Returns
    -------
    w : (n, K) float64
    row_max : (n,) float64
    """
    n, k = unary.shape
    w = np.empty((n, k))
    row_max = np.empty(n)
    for t in prange(n):
        row_max[t] = _exp_shifted(unary[t], w[t])
    return w, row_max


@njit(cache=True, parallel=True, fastmath=_FAST, error_model="numpy")
def messages(unary, w, row_max, offsets, transitions, start, end):
    """Scaled forward-backward messages of every sequence.

    Parameters
    ----------
    unary : (n, K) float64
    w, row_max : (n, K), (n,) float64
        From :func:`exp_rows` (computed once per set of node potentials).
    offsets : (m + 1,) int64
    transitions : (K, K) float64, ``transitions[a, b]`` scores ``a`` then ``b``
    start, end : (K,) float64

    Returns
    -------
    log_z : (m,) float64
    alpha, beta, r : (n, K) float64
        Scaled messages as described in the module docstring.
    into : (n, K) float64
        ``into[t] = alpha[t - 1] @ E`` (the forward message entering ``t``,
        before its unary factor); on a sequence's first row,
        ``exp(start - max(start))``.
    beta_scale : (n,) float64
        ``beta_scale[t] = sum(E @ r[t + 1])``, so that
        ``E @ r[t + 1] == beta_scale[t] * beta[t]``; unused on last rows.
    """
    n, k = unary.shape
    n_seq = offsets.shape[0] - 1
    t_max = transitions.max()
    emat = np.exp(transitions - t_max)
    alpha = np.empty((n, k))
    beta = np.empty((n, k))
    r = np.empty((n, k))
    into = np.zeros((n, k))
    beta_scale = np.ones(n)
    log_z = np.empty(n_seq)
    for i in prange(n_seq):
        lo, hi = offsets[i], offsets[i + 1]
        acc = _exp_shifted(start, into[lo])
        acc += _scaled_product(into[lo], unary[lo], w[lo], row_max[lo], alpha[lo])
        for t in range(lo + 1, hi):
            m = into[t]
            for a in range(k):
                pa = alpha[t - 1, a]
                for b in range(k):
                    m[b] += pa * emat[a, b]
            acc += t_max + _scaled_product(m, unary[t], w[t], row_max[t], alpha[t])
        e_top = _exp_shifted(end, beta[hi - 1])
        s = 0.0
        for b in range(k):
            s += alpha[hi - 1, b] * beta[hi - 1, b]
        log_z[i] = acc + e_top + np.log(s)
        _normalise(beta[hi - 1])
        for t in range(hi - 1, lo, -1):
            _scaled_product(beta[t], unary[t], w[t], row_max[t], r[t])
            for a in range(k):
                acc_a = 0.0
                for b in range(k):
                    acc_a += emat[a, b] * r[t, b]
                beta[t - 1, a] = acc_a
            beta_scale[t - 1] = beta[t - 1].sum()
            _normalise(beta[t - 1])
        _scaled_product(beta[lo], unary[lo], w[lo], row_max[lo], r[lo])
    return log_z, alpha, beta, r, into, beta_scale


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _edge_joint(alpha_t, emat, r_next, out):
    """``out[a, b] = P(y_t = a, y_{t+1} = b)`` from the scaled messages."""
    k = alpha_t.shape[0]
    s = 0.0
    for a in range(k):
        for b in range(k):
            v = alpha_t[a] * emat[a, b] * r_next[b]
            out[a, b] = v
            s += v
    inv = 1.0 / s
    for a in range(k):
        for b in range(k):
            out[a, b] *= inv


@njit(cache=True, parallel=True, fastmath=_FAST, error_model="numpy")
def edge_marginals(alpha, r, offsets, transitions):
    """Pairwise marginals of consecutive positions.

    Returns
    -------
    (n, K, K) float64
        Row ``t`` is ``P(y_t = a, y_{t+1} = b)``; the last row of every
        sequence is zero.
    """
    n, k = alpha.shape
    emat = np.exp(transitions - transitions.max())
    out = np.zeros((n, k, k))
    for i in prange(offsets.shape[0] - 1):
        for t in range(offsets[i], offsets[i + 1] - 1):
            _edge_joint(alpha[t], emat, r[t + 1], out[t])
    return out


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _row_conditional(mat, weight, out):
    """``out[i, j] = mat[i, j] * weight[j]`` normalised over ``j``; zero rows stay zero.

    With ``mat = E`` and ``weight = r[t + 1]``, row ``a`` is
    ``P(y_{t+1} | y_t = a)``; with ``mat = E.T`` and ``weight = alpha[t]``,
    row ``b`` is ``P(y_t | y_{t+1} = b)``.
    """
    k = weight.shape[0]
    for i in range(k):
        s = 0.0
        for j in range(k):
            v = mat[i, j] * weight[j]
            out[i, j] = v
            s += v
        inv = 1.0 / s if s > 0.0 else 0.0
        for j in range(k):
            out[i, j] *= inv


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _rate(emat, into_inv, weight, possible, low):
    """``1 - sum_j min_{i possible} emat[i, j] * into_inv[i] * weight[j]``.

    With ``emat = E``, ``into_inv = 1 / (E r)`` and ``weight = r`` this is
    ``alpha_{t,t+1}`` of the forward conditional ``P(y_{t+1} | y_t)``; with
    ``emat = E.T``, ``into_inv = 1 / (alpha' E)`` and ``weight = alpha`` it is
    ``alpha_{t+1,t}`` of the backward one. Labels of zero probability are
    skipped: they add nothing to the total variation in Theorem 3.1.
    """
    k = low.shape[0]
    low[:] = np.inf
    for i in range(k):
        if possible[i]:
            s = into_inv[i]
            for j in range(k):
                v = emat[i, j] * s
                low[j] = v if v < low[j] else low[j]
    total = 0.0
    for j in range(k):
        if low[j] < np.inf:
            total += low[j] * weight[j]
    return max(0.0, 1.0 - total)


@njit(cache=True, parallel=True, fastmath=_FAST, error_model="numpy")
def mixing_rates(alpha, beta, r, into, beta_scale, offsets, transitions):
    """Dobrushin contraction coefficients of both conditional chains.

    Reuses the normalisers of the message pass: ``E @ r[t + 1] =
    beta_scale[t] * beta[t]`` and ``alpha[t] @ E = into[t + 1]``, so each
    edge costs two ``K x K`` sweeps.

    Returns
    -------
    right : (n,) float64
        ``right[t] = alpha_{t, t+1} = 1 - sum_b min_a P(y_{t+1}=b | y_t=a)``;
        zero on the last row of each sequence.
    left : (n,) float64
        ``left[t] = alpha_{t, t-1}``; zero on the first row of each sequence.
    """
    n, k = alpha.shape
    emat = np.exp(transitions - transitions.max())
    emat_t = np.ascontiguousarray(emat.T)
    right = np.zeros(n)
    left = np.zeros(n)
    for i in prange(offsets.shape[0] - 1):
        inv = np.empty(k)
        low = np.empty(k)
        possible = np.empty(k, dtype=np.bool_)
        for t in range(offsets[i], offsets[i + 1] - 1):
            for j in range(k):
                possible[j] = alpha[t, j] * beta[t, j] > 0.0
                inv[j] = 1.0 / (beta_scale[t] * beta[t, j]) if possible[j] else 0.0
            right[t] = _rate(emat, inv, r[t + 1], possible, low)
            for j in range(k):
                possible[j] = alpha[t + 1, j] * beta[t + 1, j] > 0.0
                inv[j] = 1.0 / into[t + 1, j] if possible[j] else 0.0
            left[t + 1] = _rate(emat_t, inv, alpha[t], possible, low)
    return right, left


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def path_sums(right, left, offsets):
    """Eq. 17 on a chain: sums over other positions of the products of rates.

    Returns
    -------
    to_right : (n,) float64
        ``beta_{t+1 -> t} = sum_{s > t} prod_{h=t}^{s-1} right[h]``.
    to_left : (n,) float64
        ``beta_{t-1 -> t} = sum_{s < t} prod_{h=s+1}^{t} left[h]``.
    """
    n = right.shape[0]
    to_right = np.zeros(n)
    to_left = np.zeros(n)
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        for t in range(hi - 2, lo - 1, -1):
            to_right[t] = right[t] * (1.0 + to_right[t + 1])
        for t in range(lo + 1, hi):
            to_left[t] = left[t] * (1.0 + to_left[t - 1])
    return to_right, to_left


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _sequence_exact_gamma(fwd, bwd, marginals, lo, out):
    """Exact node bound of one sequence from its one-step conditionals.

    ``fwd[t]`` is ``P(y_{t+1} | y_t)`` (rows: ``y_t``), ``bwd[t]`` is
    ``P(y_{t-1} | y_t)`` (rows: ``y_t``), both ``(L, K, K)``; writes
    ``out[lo:lo + L]``.
    """
    length, k, _ = fwd.shape
    for t in range(length):
        tv = np.zeros(k)
        for direction in range(2):
            cond = np.eye(k)
            s = t
            while True:
                s = s + 1 if direction == 0 else s - 1
                if s < 0 or s >= length:
                    break
                step = fwd[s - 1] if direction == 0 else bwd[s + 1]
                cond = cond @ step
                for kk in range(k):
                    d = 0.0
                    for j in range(k):
                        d += abs(cond[kk, j] - marginals[lo + s, j])
                    tv[kk] += 0.5 * d
        best = 0.0
        for kk in range(k):
            p = marginals[lo + t, kk]
            if p * (1.0 - p) >= 1e-12:
                g = 2.0 * (1.0 + tv[kk] / (1.0 - p))
                if g > best:
                    best = g
        out[lo + t] = best if best > 0.0 else 2.0


@njit(cache=True, parallel=True, fastmath=_FAST, error_model="numpy")
def exact_gamma(alpha, r, marginals, offsets, transitions):
    """Smallest valid node bound: ``max_k sum_j |H_ij| / H_ii`` per position.

    Uses Lemma 3.1: ``sum_j |H_ij| = 2 p_i sum_s TV(P(y_s | y_t = k), P(y_s))``
    with the conditionals propagated along the chain. Cost
    ``O(sum_i L_i^2 K^3)``; labels with ``p (1 - p) < 1e-12`` are skipped.

    Returns
    -------
    (n,) float64
    """
    n, k = alpha.shape
    emat = np.exp(transitions - transitions.max())
    emat_t = np.ascontiguousarray(emat.T)
    out = np.zeros(n)
    for i in prange(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        length = hi - lo
        fwd = np.zeros((length, k, k))
        bwd = np.zeros((length, k, k))
        for t in range(length - 1):
            _row_conditional(emat, r[lo + t + 1], fwd[t])
            _row_conditional(emat_t, alpha[lo + t], bwd[t + 1])
        _sequence_exact_gamma(fwd, bwd, marginals, lo, out)
    return out


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def exact_gamma_pairwise(pairwise, marginals, offsets):
    """:func:`exact_gamma` from pairwise marginals (rows of the log-space fallback).

    Parameters
    ----------
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    marginals : (r, K) float64
    offsets : (s + 1,) int64

    Returns
    -------
    (r,) float64
    """
    r, k = marginals.shape
    ones = np.ones(k)
    out = np.zeros(r)
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        length = hi - lo
        fwd = np.zeros((length, k, k))
        bwd = np.zeros((length, k, k))
        for t in range(length - 1):
            _row_conditional(pairwise[lo + t], ones, fwd[t])
            _row_conditional(np.ascontiguousarray(pairwise[lo + t].T), ones, bwd[t + 1])
        _sequence_exact_gamma(fwd, bwd, marginals, lo, out)
    return out


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def pairwise_rates(pairwise, offsets):
    """:func:`mixing_rates` from pairwise marginals (rows of the log-space fallback).

    Parameters
    ----------
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    offsets : (s + 1,) int64

    Returns
    -------
    right, left : (r,) float64
        As in :func:`mixing_rates`.
    """
    r, k, _ = pairwise.shape
    right = np.zeros(r)
    left = np.zeros(r)
    ones = np.ones(k)
    inv = np.empty(k)
    low = np.empty(k)
    possible = np.empty(k, dtype=np.bool_)
    for i in range(offsets.shape[0] - 1):
        for t in range(offsets[i], offsets[i + 1] - 1):
            joint = pairwise[t]
            joint_t = np.ascontiguousarray(joint.T)
            for side in range(2):
                mat = joint if side == 0 else joint_t
                for a in range(k):
                    s = mat[a].sum()
                    possible[a] = s > 0.0
                    inv[a] = 1.0 / s if possible[a] else 0.0
                rate = _rate(mat, inv, ones, possible, low)
                if side == 0:
                    right[t] = rate
                else:
                    left[t + 1] = rate
    return right, left


@njit(cache=True, fastmath=_FAST, error_model="numpy")
def _logsumexp(x):
    top = -np.inf
    for j in range(x.shape[0]):
        if x[j] > top:
            top = x[j]
    if top == -np.inf:
        return -np.inf
    s = 0.0
    for j in range(x.shape[0]):
        s += np.exp(x[j] - top)
    return top + np.log(s)


@njit(cache=True, error_model="numpy")
def log_space_posterior(unary, offsets, sequences, transitions, start, end):
    """Forward-backward in log space for some sequences.

    The fallback for sequences whose scaled messages underflow (forbidden
    moves together with node potentials hundreds of units apart): every
    message is a log-sum-exp, so any finite potentials work.

    Parameters
    ----------
    unary : (n, K) float64
    offsets : (m + 1,) int64
    sequences : (s,) int64
        Indices of the sequences to process, increasing.
    transitions : (K, K) float64
    start, end : (K,) float64

    Returns
    -------
    log_z : (s,) float64
        ``-inf`` for a sequence with no allowed labelling (its other rows
        are then zero).
    marginals : (r, K) float64
        Node marginals of the rows of the selected sequences, in order.
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    """
    k = unary.shape[1]
    total = 0
    for i in sequences:
        total += offsets[i + 1] - offsets[i]
    log_z = np.empty(sequences.shape[0])
    marginals = np.zeros((total, k))
    pairwise = np.zeros((total, k, k))
    tmp = np.empty(k)
    row = 0
    for idx in range(sequences.shape[0]):
        lo, hi = offsets[sequences[idx]], offsets[sequences[idx] + 1]
        length = hi - lo
        la = np.empty((length, k))
        lb = np.empty((length, k))
        for b in range(k):
            la[0, b] = start[b] + unary[lo, b]
        for t in range(1, length):
            for b in range(k):
                for a in range(k):
                    tmp[a] = la[t - 1, a] + transitions[a, b]
                la[t, b] = _logsumexp(tmp) + unary[lo + t, b]
        lb[length - 1] = end
        for t in range(length - 2, -1, -1):
            for a in range(k):
                for b in range(k):
                    tmp[b] = transitions[a, b] + unary[lo + t + 1, b] + lb[t + 1, b]
                lb[t, a] = _logsumexp(tmp)
        for b in range(k):
            tmp[b] = la[length - 1, b] + end[b]
        lz = _logsumexp(tmp)
        log_z[idx] = lz
        if lz > -np.inf:
            # Rounding in sums of potentials ~1e4 leaves ~1e-12 in the totals: renormalise.
            for t in range(length):
                for a in range(k):
                    marginals[row + t, a] = np.exp(la[t, a] + lb[t, a] - lz)
                _normalise(marginals[row + t])
            for t in range(length - 1):
                total_pair = 0.0
                for a in range(k):
                    for b in range(k):
                        v = np.exp(
                            la[t, a] + transitions[a, b] + unary[lo + t + 1, b] + lb[t + 1, b] - lz
                        )
                        pairwise[row + t, a, b] = v
                        total_pair += v
                pairwise[row + t] /= total_pair
        row += length
    return log_z, marginals, pairwise


@njit(cache=True, parallel=True, fastmath=_FAST, error_model="numpy")
def viterbi(unary, offsets, transitions, start, end):
    """Most probable label path of every sequence (max-product in log space).

    Returns
    -------
    (n,) int64
    """
    n, k = unary.shape
    path = np.empty(n, dtype=np.int64)
    for i in prange(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        back = np.empty((hi - lo, k), dtype=np.int64)
        score = unary[lo] + start
        nxt = np.empty(k)
        for t in range(lo + 1, hi):
            for b in range(k):
                best = -np.inf
                arg = 0
                for a in range(k):
                    v = score[a] + transitions[a, b]
                    if v > best:
                        best = v
                        arg = a
                nxt[b] = best + unary[t, b]
                back[t - lo, b] = arg
            score[:] = nxt
        score += end
        y = np.argmax(score)
        for t in range(hi - 1, lo - 1, -1):
            path[t] = y
            if t > lo:
                y = back[t - lo, y]
    return path
