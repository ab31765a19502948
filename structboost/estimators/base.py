"""What every boosted CRF estimator shares: one scikit-learn dialect.

- Engine parameters are keyword arguments of the constructor (``n_jobs=2``,
  ``min_child_weight=3``), outside the signature; ``get_params`` and
  ``set_params`` see them, so ``clone`` and grid searches work.
- Labels of any hashable type are encoded once against ``classes_``.
- ``eval_set`` entries are tuples ``(X, y, groups_or_lengths, *structure)``
  or dicts with the same names as ``fit``'s arguments; their metric history
  is ``evals_result_["validation_i"]``.
- Fitted: ``booster_``, ``classes_``, ``evals_result_``, ``best_iteration_``
  (an int: the 0-based last round the model uses), ``feature_importances_``;
  predictions are ``predict``, ``predict_marginals`` and
  ``predict_log_likelihood``.
"""

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

# Engine parameters the estimators set themselves.
_RESERVED = ("objective", "num_class", "num_target", "metric", "eval_metric")
# The objective's parameters every estimator has (declared in objectives.params).
OBJECTIVE_PARAMS = ("mode", "gamma", "transitions", "reg_transitions")


def eval_entry(item, index, n_rows, structure=()):
    """One ``eval_set`` entry as a dict.

    Parameters
    ----------
    item : tuple or dict
        ``(X, y, groups_or_lengths, *structure)``, or a dict with keys
        ``"X"``, ``"y"``, ``"groups"`` or ``"lengths"``, the ``structure``
        names, and optionally ``"sample_weight"`` and ``"base_X"``. A third
        tuple element with one entry per row of ``X`` (or a column name) is
        ``groups``, anything else ``lengths``.
    index : int
        Position in ``eval_set`` (for error messages).
    n_rows : callable
        Rows of an ``X``.
    structure : tuple of str
        Names of the further per-row arrays the estimator needs
        (trees: ``("parents", "edge_types")``, the last one optional).

    Returns
    -------
    dict
        Keys ``X``, ``y``, ``groups``, ``lengths``, ``sample_weight``,
        ``base_X`` and the ``structure`` names (None when absent).
    """
    keys = ("X", "y", "groups", "lengths", "sample_weight", "base_X") + tuple(structure)
    if isinstance(item, dict):
        unknown = set(item) - set(keys)
        if unknown or "X" not in item or "y" not in item:
            raise ValueError(
                f"eval_set[{index}] must have keys 'X', 'y' and 'groups' or 'lengths' "
                f"(optional: {list(keys[4:])}); got {sorted(item)}."
            )
        return {key: item.get(key) for key in keys}
    required = 3 + max(len(structure) - 1, 0)
    if not isinstance(item, (tuple, list)) or not required <= len(item) <= 3 + len(structure):
        tail = "".join(f", {name}" for name in structure)
        raise ValueError(
            f"eval_set[{index}] must be an (X, y, groups{tail}) or (X, y, lengths{tail}) "
            "tuple, or a dict; a CRF needs the sequence boundaries of every evaluation set."
        )
    X, y, third, *rest = item
    entry = dict.fromkeys(keys)
    entry.update(X=X, y=y, **dict(zip(structure, rest)))
    if isinstance(third, str) or len(third) == n_rows(X):
        entry["groups"] = third
    else:
        entry["lengths"] = third
    return entry


