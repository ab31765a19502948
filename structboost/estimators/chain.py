"""scikit-learn estimators: chain-CRF sequence labellers on XGBoost and LightGBM.

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
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.base import clone
from sklearn.metrics import accuracy_score
from sklearn.utils.validation import check_is_fitted

from .._compat import lgb_eval_sets
from .._compile_log import reports
from .._typing import ArrayLike, Floats
from ..engines.predict import predict as _viterbi
from ..engines.predict import predict_marginals as _marginals
from ..engines.predict import sequence_log_likelihood as _log_likelihood
from ..engines.edge import EDGE_STATE_KEY, edge_crf_objective, edge_dmatrix
from ..engines.xgboost import crf_objective, xgb_params
from ..engines.xgboost import load_state as load_xgb_state
from ..objectives.constraints import resolve as resolve_constraints
from ..objectives.params import DEFAULTS, TRANSITIONS_FROM, fill_doc
from .._extras import require
from ._docs import CHAIN_ATTRIBUTES, CHAIN_PARAMS
from .inputs import ChainInputs, flatten_y, kind, nest
from .model_file import ModelFile
from .checks import LIGHTGBM
from .base import (
    HELD_OUT_NAME,
    BoostedCRFClassifier,
    ChainTransitions,
    XGBoostTraining,
    eval_metrics,
    evaluate_metrics,
    split_sequences,
)


_Self = TypeVar("_Self", bound="_CRFClassifier")


class _CRFClassifier(ModelFile, ChainInputs, ChainTransitions, BoostedCRFClassifier):
    """What both chain estimators share: input checks, base models, fit, predict.

    Subclasses implement ``_train`` (returns the booster and the metric
    history; data tuples end with the base margin ``(n, K)`` or None),
    ``_kept_rounds``, ``_engine_data`` (features as the engine
    predicts from them), ``_load_state``, ``_gain_importance`` and the
    model-file pair ``_engine_document`` / ``_booster_from_document``
    (see :class:`~structboost.estimators.model_file.ModelFile`).
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True
        return tags

    # -- input ------------------------------------------------------------
    def _base_margin(self, X, base_X, n_classes):
        """Node scores ``(n, K)`` of the fitted base model on ``base_X`` (default ``X``) or None."""
        if self.base_model_ is None:
            if base_X is not None:
                raise ValueError(
                    "base_X is the input of base_model, but base_model is None: set "
                    "base_model= or drop base_X."
                )
            return None
        inputs = X if base_X is None else base_X
        margin = np.asarray(self.base_model_.decision_function(inputs), dtype=np.float64)
        if margin.shape != (X.shape[0], n_classes):
            raise ValueError(
                f"the base model scored {margin.shape} but needs one score per row of X and "
                f"class: ({X.shape[0]}, {n_classes}). Give base_X one row per row of X."
            )
        return margin

    def _start_transitions(self, obj):
        """Start the objective's transitions from the base model's, when it has them."""
        params = getattr(self.base_model_, "transitions_", None)
        if params is not None and obj.crf.uses_transitions:
            obj.crf.start_from(params)

    # -- fit --------------------------------------------------------------
    @reports("fit")
    def fit(
        self: _Self, X: Any, y: Any, *, groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None, sample_weight: ArrayLike | None = None,
        eval_set: Sequence[Any] | None = None, base_X: Any = None, verbose: bool | int = True,
    ) -> _Self:
        """Train on labelled sequences.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d), or list
            One row per position; the rows of a sequence contiguous. Or one
            entry per sequence: 2-D arrays ``(n_i, d)`` or lists of feature
            dicts (sklearn-crfsuite's input).
        y : array-like, shape (n,), or list of label lists
            Labels of any hashable type.
        groups : array-like of shape (n,) or str, optional
            Per-row sequence id, or the name of the DataFrame column holding it.
            Not needed with ``sequence_column`` or a list of sequences; with
            no boundaries at all every row is its own sequence (a warning).
        lengths : array-like of int, shape (m,), optional
            Rows per sequence (instead of ``groups``).
        sample_weight : array-like, shape (n,), optional
            Per-row weights; equal within each sequence (a CRF weighs
            sequences).
        eval_set : list of tuple or dict, optional
            ``(X, y, groups)`` or ``(X, y, lengths)`` tuples, ``(X, y)`` when
            ``X`` carries its boundaries, or dicts (see
            :func:`structboost.estimators.inputs.eval_entry`); the
            ``eval_metric`` values are recorded in ``evals_result_`` and the
            last one drives early stopping. With ``base_model`` and ``base_X``,
            entries must be dicts with a ``"base_X"`` key.
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of ``base_model`` (e.g. sparse lexical features while the
            trees see dense ones); ``X`` by default.
        verbose : bool or int
            Print the metrics of the ``eval_set`` (or of the held-out
            sequences of automatic early stopping) every round (``True``, the
            default of ``XGBClassifier.fit``) or every ``verbose`` rounds;
            ``False``: silent.

        Returns
        -------
        self
        """
        self._require_engine()
        self._check_params()
        X, lengths, nested = self._check_X(X, groups, lengths, reset=True)
        classes, codes = self._fit_classes(flatten_y(y, lengths) if nested else y,
                                           X.shape[0])  # fmt: skip
        metrics = eval_metrics(self.eval_metric)
        self.constraints_ = resolve_constraints(
            self.allowed_transitions, len(classes), labels=classes
        )
        spec = self._objective_spec(
            metrics, allowed_transitions=self.constraints_, **self._route()
        )
        seq_weight = self._class_weighted(
            self._sequence_weights(sample_weight, lengths), codes, lengths, classes
        )
        stopping = self._stopping(lengths, bool(eval_set))
        if stopping.held_out is not None:
            (lengths, X, codes, base_X, seq_weight), held = split_sequences(
                stopping.held_out, lengths, (X, codes, base_X), (seq_weight,)
            )
        self.base_model_ = None
        if self.base_model is not None:
            inputs = X if base_X is None else base_X
            self.base_model_ = clone(self.base_model).fit(
                inputs, codes, lengths, sample_weight=seq_weight
            )
        train = (X, codes, lengths, seq_weight, self._base_margin(X, base_X, len(classes)))
        evals, names = self._eval_data(eval_set, classes, base_X)
        if stopping.held_out is not None:
            lengths_h, Xh, codes_h, base_h, weight_h = held
            margin_h = self._base_margin(Xh, base_h, len(classes))
            evals.append((Xh, codes_h, lengths_h, weight_h, margin_h))
            names.append(HELD_OUT_NAME)
        booster, evals_result = self._train(
            train, evals, spec, len(classes), verbose, names, metrics, stopping
        )
        self._set_fitted(classes, booster, evals_result, metrics, stopping.held_out)
        return self

    # -- predict ----------------------------------------------------------
    def _data(self, X, groups, lengths, base_X):
        """Engine data, lengths ``(m,)``, base margin ``(n, K)`` (or None), nested flag."""
        check_is_fitted(self)
        X, lengths, nested = self._check_X(X, groups, lengths, reset=False)
        margin = self._base_margin(X, base_X, len(self.classes_))
        return self._engine_data(X), lengths, margin, nested

    def predict(
        self, X: Any, *, groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None, decode: str = "viterbi", base_X: Any = None,
    ) -> Any:
        """Predicted labels, in the original label values.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d), or list
            As in :meth:`fit`.
        groups : array-like of shape (n,) or str, optional
        lengths : array-like of int, shape (m,), optional
        decode : {"viterbi", "marginal"}
            The most probable sequence, or each position's most probable
            label (see :func:`structboost.engines.predict`).
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of the base model, when ``fit`` was given one.

        Returns
        -------
        (n,) ndarray of ``classes_`` values, or a list of label lists when
        ``X`` was a list of sequences
        """
        data, lengths, margin, nested = self._data(X, groups, lengths, base_X)
        with self._thread_limits():
            codes = _viterbi(
                self.booster_,
                data,
                lengths=lengths,
                decode=decode,
                base_margin=margin,
                allowed_transitions=self.constraints_,
            )
        labels = self.classes_[codes]
        return nest(labels, lengths) if nested else labels

    def predict_single(self, xseq: Any, *, decode: str = "viterbi", base_X: Any = None) -> Any:
        """Labels of one sequence, as sklearn-crfsuite's ``predict_single``.

        Parameters
        ----------
        xseq : list of dict or array-like of shape (n_i, d)
            The sequence's feature dicts (one per position) or rows, the
            same kind of input as ``fit`` got.
        decode : {"viterbi", "marginal"}
        base_X : array-like of shape (n_i, p), optional
            The base model's input, when ``fit`` was given one.

        Returns
        -------
        list
            ``n_i`` labels (``classes_`` values).
        """
        return self.predict([xseq], decode=decode, base_X=base_X)[0]

    def predict_marginals(
        self, X: Any, *, groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None, base_X: Any = None,
    ) -> Any:
        """Posterior marginals ``P(y_t = c | x)``, columns in ``classes_`` order.

        Parameters are those of :meth:`predict`.

        Returns
        -------
        (n, n_classes) ndarray, or a list of ``(n_i, n_classes)`` arrays when
        ``X`` was a list of sequences
        """
        data, lengths, margin, nested = self._data(X, groups, lengths, base_X)
        with self._thread_limits():
            marginals = _marginals(
                self.booster_,
                data,
                lengths=lengths,
                base_margin=margin,
                allowed_transitions=self.constraints_,
            )
        return nest(marginals, lengths, as_lists=False) if nested else marginals

    def predict_proba(
        self, X: Any, *, groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None, base_X: Any = None,
    ) -> Any:
        """scikit-learn's name for :meth:`predict_marginals` (rows sum to 1, ``classes_`` order)."""
        return self.predict_marginals(X, groups=groups, lengths=lengths, base_X=base_X)

    def predict_log_likelihood(
        self, X: Any, y: Any, *, groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None, base_X: Any = None,
    ) -> Floats:
        """Log-likelihood ``log P(y | x)`` of every sequence, shape ``(m,)``."""
        data, lens, margin, nested = self._data(X, groups, lengths, base_X)
        codes = self._encode(flatten_y(y, lens) if nested else y,
                             int(lens.sum()), self.classes_)  # fmt: skip
        with self._thread_limits():
            return _log_likelihood(
                self.booster_,
                data,
                codes,
                lengths=lens,
                base_margin=margin,
                allowed_transitions=self.constraints_,
            )

    def score(
        self, X: Any, y: Any, *, groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None, sample_weight: ArrayLike | None = None,
        base_X: Any = None,
    ) -> float:
        """Token accuracy of :meth:`predict` (weighted by ``sample_weight`` per row)."""
        predicted = self.predict(X, groups=groups, lengths=lengths, base_X=base_X)
        if kind(X) is not None:
            lengths = np.array([len(p) for p in predicted])
            predicted = np.asarray([label for seq in predicted for label in seq])
            y = flatten_y(y, lengths)
        return accuracy_score(y, predicted, sample_weight=sample_weight)


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
        XGBoost's meaning. ``n_jobs`` sets the threads of XGBoost and of the
        objective's numba kernels (None: each its default). With
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
        self, *, mode: str = DEFAULTS["mode"],
        hessian_bound: str | float = DEFAULTS["hessian_bound"], step: str = DEFAULTS["step"],
        transition_solver: str = DEFAULTS["transition_solver"],
        reg_transitions: float = DEFAULTS["reg_transitions"], n_estimators: int | None = None,
        learning_rate: float = 0.3, max_depth: int = 6,
        early_stopping_rounds: int | None = None, early_stopping: str | bool = "auto",
        validation_fraction: float = 0.1, n_iter_no_change: int = 10, class_weight: Any = None,
        base_model: Any = None, allowed_transitions: Any = None,
        sequence_column: str | None = None, eval_metric: Any = None,
        callbacks: Sequence[Any] | None = None,
        transitions_from: str = DEFAULTS["transitions_from"], **kwargs: Any,
    ) -> None:
        self.mode = mode
        self.hessian_bound = hessian_bound
        self.step = step
        self.transition_solver = transition_solver
        self.reg_transitions = reg_transitions
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.early_stopping_rounds = early_stopping_rounds
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.class_weight = class_weight
        self.base_model = base_model
        self.allowed_transitions = allowed_transitions
        self.sequence_column = sequence_column
        self.eval_metric = eval_metric
        self.callbacks = callbacks
        self.transitions_from = transitions_from
        super().__init__(**kwargs)

    @property
    def _boosted_transitions(self):
        if self.transitions_from not in TRANSITIONS_FROM:
            raise ValueError(
                f"transitions_from must be one of {TRANSITIONS_FROM}; got {self.transitions_from!r}."
            )
        return self.transitions_from == "input"

    def _require_engine(self):
        """XGBoost is a dependency: nothing to check."""

    def _engine_data(self, X):
        # Boosted transitions: prediction builds the edge rows from X and the lengths.
        return X if self._boosted_transitions else self._dmatrix(X)

    def _dmatrix(
        self, X, labels=None, lengths=None, seq_weight=None, base_margin=None, num_labels=None,
    ):
        """Training or evaluation DMatrix (edge rows of ``num_labels`` labels when boosted)."""
        names = getattr(self, "feature_names_in_", None)
        engine = self._engine_kwargs()
        threads = self._threads()
        if self._boosted_transitions:
            return edge_dmatrix(
                X, labels, lengths, num_labels=num_labels, weight=seq_weight,
                feature_names=None if names is None else list(names),
                # vector-leaf trees do not split on categorical features
                categorical=engine.get("multi_strategy") != "multi_output_tree",
                nthread=-1 if threads is None else threads,
            )  # fmt: skip
        return xgb.DMatrix(
            X,
            label=labels,
            group=lengths,
            weight=seq_weight,
            base_margin=base_margin,
            feature_names=None if names is None else list(names),
            enable_categorical=isinstance(X, pd.DataFrame),
            nthread=-1 if threads is None else threads,
        )

    def _route(self):
        return {"transitions_from": self.transitions_from}

    def _train(self, train, evals, spec, n_classes, verbose, names, metrics, stopping):
        if self._boosted_transitions:
            if self.base_model is not None:
                raise ValueError(
                    "base_model boosts from a linear model's node scores and transitions; "
                    'with transitions_from="input" the trees score the transitions: drop '
                    'base_model or use transitions_from="linear".'
                )
            obj = edge_crf_objective(n_classes, spec)
        else:
            # XGBoost's device="cuda" runs the objective's round on the GPU too ([gpu] extra).
            obj = crf_objective(n_classes, spec, device=self._engine_kwargs().get("device", "cpu"))
            self._start_transitions(obj)
        params = xgb_params(
            n_classes,
            eta=self.learning_rate,
            max_depth=self.max_depth,
            **self._engine_params(),
        )
        dvalid = [self._dmatrix(*e, num_labels=n_classes) for e in evals]
        dtrain = self._dmatrix(*train, num_labels=n_classes)
        return self._xgb_train(params, obj, dtrain, dvalid, verbose, names, metrics, stopping)

    def _load_state(self):
        if self._boosted_transitions:
            return load_xgb_state(self.booster_, EDGE_STATE_KEY)
        return load_xgb_state(self.booster_)

    @staticmethod
    def _engine_columns(params):
        return int(params.get("transitions_from", "linear") == "input")  # the previous label

    def _gain_importance(self):
        gain = super()._gain_importance()
        # The edge rows' last column is the previous label (booster_.get_score shows it).
        return gain[:-1] if self._boosted_transitions else gain

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
        if self._boosted_transitions:
            raise ValueError(
                'with transitions_from="input" the transition scores depend on the input at '
                "every position: there is no single table. Get them per position from "
                "structboost.engines.predict.crf_inputs(clf.booster_, X, lengths=...)."
            )
        return super().transitions_


