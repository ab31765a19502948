"""scikit-learn estimators: chain-CRF sequence labellers on XGBoost (LightGBM's: :mod:`.lgbm`).

Each row of ``X`` is one position of one sequence; the rows of a sequence
are contiguous and in order. Sequences are described per call by either

- ``groups``: a per-row sequence id, ``(n,)`` (ids need not be sorted, but
  each sequence's rows must form one run), or, for a pandas ``X``, the name
  of the column holding it (the column is dropped from the features), or
- ``lengths``: rows per sequence, ``(m,)``, in row order.

``eval_set`` entries are ``(X, y, groups)`` or ``(X, y, lengths)`` tuples:
a third element with one entry per row of ``X`` (or a column name) is
``groups``, anything else ``lengths``. When every sequence has length 1 the
two coincide and the tuple reads as groups; pass a dict
``{"X": X, "y": y, "lengths": lengths}`` (keys ``groups``, ``lengths``,
``sample_weight``, ``base_X``) to say which.

Boosting from a base model (the "Features+Embd" setting of Chen et al.
2015): with ``base_model=LinearChainCRF(...)``, ``fit`` first trains a clone
of the base model on the training sequences (on ``base_X``, by default
``X``), then boosts trees from its node scores, which become XGBoost's
``base_margin`` / LightGBM's ``init_score`` of the training and evaluation
sets; the transitions start from the base model's. ``predict``,
``predict_marginals``, ``predict_log_likelihood`` and ``score`` add the base
scores back (pass them the same ``base_X`` layout). Typically the base model
sees sparse lexical features (:class:`structboost.text.lexical.TokenFeatures`)
and the trees dense ones. The same recipe with ``xgboost.train`` is in
:class:`structboost.LinearChainCRF`.

``save_model(path)`` writes a fitted estimator as one JSON file and
``load_model(path)`` reads one back, running no code (see
:mod:`structboost.estimators.model_file`).

Inside scikit-learn's model selection, let the boundaries travel with a
DataFrame (``sequence_column``)::

    est = LGBMCRFClassifier(sequence_column="sentence_id")
    GridSearchCV(est, {"max_depth": [3, 5]}, cv=GroupKFold(3)).fit(
        frame, y, groups=frame["sentence_id"])

or, for arrays, route the sequence ids to ``fit`` and ``score`` with metadata
routing::

    sklearn.set_config(enable_metadata_routing=True)
    est = LGBMCRFClassifier().set_fit_request(groups=True).set_score_request(groups=True)
    GridSearchCV(est, {"max_depth": [3, 5]}, cv=GroupKFold(3)).fit(X, y, groups=groups)

sklearn-crfsuite's contract works too: ``X`` a list of per-sequence 2-D
arrays or of per-sequence lists of feature dicts (vectorised once by a
``DictVectorizer`` kept as ``vectorizer_``), ``y`` a list of label lists;
``predict`` then returns a list of label lists, ``predict_proba`` a list of
``(n_i, K)`` arrays.
"""

from collections.abc import Sequence
from typing import Any

import pandas as pd
import xgboost as xgb
from sklearn.utils.validation import check_is_fitted

from ..engines.edge import EDGE_STATE_KEY, edge_crf_objective, edge_dmatrix
from ..engines.xgboost import crf_objective, xgb_params
from ..engines.xgboost import load_state as load_xgb_state
from ..objectives.params import DEFAULTS, TRANSITIONS_FROM, fill_doc
from ._docs import CHAIN_ATTRIBUTES, CHAIN_PARAMS
from .base import LabelledRows, keep_params
from .xgboost_training import XGBoostTraining
from .chain_base import _CRFClassifier
from .crfsuite import SEQUENCE_DOC, SequenceSamples


