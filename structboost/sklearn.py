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
sees sparse lexical features (:class:`structboost.lexical.TokenFeatures`)
and the trees dense ones. The same recipe with ``xgboost.train`` is in
:class:`structboost.LinearChainCRF`.

Inside scikit-learn's model selection, route the sequence ids to ``fit`` and
``score`` with metadata routing::

    sklearn.set_config(enable_metadata_routing=True)
    est = LGBMCRFClassifier().set_fit_request(groups=True).set_score_request(groups=True)
    GridSearchCV(est, {"max_depth": [3, 5]}, cv=GroupKFold(3)).fit(X, y, groups=groups)
"""

import inspect

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.metrics import accuracy_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from .constraints import resolve as resolve_constraints
from .predict import predict as _viterbi
from .predict import predict_marginals as _marginals
from .predict import sequence_log_likelihood as _log_likelihood
from .sequences import resolve_lengths, sequence_weights
from .xgboost import crf_objective, xgb_params
from .xgboost import load_state as load_xgb_state

_CRF_PARAMS = ("mode", "gamma", "transitions", "reg_transitions")
# Engine parameters the estimators set themselves.
_RESERVED = ("objective", "num_class", "num_target", "metric", "eval_metric")


def _eval_parts(item, index):
    """``(X, y, groups, lengths, sample_weight, base_X)`` of one ``eval_set`` entry."""
    if isinstance(item, dict):
        unknown = set(item) - {"X", "y", "groups", "lengths", "sample_weight", "base_X"}
        if unknown or "X" not in item or "y" not in item:
            raise ValueError(
                f"eval_set[{index}] must have keys 'X', 'y' and 'groups' or 'lengths' (and "
                f"optionally 'sample_weight', 'base_X'); got {sorted(item)}."
            )
        return (
            item["X"],
            item["y"],
            item.get("groups"),
            item.get("lengths"),
            item.get("sample_weight"),
            item.get("base_X"),
        )
    if not isinstance(item, (tuple, list)) or len(item) != 3:
        raise ValueError(
            f"eval_set[{index}] must be an (X, y, groups) or (X, y, lengths) tuple, or a dict; "
            "a CRF needs the sequence boundaries of every evaluation set."
        )
    X, y, third = item
    n_rows = X.shape[0] if hasattr(X, "shape") else len(X)
    if isinstance(third, str) or len(third) == n_rows:
        return X, y, third, None, None, None
    return X, y, None, third, None, None


class _CRFClassifier(ClassifierMixin, BaseEstimator):
    """What both estimators share: parameters, input checks, labels, predict.

    Subclasses implement ``_train`` (returns the booster and the metric
    history; data tuples end with the base margin ``(n, K)`` or None),
    ``_kept_rounds``, ``_engine_data`` (features as the engine
    predicts from them), ``_load_state`` and ``_gain_importance``.
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

    def __sklearn_is_fitted__(self):
        return hasattr(self, "booster_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True
        return tags

    # -- input ------------------------------------------------------------
    def _check_X(self, X, groups, lengths, *, reset):
        """Validated features and sequence lengths ``(m,)``."""
        if isinstance(groups, str):
            if not isinstance(X, pd.DataFrame):
                raise ValueError(
                    f"groups={groups!r} names a column, but X is not a pandas DataFrame: "
                    "pass the per-row sequence ids instead."
                )
            if groups not in X.columns:
                raise ValueError(f"X has no column {groups!r} to read the sequence ids from.")
            X, groups = X.drop(columns=groups), X[groups].to_numpy()
        if isinstance(X, pd.DataFrame):
            validate_data(self, X, reset=reset, skip_check_array=True)
        else:
            X = validate_data(
                self, X, reset=reset, accept_sparse=("csr", "csc"), ensure_all_finite=False
            )
        return X, resolve_lengths(X.shape[0], groups=groups, lengths=lengths)

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
                f"y contains labels not seen in fit, e.g. {y[np.flatnonzero(unseen)[0]]!r}; "
                f"known labels: {classes.tolist()}."
            )
        return codes

    def _sequence_weights(self, sample_weight, lengths):
        return None if sample_weight is None else sequence_weights(sample_weight, lengths)

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
            constraints = obj.crf.constraints
            obj.crf.params = params.copy() if constraints is None else constraints.apply(params)

    # -- fit --------------------------------------------------------------
    def fit(
        self,
        X,
        y,
        *,
        groups=None,
        lengths=None,
        sample_weight=None,
        eval_set=None,
        base_X=None,
        verbose=False,
    ):
        """Train on labelled sequences.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d)
            One row per position; the rows of a sequence contiguous.
        y : array-like, shape (n,)
            Labels of any hashable type.
        groups : array-like of shape (n,) or str, optional
            Per-row sequence id, or the name of the DataFrame column holding it.
        lengths : array-like of int, shape (m,), optional
            Rows per sequence (instead of ``groups``).
        sample_weight : array-like, shape (n,), optional
            Per-row weights; equal within each sequence (a CRF weighs
            sequences).
        eval_set : list of tuple or dict, optional
            ``(X, y, groups)`` or ``(X, y, lengths)`` tuples or dicts (see the
            module notes); the CRF metric is recorded in ``evals_result_``
            and drives early stopping. With ``base_model`` and ``base_X``,
            entries must be dicts with a ``"base_X"`` key.
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of ``base_model`` (e.g. sparse lexical features while the
            trees see dense ones); ``X`` by default.
        verbose : bool or int
            Print the ``eval_set`` metrics every round (``True``) or every
            ``verbose`` rounds, as XGBoost's ``verbose_eval``.

        Returns
        -------
        self
        """
        X, lengths = self._check_X(X, groups, lengths, reset=True)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y has {y.shape[0]} labels but X has {X.shape[0]} rows.")
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(
                f"y has only one class {classes.tolist()}: a classifier needs at least "
                "2 classes."
            )
        seq_weight = self._sequence_weights(sample_weight, lengths)
        self.base_model_ = None
        if self.base_model is not None:
            inputs = X if base_X is None else base_X
            self.base_model_ = clone(self.base_model).fit(
                inputs, codes, lengths, sample_weight=seq_weight
            )
        train = (X, codes, lengths, seq_weight, self._base_margin(X, base_X, len(classes)))
        evals = []
        for i, item in enumerate(eval_set or ()):
            Xe, ye, ge, le, we, be = _eval_parts(item, i)
            if base_X is not None and be is None and self.base_model is not None:
                raise ValueError(
                    f"eval_set[{i}] has no base_X but fit got one: pass eval_set entries as "
                    "dicts with a 'base_X' key."
                )
            Xe, le = self._check_X(Xe, ge, le, reset=False)
            codes_e = self._encode(ye, Xe.shape[0], classes)
            margin_e = self._base_margin(Xe, be, len(classes))
            evals.append((Xe, codes_e, le, self._sequence_weights(we, le), margin_e))
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs an eval_set to watch.")
        reserved = sorted(set(self._engine_kwargs()) & set(_RESERVED))
        if reserved:
            raise ValueError(
                f"{reserved} are set by {type(self).__name__} for the CRF objective: remove "
                "them from the parameters (use mode=, gamma=, transitions= instead)."
            )
        crf = {name: getattr(self, name) for name in _CRF_PARAMS}
        crf["allowed_transitions"] = self._constraints(classes)
        booster, evals_result = self._train(train, evals, crf, len(classes), verbose)
        self.classes_ = classes
        self.booster_ = booster
        self.evals_result_ = evals_result
        self.best_iteration_ = self._kept_rounds() - 1
        return self

    # -- predict ----------------------------------------------------------
    def _constraints(self, classes):
        """``allowed_transitions`` as :class:`~structboost.constraints.Constraints` (or None)."""
        return resolve_constraints(self.allowed_transitions, len(classes), labels=classes)

    def _data(self, X, groups, lengths, base_X):
        """Engine data, lengths ``(m,)`` and base margin ``(n, K)`` (or None) of ``X``."""
        check_is_fitted(self)
        X, lengths = self._check_X(X, groups, lengths, reset=False)
        margin = self._base_margin(X, base_X, len(self.classes_))
        return self._engine_data(X), lengths, margin

    def predict(self, X, *, groups=None, lengths=None, decode="viterbi", base_X=None):
        """Predicted labels, in the original label values.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d)
        groups : array-like of shape (n,) or str, optional
        lengths : array-like of int, shape (m,), optional
        decode : {"viterbi", "marginal"}
            The most probable sequence, or each position's most probable
            label (see :func:`structboost.predict`).
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of the base model, when ``fit`` was given one.

        Returns
        -------
        (n,) ndarray of ``classes_`` values
        """
        data, lengths, margin = self._data(X, groups, lengths, base_X)
        codes = _viterbi(
            self.booster_,
            data,
            lengths=lengths,
            decode=decode,
            base_margin=margin,
            allowed_transitions=self._constraints(self.classes_),
        )
        return self.classes_[codes]

    def predict_marginals(self, X, *, groups=None, lengths=None, base_X=None):
        """Posterior marginals ``P(y_t = c | x)``, ``(n, n_classes)``, columns in ``classes_`` order."""
        data, lengths, margin = self._data(X, groups, lengths, base_X)
        return _marginals(
            self.booster_,
            data,
            lengths=lengths,
            base_margin=margin,
            allowed_transitions=self._constraints(self.classes_),
        )

    def predict_log_likelihood(self, X, y, *, groups=None, lengths=None, base_X=None):
        """Log-likelihood ``log P(y | x)`` of every sequence, shape ``(m,)``."""
        data, lengths, margin = self._data(X, groups, lengths, base_X)
        codes = self._encode(y, int(lengths.sum()), self.classes_)
        return _log_likelihood(
            self.booster_,
            data,
            codes,
            lengths=lengths,
            base_margin=margin,
            allowed_transitions=self._constraints(self.classes_),
        )

    def score(self, X, y, *, groups=None, lengths=None, sample_weight=None, base_X=None):
        """Token accuracy of :meth:`predict` (weighted by ``sample_weight`` per row)."""
        predicted = self.predict(X, groups=groups, lengths=lengths, base_X=base_X)
        return accuracy_score(y, predicted, sample_weight=sample_weight)

    # -- fitted attributes --------------------------------------------------
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

    @property
    def feature_importances_(self):
        """Total split gain per feature, normalised to sum to 1, ``(n_features_in_,)``."""
        check_is_fitted(self)
        gain = np.asarray(self._gain_importance(), dtype=np.float64)
        total = gain.sum()
        return gain / total if total > 0 else gain


