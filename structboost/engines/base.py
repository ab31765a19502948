"""What the engine adapters share: one CRF objective, cached data, the metric.

An engine adapter (:mod:`structboost.engines.xgboost`, :mod:`structboost.engines.lightgbm`)
only reads labels, sequence boundaries and weights out of the engine's data
object; everything else happens here and in
:class:`~structboost.objectives.chain.CRFObjective`.
"""

import weakref
from abc import ABC, abstractmethod
from typing import Any

from .. import _compile_log
from ..objectives.chain import SequenceBatch
from ..sequences import check_lengths, sequence_weights


def build_batch(num_labels, labels, lengths, row_weight=None, seq_weight=None):
    """A :class:`~structboost.objectives.chain.SequenceBatch` from engine arrays ``labels (n,)``,
    ``lengths (m,)`` and either ``row_weight (n,)`` (constant within a sequence) or ``seq_weight (m,)``.
    """
    if row_weight is not None and len(row_weight):
        seq_weight = sequence_weights(row_weight, check_lengths(lengths, len(labels)))
    return SequenceBatch.build(labels, lengths, num_labels, seq_weight)


class EngineObjective(ABC):
    """Base of the engine objectives: ``obj(preds, data) -> (grad, hess)``.

    Parameters
    ----------
    crf : CRFObjective
        The engine-agnostic objective (its ``spec``, the transitions, timings);
        :meth:`evaluate` reports ``crf.spec.metric``.
    """

    #: Keywords of ``crf.grad_hess`` for the dtype and memory order of the G
    #: and H handed to the engine (see :meth:`NodeObjective.grad_hess
    #: <structboost.objectives.round.NodeObjective.grad_hess>`); none: fresh
    #: float64 rows.
    grad_layout: dict[str, Any] = {}

    def __init__(self, crf):
        self.crf = crf
        self._batches = weakref.WeakKeyDictionary()

    @property
    def num_labels(self):
        return self.crf.num_labels

    @property
    def spec(self):
        """The objective's :class:`~structboost.objectives.params.ObjectiveSpec`."""
        return self.crf.spec

    @property
    def params(self):
        """Current :class:`~structboost.transitions.chain.TransitionParams`."""
        return self.crf.params

    @abstractmethod
    def _build_batch(self, data):
        """Labels, structure and weights of an engine data object, validated."""

    def batch(self, data):
        """The validated batch of an engine data object, cached per object."""
        batch = self._batches.get(data)
        if batch is None:
            batch = self._build_batch(data)
            self._batches[data] = batch
        return batch

    def __call__(self, preds, data):
        """Refit the transitions; the node gradient and Hessian, both ``(n, K)``."""
        with _compile_log.listening():  # the first round compiles: say so
            return self.crf.grad_hess(preds, self.batch(data), **self.grad_layout)

    def evaluate(self, preds, data):
        """``(name, value)`` of the CRF metric on an engine data object."""
        return self.crf.evaluate(preds, self.batch(data))
