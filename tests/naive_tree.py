"""Brute-force oracle for one small tree CRF instance: enumerate every labelling.

Score(y) = sum_v unary[v, y_v] + sum_{v non-root} transitions[type_v, y_parent(v), y_v]
with ``parents`` local to the instance (``-1`` for roots). Everything is
derived from the exact distribution over all ``K ** n`` labellings, so keep
``n`` and ``K`` tiny.
"""

import itertools

import numpy as np
from scipy.special import logsumexp


class NaiveTree:
    """Exact distribution of one instance.

    Parameters
    ----------
    unary : (n, K) array
    parents : (n,) int array, ``-1`` for roots
    transitions : (n_types, K, K) array
    edge_types : (n,) int array
    """

    def __init__(self, unary, parents, transitions, edge_types):
        self.unary = np.asarray(unary, dtype=np.float64)
        self.parents = np.asarray(parents)
        self.transitions = np.asarray(transitions, dtype=np.float64)
        self.edge_types = np.asarray(edge_types)
        n, k = self.unary.shape
        self.n, self.k = n, k
        self.labellings = np.array(list(itertools.product(range(k), repeat=n)), dtype=np.int64)
        self.labellings = self.labellings.reshape(-1, n)
        self.scores = np.array([self.score(y) for y in self.labellings])
        self.log_z = logsumexp(self.scores)
        self.prob = np.exp(self.scores - self.log_z)
        self.edges = [v for v in range(n) if self.parents[v] >= 0]
        self.neighbours = [[] for _ in range(n)]
        for v in self.edges:
            self.neighbours[v].append(int(self.parents[v]))
            self.neighbours[self.parents[v]].append(v)

    def score(self, y):
        """Score of one labelling ``y (n,)``."""
        total = self.unary[np.arange(self.n), y].sum()
        for v in range(self.n):
            p = self.parents[v]
            if p >= 0:
                total += self.transitions[self.edge_types[v], y[p], y[v]]
        return total

    def nll(self, y):
        return self.log_z - self.score(np.asarray(y))

    def map_score(self):
        return self.scores.max()

    def node_indicators(self):
        """``(K**n, n*K)`` 0/1 matrix: column ``v*K + a`` is ``1(y_v = a)``."""
        n, k = self.n, self.k
        out = np.zeros((len(self.labellings), n * k))
        for v in range(n):
            out[np.arange(len(self.labellings)), v * k + self.labellings[:, v]] = 1.0
        return out

    def edge_indicators(self):
        """``(K**n, E*K*K)``: column ``e*K*K + a*K + b`` is ``1(y_p = a, y_v = b)``, edge ``e``."""
        k = self.k
        out = np.zeros((len(self.labellings), len(self.edges) * k * k))
        rows = np.arange(len(self.labellings))
        for e, v in enumerate(self.edges):
            p = self.parents[v]
            out[rows, e * k * k + self.labellings[:, p] * k + self.labellings[:, v]] = 1.0
        return out

    def _hessian(self, phi):
        """Covariance of the indicators ``phi`` under the model, centred and in long double.

        ``E[phi phi'] - mean mean'`` in float64 loses about 1e-16 to
        cancellation, which is a relative error of 1e-5 on a label whose
        ``H_ii`` is 1e-11 (peaked marginals): the exact bound of such a node
        then came out above the kernels' by 1.4e-5.
        """
        s = self.scores.astype(np.longdouble)
        p = np.exp(s - s.max())
        p /= p.sum()
        centred = phi.astype(np.longdouble) - p @ phi
        return ((centred * p[:, None]).T @ centred).astype(np.float64)

    def marginals(self):
        """``(n, K)`` node marginals."""
        return (self.prob @ self.node_indicators()).reshape(self.n, self.k)

    def edge_marginals(self):
        """``(n, K, K)``: row ``v`` is the joint of ``(parent(v), v)``; zero for roots."""
        out = np.zeros((self.n, self.k, self.k))
        for v in self.edges:
            p = self.parents[v]
            np.add.at(out[v], (self.labellings[:, p], self.labellings[:, v]), self.prob)
        return out

    @staticmethod
    def _ratio_max(h, groups, floor):
        """Per group of indicator indices: max over ``i`` of ``sum_j |H_ij| / H_ii``."""
        out = []
        for idx in groups:
            best = floor
            for i in idx:
                if h[i, i] >= 1e-12:
                    best = max(best, np.abs(h[i]).sum() / h[i, i])
            out.append(best)
        return np.array(out)

    def exact_gamma(self):
        """``(n,)`` smallest valid node bound; 2 where every label has ``H_ii < 1e-12``."""
        h = self._hessian(self.node_indicators())
        groups = [range(v * self.k, (v + 1) * self.k) for v in range(self.n)]
        return self._ratio_max(h, groups, 2.0)

    def exact_edge_gamma(self):
        """``(n,)`` smallest valid edge bound over edge indicators; 0 for roots."""
        out = np.zeros(self.n)
        if not self.edges:
            return out
        h = self._hessian(self.edge_indicators())
        kk = self.k * self.k
        groups = [range(e * kk, (e + 1) * kk) for e in range(len(self.edges))]
        out[self.edges] = self._ratio_max(h, groups, 0.0)
        return out

    def mixing_rate(self, s, v):
        """``alpha_{s,v} = 1 - sum_j min_i P(y_v = j | y_s = i)`` over possible ``i``.

        The conditionals come from log-space sums over labellings, so they stay
        exact when marginals underflow.
        """
        log_p = self.scores - self.log_z
        log_joint = np.full((self.k, self.k), -np.inf)
        for a in range(self.k):
            for b in range(self.k):
                hit = (self.labellings[:, s] == a) & (self.labellings[:, v] == b)
                if hit.any():
                    log_joint[a, b] = logsumexp(log_p[hit])
        log_marg = logsumexp(log_joint, axis=1)
        possible = log_marg > -np.inf
        cond = np.exp(log_joint[possible] - log_marg[possible, None])
        return 1.0 - cond.min(axis=0).sum()

    def _path(self, t, s):
        """Nodes on the tree path from ``t`` to ``s`` (inclusive), or None if unconnected."""
        came_from = {t: None}
        queue = [t]
        while queue:
            u = queue.pop()
            for w in self.neighbours[u]:
                if w not in came_from:
                    came_from[w] = u
                    queue.append(w)
        if s not in came_from:
            return None
        path = [s]
        while path[-1] != t:
            path.append(came_from[path[-1]])
        return path[::-1]

    def _path_product(self, t, s):
        path = self._path(t, s)
        if path is None:
            return 0.0
        return float(np.prod([self.mixing_rate(a, b) for a, b in zip(path[:-1], path[1:])]))

    def mixing_gamma(self):
        """``(n,)`` Theorem 4.1 by explicit paths: ``2 (1 + sum_{s != t} prod alpha)``."""
        return np.array(
            [
                2.0 * (1.0 + sum(self._path_product(t, s) for s in range(self.n) if s != t))
                for t in range(self.n)
            ]
        )

    def mixing_edge_gamma(self):
        """``(n,)`` edge bound by explicit paths; 0 for roots.

        For the edge ``(p, v)`` every other edge of its tree adds the product of
        rates from the nearer of ``p, v`` to that edge's near endpoint.
        """
        out = np.zeros(self.n)
        for v in self.edges:
            ends = (int(self.parents[v]), v)
            total = 1.0
            for f in self.edges:
                if f == v:
                    continue
                best = None
                for near in (int(self.parents[f]), f):
                    for end in ends:
                        path = self._path(end, near)
                        if path is not None and (best is None or len(path) < len(best)):
                            best = path
                if best is not None:
                    total += self._path_product(best[0], best[-1])
            out[v] = 2.0 * total
        return out
