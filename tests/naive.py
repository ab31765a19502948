"""Brute-force oracle for linear-chain CRF inference.

Every quantity is computed by enumerating all ``K ** L`` labellings of one
sequence with :func:`itertools.product`, so it is only usable for tiny
problems (``K ** L`` up to a few thousand). Nothing here shares code with
``structboost``; the point is to be slow, short and obviously correct.

Conventions match ``structboost.inference.chain``: ``unary (L, K)`` node scores of
one sequence, ``transitions[a, b]`` the score of label ``a`` followed by label
``b`` (or per-position scores ``(L, K, K)``, row ``t`` scoring the move into
position ``t``, row 0 unused), ``start (K,)`` / ``end (K,)`` the scores of the
first / last label::

    score(y) = sum_t unary[t, y_t] + start[y_0]
               + sum_t transitions[y_t, y_{t+1}] + end[y_{L-1}]

Node indicator ``(t, k)`` has flat index ``t * K + k``; edge indicator
``(t, a, b)`` (``y_t = a, y_{t+1} = b``) has flat index ``(t * K + a) * K + b``.
"""

import itertools

import numpy as np

#: Labels whose variance ``H_ii`` is below this are skipped by the exact gamma.
VARIANCE_FLOOR = 1e-12


def _logsumexp(values):
    top = np.max(values)
    return float(top + np.log(np.sum(np.exp(values - top))))


