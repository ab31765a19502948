"""The chain-CRF boosting objective: node potentials and sequences in, G and H out (the round:
:class:`~.round.NodeObjective`).
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._typing import Floats, Ints
from ..inference.chain import forward_backward, map_labels, path_scores
from ..sequences import check_labels, check_lengths, offsets_from_lengths
from ..transitions.chain import TransitionParams, TransitionProblem, observed_counts
from .base import check_sequence_weights, row_blocks
from .params import ObjectiveSpec
from .constraints import resolve as resolve_constraints
from .round import NodeObjective


@dataclass
class SequenceBatch:
    """Validated labels and sequence structure of one dataset.

    Attributes
    ----------
    labels : (n,) int64
    offsets : (m + 1,) int64
    seq_weight : (m,) float64
    counts : (K*K + 2K,) float64
        Weighted observed transition, start and end counts.
    """

    labels: np.ndarray
    offsets: np.ndarray
    seq_weight: np.ndarray
    counts: np.ndarray

    @classmethod
    def build(cls, labels, lengths, num_labels, seq_weight=None):
        """Validate ``labels (n,)``, ``lengths (m,)`` and optional ``seq_weight (m,)``."""
        n = len(labels)
        lengths = check_lengths(lengths, n)
        y = check_labels(labels, num_labels, n)
        offsets = offsets_from_lengths(lengths)
        w = check_sequence_weights(seq_weight, lengths)
        return cls(y, offsets, w, observed_counts(y, offsets, w, num_labels))

    @property
    def lengths(self):
        return np.diff(self.offsets)


class CRFObjective(NodeObjective):
    """Gradient and Hessian of the chain-CRF negative log-likelihood.

    Parameters as :class:`NodeObjective`; the transitions are a
    :class:`~structboost.transitions.chain.TransitionParams` and ``batch`` a
    :class:`SequenceBatch`. ``spec.allowed_transitions`` keeps forbidden scores
    at ``-inf`` through training (training labels must obey them); in
    ``"logitboost"`` mode only the metric and decoding use them.

    Attributes
    ----------
    constraints : Constraints or None
    """

    def __init__(self, num_labels: int, spec: ObjectiveSpec | None = None, **params: Any) -> None:
        super().__init__(num_labels, spec, **params)
        self.spec.check_route("linear", type(self).__name__)
        self._resolve_constraints()

    def _resolve_constraints(self):
        """Constraints from ``spec.allowed_transitions``; the parameters start from them."""
        self.constraints = resolve_constraints(self.spec.allowed_transitions, self.num_labels)
        self._workspace = None
        self.start_from(self.params)

    def start_from(self, params: TransitionParams) -> None:
        """Continue from a copy of ``params`` (TransitionParams), the constraints applied."""
        self.params = params.copy() if self.constraints is None else self.constraints.apply(params)

    def _zero_params(self):
        return TransitionParams.zeros(self.num_labels)

    def _check_allowed(self, batch):
        """Raise if the labels of ``batch`` make a move the constraints forbid."""
        if self.constraints is not None:
            if (batch.counts[~self.constraints.free_vector()] > 0).any():
                self.constraints.check_labels(batch.labels, batch.lengths)

    def __getstate__(self):
        state = super().__getstate__()
        state["_workspace"] = None  # buffers, rebuilt on the next round
        return state

    def _problem(self, unary, batch):
        free = None if self.constraints is None else self.constraints.free_vector()
        problem = TransitionProblem(
            unary, batch.offsets, batch.seq_weight, batch.counts, self.spec.reg_transitions, free,
            workspace=self._workspace, allreduce=self.allreduce,
            # only the exact node bound reads the stored messages after a pass
            keep_messages=self.spec.hessian_bound == "exact",
        )
        self._workspace = problem.workspace  # kept across rounds
        return problem

    def grad_hess(
        self, margins: Any, batch: Any, dtype: Any = np.float64, order: str = "C"
    ) -> tuple[Any, Any]:
        """As :meth:`NodeObjective.grad_hess`, after checking the labels against the constraints."""
        self._check_allowed(batch)
        return super().grad_hess(margins, batch, dtype, order)

    def sequence_nll(self, margins: Any, batch: Any) -> Floats:
        """Per-sequence NLL ``(m,)`` under the current transitions, ``margins (n, K)`` read block by
        block as :meth:`grad_hess` does.
        """
        self._check_allowed(batch)
        u = self.margin_rows(margins)
        p = self.params
        log_z = self._problem(u, batch).evaluate(p).log_z
        return log_z - path_scores(u, batch.offsets, batch.labels, p.transitions, p.start, p.end)

    def marginals(self, margins: Any, batch: Any) -> Floats:
        """Node marginals ``(n, K)`` under the current transitions."""
        p = self.params
        u = self.check_margins(margins)
        return forward_backward(u, batch.lengths, p.transitions, p.start, p.end)[1]

    def decode(self, margins: Any, batch: Any) -> Ints:
        """Viterbi labels ``(n,)`` of the sequences of ``batch``, block by block (see
        :meth:`sequence_nll`).
        """
        u = self.margin_rows(margins)
        p = self.params
        offsets = batch.offsets
        labels = np.empty(u.shape[0], dtype=np.int64)
        for rows, seqs in row_blocks(offsets, u.shape):
            block = np.ascontiguousarray(u[rows], dtype=np.float64)
            block_offsets = offsets[seqs.start : seqs.stop + 1] - offsets[seqs.start]
            labels[rows] = map_labels(block, block_offsets, p.transitions, p.start, p.end)
        return labels
