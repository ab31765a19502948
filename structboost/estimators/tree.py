"""Scikit-learn estimator for tree-structured CRFs boosted with XGBoost.

Each row is one node of one tree instance, the rows of an instance
contiguous, ``parents`` each node's parent within its instance (``-1`` for a
root); otherwise the input dialects of the chain estimators.
"""

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from .._typing import ArrayLike, Floats
from ..features import canonical_sparse
from ..engines.predict import predict_tree, predict_tree_marginals, tree_log_likelihood
from ..engines.xgboost import load_state
from ..engines.xgboost_tree import TREE_STATE_KEY, tree_crf_objective, tree_dmatrix
from ..objectives.params import DEFAULTS, TREE_SOLVERS, fill_doc
from ..transitions.tree import TreeTransitionParams
from ._docs import FIT_ATTRIBUTES, ROUNDS_PARAMS, SEQUENCE_PARAMS, VERBOSE
from .base import BoostedCRFClassifier, keep_params
from .inputs import flatten_y, nest
from .xgboost_training import XGBoostTraining

_Self = TypeVar("_Self", bound="TreeCRFClassifier")


@fill_doc("mode", "hessian_bound", "step", "transition_solver", "reg_transitions",
          solvers=TREE_SOLVERS, rounds_params=ROUNDS_PARAMS, sequence_params=SEQUENCE_PARAMS,
          fit_attributes=FIT_ATTRIBUTES)  # fmt: skip
