"""Typed edge potentials of a tree CRF and the problem their solvers refit.

Each edge type owns a ``(K, K)`` potential shared by its edges. With the
node potentials fixed, the penalised NLL in ``theta (n_types, K, K)`` is::

    f(theta) = sum_i w_i (log Z_i - score_i) + reg / 2 * ||theta||^2

with gradient the per-type weighted edge marginals minus the observed pair
counts plus ``reg * theta``. The Newton curvature of a shared entry sums
``w gamma_e P_e (1 - P_e)`` over its edges
(:func:`structboost.inference.tree.tree_edge_gamma`).
"""

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from .base import PenalisedProblem, identity
from ..inference.tree import posterior


@dataclass
class TreeTransitionParams:
    """Edge potentials of a tree CRF, one ``(K, K)`` matrix per edge type.

    Attributes
    ----------
    transitions : (n_types, K, K) float64
        ``transitions[e, a, b]`` scores parent label ``a`` with child label
        ``b`` on an edge of type ``e``.
    """

    transitions: np.ndarray

    @classmethod
    def zeros(cls, num_labels, n_edge_types=1):
        """All-zero potentials (independent nodes)."""
        k = int(num_labels)
        return cls(np.zeros((int(n_edge_types), k, k)))

    @property
    def num_labels(self):
        return self.transitions.shape[1]

    @property
    def n_edge_types(self):
        return self.transitions.shape[0]

    def to_vector(self):
        """``(n_types * K * K,)`` vector ``transitions.ravel()``."""
        return self.transitions.ravel().copy()

    @classmethod
    def from_vector(cls, vec, num_labels):
        k = int(num_labels)
        return cls(np.ascontiguousarray(np.asarray(vec, dtype=np.float64).reshape(-1, k, k)))

    def copy(self):
        return TreeTransitionParams(self.transitions.copy())

    def to_dict(self):
        """JSON-ready dict; floats round-trip exactly through :func:`json.dumps`."""
        return {"edge_transitions": self.transitions.tolist()}

    @classmethod
    def from_dict(cls, d):
        return cls(np.ascontiguousarray(d["edge_transitions"], dtype=np.float64))


def _type_sum_matrix(batch, seq_weight):
    """Sparse ``(n_types, n_edges)`` weights summing edge rows per type, and the edge rows."""
    edges = np.flatnonzero(batch.gparent >= 0)
    row_w = np.repeat(seq_weight, np.diff(batch.offsets))[edges]
    n_types = batch.transitions.shape[0]
    mat = sparse.csr_matrix(
        (row_w, (batch.edge_types[edges], np.arange(edges.size))), shape=(n_types, edges.size)
    )
    return mat, edges


def tree_observed_counts(batch, labels, seq_weight):
    """Weighted observed ``(parent, child)`` label counts per edge type, ``(n_types * K * K,)`` in
    :meth:`TreeTransitionParams.to_vector` order.

    Parameters
    ----------
    batch : structboost.inference.tree.TreeBatch
    labels : (n,) int64
    seq_weight : (m,) float64
    """
    k = batch.unary.shape[1]
    mat, edges = _type_sum_matrix(batch, seq_weight)
    pair = labels[batch.gparent[edges]] * k + labels[edges]
    onehot = sparse.csr_matrix(
        (np.ones(edges.size), (np.arange(edges.size), pair)), shape=(edges.size, k * k)
    )
    return np.asarray((mat @ onehot).todense()).ravel()


class TreeTransitionProblem(PenalisedProblem):
    """The penalised NLL in the typed edge potentials, node potentials fixed.

    Parameters
    ----------
    batch : structboost.inference.tree.TreeBatch
        With the current node potentials as ``unary``.
    seq_weight : (m,) float64
    counts : (n_types * K * K,) float64
        From :func:`tree_observed_counts`.
    reg : float
    allreduce : callable, optional
    """

    param_type = TreeTransitionParams

    def __init__(self, batch, seq_weight, counts, reg, allreduce=identity):
        self.allreduce = allreduce
        self.batch = batch
        self.seq_weight = seq_weight
        self.counts = counts
        self.reg = float(reg)
        self.num_labels = batch.unary.shape[1]
        self._type_sum, self._edges = _type_sum_matrix(batch, seq_weight)

    def _posterior(self, params, rates, edges):  # both come from the tree's stored messages
        trans = np.ascontiguousarray(params.transitions, dtype=np.float64)
        return posterior(self.batch._replace(transitions=trans))

    def expected_counts(self, post, with_curvature=False):
        """Expected per-type counts ``(n_types * K * K,)`` and, on request, the curvature ``sum_e w
        gamma_e P_e (1 - P_e)``.
        """
        k = self.num_labels
        pair = post.edge_marginals()[self._edges].reshape(-1, k * k)
        expected = (self._type_sum @ pair).ravel()
        if not with_curvature:
            return expected, None
        gamma = post.edge_gamma()[self._edges]
        curvature = (self._type_sum @ (gamma[:, None] * pair * (1.0 - pair))).ravel()
        return expected, curvature
