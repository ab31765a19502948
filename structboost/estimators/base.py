"""The base of the boosted CRF estimators: parameters, the fit loop, labels, fitted attributes.

- Engine parameters are keyword arguments of the constructor, outside the
  signature; ``get_params`` / ``set_params`` see them, and any name that is
  neither the engine's nor the objective's (``transition_iter``,
  ``hess_floor``) is a ``ValueError`` at ``fit``. ``n_jobs`` is the one
  thread setting (None: one thread, -1: every core), decided once per fit.
- One fit skeleton (:meth:`BoostedCRFClassifier._fit`): inputs read once into
  :class:`LabelledRows`, labels encoded against ``classes_``, the stopping
  rule, the objective's :class:`~structboost.objectives.params.ObjectiveSpec`,
  class weights, ``eval_set``, held-out sequences of automatic early stopping
  (:data:`AUTO_EARLY_STOPPING_ROWS`, :data:`AUTO_STOP_METRICS`) and the refit
  on all sequences; the estimators supply the engine run (``_train``) and
  what their structure adds (``_fit_structure``).
- A failed ``fit`` leaves the estimator as it was (:func:`all_or_nothing`).
"""

import functools
import math
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .. import _config
from ..objectives.params import METRICS, ObjectiveSpec, metric_name
from ..sequences import check_values, sequence_weights
from .checks import BOOSTING, check_keywords, check_params
from .inputs import SequenceInputs, flatten_y
from .model_file import ModelFile

#: ``early_stopping="auto"`` holds out validation sequences when the training
#: set has more rows than this (scikit-learn's HistGradientBoosting threshold).
AUTO_EARLY_STOPPING_ROWS = 10_000
#: ``n_estimators=None``: the upper bound when early stopping ends the fit,
#: and the fixed number of rounds otherwise (XGBoost's default).
ROUNDS_STOPPED, ROUNDS_FIXED = 1000, 100
#: Name of the held-out sequences in ``evals_result_``.
HELD_OUT_NAME = "validation"
#: ``eval_metric=None`` on the held-out sequences of automatic early stopping,
#: by the estimator's ``decode``: both recorded, the last drives the stop.
AUTO_STOP_METRICS = {"viterbi": ("crf-nll", "crf-error"), "marginal": ("crf-error", "crf-nll"),
                     "auto": ("crf-nll", "crf-error")}

# Engine parameters the estimators set themselves.
_RESERVED = ("objective", "num_class", "num_target", "metric")
# The objective's settings outside the estimators' signatures, taken as keywords.
_SPEC_KEYWORDS = ("transition_iter", "hess_floor")


def eval_metrics(eval_metric, held_out=False, decode="viterbi"):
    """``eval_metric`` as ``[(name in evals_result_, metric)]``; the last drives early stopping.

    None is ``["crf-nll"]``, or on held-out training sequences the pair of
    :data:`AUTO_STOP_METRICS` for ``decode``.
    """
    if eval_metric is None:
        items = list(AUTO_STOP_METRICS[decode]) if held_out else ["crf-nll"]
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
    """``[(name, value)]`` of ``metrics`` (:func:`eval_metrics`) on margins ``(n, K)``."""
    return [(name, crf.evaluate(margins, batch, metric)[1]) for name, metric in metrics]


class Stopping(NamedTuple):
    """How one ``fit`` ends.

    Attributes
    ----------
    rounds : int
    patience : int or None
        None: no early stopping.
    held_out : (v,) int64 ndarray or None
        Sorted positions of the held-out training sequences.
    """

    rounds: int
    patience: int | None
    held_out: np.ndarray | None