class TreeCRFClassifier(XGBoostTraining, BoostedCRFClassifier):
    """Gradient-boosted tree CRF (GBCRF, TreeCRF or LogitBoost modes) on XGBoost.

    Parameters
    ----------
    {objective_params}
    {rounds_params}
    learning_rate : float
        XGBoost's ``eta``.
    max_depth : int
    n_edge_types : int, optional
        Number of edge types; inferred as ``max(edge_types) + 1`` when None.
        Set it when test trees may use types absent from training.
    {sequence_params}
    callbacks : list of xgboost.callback.TrainingCallback, optional
        Run after the one that stores the potentials.
    **kwargs
        Any other XGBoost parameter (``min_child_weight``, ``subsample``,
        ``random_state``, ...). ``n_jobs`` sets the threads of XGBoost and
        of the objective's numba kernels (None: one, -1: every core).

    Attributes
    ----------
    booster_ : xgboost.Booster
        Carries the edge potentials; :func:`structboost.xgboost.predict_tree` accepts it.
    n_edge_types_ : int
    {fit_attributes}
    """

    def __init__(self, *, mode: str = DEFAULTS["mode"],
                 hessian_bound: str | float = DEFAULTS["hessian_bound"],
                 step: str = DEFAULTS["step"],
                 transition_solver: str = DEFAULTS["transition_solver"],
                 reg_transitions: float = DEFAULTS["reg_transitions"],
                 n_estimators: int | None = None, learning_rate: float = 0.3, max_depth: int = 6,
                 n_edge_types: int | None = None, early_stopping_rounds: int | None = None,
                 early_stopping: str | bool = "auto", validation_fraction: float = 0.1,
                 n_iter_no_change: int = 30, refit: bool = True, class_weight: Any = None,
                 sequence_column: str | None = None, eval_metric: Any = None,
                 callbacks: Sequence[Any] | None = None, **kwargs: Any) -> None:
        keep_params(self, locals())

    _structure = ("parents", "edge_types")

    def _validate(self, X, reset):
        """Validated features (DataFrames become arrays; sparse and NaN accepted)."""
        return canonical_sparse(validate_data(self, X, reset=reset, accept_sparse=("csr", "csc"),
                                              ensure_all_finite=False))

    def _fit_structure(self, rows):
        """Set ``n_edge_types_``."""
        if self.n_edge_types is not None:
            self.n_edge_types_ = int(self.n_edge_types)
        elif rows.edge_types is None or not len(rows.edge_types):
            self.n_edge_types_ = 1
        else:
            self.n_edge_types_ = int(np.max(rows.edge_types)) + 1
        return {}

    def _objective(self, n_classes, spec):
        """The tree CRF objective."""
        return tree_crf_objective(n_classes, self.n_edge_types_, spec)

    @staticmethod
    def _dmatrix(rows, n_classes):
        """The training DMatrix of LabelledRows."""
        return tree_dmatrix(rows.X, rows.codes, rows.lengths, rows.parents, rows.edge_types,
                            weight=rows.seq_weight)  # fmt: skip

    @fill_doc(verbose=VERBOSE)
    def fit(self: _Self, X: Any, y: Any, *, parents: ArrayLike, edge_types: ArrayLike | None = None,
            groups: ArrayLike | str | None = None, lengths: ArrayLike | None = None,
            sample_weight: ArrayLike | None = None, eval_set: Sequence[Any] | None = None,
            verbose: bool | int | None = None) -> _Self:
        """Fit on tree instances.

        Parameters
        ----------
        X : (n, d) array-like or scipy sparse matrix, or list
            One row per node, the rows of an instance contiguous; or one
            entry per instance (2-D arrays or lists of feature dicts).
        y : (n,) array-like, or list of label lists
            Labels of any hashable type.
        parents : (n,) array-like of int, or list of ``(n_i,)`` arrays
            Parent of each row within its instance, ``-1`` for a root.
        edge_types : (n,) array-like of int, or list of ``(n_i,)`` arrays, optional
        groups : (n,) array-like, optional
            Per-row instance id (rows of an instance contiguous).
        lengths : (m,) array-like of int, optional
            Rows per instance (alternative to ``groups``).
        sample_weight : (n,) array-like, optional
            Per-row weights, equal within each instance.
        eval_set : list of tuple or dict, optional
            ``(X, y, groups_or_lengths, parents[, edge_types])`` tuples or
            dicts with those keys (and optionally ``"name"``); the last one
            drives early stopping.
        {verbose}

        Returns
        -------
        self
        """
        return self._fit(X, y, eval_set, verbose, parents=parents, edge_types=edge_types,
                         groups=groups, lengths=lengths, sample_weight=sample_weight)  # fmt: skip

    def _load_state(self):
        """The booster's tree CRF state."""
        return load_state(self.booster_, TREE_STATE_KEY, TreeTransitionParams,
                          "tree_crf_objective")  # fmt: skip

    def _state_loaded(self, state):
        """Set ``n_edge_types_`` from the loaded potentials."""
        found = state[2].n_edge_types
        if self.n_edge_types is not None and self.n_edge_types != found:
            raise ValueError(f"damaged: n_edge_types is {self.n_edge_types} but its CRF has "
                             f"potentials for {found} edge types.")
        self.n_edge_types_ = found

    def _run(self, engine_fn, X, parents, edge_types, groups, lengths, y=None):
        """``engine_fn`` on one prediction's instances (label codes after ``X`` when ``y`` is
        given): its result and the LabelledRows.
        """
        check_is_fitted(self)
        r = self._rows(X, y, groups=groups, lengths=lengths, parents=parents,
                       edge_types=edge_types)  # fmt: skip
        codes = () if y is None else (r.codes,)
        return engine_fn(self.booster_, r.X, *codes, r.lengths, r.parents, r.edge_types), r

    def predict(self, X: Any, *, parents: ArrayLike, edge_types: ArrayLike | None = None,
                groups: ArrayLike | str | None = None, lengths: ArrayLike | None = None) -> Any:
        """MAP labelling of every tree, ``(n,)`` in the original labels.

        Returns
        -------
        (n,) ndarray, or a list of label lists when ``X`` was a list of instances
        """
        codes, r = self._run(predict_tree, X, parents, edge_types, groups, lengths)
        return nest(self.classes_[codes], r.lengths) if r.nested else self.classes_[codes]

    def predict_marginals(self, X: Any, *, parents: ArrayLike, edge_types: ArrayLike | None = None,
                          groups: ArrayLike | str | None = None,
                          lengths: ArrayLike | None = None) -> Any:
        """Node marginals ``(n, K)`` in ``classes_`` order.

        Returns
        -------
        (n, K) ndarray, or a list of ``(n_i, K)`` arrays when ``X`` was a list of instances
        """
        marginals, r = self._run(predict_tree_marginals, X, parents, edge_types, groups, lengths)
        return nest(marginals, r.lengths, as_lists=False) if r.nested else marginals

    def predict_proba(self, X: Any, *, parents: ArrayLike, edge_types: ArrayLike | None = None,
                      groups: ArrayLike | str | None = None,
                      lengths: ArrayLike | None = None) -> Any:
        """scikit-learn's name for :meth:`predict_marginals`."""
        return self.predict_marginals(X, parents=parents, edge_types=edge_types, groups=groups,
                                      lengths=lengths)  # fmt: skip

    def predict_log_likelihood(self, X: Any, y: Any, *, parents: ArrayLike,
                               edge_types: ArrayLike | None = None,
                               groups: ArrayLike | str | None = None,
                               lengths: ArrayLike | None = None) -> Floats:
        """``log P(y | x)`` of every instance, ``(m,)``."""
        return self._run(tree_log_likelihood, X, parents, edge_types, groups, lengths, y)[0]

    def score(self, X: Any, y: Any, *, parents: ArrayLike, edge_types: ArrayLike | None = None,
              groups: ArrayLike | str | None = None, lengths: ArrayLike | None = None,
              sample_weight: ArrayLike | None = None) -> float:
        """Node accuracy of the MAP labelling (weighted by ``sample_weight`` per row)."""
        codes, r = self._run(predict_tree, X, parents, edge_types, groups, lengths)
        truth = np.asarray(flatten_y(y, r.lengths) if r.nested else y)
        weights = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        return float(np.average(self.classes_[codes] == truth, weights=weights))