class ChainOracle:
    """Exact inference for one linear-chain CRF by full enumeration.

    Parameters
    ----------
    unary : array_like, shape (L, K)
    transitions : array_like, shape (K, K) or (L, K, K)
        One table for every move, or per position (row ``t`` scores the move
        from ``t - 1`` into ``t``; row 0 is not used).
    start, end : array_like, shape (K,)
    """

    def __init__(self, unary, transitions, start, end):
        self.unary = np.asarray(unary, dtype=np.float64)
        self.transitions = np.asarray(transitions, dtype=np.float64)
        self.start = np.asarray(start, dtype=np.float64)
        self.end = np.asarray(end, dtype=np.float64)
        self.length, self.num_labels = self.unary.shape
        L, K = self.length, self.num_labels
        #: every labelling, shape (K ** L, L)
        self.labellings = np.array(list(itertools.product(range(K), repeat=L)), dtype=np.int64)
        #: score of every labelling, shape (K ** L,)
        self.scores = np.array([self.score(y) for y in self.labellings])
        #: log partition function
        self.log_z = _logsumexp(self.scores)
        #: probability of every labelling, shape (K ** L,)
        self.probs = np.exp(self.scores - self.log_z)
        #: node indicators of every labelling, shape (K ** L, L * K)
        self.node_indicators = np.zeros((len(self.labellings), L * K))
        for t in range(L):
            self.node_indicators[np.arange(len(self.labellings)), t * K + self.labellings[:, t]] = 1.0
        #: edge indicators of every labelling, shape (K ** L, (L - 1) * K * K)
        self.edge_indicators = np.zeros((len(self.labellings), max(L - 1, 0) * K * K))
        for t in range(L - 1):
            flat = (t * K + self.labellings[:, t]) * K + self.labellings[:, t + 1]
            self.edge_indicators[np.arange(len(self.labellings)), flat] = 1.0

    def score(self, labels):
        """Score of one labelling ``(L,)``."""
        y = np.asarray(labels)
        total = self.start[y[0]] + self.end[y[-1]]
        for t in range(self.length):
            total += self.unary[t, y[t]]
        for t in range(self.length - 1):
            table = self.transitions if self.transitions.ndim == 2 else self.transitions[t + 1]
            total += table[y[t], y[t + 1]]
        return float(total)

    def nll(self, labels):
        """Negative log-likelihood ``log Z - score(labels)`` of one labelling."""
        return self.log_z - self.score(labels)

    @property
    def marginals(self):
        """Node marginals ``P(y_t = k)``, shape (L, K)."""
        return (self.probs @ self.node_indicators).reshape(self.length, self.num_labels)

    @property
    def edge_marginals(self):
        """Pairwise marginals ``P(y_t = a, y_{t+1} = b)``, shape (L - 1, K, K)."""
        K = self.num_labels
        return (self.probs @ self.edge_indicators).reshape(self.length - 1, K, K)

    @property
    def map_score(self):
        """Highest score over all labellings."""
        return float(np.max(self.scores))

    @property
    def map_labelling(self):
        """One labelling of highest score, shape (L,)."""
        return self.labellings[np.argmax(self.scores)].copy()

    def conditional(self, t, k):
        """Node marginals given ``y_t = k``, shape (L, K), by re-enumeration."""
        keep = self.labellings[:, t] == k
        weights = self.probs[keep] / self.probs[keep].sum()
        return (weights @ self.node_indicators[keep]).reshape(self.length, self.num_labels)

    @staticmethod
    def _covariance(indicators, probs):
        centred = indicators - probs @ indicators
        return centred.T @ (probs[:, None] * centred)

    @property
    def node_covariance(self):
        """Hessian of log Z in the node scores, ``H_ij = p_ij - p_i p_j``, shape (L K, L K)."""
        return self._covariance(self.node_indicators, self.probs)

    @property
    def edge_covariance(self):
        """Covariance of the edge indicators, shape ((L-1) K K, (L-1) K K)."""
        return self._covariance(self.edge_indicators, self.probs)

    @staticmethod
    def _ratios(H):
        """``sum_j |H_ij| / H_ii`` per indicator; NaN where ``H_ii < VARIANCE_FLOOR``."""
        diagonal = np.diag(H).copy()
        ratios = np.full(len(diagonal), np.nan)
        ok = diagonal >= VARIANCE_FLOOR
        ratios[ok] = np.abs(H[ok]).sum(axis=1) / diagonal[ok]
        return ratios

    @staticmethod
    def _max_ignoring_nan(rows):
        return np.array([np.max(r[~np.isnan(r)]) if np.any(~np.isnan(r)) else np.nan for r in rows])

    @property
    def exact_node_gamma_per_label(self):
        """Smallest valid node gamma per (t, k), shape (L, K); NaN for skipped labels."""
        return self._ratios(self.node_covariance).reshape(self.length, self.num_labels)

    @property
    def exact_node_gamma(self):
        """Max over labels of :attr:`exact_node_gamma_per_label`, shape (L,); NaN if all skipped."""
        return self._max_ignoring_nan(self.exact_node_gamma_per_label)

    @property
    def exact_edge_gamma(self):
        """Smallest valid edge gamma per edge (t, t+1), shape (L - 1,); NaN if all skipped."""
        K = self.num_labels
        ratios = self._ratios(self.edge_covariance).reshape(self.length - 1, K * K)
        return self._max_ignoring_nan(ratios)

    def _alphas(self):
        """Mixing rates of Theorem 3.1 between neighbours.

        Returns ``forward[h] = alpha_{h, h+1}`` (shape (L - 1,)), computed from
        ``P(y_{h+1} | y_h)``, and ``backward[h] = alpha_{h+1, h}``, computed from
        ``P(y_h | y_{h+1})``. The minimum runs over the conditioning labels of
        nonzero probability (a conditional given an impossible label is undefined).
        """
        pair = self.edge_marginals
        node = self.marginals

        def rate(joint, given):  # joint[i, j] = P(given = i, other = j)
            possible = given > 0
            conditional = joint[possible] / given[possible][:, None]
            return 1.0 - conditional.min(axis=0).sum()

        forward = np.array([rate(pair[h], node[h]) for h in range(self.length - 1)])
        backward = np.array([rate(pair[h].T, node[h + 1]) for h in range(self.length - 1)])
        return forward, backward

    def _path_decay(self, forward, backward, s, t):
        """Product of alphas along the path from t to s (Corollary 3.1); 1 when s == t."""
        if s > t:
            return float(np.prod(forward[t:s]))
        return float(np.prod(backward[s:t]))

    @property
    def mixing_node_gamma(self):
        """Theorem 4.1 as a direct sum of path products, shape (L,)."""
        forward, backward = self._alphas()
        L = self.length
        return np.array(
            [2.0 * (1.0 + sum(self._path_decay(forward, backward, s, t) for s in range(L) if s != t)) for t in range(L)]
        )

    @property
    def mixing_edge_gamma(self):
        """Theorem 4.2 for edge (t, t+1) as a direct sum of path products, shape (L - 1,)."""
        forward, backward = self._alphas()
        L = self.length
        values = []
        for t in range(L - 1):
            left = sum(self._path_decay(forward, backward, s, t) for s in range(t))
            right = sum(self._path_decay(forward, backward, s, t + 1) for s in range(t + 2, L))
            values.append(2.0 * (3.0 + left + right))
        return np.array(values)


def offsets(lengths):
    """Start row of every sequence plus the total, shape (m + 1,)."""
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])


def oracles(unary, lengths, transitions, start, end):
    """One :class:`ChainOracle` per sequence of a flat batch ``unary (n, K)``.

    ``transitions`` is one ``(K, K)`` table or per-position scores ``(n, K, K)``.
    """
    unary = np.asarray(unary, dtype=np.float64)
    transitions = np.asarray(transitions, dtype=np.float64)
    bounds = offsets(lengths)
    return [
        ChainOracle(unary[a:b], transitions if transitions.ndim == 2 else transitions[a:b], start, end)
        for a, b in zip(bounds[:-1], bounds[1:])
    ]


