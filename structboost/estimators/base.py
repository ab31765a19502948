"""What every boosted CRF estimator shares: one scikit-learn dialect.

- Engine parameters are keyword arguments of the constructor (``n_jobs=2``,
  ``min_child_weight=3``), outside the signature; ``get_params`` and
  ``set_params`` see them, so ``clone`` and grid searches work.
- Labels of any hashable type are encoded once against ``classes_``.
- Sequence boundaries: ``groups`` (per-row ids, or the name of a DataFrame
  column), ``lengths``, or the constructor's ``sequence_column`` (a DataFrame
  column read on every call, so plain ``GridSearchCV(...).fit(frame, y,
  groups=frame[column])`` works without metadata routing). With none of them
  ``fit`` reads every row as its own sequence (with a warning): the
  estimator is then an ordinary classifier, as scikit-learn's generic code
  expects, but a model fitted on sequences refuses to predict without
  boundaries, so a forgotten ``groups=`` never silently cuts sequences.
- ``eval_set`` entries are tuples ``(X, y, groups_or_lengths, *structure)``
  (``(X, y)`` when ``X`` carries its boundaries) or dicts with the same names
  as ``fit``'s arguments and an optional ``"name"``; their metric history is
  ``evals_result_[name]`` (``"validation_i"`` by default).
- The objective's parameters (``mode``, ``hessian_bound``, ``step``,
  ``transition_solver``, ``reg_transitions``, ...) are flat constructor
  parameters; ``fit`` builds one
  :class:`~structboost.objectives.params.ObjectiveSpec` from them. Every
  other name an engine knows (``gamma``, ``reg_lambda``, ...) keeps the
  engine's meaning.
- ``eval_metric`` and ``callbacks`` are constructor parameters with the
  meaning of XGBoost's scikit-learn wrapper: metric names (``"crf-nll"``,
  ``"crf-error"``, the objective's own names) or callables ``f(y_true,
  y_proba)``, the last one driving early stopping; callbacks run after the
  transition recorder.
- Threads: ``n_jobs`` is the one setting (the engine's ``nthread`` /
  ``num_threads`` are refused): the engine gets it, and the objective's
  numba kernels get it as the spec's ``nthread`` each round; None leaves
  each its default.
- Fitted: ``booster_`` (also ``get_booster()``), ``classes_``,
  ``n_classes_``, ``evals_result_``, ``best_iteration_`` (an int: the
  0-based last round the model uses), ``best_score_`` (with an
  ``eval_set``), ``feature_importances_``; predictions are ``predict``,
  ``predict_proba`` (= ``predict_marginals``) and ``predict_log_likelihood``.
"""

import contextlib
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d
from threadpoolctl import threadpool_limits

from .. import _config
from ..objectives.params import METRICS, ObjectiveSpec, metric_name
from .inputs import SequenceInputs

# Engine parameters the estimators set themselves.
_RESERVED = ("objective", "num_class", "num_target", "metric")
# Engine spellings of the thread count that the estimators refuse (n_jobs is the one).
_ENGINE_THREADS = ("nthread", "num_threads")


def eval_metrics(eval_metric):
    """``eval_metric`` as a list of ``(name, metric)``; the last drives early stopping.

    Parameters
    ----------
    eval_metric : None, str, callable or list of them
        Names of the CRF metrics (``"crf-nll"``, ``"crf-error"``) or
        callables ``f(y_true, y_proba[, sample_weight=])`` as in XGBoost's
        scikit-learn wrapper: ``y_true`` ``(n,)`` label indices, ``y_proba``
        ``(n, K)`` posterior marginals; lower is better. None: ``"crf-nll"``.

    Returns
    -------
    list of (str, str or callable)
        The name in ``evals_result_`` and the objective's metric (a name
        of :data:`~structboost.objectives.params.METRICS` or the callable).
    """
    if eval_metric is None:
        items = ["crf-nll"]
    elif isinstance(eval_metric, str) or callable(eval_metric):
        items = [eval_metric]
    else:
        items = list(eval_metric)
    metrics = []
    for item in items:
        if (isinstance(item, str) and item in METRICS) or callable(item):
            metrics.append((metric_name(item), item))
        else:
            allowed = "'crf-nll', 'crf-error' or a callable f(y_true, y_proba)"
            raise ValueError(
                f"eval_metric {item!r} is not a CRF metric: use {allowed}. The engine's "
                "built-in metrics would read the CRF margins as class scores, which they "
                "are not."
            )
    if not metrics:
        raise ValueError("eval_metric is an empty list: give at least one metric or None.")
    return metrics