class XGBCRFClassifier(_CRFClassifier):
    """Chain-CRF sequence labeller trained by XGBoost.

    Parameters
    ----------
    mode : {"gbcrf", "treecrf", "logitboost"}
        See :func:`structboost.crf_objective`.
    gamma : {"mixing", "length", "exact"} or float
        Node bound of the GBCRF Hessian.
    transitions : {"lbfgs", "newton"}
        Solver refitting the transition scores every round.
    reg_transitions : float
        L2 penalty on the transition, start and end scores.
    n_estimators : int
        Boosting rounds.
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
        :func:`structboost.constraints.allowed_transitions`) or masks over
        ``classes_``. Forbidden transition, start and end scores stay at
        ``-inf`` in training (never refit, also when starting from a base
        model's transitions) and in :meth:`predict`,
        :meth:`predict_marginals`, :meth:`predict_log_likelihood` and
        :meth:`score`, so no prediction makes a forbidden move. The
        training labels must obey them.
    **kwargs
        Any other XGBoost parameter (``min_child_weight``, ``reg_lambda``,
        ``n_jobs``, ``random_state``, ``multi_strategy``, ...).

    Attributes
    ----------
    classes_ : ndarray, shape (n_classes,)
    booster_ : xgboost.Booster
        Carries the transitions; :func:`structboost.predict` accepts it.
    best_iteration_ : int
        0-based index of the last round the model uses.
    evals_result_ : dict
        CRF metric per round for each ``eval_set`` entry (``validation_i``).
    transitions_ : pandas.DataFrame
    feature_importances_ : ndarray, shape (n_features_in_,)
    base_model_ : estimator or None
        The fitted clone of ``base_model``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` was a DataFrame.
    """

    def __init__(
        self,
        *,
        mode="gbcrf",
        gamma="mixing",
        transitions="lbfgs",
        reg_transitions=1.0,
        n_estimators=100,
        learning_rate=0.3,
        max_depth=6,
        early_stopping_rounds=None,
        base_model=None,
        allowed_transitions=None,
        **kwargs,
    ):
        self.mode = mode
        self.gamma = gamma
        self.transitions = transitions
        self.reg_transitions = reg_transitions
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.early_stopping_rounds = early_stopping_rounds
        self.base_model = base_model
        self.allowed_transitions = allowed_transitions
        super().__init__(**kwargs)

    def _engine_data(self, X):
        return self._dmatrix(X)

    def _dmatrix(self, X, labels=None, lengths=None, seq_weight=None, base_margin=None):
        names = getattr(self, "feature_names_in_", None)
        engine = self._engine_kwargs()
        threads = engine.get("n_jobs", engine.get("nthread"))
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

    def _train(self, train, evals, crf, n_classes, verbose):
        obj = crf_objective(n_classes, nthread=self._objective_threads(), **crf)
        self._start_transitions(obj)
        dtrain = self._dmatrix(*train)
        dvalid = [(self._dmatrix(*e), f"validation_{i}") for i, e in enumerate(evals)]
        params = xgb_params(
            n_classes,
            eta=self.learning_rate,
            max_depth=self.max_depth,
            **self._engine_kwargs(),
        )
        evals_result = {}
        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=self.n_estimators,
            obj=obj,
            custom_metric=obj.metric,
            evals=dvalid,
            early_stopping_rounds=self.early_stopping_rounds,
            evals_result=evals_result,
            verbose_eval=verbose,
            callbacks=[obj.callback()],
        )
        return booster, evals_result

    def _kept_rounds(self):
        best = self.booster_.attr("best_iteration")
        return int(best) + 1 if best is not None else self.booster_.num_boosted_rounds()

    def _load_state(self):
        return load_xgb_state(self.booster_)

    def _gain_importance(self):
        scores = self.booster_.get_score(importance_type="total_gain")
        names = self.booster_.feature_names or [f"f{i}" for i in range(self.n_features_in_)]
        return [scores.get(name, 0.0) for name in names]


