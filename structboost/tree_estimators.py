"""Scikit-learn estimator for tree-structured CRFs boosted with XGBoost.

Each row is one node of one tree instance; rows of an instance are
contiguous and ``parents`` gives each node's parent within its instance
(``-1`` for a root). Labels may be of any hashable type (``classes_``).
"""

import numpy as np
import xgboost as xgb
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .sequences import resolve_lengths
from .tree_xgboost import (
    predict_tree,
    predict_tree_marginals,
    tree_crf_objective,
    tree_dmatrix,
    tree_log_likelihood,
)
from .xgboost import xgb_params


def _edge_type_count(edge_types, given):
    if given is not None:
        return int(given)
    if edge_types is None:
        return 1
    return int(np.max(edge_types)) + 1 if len(edge_types) else 1


class TreeCRFClassifier(ClassifierMixin, BaseEstimator):
    """Gradient-boosted tree CRF (GBCRF, TreeCRF or LogitBoost modes) on XGBoost.

    Parameters
    ----------
    mode : {"gbcrf", "treecrf", "logitboost"}
    n_estimators : int
        Boosting rounds.
    learning_rate : float
    max_depth : int
    gamma : {"mixing", "length", "exact"} or float
        Node bound of the GBCRF Hessian (not XGBoost's split ``gamma``).
    transitions : {"lbfgs", "newton"}
        Solver of the edge potentials.
    reg_transitions : float
        L2 penalty on the edge potentials.
    n_edge_types : int, optional
        Number of edge types; inferred as ``max(edge_types) + 1`` when None.
        Set it when test trees may use types absent from training.
    early_stopping_rounds : int, optional
        Stop when the NLL on the last ``eval_set`` entry stops improving.
    booster_params : dict, optional
        Any other XGBoost parameter (``min_child_weight``, ``subsample``,
        ``nthread``, ...).

    Attributes
    ----------
    classes_ : (K,) ndarray
    booster_ : xgboost.Booster
    objective_ : structboost.tree_xgboost.XGBTreeCRFObjective
    n_edge_types_ : int
    best_iteration_ : int or None
    """

    def __init__(
        self,
        mode="gbcrf",
        n_estimators=100,
        learning_rate=0.3,
        max_depth=6,
        gamma="mixing",
        transitions="lbfgs",
        reg_transitions=1.0,
        n_edge_types=None,
        early_stopping_rounds=None,
        booster_params=None,
    ):
        self.mode = mode
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.gamma = gamma
        self.transitions = transitions
        self.reg_transitions = reg_transitions
        self.n_edge_types = n_edge_types
        self.early_stopping_rounds = early_stopping_rounds
        self.booster_params = booster_params

    def _encode(self, y):
        y = np.asarray(y)
        codes = np.searchsorted(self.classes_, y)
        codes = np.clip(codes, 0, len(self.classes_) - 1)
        unknown = self.classes_[codes] != y
        if unknown.any():
            raise ValueError(
                f"label {y[np.flatnonzero(unknown)[0]].tolist()!r} was not seen in fit; "
                f"known labels: {self.classes_.tolist()}."
            )
        return codes

    def _dmatrix(self, X, y, groups, lengths, parents, edge_types, weight=None):
        n = np.shape(X)[0]
        lens = resolve_lengths(n, groups=groups, lengths=lengths)
        label = None if y is None else self._encode(y)
        return tree_dmatrix(X, label, lens, parents, edge_types, weight=weight)

    def fit(self, X, y, *, parents, edge_types=None, groups=None, lengths=None,
            sample_weight=None, eval_set=None):  # fmt: skip
        """Fit on tree instances.

        Parameters
        ----------
        X : (n, d) array-like
        y : (n,) array-like
        parents : (n,) array-like of int
            Parent of each row within its instance, ``-1`` for a root.
        edge_types : (n,) array-like of int, optional
        groups : (n,) array-like, optional
            Per-row instance id (rows of an instance contiguous).
        lengths : (m,) array-like of int, optional
            Rows per instance (alternative to ``groups``).
        sample_weight : (m,) array-like, optional
            One weight per instance.
        eval_set : list of tuples, optional
            ``(X, y, lengths, parents)`` or ``(X, y, lengths, parents,
            edge_types)``; the last one drives early stopping.

        Returns
        -------
        self
        """
        self.classes_ = np.unique(np.asarray(y))
        self.n_edge_types_ = _edge_type_count(edge_types, self.n_edge_types)
        k = len(self.classes_)
        obj = tree_crf_objective(
            k,
            self.n_edge_types_,
            mode=self.mode,
            gamma=self.gamma,
            transitions=self.transitions,
            reg_transitions=self.reg_transitions,
        )
        dtrain = self._dmatrix(X, y, groups, lengths, parents, edge_types, sample_weight)
        evals = []
        for i, entry in enumerate(eval_set or ()):
            if len(entry) not in (4, 5):
                raise ValueError(
                    "each eval_set entry must be (X, y, lengths, parents) or "
                    f"(X, y, lengths, parents, edge_types); entry {i} has {len(entry)} items."
                )
            Xe, ye, le, pe, *te = entry
            evals.append((self._dmatrix(Xe, ye, None, le, pe, te[0] if te else None), f"eval{i}"))
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs an eval_set.")
        params = xgb_params(
            k, eta=self.learning_rate, max_depth=self.max_depth, **(self.booster_params or {})
        )
        self.booster_ = xgb.train(
            params,
            dtrain,
            num_boost_round=self.n_estimators,
            obj=obj,
            custom_metric=obj.metric if evals else None,
            evals=evals,
            early_stopping_rounds=self.early_stopping_rounds,
            verbose_eval=False,
            callbacks=[obj.callback()],
        )
        best = self.booster_.attr("best_iteration")
        self.best_iteration_ = None if best is None else int(best)
        self.objective_ = obj
        return self

    def predict(self, X, *, parents, edge_types=None, groups=None, lengths=None):
        """MAP labelling of every tree, ``(n,)`` in the original labels."""
        check_is_fitted(self)
        lens = resolve_lengths(np.shape(X)[0], groups=groups, lengths=lengths)
        return self.classes_[predict_tree(self.booster_, X, lens, parents, edge_types)]

    def predict_marginals(self, X, *, parents, edge_types=None, groups=None, lengths=None):
        """Node marginals ``(n, K)`` in ``classes_`` order."""
        check_is_fitted(self)
        lens = resolve_lengths(np.shape(X)[0], groups=groups, lengths=lengths)
        return predict_tree_marginals(self.booster_, X, lens, parents, edge_types)

    def log_likelihood(self, X, y, *, parents, edge_types=None, groups=None, lengths=None):
        """``log P(y | x)`` of every instance, ``(m,)``."""
        check_is_fitted(self)
        lens = resolve_lengths(np.shape(X)[0], groups=groups, lengths=lengths)
        return tree_log_likelihood(self.booster_, X, self._encode(y), lens, parents, edge_types)

    def score(self, X, y, *, parents, edge_types=None, groups=None, lengths=None):
        """Node accuracy of the MAP labelling."""
        pred = self.predict(X, parents=parents, edge_types=edge_types, groups=groups,
                            lengths=lengths)  # fmt: skip
        return float(np.mean(pred == np.asarray(y)))

    @property
    def feature_importances_(self):
        """Total gain per feature, normalised to sum to one."""
        check_is_fitted(self)
        gain = self.booster_.get_score(importance_type="total_gain")
        n = self.booster_.num_features()
        imp = np.array([gain.get(f"f{i}", 0.0) for i in range(n)])
        return imp / imp.sum() if imp.sum() > 0 else imp