class _LinearTransitions:
    """``transitions_from="linear"``: one K x K table, refit by the transition solver.

    The estimator's questions that depend on where the transitions come
    from; :class:`_BoostedTransitions` answers them for boosted ones.
    """

    #: Columns the engine sees after the input features.
    engine_columns = 0

    @staticmethod
    def objective(est, n_classes, spec):
        """The training objective, its transitions started (from a base model's, if any)."""
        # XGBoost's device="cuda" runs the objective's round on the GPU too ([gpu] extra).
        obj = crf_objective(n_classes, spec, device=est._engine_kwargs().get("device", "cpu"))
        est._start_transitions(obj)
        return obj

    @staticmethod
    def dmatrix(X, labels, lengths, seq_weight, base_margin, num_labels, feature_names, engine,
                threads):
        """A DMatrix of the rows, one row per position (see ``XGBCRFClassifier._dmatrix``)."""
        return xgb.DMatrix(
            X,
            label=labels,
            group=lengths,
            weight=seq_weight,
            base_margin=base_margin,
            feature_names=feature_names,
            enable_categorical=isinstance(X, pd.DataFrame),
            nthread=threads,
        )

    @staticmethod
    def engine_data(est, X):
        """What prediction hands the engine: the DMatrix of ``X``."""
        return est._dmatrix(X)

    @staticmethod
    def load_state(booster):
        """The CRF state the booster carries (:func:`structboost.engines.xgboost.load_state`)."""
        return load_xgb_state(booster)

    @staticmethod
    def feature_gain(gain):
        """Total gain per input feature from the engine's per-column gain."""
        return gain

    @staticmethod
    def check_single_table():
        """Nothing to refuse: the transitions are one table."""


class _BoostedTransitions:
    """``transitions_from="input"``: boosted, input-dependent transitions (edge rows)."""

    #: The previous label, the edge rows' last column.
    engine_columns = 1

    @staticmethod
    def objective(est, n_classes, spec):
        """The edge objective; a base model has no place here."""
        if est.base_model is not None:
            raise ValueError(
                "base_model boosts from a linear model's node scores and transitions; "
                'with transitions_from="input" the trees score the transitions: drop '
                'base_model or use transitions_from="linear".'
            )
        return edge_crf_objective(n_classes, spec)

    @staticmethod
    def dmatrix(X, labels, lengths, seq_weight, base_margin, num_labels, feature_names, engine,
                threads):
        """The edge rows of ``num_labels`` labels (K rows per position)."""
        return edge_dmatrix(
            X, labels, lengths, num_labels=num_labels, weight=seq_weight,
            feature_names=feature_names,
            # vector-leaf trees do not split on categorical features
            categorical=engine.get("multi_strategy") != "multi_output_tree", nthread=threads,
        )  # fmt: skip

    @staticmethod
    def engine_data(est, X):
        """What prediction hands the engine: ``X`` itself (the edge rows need the lengths)."""
        return X

    @staticmethod
    def load_state(booster):
        """The edge objective's state the booster carries."""
        return load_xgb_state(booster, EDGE_STATE_KEY)

    @staticmethod
    def feature_gain(gain):
        """The input features' gain: the last column (the previous label) dropped."""
        return gain[:-1]

    @staticmethod
    def check_single_table():
        """Refuse: the transitions differ at every position."""
        raise ValueError(
            'with transitions_from="input" the transition scores depend on the input at '
            "every position: there is no single table. Get them per position from "
            "structboost.engines.predict.crf_inputs(clf.booster_, X, lengths=...)."
        )


#: The route of each ``transitions_from``, chosen once per fit or load.
_TRANSITION_ROUTES = {"linear": _LinearTransitions, "input": _BoostedTransitions}