class BoostedCRFClassifier(ClassifierMixin, BaseEstimator):
    """Base of the boosted CRF estimators (see the module notes).

    Subclasses implement ``_kept_rounds()`` (rounds the model uses) and
    ``_gain_importance()`` (total split gain per feature).
    """

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)

    # -- parameters -------------------------------------------------------
    def _engine_kwargs(self):
        """The engine parameters given as keyword arguments (not in the signature)."""
        named = set(self._get_param_names())
        return {
            key: value
            for key, value in vars(self).items()
            if key not in named and not key.startswith("_") and not key.endswith("_")
        }

    def _objective_threads(self):
        """The engine's thread count (``n_jobs``, ``nthread`` or ``num_threads``) for the objective.

        None (numba's default) when unset or not positive.
        """
        engine = self._engine_kwargs()
        for key in ("n_jobs", "nthread", "num_threads"):
            threads = engine.get(key)
            if threads is not None:
                return int(threads) if int(threads) > 0 else None
        return None

    def get_params(self, deep=True):
        """Parameters of this estimator, engine keyword arguments included."""
        params = super().get_params(deep=deep)
        params.update(self._engine_kwargs())
        return params

    def set_params(self, **params):
        """Set parameters; names outside the signature become engine parameters."""
        named = set(self._get_param_names())
        extra = {k: params.pop(k) for k in list(params) if k not in named and "__" not in k}
        super().set_params(**params)
        for key, value in extra.items():
            setattr(self, key, value)
        return self

    def _objective_kwargs(self):
        """The objective's parameters, after refusing engine parameters that clash with them."""
        reserved = sorted(set(self._engine_kwargs()) & set(_RESERVED))
        if reserved:
            raise ValueError(
                f"{reserved} are set by {type(self).__name__} for the CRF objective: remove "
                "them from the parameters (use mode=, gamma=, transitions= instead)."
            )
        return {name: getattr(self, name) for name in OBJECTIVE_PARAMS}

    def __sklearn_is_fitted__(self):
        return hasattr(self, "booster_")

    # -- labels -----------------------------------------------------------
    @staticmethod
    def _fit_classes(y, n_rows):
        """Sorted ``classes (K,)`` and codes ``(n,)`` of the training labels."""
        y = column_or_1d(y, warn=True)
        missing = pd.isna(y)
        if missing.any():
            row = int(np.flatnonzero(missing)[0])
            raise ValueError(
                f"y has a missing label ({y[row]!r}) at row {row} ({int(missing.sum())} in "
                "all): drop those rows or give them a label."
            )
        check_classification_targets(y)
        if y.shape[0] != n_rows:
            raise ValueError(f"y has {y.shape[0]} labels but X has {n_rows} rows.")
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(
                f"y has only one class {classes.tolist()}: a classifier needs at least "
                "2 classes."
            )
        return classes, codes

    @staticmethod
    def _encode(y, n_rows, classes):
        """Indices ``(n,)`` into the sorted ``classes`` of labels seen in ``fit``."""
        y = column_or_1d(np.asarray(y), warn=True)
        if y.shape[0] != n_rows:
            raise ValueError(f"y has {y.shape[0]} labels but X has {n_rows} rows.")
        codes = np.minimum(np.searchsorted(classes, y), len(classes) - 1)
        unseen = classes[codes] != y
        if unseen.any():
            raise ValueError(
                f"y contains labels not seen in fit, e.g. {y[np.flatnonzero(unseen)[0]].tolist()!r}; "
                f"known labels: {classes.tolist()}."
            )
        return codes

    # -- fitted attributes --------------------------------------------------
    def _set_fitted(self, classes, booster, evals_result):
        self.classes_ = classes
        self.booster_ = booster
        self.evals_result_ = evals_result
        self.best_iteration_ = self._kept_rounds() - 1

    @property
    def feature_importances_(self):
        """Total split gain per feature, normalised to sum to 1, ``(n_features_in_,)``."""
        check_is_fitted(self)
        gain = np.asarray(self._gain_importance(), dtype=np.float64)
        total = gain.sum()
        return gain / total if total > 0 else gain


class XGBoostTraining:
    """The XGBoost training loop and booster queries of the XGBoost estimators.

    Mixed into a :class:`BoostedCRFClassifier` with ``n_estimators``,
    ``learning_rate``, ``max_depth`` and ``early_stopping_rounds``.
    """

    def _xgb_train(self, params, obj, dtrain, dvalid, verbose):
        """``xgboost.train`` with the CRF objective, metric and transition callback.

        Parameters
        ----------
        params : dict
            From :func:`structboost.xgb_params`.
        obj : XGBCRFObjective or XGBTreeCRFObjective
        dtrain : xgboost.DMatrix
        dvalid : list of xgboost.DMatrix
            Evaluation sets, named ``validation_i``; the last drives early stopping.
        verbose : bool or int
            XGBoost's ``verbose_eval``.

        Returns
        -------
        booster : xgboost.Booster
        evals_result : dict
        """
        evals_result = {}
        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=self.n_estimators,
            obj=obj,
            custom_metric=obj.metric,
            evals=[(d, f"validation_{i}") for i, d in enumerate(dvalid)],
            early_stopping_rounds=self.early_stopping_rounds,
            evals_result=evals_result,
            verbose_eval=verbose,
            callbacks=[obj.callback()],
        )
        return booster, evals_result

    def _kept_rounds(self):
        best = self.booster_.attr("best_iteration")
        return int(best) + 1 if best is not None else self.booster_.num_boosted_rounds()

    def _gain_importance(self):
        scores = self.booster_.get_score(importance_type="total_gain")
        names = self.booster_.feature_names or [f"f{i}" for i in range(self.n_features_in_)]
        return [scores.get(name, 0.0) for name in names]