def evaluate_metrics(crf, metrics, margins, batch):
    """``[(name, value)]`` of ``metrics`` (from :func:`eval_metrics`) on one dataset.

    Parameters
    ----------
    crf : NodeObjective
        Holds the current transitions.
    metrics : list of (str, str or callable)
    margins : (n, K) array-like
    batch : SequenceBatch or TreeLabelBatch
    """
    return [(name, crf.evaluate(margins, batch, metric)[1]) for name, metric in metrics]


_Self = TypeVar("_Self", bound="BoostedCRFClassifier")


class BoostedCRFClassifier(SequenceInputs, ClassifierMixin, BaseEstimator):
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

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Parameters of this estimator, engine keyword arguments included."""
        params = super().get_params(deep=deep)
        params.update(self._engine_kwargs())
        return params

    def set_params(self: _Self, **params: Any) -> _Self:
        """Set parameters; names outside the signature become engine parameters."""
        named = set(self._get_param_names())
        extra = {k: params.pop(k) for k in list(params) if k not in named and "__" not in k}
        super().set_params(**params)
        for key, value in extra.items():
            setattr(self, key, value)
        return self

    def _objective_spec(self, metrics, **route):
        """The objective's spec, built once from the parameters (see the module notes).

        Parameters
        ----------
        metrics : list of (str, str or callable)
            From :func:`eval_metrics`: the last one is the spec's metric.
        **route
            Fields the estimator sets itself (``allowed_transitions``,
            ``transitions_from``).

        Returns
        -------
        ObjectiveSpec
        """
        reserved = sorted(set(self._engine_kwargs()) & set(_RESERVED))
        if reserved:
            raise ValueError(
                f"{reserved} are set by {type(self).__name__} for the CRF objective: remove "
                "them from the parameters (use mode=, hessian_bound=, step=, "
                "transition_solver=, eval_metric= instead)."
            )
        return ObjectiveSpec(
            mode=self.mode,
            hessian_bound=self.hessian_bound,
            step=self.step,
            transition_solver=self.transition_solver,
            reg_transitions=self.reg_transitions,
            metric=metrics[-1][1],
            nthread=self._threads(),
            **route,
        )

    # -- threads ----------------------------------------------------------
    def _threads(self):
        """The one thread count, ``n_jobs``.

        None or <= 0: :func:`structboost._config.default_threads` (None, each
        engine's default, unless a spinning OpenMP runtime was loaded before
        structboost: then the cores idle when the fit starts).
        """
        engine = self._engine_kwargs()
        refused = [k for k in _ENGINE_THREADS if k in engine]
        if refused:
            raise ValueError(
                f"{type(self).__name__} takes its thread count as n_jobs; got {refused}: "
                f"pass n_jobs={engine[refused[0]]!r} instead."
            )
        value = engine.get("n_jobs")
        if value is None or value <= 0:
            return _config.default_threads()
        return int(value)

    def _engine_params(self):
        """The engine keyword arguments, with the thread count of :meth:`_threads`."""
        engine = self._engine_kwargs()
        threads = self._threads()
        if threads is not None:
            engine["n_jobs"] = threads
        return engine

    @contextlib.contextmanager
    def _thread_limits(self):
        """numba kernels and BLAS on :meth:`_threads` threads inside the block (prediction)."""
        n = self._threads()
        if n is None:
            yield
            return
        with threadpool_limits(limits=n, user_api="blas"), _config.threads(n):
            yield

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
    def _set_fitted(self, classes, booster, evals_result, metrics):
        self.classes_ = classes
        self.booster_ = booster
        self.evals_result_ = evals_result
        self.best_iteration_ = self._kept_rounds() - 1
        if evals_result:  # as XGBoost: the stopping metric on the last eval set, kept round
            last = evals_result[list(evals_result)[-1]]
            self.best_score_ = float(last[metrics[-1][0]][self.best_iteration_])
        elif hasattr(self, "best_score_"):
            del self.best_score_

    @property
    def n_classes_(self):
        """Number of labels ``K`` (``len(classes_)``)."""
        check_is_fitted(self)
        return len(self.classes_)

    def get_booster(self) -> Any:
        """The trained engine model (``booster_``), as XGBoost's ``get_booster``."""
        check_is_fitted(self)
        return self.booster_

    @property
    def feature_importances_(self):
        """Total split gain per feature, normalised to sum to 1, ``(n_features_in_,)``."""
        check_is_fitted(self)
        gain = np.asarray(self._gain_importance(), dtype=np.float64)
        total = gain.sum()
        return gain / total if total > 0 else gain