@fill_doc(
    "mode", "hessian_bound", "step", "transition_solver", "reg_transitions", "transitions_from",
    shared_params=CHAIN_PARAMS, shared_attributes=CHAIN_ATTRIBUTES,
)
class XGBCRFClassifier(XGBoostTraining, _CRFClassifier):
    """Chain-CRF sequence labeller trained by XGBoost.

    Parameters
    ----------
    {objective_params}
    n_estimators : int, optional
        Most boosting rounds; None: 1000 when automatic early stopping
        ends the fit (see ``early_stopping``), 100 otherwise.
    learning_rate : float
        XGBoost's ``eta``.
    max_depth : int
    early_stopping_rounds : int, optional
        Stop when the CRF negative log-likelihood on the last ``eval_set``
        entry has not improved for this many rounds; predictions then use
        the best round and its transitions.
    base_model : estimator, optional
        A :class:`structboost.LinearChainCRF` (or any estimator with
        ``fit(X, y, lengths, sample_weight=)`` and ``decision_function(X) ->
        (n, K)``): ``fit`` trains a clone of it first and boosts from its
        node scores (``base_margin``) and transitions; see the module notes.
    allowed_transitions : {"iob1", "iob2", "bioes"}, Constraints or (K, K) bool array, optional
        Moves the model may make: a tag scheme (the classes must then be
        its tags, such as ``"B-PER"`` and ``"O"``; see
        :func:`structboost.objectives.constraints.allowed_transitions`) or masks over
        ``classes_``. Forbidden transition, start and end scores stay at
        ``-inf`` in training (never refit, also when starting from a base
        model's transitions) and in :meth:`predict`,
        :meth:`predict_marginals`, :meth:`predict_log_likelihood` and
        :meth:`score`, so no prediction makes a forbidden move. The
        training labels must obey them.
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
        one, -1: every core). With
        ``device="cuda"`` the CRF objective runs on the GPU as well
        (``crf_objective(..., device="cuda")``, needs ``structboost-crf[gpu]``).

    Attributes
    ----------
    classes_ : ndarray, shape (n_classes,)
    constraints_ : Constraints or None
        ``allowed_transitions`` resolved against ``classes_``.
    booster_ : xgboost.Booster
        Carries the transitions; :func:`structboost.engines.predict` accepts it.
    {shared_attributes}
    """

    def __init__(
        self,
        *,
        mode: str = DEFAULTS['mode'],
        hessian_bound: str | float = DEFAULTS['hessian_bound'],
        step: str = DEFAULTS['step'],
        transition_solver: str = DEFAULTS['transition_solver'],
        reg_transitions: float = DEFAULTS['reg_transitions'],
        n_estimators: int | None = None,
        learning_rate: float = 0.3,
        max_depth: int = 6,
        early_stopping_rounds: int | None = None,
        early_stopping: str | bool = 'auto',
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 30,
        refit: bool = True,
        class_weight: Any = None,
        base_model: Any = None,
        allowed_transitions: Any = None,
        sequence_column: str | None = None,
        eval_metric: Any = None,
        decode: str = 'viterbi',
        callbacks: Sequence[Any] | None = None,
        transitions_from: str = DEFAULTS['transitions_from'],
        **kwargs: Any,
    ) -> None:
        keep_params(self, locals())

    def _check_params(self):
        """Check the parameters and choose the transitions' route once (fit and load)."""
        super()._check_params()
        if self.transitions_from not in _TRANSITION_ROUTES:
            raise ValueError(
                f"transitions_from must be one of {TRANSITIONS_FROM}; got {self.transitions_from!r}."
            )
        self._transitions = _TRANSITION_ROUTES[self.transitions_from]

    def _require_engine(self):
        """XGBoost is a dependency: nothing to check."""

    def _engine_data(self, X):
        return self._transitions.engine_data(self, X)

    def _dmatrix(self, X, rows=None, num_labels=None):
        """A DMatrix of features ``X``, or of labelled ``rows`` (LabelledRows) to train on.

        Edge rows of ``num_labels`` labels when the transitions are boosted.
        """
        names = getattr(self, "feature_names_in_", None)
        if rows is None:
            rows = LabelledRows(X, None, None, None, None)
        return self._transitions.dmatrix(
            rows.X, rows.codes, rows.lengths, rows.seq_weight, rows.base_margin, num_labels,
            feature_names=None if names is None else list(names), engine=self._engine_kwargs(),
            threads=self._threads(),
        )  # fmt: skip

    def _route(self):
        return {"transitions_from": self.transitions_from}

    def _train(self, train, evals, spec, n_classes, verbose, names, metrics, stopping):
        obj = self._transitions.objective(self, n_classes, spec)
        params = xgb_params(
            n_classes,
            eta=self.learning_rate,
            max_depth=self.max_depth,
            **self._engine_params(),
        )
        dvalid = [self._dmatrix(None, e, n_classes) for e in evals]
        dtrain = self._dmatrix(None, train, n_classes)
        return self._xgb_train(params, obj, dtrain, dvalid, verbose, names, metrics, stopping)

    def _load_state(self):
        return self._transitions.load_state(self.booster_)

    def _engine_columns(self):
        return self._transitions.engine_columns

    def _gain_importance(self):
        return self._transitions.feature_gain(super()._gain_importance())

    @property
    def transitions_(self):
        """Transition scores, ``transitions_.loc[a, b]`` for label ``a`` followed by ``b``.

        Only with ``transitions_from="linear"``: boosted transitions differ at
        every position (:func:`structboost.engines.predict.crf_inputs` gives them).

        Returns
        -------
        pandas.DataFrame
            ``(n_classes, n_classes)``, index and columns ``classes_``.
        """
        check_is_fitted(self)
        self._transitions.check_single_table()
        return super().transitions_


class XGBSequenceCRF(SequenceSamples, XGBCRFClassifier):
    __doc__ = SEQUENCE_DOC.format(engine="XGBoost", base="XGBCRFClassifier")