def batch(unary, lengths, transitions, start, end):
    """Brute-force results for a flat batch, in the shapes of ``structboost.inference.chain``.

    Returns
    -------
    dict with
        ``log_z (m,)``, ``marginals (n, K)``, ``edge_marginals (n, K, K)`` (last row of
        every sequence zero), ``map_labels (n,)`` (one MAP labelling), ``map_score (m,)``,
        ``gamma_exact (n,)`` (NaN where every label is skipped), ``gamma_mixing (n,)``,
        ``gamma_length (n,)``, ``edge_gamma_exact (n,)`` and ``edge_gamma_mixing (n,)``
        (last row of every sequence zero; NaN where every edge state is skipped).
    """
    parts = oracles(unary, lengths, transitions, start, end)
    K = np.asarray(unary).shape[1]

    def padded_edges(values, tail_shape):
        return np.concatenate([values, np.zeros((1,) + tail_shape)])

    return {
        "log_z": np.array([o.log_z for o in parts]),
        "marginals": np.concatenate([o.marginals for o in parts]),
        "edge_marginals": np.concatenate([padded_edges(o.edge_marginals, (K, K)) for o in parts]),
        "map_labels": np.concatenate([o.map_labelling for o in parts]),
        "map_score": np.array([o.map_score for o in parts]),
        "gamma_exact": np.concatenate([o.exact_node_gamma for o in parts]),
        "gamma_mixing": np.concatenate([o.mixing_node_gamma for o in parts]),
        "gamma_length": np.concatenate([np.full(o.length, 2.0 * o.length) for o in parts]),
        "edge_gamma_exact": np.concatenate([padded_edges(o.exact_edge_gamma, ()) for o in parts]),
        "edge_gamma_mixing": np.concatenate([padded_edges(o.mixing_edge_gamma, ()) for o in parts]),
    }


def batch_scores(unary, lengths, labels, transitions, start, end):
    """Score of given flat labels ``(n,)`` per sequence, shape (m,)."""
    bounds = offsets(lengths)
    parts = oracles(unary, lengths, transitions, start, end)
    return np.array([o.score(labels[a:b]) for o, a, b in zip(parts, bounds[:-1], bounds[1:])])


def batch_nll(unary, lengths, labels, transitions, start, end):
    """Negative log-likelihood of given flat labels ``(n,)`` per sequence, shape (m,)."""
    bounds = offsets(lengths)
    parts = oracles(unary, lengths, transitions, start, end)
    return np.array([o.nll(labels[a:b]) for o, a, b in zip(parts, bounds[:-1], bounds[1:])])


def edge_rows(length, num_labels):
    """``(position, previous label)`` of each edge row of one sequence (``K`` = start).

    The layout of ``structboost.objectives.edge``, written out by hand: one
    row ``(0, start)``, then ``(t, 0), ..., (t, K - 1)`` for ``t = 1..L-1``.
    """
    rows = [(0, num_labels)]
    for t in range(1, length):
        rows.extend((t, u) for u in range(num_labels))
    return rows


def edge_moments(scores, num_labels):
    """Brute-force moments of the edge-row indicator features of one sequence.

    ``scores (r, K)``: ``scores[row, v] = F^v(u, X_t)`` for the rows of
    :func:`edge_rows`; a labelling scores ``sum_t F^{y_t}(y_{t-1}, X_t)``
    (``y_{-1}`` = start). Feature ``(row, v)`` (flat index ``row * K + v``)
    is ``1[y_{t-1} = u, y_t = v]``.

    Returns
    -------
    log_z : float
    mean : (r * K,) float64
        Feature expectations.
    cov : (r * K, r * K) float64
        Their covariance: the Hessian of ``log Z`` in the scores.
    labellings : list of tuple
    features : (K ** L, r * K) float64
        Feature vector of each labelling.
    """
    k = num_labels
    scores = np.asarray(scores, dtype=np.float64)
    length = 1 + (scores.shape[0] - 1) // k
    index = {row: i for i, row in enumerate(edge_rows(length, k))}
    labellings = list(itertools.product(range(k), repeat=length))
    feats = np.zeros((len(labellings), scores.size))
    for j, y in enumerate(labellings):
        prev = (k,) + y[:-1]
        for t in range(length):
            feats[j, index[(t, prev[t])] * k + y[t]] = 1.0
    logits = feats @ scores.ravel()
    log_z = _logsumexp(logits)
    prob = np.exp(logits - log_z)
    mean = prob @ feats
    centred = feats - mean
    return log_z, mean, (centred * prob[:, None]).T @ centred, labellings, feats
