"""scikit-learn estimators: chain-CRF sequence labellers on LightGBM.

The row dialect and sklearn-crfsuite's, as :mod:`.chain` describes them for
XGBoost; this module imports no XGBoost, so that the LightGBM estimators work
where only LightGBM is installed.
"""

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._extras import require
from ..objectives.params import DEFAULTS, fill_doc
from ._docs import CHAIN_ATTRIBUTES, CHAIN_PARAMS, ROUNDS_PARAMS
from .base import evaluate_metrics, keep_params
from .chain_base import _CRFClassifier
from .checks import LIGHTGBM
from .crfsuite import SEQUENCE_DOC, SequenceSamples


@fill_doc(
    "mode", "hessian_bound", "step", "transition_solver", "reg_transitions",
    rounds_params=ROUNDS_PARAMS, shared_params=CHAIN_PARAMS, shared_attributes=CHAIN_ATTRIBUTES,
)
class LGBMCRFClassifier(_CRFClassifier):
    """Chain-CRF sequence labeller trained by LightGBM (through ``lightgbm.train``).

    Parameters
    ----------
    {objective_params}
    {rounds_params}
        LightGBM grows one tree per class and round.
    learning_rate : float
    max_depth : int
        ``-1`` for no limit.
    num_leaves : int
    {shared_params}
    callbacks : list, optional
        LightGBM callbacks (callables of ``env``, such as
        ``lightgbm.log_evaluation(10)``), run after the one that stores the
        transitions.
    **kwargs
        Any other LightGBM parameter (``min_child_samples``, ``reg_lambda``,
        ``random_state``, ...), with LightGBM's meaning, or the objective's
        ``transition_iter`` and ``hess_floor``; any other name raises at
        ``fit``. ``n_jobs`` sets the threads of LightGBM and of the
        objective's numba kernels (None: one, -1: every core). The safe defaults of
        :func:`structboost.lightgbm.lgb_params` apply (``min_child_weight=1``).
        LightGBM grows one tree per label and round: it has no multi-output
        trees (:class:`structboost.XGBCRFClassifier` grows them by default on
        dense features with many labels).

    Attributes
    ----------
    booster_ : lightgbm.Booster
        Carries the transitions; :func:`structboost.engines.predict` and
        :func:`structboost.lightgbm.save_lgb_model` accept it.
    {shared_attributes}
    """

    def __init__(self, *, mode: str = DEFAULTS['mode'],
                 hessian_bound: str | float = DEFAULTS['hessian_bound'],
                 step: str = DEFAULTS['step'],
                 transition_solver: str = DEFAULTS['transition_solver'],
                 reg_transitions: float = DEFAULTS['reg_transitions'],
                 n_estimators: int | None = None, learning_rate: float = 0.1, max_depth: int = -1,
                 num_leaves: int = 31, early_stopping_rounds: int | None = None,
                 early_stopping: str | bool = 'auto', validation_fraction: float = 0.1,
                 n_iter_no_change: int = 30, refit: bool = True, class_weight: Any = None,
                 base_model: Any = None, allowed_transitions: Any = None,
                 sequence_column: str | None = None, eval_metric: Any = None,
                 decode: str = 'viterbi', callbacks: Sequence[Any] | None = None,
                 **kwargs: Any) -> None:
        keep_params(self, locals())

    _param_checks = LIGHTGBM
    _engine = "lightgbm"
    _FIRST_ROUND = 1  # LightGBM's best_iteration_ counts rounds from 1

    def _engine_data(self, X):
        """LightGBM predicts from the rows themselves."""
        return X

    def _require_engine(self):
        """ImportError with the install command where LightGBM is missing."""
        require("lightgbm", "lightgbm", type(self).__name__)

    def _train(self, train, evals, names, spec, verbose, metrics, stopping):
        """Fit the base model, then one ``lightgbm.train`` run: ``(booster, evals_result)``."""
        import lightgbm as lgb

        from ..engines.lightgbm import lgb_crf_objective, lgb_params

        self._fit_base_model(train)
        n_classes = len(self.classes_)
        obj = lgb_crf_objective(n_classes, spec)
        self._start_transitions(obj)
        params = lgb_params(n_classes, objective=obj, learning_rate=self.learning_rate,
                            max_depth=self.max_depth, num_leaves=self.num_leaves,
                            **self._engine_params())
        train_set, *valid_sets = (
            lgb.Dataset(r.X, label=r.codes, group=r.lengths, init_score=self._base_margin(r),
                        weight=None if r.seq_weight is None else np.repeat(r.seq_weight, r.lengths))
            for r in (train, *evals)
        )  # fmt: skip
        evals_result = {}
        callbacks = [obj.callback(), *(self.callbacks or ()), lgb.record_evaluation(evals_result)]
        if verbose:
            callbacks.append(lgb.log_evaluation(int(verbose)))
        if stopping.patience is not None:
            stop = lgb.early_stopping(stopping.patience, first_metric_only=True, verbose=False)
            callbacks.append(stop)
        try:
            booster = lgb.train(
                params, train_set, num_boost_round=stopping.rounds, valid_sets=valid_sets,
                valid_names=names, callbacks=callbacks,
                # LightGBM stops on the first metric, XGBoost on the last: put it first.
                feval=lambda preds, data: [(name, value, False) for name, value in evaluate_metrics(
                    obj.crf, [metrics[-1], *metrics[:-1]], preds, obj.batch(data))],
            )  # fmt: skip
        except lgb.basic.LightGBMError as err:
            if "num_features()) > (0)" not in str(err):
                raise
            raise ValueError(
                f"LightGBM found no usable feature in {train.X.shape[0]} rows: every feature is "
                "constant or cannot split off min_child_samples rows (default 20) on each "
                "side. Lower min_child_samples or train on more rows."
            ) from err
        return booster, evals_result

    def _kept_rounds(self):
        """Rounds the booster predicts with."""
        from ..engines.lightgbm import kept_rounds

        return kept_rounds(self.booster_)

    def _load_state(self):
        """The booster's CRF state."""
        from ..engines.lightgbm import load_state

        return load_state(self.booster_)

    def _engine_document(self):
        """The booster and its CRF state as JSON-ready data."""
        from ..engines.lightgbm import booster_document

        return booster_document(self.booster_)

    @staticmethod
    def _booster_from_document(doc, where, num_features, num_labels, params):
        """The booster of :meth:`_engine_document`'s data, checked."""
        from ..engines.lightgbm import booster_from_document

        return booster_from_document(doc, where, num_features=num_features)

    def _gain_importance(self):
        """Split gain per input feature."""
        return self.booster_.feature_importance(importance_type="gain")

    def __deepcopy__(self, memo):
        """A deep copy whose booster keeps its transitions (LightGBM's copies its text only)."""
        from ..engines.lightgbm import copy_booster

        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        for name, value in vars(self).items():
            copied = copy_booster(value, memo) if name == "booster_" else copy.deepcopy(value, memo)
            setattr(twin, name, copied)
        return twin


class LGBMSequenceCRF(SequenceSamples, LGBMCRFClassifier):
    __doc__ = SEQUENCE_DOC.format(engine="LightGBM", base="LGBMCRFClassifier")
