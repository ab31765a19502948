"""The CRF boosting objective on trees with typed edges (modes as
:class:`~structboost.objectives.round.NodeObjective`).

Each row is a node with ``parents`` (within its instance, ``-1`` for a
root) and ``edge_types``; each type's ``(K, K)`` potential is refit every
round (:class:`~structboost.transitions.tree.TreeTransitionProblem`).
"""

from dataclasses import dataclass

import numpy as np

from ..inference.tree import TreeBatch, check_tree, label_scores, map_labels, posterior
from ..sequences import check_labels, check_lengths
from ..transitions.tree import TreeTransitionParams, TreeTransitionProblem, tree_observed_counts
from .base import check_sequence_weights
from .params import TREE_SOLVERS
from .round import NodeObjective


@dataclass
class TreeLabelBatch:
    """Validated labels, tree structure and weights of one dataset.

    Attributes
    ----------
    labels : (n,) int64
    structure : TreeBatch
        Parents, order, children and edge types (zero ``unary`` and
        ``transitions`` placeholders, replaced every round).
    seq_weight : (m,) float64
    counts : (n_types * K * K,) float64
        Weighted observed pair counts per edge type.
    """

    labels: np.ndarray
    structure: TreeBatch
    seq_weight: np.ndarray
    counts: np.ndarray

    @classmethod
    def build(
        cls, labels, lengths, parents, num_labels, n_edge_types=1, edge_types=None, seq_weight=None
    ):
        """Validate labels ``(n,)``, lengths ``(m,)``, parents ``(n,)``, edge types
        (``0..n_edge_types-1``, None: 0) and weights.
        """
        n = len(labels)
        lengths = check_lengths(lengths, n)
        y = check_labels(labels, num_labels, n)
        k = int(num_labels)
        structure = check_tree(
            np.zeros((n, k)), lengths, parents, np.zeros((int(n_edge_types), k, k)), edge_types
        )
        w = check_sequence_weights(seq_weight, lengths)
        return cls(y, structure, w, tree_observed_counts(structure, y, w))

    @property
    def offsets(self):
        return self.structure.offsets

    @property
    def lengths(self):
        return self.structure.lengths

    def with_potentials(self, unary, transitions):
        """The structure with node potentials ``(n, K)`` and edge potentials set."""
        return self.structure._replace(unary=unary, transitions=transitions)


class TreeCRFObjective(NodeObjective):
    """Gradient and Hessian of the tree-CRF negative log-likelihood.

    Parameters
    ----------
    num_labels : int
    n_edge_types : int
        Edge types, each with its own ``(K, K)`` potential.
    spec : ObjectiveSpec, optional
    **params
        As for :class:`~structboost.objectives.round.NodeObjective` (solvers
        ``"lbfgs"``, ``"newton"``; no constraints).

    Attributes
    ----------
    params : TreeTransitionParams
    """

    solvers = TREE_SOLVERS

    def __init__(self, num_labels, n_edge_types=1, spec=None, **params):
        if int(n_edge_types) != n_edge_types or n_edge_types < 1:
            raise ValueError(f"n_edge_types must be a positive integer; got {n_edge_types!r}.")
        self.n_edge_types = int(n_edge_types)
        super().__init__(num_labels, spec, **params)
        self.spec.check_route("linear", type(self).__name__)
        if self.spec.allowed_transitions is not None:
            raise ValueError(
                "allowed_transitions constrains chains; a tree CRF takes none: leave it None."
            )

    def _zero_params(self):
        return TreeTransitionParams.zeros(self.num_labels, self.n_edge_types)

    def _check_batch(self, batch):
        n_types = batch.structure.transitions.shape[0]
        if n_types != self.n_edge_types:
            raise ValueError(
                f"the data was built for {n_types} edge type(s) but the objective has "
                f"n_edge_types={self.n_edge_types}; build both with the same number."
            )

    def _problem(self, unary, batch):
        self._check_batch(batch)
        unary = np.ascontiguousarray(unary, dtype=np.float64)  # one block: the whole batch
        return TreeTransitionProblem(
            batch.with_potentials(unary, self.params.transitions), batch.seq_weight, batch.counts,
            self.spec.reg_transitions, allreduce=self.allreduce
        )

    def _structure(self, margins, batch):
        self._check_batch(batch)
        return batch.with_potentials(self.check_margins(margins), self.params.transitions)

    def sequence_nll(self, margins, batch):
        """Per-instance negative log-likelihood ``(m,)`` under the current potentials."""
        b = self._structure(margins, batch)
        return posterior(b).log_z - label_scores(b, batch.labels)

    def marginals(self, margins, batch):
        """Node marginals ``(n, K)`` under the current potentials."""
        return posterior(self._structure(margins, batch)).marginals()

    def decode(self, margins, batch):
        """MAP labels ``(n,)`` of every tree under the current potentials."""
        return map_labels(self._structure(margins, batch))