class LGBMCRFClassifier(_CRFClassifier):
    """Chain-CRF sequence labeller trained by LightGBM (through ``lightgbm.LGBMModel``).

    Parameters
    ----------
    mode, gamma, transitions, reg_transitions
        As in :class:`XGBCRFClassifier`.
    n_estimators : int
        Boosting rounds (each grows one tree per class).
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
    **kwargs
        Any other LightGBM parameter (``min_child_samples``, ``reg_lambda``,
        ``n_jobs``, ``random_state``, ...). The safe defaults of
        :func:`structboost.lgb_params` apply (``min_child_weight=1``).

    Attributes
    ----------
    classes_ : ndarray, shape (n_classes,)
    booster_ : lightgbm.Booster
        Carries the transitions; :func:`structboost.predict` and
        :func:`structboost.save_lgb_model` accept it.
    best_iteration_ : int
        0-based index of the last round the model uses.
    evals_result_ : dict
        CRF metric per round for each ``eval_set`` entry (``validation_i``).
    transitions_ : pandas.DataFrame
    feature_importances_ : ndarray, shape (n_features_in_,)
    base_model_ : estimator or None
        The fitted clone of ``base_model``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` was a DataFrame.
    """

    def __init__(
        self,
        *,
        mode="gbcrf",
        gamma="mixing",
        transitions="lbfgs",
        reg_transitions=1.0,
        n_estimators=100,
        learning_rate=0.1,
        max_depth=-1,
        num_leaves=31,
        early_stopping_rounds=None,
        base_model=None,
        allowed_transitions=None,
        **kwargs,
    ):
        self.mode = mode
        self.gamma = gamma
        self.transitions = transitions
        self.reg_transitions = reg_transitions
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.num_leaves = num_leaves
        self.early_stopping_rounds = early_stopping_rounds
        self.base_model = base_model
        self.allowed_transitions = allowed_transitions
        super().__init__(**kwargs)

    def _engine_data(self, X):
        return X

    def _train(self, train, evals, crf, n_classes, verbose):
        import lightgbm as lgb

        from .lightgbm import lgb_crf_objective, lgb_params

        X, y, lengths, seq_weight, init_score = train
        obj = lgb_crf_objective(n_classes, nthread=self._objective_threads(), **crf)
        self._start_transitions(obj)
        params = lgb_params(
            n_classes,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            num_leaves=self.num_leaves,
            **self._engine_kwargs(),
        )
        if "min_sum_hessian_in_leaf" in params:  # LGBMModel's own name for it
            params["min_child_weight"] = params.pop("min_sum_hessian_in_leaf")
        model = lgb.LGBMModel(
            objective=obj.sklearn_objective, n_estimators=self.n_estimators, **params
        )
        callbacks = [obj.callback()]
        if verbose:
            callbacks.append(lgb.log_evaluation(int(verbose)))
        if self.early_stopping_rounds is not None:
            stop = lgb.early_stopping(
                self.early_stopping_rounds, first_metric_only=True, verbose=False
            )
            callbacks.append(stop)
        fit = {
            "sample_weight": self._row_weights(seq_weight, lengths),
            "init_score": init_score,
            "group": lengths,
            "eval_metric": obj.sklearn_metric,
            "callbacks": callbacks,
        }
        if evals:
            if "eval_X" in inspect.signature(lgb.LGBMModel.fit).parameters:
                fit.update(eval_X=tuple(e[0] for e in evals), eval_y=tuple(e[1] for e in evals))
            else:  # lightgbm < 4.7
                fit.update(eval_set=[(e[0], e[1]) for e in evals])
            fit.update(
                eval_group=[e[2] for e in evals],
                eval_sample_weight=[self._row_weights(e[3], e[2]) for e in evals],
                eval_init_score=[e[4] for e in evals],
                eval_names=[f"validation_{i}" for i in range(len(evals))],
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
        from .lightgbm import kept_rounds

        return kept_rounds(self.booster_)

    @staticmethod
    def _row_weights(seq_weight, lengths):
        return None if seq_weight is None else np.repeat(seq_weight, lengths)

    def _load_state(self):
        from .lightgbm import load_state

        return load_state(self.booster_)

    def _gain_importance(self):
        return self.booster_.feature_importance(importance_type="gain")
