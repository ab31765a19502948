"""Scikit-learn estimator for tree-structured CRFs boosted with XGBoost.

Each row is one node of one tree instance; rows of an instance are
contiguous and ``parents`` gives each node's parent within its instance
(``-1`` for a root). Labels may be of any hashable type (``classes_``).
The estimator speaks the dialect of the chain estimators
(:mod:`structboost.estimators.base`): instances are given by ``groups`` or
``lengths``, or ``X`` is a list of instances (with ``y``, ``parents`` and
``edge_types`` flat or lists alike), and ``eval_set`` entries are ``(X, y,
groups_or_lengths, parents[, edge_types])`` tuples or dicts.
"""

from collections.abc import Sequence
from typing import Any, TypeVar
import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from .._typing import ArrayLike, Floats
from ..features import canonical_sparse
from ..engines.xgboost import xgb_params
from ..engines.predict import predict_tree, predict_tree_marginals, tree_log_likelihood
from ..engines.xgboost import load_state
from ..engines.xgboost_tree import TREE_STATE_KEY, tree_crf_objective, tree_dmatrix
from ..objectives.params import DEFAULTS, TREE_SOLVERS, fill_doc
from ..sequences import sequence_weights
from ..transitions.tree import TreeTransitionParams
from .base import (
    HELD_OUT_NAME,
    BoostedCRFClassifier,
    all_or_nothing,
    eval_metrics,
    keep_params,
    round_logging,
    split_sequences,
)
from .xgboost_training import XGBoostTraining
from ._docs import STOPPING_PARAMS
from .inputs import ListInputs, flatten_y, nest
from .model_file import ModelFile

_STRUCTURE = ("parents", "edge_types")


def _edge_type_count(edge_types, given):
    if given is not None:
        return int(given)
    if edge_types is None:
        return 1
    return int(np.max(edge_types)) + 1 if len(edge_types) else 1


def _flat_structure(parents, edge_types, lengths):
    """``parents`` and ``edge_types`` ``(n,)``, flat or given as one array per instance."""
    if parents is None:
        raise ValueError("parents is required: the parent of each row within its instance.")
    parents = flatten_y(parents, lengths, "parents")
    return parents, None if edge_types is None else flatten_y(edge_types, lengths, "edge_types")


_Self = TypeVar("_Self", bound="TreeCRFClassifier")


@fill_doc("mode", "hessian_bound", "step", "transition_solver", "reg_transitions",
          solvers=TREE_SOLVERS, stopping_params=STOPPING_PARAMS)  # fmt: skip