class LabelledRows(NamedTuple):
    """Sequences (or tree instances) read once from any input dialect.

    Attributes
    ----------
    X : (n, d) array, sparse matrix or DataFrame
        Validated features, one row per position.
    lengths : (m,) int64 ndarray
        Rows per sequence.
    codes : (n,) int64 ndarray or None
        Label indices into ``classes_``; None without labels.
    seq_weight : (m,) float64 ndarray or None
        One weight per sequence.
    base_X : (n, p) array-like or None
        Input of the base model (chain estimators).
    parents, edge_types : (n,) int arrays or None
        Each node's parent and edge type (tree estimators).
    nested : bool
        Whether ``X`` was a list of sequences: predictions come back as lists.
    """

    X: Any
    lengths: np.ndarray
    codes: np.ndarray | None = None
    seq_weight: np.ndarray | None = None
    base_X: Any = None
    parents: np.ndarray | None = None
    edge_types: np.ndarray | None = None
    nested: bool = False

    def split(self, held_out):
        """The kept and the held-out sequences ``held_out`` ((v,) positions), each LabelledRows."""
        held = np.zeros(len(self.lengths), dtype=bool)
        held[held_out] = True
        rows = np.repeat(held, self.lengths)
        per_row = ("X", "codes", "base_X", "parents", "edge_types")
        return tuple(
            self._replace(lengths=self.lengths[seqs],
                          seq_weight=None if self.seq_weight is None else self.seq_weight[seqs],
                          **{f: _take_rows(getattr(self, f), np.flatnonzero(r)) for f in per_row})
            for seqs, r in ((~held, ~rows), (held, rows))
        )  # fmt: skip


def _take_rows(X, rows):
    """Rows ``rows`` (int array) of an array, sparse matrix or DataFrame (None stays None)."""
    if X is None:
        return None
    if isinstance(X, pd.DataFrame):
        return X.iloc[rows].reset_index(drop=True)
    return np.asarray(X)[rows] if isinstance(X, (list, tuple)) else X[rows]


_Self = TypeVar("_Self", bound="BoostedCRFClassifier")


def all_or_nothing(fit):
    """Decorate a ``fit`` so that a failed one leaves the fitted attributes as they were.

    A fit that succeeds records the parameters it trained with (``_params_at_fit_``).
    """

    @functools.wraps(fit)
    def guarded(self, *args, **kwargs):
        before = {k: v for k, v in vars(self).items() if _fitted(k)}
        try:
            fitted = fit(self, *args, **kwargs)
        except BaseException:
            for name in [k for k in vars(self) if _fitted(k)]:
                delattr(self, name)
            vars(self).update(before)
            raise
        self._params_at_fit_ = self.get_params(deep=False)
        return fitted

    return guarded


def _fitted(name):
    return name.endswith("_") and not name.startswith("__")


def keep_params(estimator, arguments):
    """Store a constructor's ``locals()`` as attributes, ``kwargs`` (engine keywords) included."""
    for name, value in {**arguments, **arguments.get("kwargs", {})}.items():
        if name not in ("self", "kwargs", "__class__"):
            setattr(estimator, name, value)