class ChainTransitions:
    """The fitted ``transitions_`` table of the chain estimators.

    Mixed into a :class:`BoostedCRFClassifier` whose ``_load_state()``
    returns the booster's ``(num_labels, state, TransitionParams)``.
    """

    @property
    def transitions_(self):
        """Transition scores, ``transitions_.loc[a, b]`` for label ``a`` followed by ``b``.

        Returns
        -------
        pandas.DataFrame
            ``(n_classes, n_classes)``, index and columns ``classes_``.
        """
        check_is_fitted(self)
        params = self._load_state()[2]
        labels = pd.Index(self.classes_)
        return pd.DataFrame(
            params.transitions, index=labels.rename("from"), columns=labels.rename("to")
        )


class XGBoostTraining:
    """The XGBoost training loop and booster queries of the XGBoost estimators.

    Mixed into a :class:`BoostedCRFClassifier` with ``n_estimators``,
    ``learning_rate``, ``max_depth``, ``early_stopping_rounds`` and ``callbacks``.
    """

    def _xgb_train(self, params, obj, dtrain, dvalid, verbose, names, metrics):
        """``xgboost.train`` with the CRF objective, metric and transition callback.

        Parameters
        ----------
        params : dict
            From :func:`structboost.xgb_params`.
        obj : XGBCRFObjective or XGBTreeCRFObjective
        dtrain : xgboost.DMatrix
        dvalid : list of xgboost.DMatrix
            Evaluation sets; the last drives early stopping.
        verbose : bool or int
            XGBoost's ``verbose_eval``.
        names : list of str
            Names of the evaluation sets in ``evals_result``.
        metrics : list of (str, str or callable)
            From :func:`eval_metrics`; the last drives early stopping.

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
            custom_metric=lambda predt, d: evaluate_metrics(obj.crf, metrics, predt, obj.batch(d)),
            evals=list(zip(dvalid, names)),
            early_stopping_rounds=self.early_stopping_rounds,
            evals_result=evals_result,
            verbose_eval=verbose,
            callbacks=[obj.callback(), *(self.callbacks or ())],
        )
        return booster, evals_result

    def _kept_rounds(self):
        best = self.booster_.attr("best_iteration")
        return int(best) + 1 if best is not None else self.booster_.num_boosted_rounds()

    def _gain_importance(self):
        scores = self.booster_.get_score(importance_type="total_gain")
        names = self.booster_.feature_names or [f"f{i}" for i in range(self.n_features_in_)]
        return [scores.get(name, 0.0) for name in names]
