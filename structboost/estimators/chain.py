"""scikit-learn estimators: chain-CRF sequence labellers on XGBoost (LightGBM's: :mod:`.lgbm`).

Each row of ``X`` is one position of one sequence, the rows of a sequence
contiguous; the boundaries come from ``groups`` (per-row ids, or the name of
the DataFrame column holding them), ``lengths`` or the ``sequence_column``.
With ``base_model=LinearChainCRF(...)``, ``fit`` trains a clone of it on
``base_X`` (default ``X``) and boosts from its node scores and transitions;
prediction adds the base scores back (pass the same ``base_X`` layout).

In scikit-learn's model selection, let the boundaries travel with a DataFrame
(``sequence_column``)::

    est = LGBMCRFClassifier(sequence_column="sentence_id")
    GridSearchCV(est, {"max_depth": [3, 5]}, cv=GroupKFold(3)).fit(
        frame, y, groups=frame["sentence_id"])

or route the sequence ids with metadata routing::

    sklearn.set_config(enable_metadata_routing=True)
    est = LGBMCRFClassifier().set_fit_request(groups=True).set_score_request(groups=True)
    GridSearchCV(est, {"max_depth": [3, 5]}, cv=GroupKFold(3)).fit(X, y, groups=groups)

sklearn-crfsuite's contract works too: ``X`` a list of per-sequence 2-D
arrays or lists of feature dicts, ``y`` a list of label lists.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.utils.validation import check_is_fitted

from ..engines.edge import EDGE_STATE_KEY, edge_crf_objective, edge_dmatrix
from ..engines.xgboost import crf_objective
from ..engines.xgboost import load_state as load_xgb_state
from ..objectives.params import DEFAULTS, TRANSITIONS_FROM, fill_doc
from ._docs import CHAIN_ATTRIBUTES, CHAIN_PARAMS, ROUNDS_PARAMS
from .base import keep_params
from .chain_base import _CRFClassifier
from .checks import BOOSTING, Options
from .crfsuite import SEQUENCE_DOC, SequenceSamples
from .xgboost_training import XGBoostTraining


#: The fewest labels at which dense features get multi-output trees by default (OCR's 26
#: letters gain from them, protein's 3 states lose: ``benchmarks/README.md``).
MULTI_OUTPUT_LABELS = 10


@fill_doc(
    "mode", "hessian_bound", "step", "transition_solver", "reg_transitions", "transitions_from",
    rounds_params=ROUNDS_PARAMS, shared_params=CHAIN_PARAMS, shared_attributes=CHAIN_ATTRIBUTES,
)
class XGBCRFClassifier(XGBoostTraining, _CRFClassifier):
    """Chain-CRF sequence labeller trained by XGBoost.

    Parameters
    ----------
    {objective_params}
    {rounds_params}
    learning_rate : float
        XGBoost's ``eta``.
    max_depth : int
    {shared_params}
    callbacks : list, optional
        ``xgboost.callback.TrainingCallback`` objects, run after the one
        that stores the transitions (as ``XGBClassifier(callbacks=)``).
    **kwargs
        Any other XGBoost parameter (``min_child_weight``, ``reg_lambda``,
        ``random_state``, ``multi_strategy``, ``gamma``, ...), with
        XGBoost's meaning, or the objective's ``transition_iter`` and
        ``hess_floor``; any other name raises at ``fit``. ``n_jobs`` sets
        the threads of XGBoost and of the objective's numba kernels (None:
        one, -1: every core). With ``device="cuda"`` the CRF objective runs
        on the GPU as well (needs ``structboost-crf[gpu]``).
        ``multi_strategy`` defaults to one multi-output tree per round
        (``"multi_output_tree"``) where that measured better: dense numeric
        features, at least ``MULTI_OUTPUT_LABELS`` (10) labels, chain
        transitions, ``hist`` trees on the CPU; to a tree per label
        otherwise. XGBoost gives no SHAP values (``pred_contribs``) for
        multi-output trees: pass ``multi_strategy="one_output_per_tree"``
        for them.

    Attributes
    ----------
    booster_ : xgboost.Booster
        Carries the transitions; :func:`structboost.engines.predict` accepts it.
    {shared_attributes}
    """

    def __init__(self, *, mode: str = DEFAULTS['mode'],
                 hessian_bound: str | float = DEFAULTS['hessian_bound'],
                 step: str = DEFAULTS['step'],
                 transition_solver: str = DEFAULTS['transition_solver'],
                 reg_transitions: float = DEFAULTS['reg_transitions'],
                 n_estimators: int | None = None, learning_rate: float = 0.3, max_depth: int = 6,
                 early_stopping_rounds: int | None = None, early_stopping: str | bool = 'auto',
                 validation_fraction: float = 0.1, n_iter_no_change: int = 30, refit: bool = True,
                 class_weight: Any = None, base_model: Any = None, allowed_transitions: Any = None,
                 sequence_column: str | None = None, eval_metric: Any = None,
                 decode: str = 'viterbi', callbacks: Sequence[Any] | None = None,
                 transitions_from: str = DEFAULTS['transitions_from'], **kwargs: Any) -> None:
        keep_params(self, locals())

    _param_checks = {**BOOSTING, "transitions_from": [Options(*TRANSITIONS_FROM)]}

    def _check_params(self):
        """As the base's, and no ``base_model`` with boosted transitions."""
        super()._check_params()
        if self.transitions_from == "input" and self.base_model is not None:
            raise ValueError("base_model boosts from a linear model's node scores and transitions; "
                             'with transitions_from="input" the trees score the transitions: drop '
                             'base_model or use transitions_from="linear".')

    @property
    def _edges(self):
        """Whether the transitions are boosted (``transitions_from="input"``: edge rows)."""
        return self.transitions_from == "input"

    def _fit_structure(self, rows):
        """As the chain's, and ``transitions_from``."""
        return {**super()._fit_structure(rows), "transitions_from": self.transitions_from}

    def _train(self, train, evals, names, spec, verbose, metrics, stopping):
        """Fit the base model, then one XGBoost run."""
        self._fit_base_model(train)
        return super()._train(train, evals, names, spec, verbose, metrics, stopping)

    def _objective(self, n_classes, spec):
        """The XGBoost objective: chain, or boosted transitions."""
        if self._edges:
            return edge_crf_objective(n_classes, spec)
        # XGBoost's device="cuda" runs the objective's round on the GPU too ([gpu] extra).
        obj = crf_objective(n_classes, spec, device=self._engine_kwargs().get("device", "cpu"))
        self._start_transitions(obj)
        return obj

    def _run_params(self, train):
        """The user's engine parameters, with multi-output trees where they pay: dense
        numeric features, at least ``MULTI_OUTPUT_LABELS`` labels, chain transitions, and
        XGBoost's ``hist`` trees on the CPU (``gbtree``), unless ``multi_strategy`` is given.
        """
        params = super()._run_params(train)
        dense = isinstance(train.X, np.ndarray) or (isinstance(train.X, pd.DataFrame) and all(
            pd.api.types.is_numeric_dtype(dtype) for dtype in train.X.dtypes))
        cpu_hist_trees = (params.get("multi_strategy") is None
                          and params.get("booster", "gbtree") == "gbtree"
                          and params.get("tree_method", "hist") in ("hist", "auto")
                          and str(params.get("device", "cpu")).lower() == "cpu")
        if dense and cpu_hist_trees and not self._edges and (
                len(self.classes_) >= MULTI_OUTPUT_LABELS):
            params["multi_strategy"] = "multi_output_tree"
        return params

    def _device_rows(self, train):
        """Dense features on the GPU when XGBoost trains there (margins kept on the device)."""
        on_gpu = str(self._engine_kwargs().get("device", "cpu")).lower() != "cpu"
        if self._edges or not on_gpu or not isinstance(train.X, np.ndarray):
            return None
        import cupy

        return cupy.asarray(train.X)

    def _feature_names(self):
        """``feature_names_in_`` as a list, or None."""
        names = getattr(self, "feature_names_in_", None)
        return None if names is None else list(names)

    def _dmatrix(self, rows, num_labels):
        """The training DMatrix of LabelledRows: one row per position, or K edge rows."""
        if self._edges:
            return edge_dmatrix(
                rows.X, rows.codes, rows.lengths, num_labels=num_labels, weight=rows.seq_weight,
                feature_names=self._feature_names(), nthread=self._threads(),
                # vector-leaf trees do not split on categorical features
                categorical=self._engine_kwargs().get("multi_strategy") != "multi_output_tree",
            )  # fmt: skip
        return self._engine_data(rows.X, label=rows.codes, group=rows.lengths,
                                 weight=rows.seq_weight, base_margin=self._base_margin(rows))

    def _engine_data(self, X, **fields):
        """What the engine reads: the DMatrix of features ``X`` with ``fields`` (``label``,
        ``group``, ...), or ``X`` itself for the prediction of edge rows.
        """
        if self._edges:  # the training DMatrix of edge rows is _dmatrix's
            return X
        return xgb.DMatrix(X, feature_names=self._feature_names(), nthread=self._threads(),
                           enable_categorical=isinstance(X, pd.DataFrame), **fields)

    def _load_state(self):
        """The booster's CRF state."""
        return load_xgb_state(self.booster_, EDGE_STATE_KEY) if self._edges else (
            load_xgb_state(self.booster_))  # fmt: skip

    def _engine_columns(self):
        """Columns the engine reads beyond the features (edge rows: the previous label)."""
        return int(self._edges)

    def _gain_importance(self):
        """Split gain per input feature."""
        gain = super()._gain_importance()
        return gain[:-1] if self._edges else gain

    @property
    def transitions_(self):
        """Transition scores ``(n_classes, n_classes)``, ``.loc[a, b]`` for ``a`` followed by ``b``.

        Only with ``transitions_from="linear"``: boosted transitions differ at
        every position (:func:`structboost.engines.predict.crf_inputs`).
        """
        check_is_fitted(self)
        if self._edges:
            raise ValueError(
                'with transitions_from="input" the transition scores depend on the input at '
                "every position: there is no single table. Get them per position from "
                "structboost.engines.predict.crf_inputs(clf.booster_, X, lengths=...)."
            )
        return super().transitions_


class XGBSequenceCRF(SequenceSamples, XGBCRFClassifier):
    __doc__ = SEQUENCE_DOC.format(engine="XGBoost", base="XGBCRFClassifier")
