"""Boosted, input-dependent transitions: Dietterich et al.'s ``F^v(u, X_t)``.

One booster scores *edge rows*: per position ``t`` and possible previous
label ``u`` one row whose ``K`` outputs are ``F^v(u, X_t)``, the score of
moving from ``u`` into ``v``. A first position has one row (``u`` = start),
every other ``K``, so a sequence of length ``L`` has ``1 + (L - 1) K`` rows,
in this order. A labelling scores ``sum_t F^{y_t}(y_{t-1}, X_t)``: the chain
of :mod:`structboost.inference.chain` with node scores ``F(start, X_0)`` on
first rows (zero elsewhere) and tables ``T_t[u, v] = F^v(u, X_t)``.

Gradient and Hessian
--------------------
Each edge row and output is an indicator ``1[y_{t-1} = u, y_t = v]`` with
marginal ``p``; G is ``p - 1[observed]``. H is 1 (``"treecrf"``) or
``gamma p (1 - p)`` (``"gbcrf"``) with ``gamma`` bounding ``sum_j |H_ij| /
H_ii`` over all the sequence's features (Chen et al. 2015, Corollary 3.1):

* edge ``(t - 1, t)``: ``2 (3 + to_left[t - 1] + to_right[t])``, the chain
  edge bound of Theorem 4.2 (:meth:`ChainPosterior.edge_gamma`);
* first row: ``2 (1 + to_right[0]) + 2 [L > 1]``;
* ``hessian_bound="length"``: ``2 L`` for every feature.
"""

import time

import numpy as np

from ..inference.chain import map_labels, path_scores, posterior
from ..sequences import offsets_from_lengths
from .chain import CRFObjective
from .round import Hessian, NodeObjective


def edge_layout(offsets, num_labels):
    """Where each position's edge rows start, from position ``offsets (m + 1,)``.

    Returns
    -------
    first_row : (n,) int64
        Edge row of ``(t, start)`` on a first position, of ``(t, u = 0)``
        otherwise.
    is_first : (n,) bool
    n_rows : int
        ``sum_i 1 + (L_i - 1) K``.
    """
    is_first = np.zeros(int(offsets[-1]), dtype=bool)
    is_first[offsets[:-1]] = True
    rows = np.where(is_first, 1, int(num_labels))
    ends = np.cumsum(rows)
    return ends - rows, is_first, int(ends[-1]) if ends.size else 0


def edge_row_counts(lengths, num_labels):
    """Edge rows per sequence ``(m,)``: ``1 + (L - 1) K``."""
    return 1 + (np.asarray(lengths, dtype=np.int64) - 1) * int(num_labels)


def edge_positions(lengths, num_labels):
    """Position ``(r,)`` and previous label ``(r,)`` of every edge row (``K`` = start)."""
    k = int(num_labels)
    first_row, is_first, _ = edge_layout(offsets_from_lengths(lengths), k)
    rows = np.where(is_first, 1, k)
    position = np.repeat(np.arange(first_row.shape[0]), rows)
    previous = np.arange(position.shape[0]) - first_row[position]
    previous[is_first[position]] = k
    return position, previous


def edge_potentials(scores, offsets, num_labels):
    """Chain potentials of edge-row scores ``(r, K)`` (layout in the module notes).

    Returns
    -------
    unary : (n, K) float64
        ``F(start, X_t)`` on first positions, zero elsewhere.
    transitions : (n, K, K) float64
        ``transitions[t, u, v] = F^v(u, X_t)``; zero on first positions.
    """
    k = int(num_labels)
    first_row, is_first, n_rows = edge_layout(offsets, k)
    if scores.shape != (n_rows, k):
        raise ValueError(
            f"the booster scored {scores.shape} but {len(offsets) - 1} sequences of "
            f"{int(offsets[-1])} positions have {n_rows} edge rows of {k} labels: "
            "build the data with structboost.xgboost.edge_dmatrix(..., num_labels=K)."
        )
    n = first_row.shape[0]
    unary = np.zeros((n, k))
    unary[is_first] = scores[first_row[is_first]]
    transitions = np.zeros((n, k, k))
    inner = np.flatnonzero(~is_first)
    transitions[inner] = scores[first_row[inner][:, None] + np.arange(k)]
    return unary, transitions