class BoostedCRFClassifier(ModelFile, SequenceInputs, ClassifierMixin, BaseEstimator):
    """Base of the boosted CRF estimators (see the module notes).

    Subclasses implement ``_train`` (one engine run on LabelledRows),
    ``_kept_rounds()``, ``_gain_importance()``, ``_load_state()`` and the model
    file's ``_engine_document`` / ``_booster_from_document``; they may
    override ``_fit_structure`` (fitted attributes of the structure, and
    the spec's fields they set).
    """

    # Accepted values of the estimator-level parameters, checked once at fit.
    _param_checks = BOOSTING
    # The engine that reads the keyword arguments outside the signature.
    _engine = "xgboost"
    # Names of the per-row structure arrays of ``fit``, ``predict`` and eval-set entries.
    _structure: tuple[str, ...] = ()

    def __init__(self, **kwargs: Any) -> None:
        keep_params(self, locals())

    def _check_params(self):
        """A ValueError naming the first parameter outside :attr:`_param_checks`, or unknown."""
        check_keywords(self, self._keywords(), self._engine, _SPEC_KEYWORDS,
                       self._get_param_names())
        check_params(self, self._param_checks)

    def _require_engine(self):
        """An ImportError with the install command when the engine is missing (XGBoost: none)."""

    # -- input ------------------------------------------------------------
    def _rows(self, X, y=None, *, reset=False, where="X", groups=None, lengths=None,
              sample_weight=None, base_X=None, parents=None, edge_types=None):
        """Any input dialect as LabelledRows; ``reset`` (fit) also sets ``classes_``."""
        X, lengths, nested = self._check_X(X, groups, lengths, reset=reset, where=where)
        codes = None
        if y is not None or reset:
            y = flatten_y(y, lengths) if nested else y
            if reset:
                self.classes_, codes = self._fit_classes(y, X.shape[0])
            else:
                codes = self._encode(y, X.shape[0], self.classes_)
        if self._structure:
            if parents is None:
                raise ValueError("parents is required: the parent of each row within its instance.")
            parents = flatten_y(parents, lengths, "parents")
            if edge_types is not None:
                edge_types = flatten_y(edge_types, lengths, "edge_types")
        weight = None if sample_weight is None else sequence_weights(sample_weight, lengths)
        return LabelledRows(X, lengths, codes, weight, base_X, parents, edge_types, nested)

    def _eval_rows(self, eval_set, base_X):
        """``eval_set`` as LabelledRows and their names (``fit`` got ``base_X``)."""

        def convert(entry, where):
            if base_X is not None and entry["base_X"] is None and self.base_model is not None:
                raise ValueError(f"{where} has no base_X but fit got one: pass eval_set entries as "
                                 "dicts with a 'base_X' key.")
            given = ("groups", "lengths", "sample_weight", "base_X") + self._structure
            return self._rows(entry["X"], entry["y"], where=where, **{k: entry[k] for k in given})

        return self._eval_set(eval_set, convert, self._structure)

    # -- fit --------------------------------------------------------------
    @all_or_nothing
    def _fit(self, X, y, eval_set, verbose, **given):
        """The one fit: ``given`` are ``fit``'s keyword arguments of :meth:`_rows`."""
        self._require_engine()
        self._check_params()
        rows = self._rows(X, y, reset=True, **given)
        stopping = self._stopping(rows.lengths, bool(eval_set))
        held_out = stopping.held_out is not None
        metrics = eval_metrics(self.eval_metric, held_out, getattr(self, "decode", "viterbi"))
        spec = self._objective_spec(metrics, **self._fit_structure(rows))
        rows = rows._replace(seq_weight=self._class_weighted(rows))
        evals, names = self._eval_rows(eval_set, rows.base_X)
        verbose = bool(eval_set) if verbose is None else verbose  # None: print for an eval_set
        booster, evals_result = self._boost(rows, evals, names, stopping, spec, verbose, metrics)
        self._set_fitted(booster, evals_result, metrics, stopping.held_out)
        if hasattr(self, "decode"):  # (chosen with the held-out run's model, before the refit)
            self.decode_ = self._chosen_decode(rows, stopping.held_out)
        refit = self._refit_stopping(stopping)
        if refit is not None:
            self.booster_ = self._boost(rows, [], [], refit, spec, verbose, metrics)[0]
            self._set_best_iteration()  # evals_result_ stays the held-out run's
        return self

    def _fit_structure(self, rows):
        """Set what the training structure determines; the spec fields it fixes (``{}``)."""
        return {}

    def _boost(self, rows, evals, names, stopping, spec, verbose, metrics):
        """One engine run (:meth:`_train`), the held-out sequences split off as last eval set."""
        if stopping.held_out is not None:
            rows, held = rows.split(stopping.held_out)
            evals, names = [*evals, held], [*names, HELD_OUT_NAME]
        return self._train(rows, evals, names, spec, verbose, metrics, stopping)

    # -- parameters -------------------------------------------------------
    def _keywords(self):
        """The keyword arguments given outside the signature: ``{name: value}``."""
        named = set(self._get_param_names())
        return {key: value for key, value in vars(self).items()
                if key not in named and not key.startswith("_") and not key.endswith("_")}

    def _engine_kwargs(self):
        """The engine parameters given as keyword arguments (not the objective's)."""
        return {k: v for k, v in self._keywords().items() if k not in _SPEC_KEYWORDS}

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Parameters of this estimator, engine keyword arguments included."""
        params = super().get_params(deep=deep)
        params.update(self._keywords())
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
        """The objective's spec from the parameters, the last of ``metrics``
        (:func:`eval_metrics`) and the fields ``route`` the estimator sets itself.
        """
        reserved = sorted(set(self._engine_kwargs()) & set(_RESERVED))
        if reserved:
            raise ValueError(
                f"{reserved} are set by {type(self).__name__} for the CRF objective: remove "
                "them from the parameters (use mode=, hessian_bound=, step=, "
                "transition_solver=, eval_metric= instead)."
            )
        return ObjectiveSpec(
            mode=self.mode, hessian_bound=self.hessian_bound, step=self.step,
            transition_solver=self.transition_solver, reg_transitions=self.reg_transitions,
            metric=metrics[-1][1], nthread=self._threads(),
            **{k: v for k, v in self._keywords().items() if k in _SPEC_KEYWORDS}, **route,
        )  # fmt: skip

    # -- weights ------------------------------------------------------------
    def _class_weighted(self, rows):
        """Sequence weights ``(m,)`` times each sequence's mean ``class_weight`` of its labels."""
        seq_weight, codes, lengths = rows.seq_weight, rows.codes, rows.lengths
        classes = self.classes_
        class_weight = self.class_weight
        if class_weight is None:
            return seq_weight
        if not (isinstance(class_weight, dict) or class_weight == "balanced"):
            raise ValueError(
                f"class_weight must be None, 'balanced' or a dict {{label: weight}}; got "
                f"{class_weight!r}."
            )
        unknown = [k for k in class_weight if k not in set(classes.tolist())] if isinstance(
            class_weight, dict) else []  # fmt: skip
        if unknown:
            raise ValueError(f"class_weight names labels not in y: {unknown}; known labels: "
                             f"{classes.tolist()}.")
        per_class = compute_class_weight(class_weight, classes=classes, y=classes[codes])
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        factor = np.add.reduceat(per_class[codes], starts) / lengths
        weighted = factor if seq_weight is None else np.asarray(seq_weight) * factor
        if not (weighted > 0).any():
            raise ValueError(
                f"class_weight={class_weight!r} leaves every training sequence with weight "
                "zero, so nothing can be learned: give the labels of y positive weights."
            )
        return weighted

    # -- early stopping ---------------------------------------------------
    def _stopping(self, lengths, has_eval_set):
        """The Stopping of one ``fit`` on sequences of ``lengths (m,)`` (see ``early_stopping``)."""
        mode, patience = self.early_stopping, self.early_stopping_rounds
        if mode is False and patience is not None:
            raise ValueError(
                f"early_stopping=False but early_stopping_rounds={patience!r}: drop one of them."
            )
        held_out = None
        automatic = False
        if patience is not None and not has_eval_set:
            raise ValueError(
                "early_stopping_rounds needs an eval_set to watch: pass eval_set=, or drop "
                "early_stopping_rounds and set early_stopping=True to hold out "
                "validation_fraction of the training sequences."
            )
        if patience is None and mode is not False:
            n_rows, m = int(np.sum(lengths)), len(lengths)
            if has_eval_set:
                automatic = mode is True
            elif mode is True or (n_rows > AUTO_EARLY_STOPPING_ROWS and m >= 2):
                held_out = self._held_out(m)
                automatic = True
            if automatic:
                patience = int(self.n_iter_no_change)
        rounds = self.n_estimators
        if rounds is None:
            rounds = ROUNDS_STOPPED if automatic else ROUNDS_FIXED
        return Stopping(int(rounds), patience, held_out)

    def _held_out(self, m):
        """Sorted positions ``(v,)`` of the ``validation_fraction`` of ``m`` sequences held out."""
        n_held = math.ceil(self.validation_fraction * m)
        if m < 2 or n_held >= m:
            raise ValueError(
                f"early stopping holds out {n_held} of the {m} training sequences, which leaves "
                "none to train on: give more sequences, lower validation_fraction, or set "
                "early_stopping=False."
            )
        seed = getattr(self, "random_state", None)
        if seed is None:  # XGBoost's and LightGBM's None is a fixed seed too
            seed = getattr(self, "seed", 0) or 0
        order = check_random_state(seed).permutation(m)
        return np.sort(order[:n_held]).astype(np.int64)

    def _refit_stopping(self, stopping):
        """The Stopping of the refit on all sequences after a held-out run (``refit``), or None."""
        if stopping.held_out is None or not self.refit:
            return None
        chosen = self.validation_best_iteration_ + 1
        # rounded to 9 places first, so that 90 / 0.9 = 100.00000000000001 gives 100
        rounds = math.ceil(round(chosen / (1.0 - self.validation_fraction), 9))
        return Stopping(min(rounds, stopping.rounds), None, None)

    # -- threads ----------------------------------------------------------
    def _threads(self):
        """The thread count of a fit or prediction, engine and kernels alike, from ``n_jobs``."""
        return _config.resolve_n_jobs(self._engine_kwargs().get("n_jobs"))

    def _engine_params(self):
        """The engine keyword arguments, with the thread count of :meth:`_threads`."""
        return {**self._engine_kwargs(), "n_jobs": self._threads()}

    def __sklearn_is_fitted__(self):
        """Whether ``fit`` has run."""
        return hasattr(self, "booster_")

    # -- labels -----------------------------------------------------------
    @staticmethod
    def _fit_classes(y, n_rows):
        """Sorted ``classes (K,)`` and codes ``(n,)`` of the training labels."""
        # Python strings before NumPy's, which drop trailing NULs
        if isinstance(y, (list, tuple)) or getattr(getattr(y, "dtype", None), "kind", "") == "O":
            raw = list(y) if isinstance(y, (list, tuple)) else y.tolist()
            odd = next((v for v in raw if isinstance(v, str) and v.endswith("\0")), None)
            if odd is not None:
                raise ValueError(
                    f"y has the label {odd!r}, which ends in a NUL character: NumPy's strings "
                    "drop trailing NULs, so it would merge with "
                    f"{odd.rstrip(chr(0))!r}. Rename such labels."
                )
        y = column_or_1d(y, warn=True)
        missing = pd.isna(y)
        if missing.any():
            row = int(np.flatnonzero(missing)[0])
            raise ValueError(
                f"y has a missing label ({y[row]!r}) at row {row} ({int(missing.sum())} in "
                "all): drop those rows or give them a label."
            )
        check_values(y, "y", "label")
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
        # A dict lookup compares by equality and hash: any dtype, no sorting of mixed types.
        index = {label: i for i, label in enumerate(classes.tolist())}
        values = y.tolist()
        codes = np.fromiter((index.get(v, -1) for v in values), dtype=np.int64, count=len(values))
        unseen = codes < 0
        if unseen.any():
            row = int(np.flatnonzero(unseen)[0])
            raise ValueError(
                f"y contains labels not seen in fit, e.g. {values[row]!r}; known labels: "
                f"{classes.tolist()} (first unseen at row {row}, {int(unseen.sum())} in all)."
            )
        return codes

    # -- fitted attributes --------------------------------------------------
    def _set_fitted(self, booster, evals_result, metrics, held_out=None):
        """Set ``booster_``, ``evals_result_`` and the rounds and scores they give."""
        self.validation_sequences_ = (
            np.zeros(0, dtype=np.int64) if held_out is None else np.asarray(held_out, np.int64)
        )
        self.booster_ = booster
        self.evals_result_ = evals_result
        self._set_best_iteration()
        self.validation_best_iteration_ = None if held_out is None else self.best_iteration
        if evals_result:  # as XGBoost: the stopping metric on the last eval set, kept round
            last = evals_result[list(evals_result)[-1]]
            self.best_score_ = float(last[metrics[-1][0]][self.best_iteration])
        elif hasattr(self, "best_score_"):
            del self.best_score_

    #: The engine's number of its first round in ``best_iteration_`` (XGBoost's
    #: 0, LightGBM's 1); ``best_iteration`` counts from 0 on every estimator.
    _FIRST_ROUND = 0

    def _set_best_iteration(self):
        """``best_iteration_`` from the booster's kept rounds."""
        self.best_iteration_ = self._kept_rounds() - 1 + self._FIRST_ROUND

    @property
    def best_iteration(self):
        """XGBoost's name: the 0-based index of the last round the model uses."""
        check_is_fitted(self)
        return self.best_iteration_ - self._FIRST_ROUND

    @property
    def best_score(self):
        """XGBoost's name of ``best_score_`` (only with an evaluation set)."""
        check_is_fitted(self)
        return self.best_score_

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