@fill_doc(
    "mode", "hessian_bound", "step", "transition_solver", "reg_transitions",
    shared_params=CHAIN_PARAMS, shared_attributes=CHAIN_ATTRIBUTES,
)
class LGBMCRFClassifier(_CRFClassifier):
    """Chain-CRF sequence labeller trained by LightGBM (through ``lightgbm.LGBMModel``).

    Parameters
    ----------
    {objective_params}
    n_estimators : int, optional
        Most boosting rounds (each grows one tree per class); None: 1000
        when automatic early stopping ends the fit (see ``early_stopping``),
        100 otherwise.
    learning_rate : float
    max_depth : int
        ``-1`` for no limit.
    num_leaves : int
    early_stopping_rounds : int, optional
        Stop when the CRF negative log-likelihood on an ``eval_set`` entry
        has not improved for this many rounds; predictions then use the best
        round and its transitions.
    base_model : estimator, optional
        As in :class:`XGBCRFClassifier`; its scores become ``init_score``.
    allowed_transitions : {"iob1", "iob2", "bioes"}, Constraints or (K, K) bool array, optional
        As in :class:`XGBCRFClassifier`.
    {shared_params}
    callbacks : list, optional
        LightGBM callbacks (callables of ``env``, such as
        ``lightgbm.log_evaluation(10)``), run after the one that stores the
        transitions.
    **kwargs
        Any other LightGBM parameter (``min_child_samples``, ``reg_lambda``,
        ``random_state``, ...), with LightGBM's meaning. ``n_jobs`` sets
        the threads of LightGBM and of the objective's numba kernels (None:
        each its default). Needs ``pip install "structboost-crf[lightgbm]"``. The safe defaults of
        :func:`structboost.lightgbm.lgb_params` apply (``min_child_weight=1``).

    Attributes
    ----------
    classes_ : ndarray, shape (n_classes,)
    constraints_ : Constraints or None
        ``allowed_transitions`` resolved against ``classes_``.
    booster_ : lightgbm.Booster
        Carries the transitions; :func:`structboost.engines.predict` and
        :func:`structboost.lightgbm.save_lgb_model` accept it.
    {shared_attributes}
    """

    def __init__(
        self, *, mode: str = DEFAULTS["mode"],
        hessian_bound: str | float = DEFAULTS["hessian_bound"], step: str = DEFAULTS["step"],
        transition_solver: str = DEFAULTS["transition_solver"],
        reg_transitions: float = DEFAULTS["reg_transitions"], n_estimators: int | None = None,
        learning_rate: float = 0.1, max_depth: int = -1, num_leaves: int = 31,
        early_stopping_rounds: int | None = None, early_stopping: str | bool = "auto",
        validation_fraction: float = 0.1, n_iter_no_change: int = 10, class_weight: Any = None,
        base_model: Any = None, allowed_transitions: Any = None,
        sequence_column: str | None = None, eval_metric: Any = None,
        callbacks: Sequence[Any] | None = None, **kwargs: Any,
    ) -> None:
        self.mode = mode
        self.hessian_bound = hessian_bound
        self.step = step
        self.transition_solver = transition_solver
        self.reg_transitions = reg_transitions
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.num_leaves = num_leaves
        self.early_stopping_rounds = early_stopping_rounds
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.class_weight = class_weight
        self.base_model = base_model
        self.allowed_transitions = allowed_transitions
        self.sequence_column = sequence_column
        self.eval_metric = eval_metric
        self.callbacks = callbacks
        super().__init__(**kwargs)

    _param_checks = LIGHTGBM
    _FIRST_ROUND = 1  # LightGBM's best_iteration_ counts rounds from 1

    def _engine_data(self, X):
        return X

    def _require_engine(self):
        require("lightgbm", "lightgbm", type(self).__name__)

    def _route(self):
        return {}

    def _train(self, train, evals, spec, n_classes, verbose, names, metrics, stopping):
        import lightgbm as lgb

        from ..engines.base import build_batch
        from ..engines.lightgbm import lgb_crf_objective, lgb_params

        X, y, lengths, seq_weight, init_score = train
        obj = lgb_crf_objective(n_classes, spec)
        self._start_transitions(obj)
        params = lgb_params(
            n_classes,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            num_leaves=self.num_leaves,
            **self._engine_params(),
        )
        if "min_sum_hessian_in_leaf" in params:  # LGBMModel's own name for it
            params["min_child_weight"] = params.pop("min_sum_hessian_in_leaf")
        model = lgb.LGBMModel(
            objective=obj.sklearn_objective, n_estimators=stopping.rounds, **params
        )
        callbacks = [obj.callback(), *(self.callbacks or ())]
        if verbose:
            callbacks.append(lgb.log_evaluation(int(verbose)))
        if stopping.patience is not None:
            stop = lgb.early_stopping(stopping.patience, first_metric_only=True, verbose=False)
            callbacks.append(stop)
        fit = {
            "sample_weight": self._row_weights(seq_weight, lengths),
            "init_score": init_score,
            "group": lengths,
            # LightGBM stops on the first metric, XGBoost on the last: put it first.
            "eval_metric": lambda y_true, y_pred, weight, group: [
                (name, value, False)
                for name, value in evaluate_metrics(
                    obj.crf, [metrics[-1], *metrics[:-1]], y_pred,
                    build_batch(n_classes, y_true, group, row_weight=weight),
                )
            ],
            "callbacks": callbacks,
        }
        if evals:
            fit.update(lgb_eval_sets([e[0] for e in evals], [e[1] for e in evals]))
            fit.update(
                eval_group=[e[2] for e in evals],
                eval_sample_weight=[self._row_weights(e[3], e[2]) for e in evals],
                eval_init_score=[e[4] for e in evals],
                eval_names=names,
            )
        try:
            model.fit(X, y, **fit)
        except lgb.basic.LightGBMError as err:
            if "num_features()) > (0)" not in str(err):
                raise
            raise ValueError(
                f"LightGBM found no usable feature in {X.shape[0]} rows: every feature is "
                "constant or cannot split off min_child_samples rows (default 20) on each "
                "side. Lower min_child_samples or train on more rows."
            ) from err
        return model.booster_, model.evals_result_

    def _kept_rounds(self):
        from ..engines.lightgbm import kept_rounds

        return kept_rounds(self.booster_)

    @staticmethod
    def _row_weights(seq_weight, lengths):
        return None if seq_weight is None else np.repeat(seq_weight, lengths)

    def _load_state(self):
        from ..engines.lightgbm import load_state

        return load_state(self.booster_)

    def _engine_document(self):
        from ..engines.lightgbm import booster_document

        return booster_document(self.booster_)

    @staticmethod
    def _booster_from_document(doc, where, num_features, num_labels, params):
        from ..engines.lightgbm import booster_from_document

        return booster_from_document(doc, where, num_features=num_features)

    def _gain_importance(self):
        return self.booster_.feature_importance(importance_type="gain")