class TreeCRFClassifier(ModelFile, ListInputs, XGBoostTraining, BoostedCRFClassifier):
    """Gradient-boosted tree CRF (GBCRF, TreeCRF or LogitBoost modes) on XGBoost.

    Parameters
    ----------
    {objective_params}
    n_estimators : int, optional
        Most boosting rounds; None: 1000 when automatic early stopping ends
        the fit (see ``early_stopping``), 100 otherwise.
    learning_rate : float
        XGBoost's ``eta``.
    max_depth : int
    n_edge_types : int, optional
        Number of edge types; inferred as ``max(edge_types) + 1`` when None.
        Set it when test trees may use types absent from training.
    early_stopping_rounds : int, optional
        Stop when the last ``eval_metric`` on the last ``eval_set`` entry
        has not improved for this many rounds; predictions then use the best
        round and its potentials.
    {stopping_params}
    sequence_column : str, optional
        DataFrame column holding the per-row instance id, read on every call
        (never a feature); see :mod:`structboost.estimators.base`.
    eval_metric : str, callable or list of them, optional
        ``"crf-nll"`` (default; ``["crf-nll", "crf-error"]`` on held-out
        instances), ``"crf-error"`` or callables ``f(y_true,
        y_proba[, sample_weight=])`` of the node marginals, as in
        :class:`structboost.XGBCRFClassifier`; the last drives early stopping.
    callbacks : list of xgboost.callback.TrainingCallback, optional
        Run after the one that stores the potentials.
    **kwargs
        Any other XGBoost parameter (``min_child_weight``, ``subsample``,
        ``random_state``, ...). ``n_jobs`` sets the threads of XGBoost and
        of the objective's numba kernels (None: one, -1: every core).

    Attributes
    ----------
    classes_ : (K,) ndarray
    booster_ : xgboost.Booster
        Carries the edge potentials; :func:`structboost.xgboost.predict_tree` accepts it.
    n_edge_types_ : int
    best_iteration_ : int
        0-based index of the last round the model uses.
    evals_result_ : dict
        ``eval_metric`` per round for each ``eval_set`` entry (``validation_i``
        or the entry's ``"name"``).
    best_score_ : float
        The stopping metric on the last ``eval_set`` entry at
        ``best_iteration_`` (only with an ``eval_set``).
    validation_sequences_ : (v,) int64 ndarray
        Positions of the training instances held out by automatic early
        stopping (empty when none were).
    validation_best_iteration_ : int or None
        The 0-based round at which the metric on the held-out instances was
        best; with ``refit=True`` the final model keeps that count scaled by
        ``1 / (1 - validation_fraction)``. None when nothing was held out.
    n_classes_ : int
    feature_importances_ : ndarray, shape ``(n_features_in_,)``
    n_features_in_ : int

    Notes
    -----
    ``save_model(path)`` writes the fitted estimator as one JSON file and
    ``load_model(path)`` reads it back (validated; reading runs no code), as
    for :class:`structboost.XGBCRFClassifier`.
    """

    def __init__(
        self,
        *,
        mode: str = DEFAULTS["mode"],
        hessian_bound: str | float = DEFAULTS["hessian_bound"],
        step: str = DEFAULTS["step"],
        transition_solver: str = DEFAULTS["transition_solver"],
        reg_transitions: float = DEFAULTS["reg_transitions"],
        n_estimators: int | None = None,
        learning_rate: float = 0.3,
        max_depth: int = 6,
        n_edge_types: int | None = None,
        early_stopping_rounds: int | None = None,
        early_stopping: str | bool = "auto",
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 30,
        refit: bool = True,
        class_weight: Any = None,
        sequence_column: str | None = None,
        eval_metric: Any = None,
        callbacks: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        keep_params(self, locals())

    def _validate(self, X, reset):
        return canonical_sparse(validate_data(
            self, X, reset=reset, accept_sparse=("csr", "csc"), ensure_all_finite=False
        ))

    def _dmatrix(self, X, codes, lengths, parents, edge_types, sample_weight=None):
        weight = None if sample_weight is None else sequence_weights(sample_weight, lengths)
        return tree_dmatrix(X, codes, lengths, parents, edge_types, weight=weight)

    @all_or_nothing
    def fit(
        self: _Self,
        X: Any,
        y: Any,
        *,
        parents: ArrayLike,
        edge_types: ArrayLike | None = None,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        eval_set: Sequence[Any] | None = None,
        verbose: bool | int | None = None,
    ) -> _Self:
        """Fit on tree instances.

        Parameters
        ----------
        X : (n, d) array-like or scipy sparse matrix, or list
            One row per node, the rows of an instance contiguous; or one
            entry per instance, as the chain estimators take sequences:
            2-D arrays ``(n_i, d)`` or lists of feature dicts (then no
            ``groups`` or ``lengths``, and ``predict`` returns lists).
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
            Per-row weights, equal within each instance (a CRF weighs instances).
        eval_set : list of tuple or dict, optional
            ``(X, y, groups_or_lengths, parents[, edge_types])`` tuples or
            dicts with those keys (and optionally ``"name"``, ``X`` a list of
            instances without ``groups``/``lengths``); the last one drives
            early stopping.
        verbose : bool or int, optional
            Print the metrics every round (``True``) or every ``verbose``
            rounds; ``False``: silent. None (the default): every round for an
            ``eval_set`` you pass, as ``XGBClassifier.fit`` does, and nothing
            for the held-out sequences of automatic early stopping.

        Returns
        -------
        self
        """
        self._check_params()
        X, lengths, nested = self._check_X(X, groups, lengths, reset=True)
        classes, codes = self._fit_classes(flatten_y(y, lengths) if nested else y, X.shape[0])
        parents, edge_types = _flat_structure(parents, edge_types, lengths)
        stopping = self._stopping(lengths, bool(eval_set))
        metrics = eval_metrics(self.eval_metric, held_out=stopping.held_out is not None)
        self.n_edge_types_ = _edge_type_count(edge_types, self.n_edge_types)
        spec = self._objective_spec(metrics)
        seq_weight = self._class_weighted(
            None if sample_weight is None else sequence_weights(sample_weight, lengths),
            codes, lengths, classes,
        )  # fmt: skip
        if seq_weight is not None:
            sample_weight = np.repeat(seq_weight, np.asarray(lengths))
        train = (X, codes, lengths, parents, edge_types, sample_weight)

        def convert(e, where):
            Xe, le, codes_e = self._eval_rows(e, where, classes)
            par, types = _flat_structure(e["parents"], e["edge_types"], le)
            return self._dmatrix(Xe, codes_e, le, par, types, e["sample_weight"])

        evals, eval_names = self._eval_set(eval_set, convert, _STRUCTURE)
        params = xgb_params(
            len(classes), eta=self.learning_rate, max_depth=self.max_depth, **self._engine_params()
        )
        run = (params, len(classes), spec, round_logging(verbose, eval_set), metrics)
        booster, evals_result = self._boost(train, stopping, evals, eval_names, *run)
        self._set_fitted(classes, booster, evals_result, metrics, stopping.held_out)
        refit = self._refit_stopping(stopping)
        if refit is not None:
            self._set_refitted(self._boost(train, refit, [], [], *run)[0])
        return self

    def _boost(self, train, stopping, evals, eval_names, params, n_labels, spec, verbose,
               metrics):
        """One boosting run of :meth:`fit`, held-out instances split off.

        Parameters
        ----------
        train : tuple
            ``(X, codes, lengths, parents, edge_types, sample_weight)`` of all
            the training instances (the last may be None).
        stopping : Stopping
            From :meth:`_stopping` or :meth:`_refit_stopping`.
        evals : list of xgboost.DMatrix
            The ``eval_set``'s.
        eval_names : list of str
        params : dict
        n_labels : int
        spec : ObjectiveSpec
            Every run starts a fresh objective (its transitions at zero).
        verbose, metrics
            As :meth:`_xgb_train` takes them.

        Returns
        -------
        booster, evals_result
        """
        dvalid, names = [], []
        if stopping.held_out is not None:
            parts = split_sequences(stopping.held_out, train[2], (train[0], train[1], *train[3:]))
            # (lengths, X, codes, ...) -> the _dmatrix order (X, codes, lengths, ...)
            train, held = ((p[1], p[2], p[0], *p[3:]) for p in parts)
            dvalid.append(self._dmatrix(*held))
            names.append(HELD_OUT_NAME)
        obj = tree_crf_objective(n_labels, self.n_edge_types_, spec)
        return self._xgb_train(params, obj, self._dmatrix(*train), dvalid + evals, verbose,
                               names + eval_names, metrics, stopping)  # fmt: skip

    def _load_state(self):
        return load_state(self.booster_, TREE_STATE_KEY, TreeTransitionParams,
                          "tree_crf_objective")  # fmt: skip

    def _state_loaded(self, state):
        found = state[2].n_edge_types
        if self.n_edge_types is not None and self.n_edge_types != found:
            raise ValueError(
                f"damaged: n_edge_types is {self.n_edge_types} but its CRF has "
                f"potentials for {found} edge types."
            )
        self.n_edge_types_ = found

    def _inputs(self, X, parents, edge_types, groups, lengths):
        """Flat rows, lengths ``(m,)``, parents, edge types and whether ``X`` was a list."""
        check_is_fitted(self)
        X, lens, nested = self._check_X(X, groups, lengths, reset=False)
        return (X, lens, *_flat_structure(parents, edge_types, lens), nested)

    def predict(
        self,
        X: Any,
        *,
        parents: ArrayLike,
        edge_types: ArrayLike | None = None,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
    ) -> Any:
        """MAP labelling of every tree, ``(n,)`` in the original labels.

        Returns
        -------
        (n,) ndarray, or a list of label lists when ``X`` was a list of instances
        """
        X, lens, parents, edge_types, nested = self._inputs(X, parents, edge_types, groups,
                                                            lengths)  # fmt: skip
        labels = self.classes_[predict_tree(self.booster_, X, lens, parents, edge_types)]
        return nest(labels, lens) if nested else labels

    def predict_marginals(
        self,
        X: Any,
        *,
        parents: ArrayLike,
        edge_types: ArrayLike | None = None,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
    ) -> Any:
        """Node marginals ``(n, K)`` in ``classes_`` order.

        Returns
        -------
        (n, K) ndarray, or a list of ``(n_i, K)`` arrays when ``X`` was a list of instances
        """
        X, lens, parents, edge_types, nested = self._inputs(X, parents, edge_types, groups,
                                                            lengths)  # fmt: skip
        marginals = predict_tree_marginals(self.booster_, X, lens, parents, edge_types)
        return nest(marginals, lens, as_lists=False) if nested else marginals

    def predict_proba(
        self,
        X: Any,
        *,
        parents: ArrayLike,
        edge_types: ArrayLike | None = None,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
    ) -> Any:
        """scikit-learn's name for :meth:`predict_marginals`."""
        return self.predict_marginals(X, parents=parents, edge_types=edge_types, groups=groups,
                                      lengths=lengths)  # fmt: skip

    def predict_log_likelihood(
        self,
        X: Any,
        y: Any,
        *,
        parents: ArrayLike,
        edge_types: ArrayLike | None = None,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
    ) -> Floats:
        """``log P(y | x)`` of every instance, ``(m,)``."""
        X, lens, parents, edge_types, nested = self._inputs(X, parents, edge_types, groups,
                                                            lengths)  # fmt: skip
        codes = self._encode(flatten_y(y, lens) if nested else y, X.shape[0], self.classes_)
        return tree_log_likelihood(self.booster_, X, codes, lens, parents, edge_types)

    def score(
        self,
        X: Any,
        y: Any,
        *,
        parents: ArrayLike,
        edge_types: ArrayLike | None = None,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
    ) -> float:
        """Node accuracy of the MAP labelling (weighted by ``sample_weight`` per row)."""
        X, lens, parents, edge_types, nested = self._inputs(X, parents, edge_types, groups,
                                                            lengths)  # fmt: skip
        pred = self.classes_[predict_tree(self.booster_, X, lens, parents, edge_types)]
        truth = np.asarray(flatten_y(y, lens) if nested else y)
        weights = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        return float(np.average(pred == truth, weights=weights))