class EdgeCRFObjective(CRFObjective):
    """Gradient and Hessian of the chain-CRF NLL in the edge-row scores ``(r, K)``.

    ``batch`` is a :class:`~structboost.objectives.chain.SequenceBatch` of the
    *positions*. ``params`` stays fixed (zero, ``-inf`` where
    ``allowed_transitions`` forbids), added to the boosted scores.

    Parameters
    ----------
    num_labels : int
    spec : ObjectiveSpec, optional
        With ``transitions_from="input"``: modes ``"gbcrf"`` and ``"treecrf"``;
        transition-solver settings are refused.
    **params
        Fields of the spec changed from ``spec`` (or the defaults).
    """

    def __init__(self, num_labels, spec=None, **params):
        if spec is None:
            params.setdefault("transitions_from", "input")
        NodeObjective.__init__(self, num_labels, spec, **params)
        self.spec.check_route("input", type(self).__name__)
        self._resolve_constraints()

    def potentials(self, margins, batch):
        """Node scores ``(n, K)`` and per-position transitions ``(n, K, K)``, constraints applied."""
        unary, trans = edge_potentials(self.check_margins(margins), batch.offsets, self.num_labels)
        trans += self.params.transitions
        return unary, trans

    def posterior(self, margins, batch, rates=False):
        """:class:`~structboost.inference.chain.ChainPosterior` of the edge-row scores."""
        unary, trans = self.potentials(margins, batch)
        return posterior(unary, batch.offsets, trans, self.params.start, self.params.end, rates=rates)

    def grad_hess(self, margins, batch):
        """Gradient and Hessian ``(r, K)`` of the weighted NLL in the edge-row scores."""
        self._check_allowed(batch)
        with self.threads():
            t0 = time.process_time()
            k = self.num_labels
            offsets, y = batch.offsets, batch.labels
            first_row, is_first, n_rows = edge_layout(offsets, k)
            post = self.posterior(margins, batch, rates=self._rates())
            p_node = post.marginals()
            pair = post.edge_marginals()
            t1 = time.process_time()
            first = np.flatnonzero(is_first)
            inner = np.flatnonzero(~is_first)
            rows_inner = first_row[inner][:, None] + np.arange(k)
            prob = np.empty((n_rows, k))
            prob[first_row[first]] = p_node[first]
            prob[rows_inner] = pair[inner - 1]
            grad = prob.copy()
            grad[first_row[first], y[first]] -= 1.0
            grad[first_row[inner] + y[inner - 1], y[inner]] -= 1.0
            if self.hessian is Hessian.UNIT:
                hess = np.ones_like(prob)
            else:
                hess = prob * (1.0 - prob)
                hess *= self._edge_gamma(post, batch, first_row, is_first)[:, None]
            np.maximum(hess, self.spec.hess_floor, out=hess)
            row_w = np.repeat(batch.seq_weight, edge_row_counts(batch.lengths, k))[:, None]
            grad *= row_w
            hess *= row_w
            self.timings["inference"] += t1 - t0
            self.timings["gamma"] += time.process_time() - t1
            return grad, hess

    def _edge_gamma(self, post, batch, first_row, is_first):
        """The bound ``gamma`` of every edge row ``(r,)`` (module notes)."""
        k = self.num_labels
        lengths = batch.lengths
        counts = edge_row_counts(lengths, k)
        bound = self.spec.hessian_bound
        if not isinstance(bound, str):
            return np.full(int(counts.sum()), bound)
        if bound == "length":
            return np.repeat(2.0 * lengths, counts).astype(np.float64)
        per_position = np.empty(is_first.shape[0])
        edge = post.edge_gamma()
        per_position[1:] = edge[:-1]
        first = np.flatnonzero(is_first)
        per_position[first] = post.node_gamma("mixing")[first] + 2.0 * (lengths > 1)
        return np.repeat(per_position, np.where(is_first, 1, k))

    def sequence_nll(self, margins, batch):
        """Per-sequence negative log-likelihood ``(m,)`` of the edge-row scores."""
        self._check_allowed(batch)
        unary, trans = self.potentials(margins, batch)
        p = self.params
        post = posterior(unary, batch.offsets, trans, p.start, p.end, keep_messages=False)
        return post.log_z - path_scores(unary, batch.offsets, batch.labels, trans, p.start, p.end)

    def marginals(self, margins, batch):
        """Node marginals ``(n, K)`` of the positions."""
        return self.posterior(margins, batch).marginals()

    def decode(self, margins, batch):
        """Viterbi labels ``(n,)`` of the edge-row scores."""
        unary, trans = self.potentials(margins, batch)
        return map_labels(unary, batch.offsets, trans, self.params.start, self.params.end)
