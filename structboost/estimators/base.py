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
- Early stopping as scikit-learn's ``HistGradientBoostingClassifier``:
  ``early_stopping="auto"`` holds out ``validation_fraction`` of the
  training *sequences* (drawn with ``random_state``) when there are more
  than :data:`AUTO_EARLY_STOPPING_ROWS` rows and stops after
  ``n_iter_no_change`` rounds without progress (of the Viterbi token error
  by default, of the NLL with ``decode="marginal"``: :data:`AUTO_STOP_METRICS`);
  ``n_estimators=None`` is
  then a bound of :data:`ROUNDS_STOPPED` rounds. An ``eval_set`` or
  ``early_stopping_rounds`` keeps XGBoost's behaviour (see
  :meth:`BoostedCRFClassifier._stopping`). Unlike scikit-learn, ``refit=True``
  (the default) then trains again on *all* the training sequences for the
  rounds the held-out ones chose, scaled by ``1 / (1 - validation_fraction)``
  (see :meth:`BoostedCRFClassifier._refit_stopping`).
- ``eval_metric`` and ``callbacks`` are constructor parameters with the
  meaning of XGBoost's scikit-learn wrapper: metric names (``"crf-nll"``,
  ``"crf-error"``, the objective's own names) or callables ``f(y_true,
  y_proba)``, the last one driving early stopping; callbacks run after the
  transition recorder.
- Threads: ``n_jobs`` is the one setting (the engine's ``nthread`` /
  ``num_threads`` are refused), with scikit-learn's meaning: None is one
  thread, -1 every core. A fit decides the count once; the engine gets it,
  and the objective's numba kernels get it as the spec's ``nthread``.
- Keywords outside the signature must be the engine's parameters (or the
  objective's ``transition_iter`` and ``hess_floor``): any other name is a
  ``ValueError`` at ``fit``, so that nothing is silently lost.
- Fitted: ``booster_`` (also ``get_booster()``), ``classes_``,
  ``n_classes_``, ``evals_result_``, ``best_iteration_`` (an int: the
  last round the model uses, in the engine's numbering: 0-based on
  XGBoost, 1-based on LightGBM), ``best_score_`` (with an ``eval_set``),
  their XGBoost names ``best_iteration`` (0-based everywhere) and
  ``best_score``, ``validation_sequences_``, ``validation_best_iteration_``
  (the round the held-out sequences chose, before a refit),
  ``feature_importances_``;
  predictions are ``predict`` (decoded as the ``decode`` parameter says:
  the Viterbi path or each position's most probable label), ``predict_proba``
  (= ``predict_marginals``)
  and ``predict_log_likelihood``.
"""

import contextlib
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
from ..sequences import check_values
from .checks import BOOSTING, check_keywords, check_params
from .inputs import SequenceInputs

#: ``early_stopping="auto"`` holds out validation sequences when the training
#: set has more rows than this (scikit-learn's HistGradientBoosting threshold).
AUTO_EARLY_STOPPING_ROWS = 10_000
#: ``n_estimators=None``: the upper bound when early stopping ends the fit,
#: and the fixed number of rounds otherwise (XGBoost's default).
ROUNDS_STOPPED, ROUNDS_FIXED = 1000, 100
#: Name of the held-out sequences in ``evals_result_``.
HELD_OUT_NAME = "validation"
#: ``eval_metric=None`` on the held-out sequences of automatic early stopping,
#: by the estimator's ``decode``: both recorded, the last drives the stop. The
#: Viterbi token error for Viterbi decoding (issue 30: level with the NLL on OCR
#: and CoNLL, +1.9 points on protein, validation parts); the NLL, which scores
#: the marginals themselves, for marginal decoding.
AUTO_STOP_METRICS = {"viterbi": ("crf-nll", "crf-error"), "marginal": ("crf-error", "crf-nll")}

# Engine parameters the estimators set themselves.
_RESERVED = ("objective", "num_class", "num_target", "metric")
# The objective's settings outside the estimators' signatures, taken as keywords.
_SPEC_KEYWORDS = ("transition_iter", "hess_floor")


def eval_metrics(eval_metric, held_out=False, decode="viterbi"):
    """``eval_metric`` as a list of ``(name, metric)``; the last drives early stopping.

    Parameters
    ----------
    eval_metric : None, str, callable or list of them
        Names of the CRF metrics (``"crf-nll"``, ``"crf-error"``) or
        callables ``f(y_true, y_proba[, sample_weight=])`` as in XGBoost's
        scikit-learn wrapper: ``y_true`` ``(n,)`` label indices, ``y_proba``
        ``(n, K)`` posterior marginals; lower is better. None:
        ``"crf-nll"``, or with ``held_out`` ``["crf-nll", "crf-error"]``.
    held_out : bool
        Whether the fit stops on held-out training sequences (automatic
        early stopping): by default it then records the NLL and the
        Viterbi token error, and stops on the metric of ``decode``
        (:data:`AUTO_STOP_METRICS`).
    decode : {"viterbi", "marginal"}
        The estimator's decoding: with ``held_out`` and no ``eval_metric``
        the Viterbi token error (whose best round comes rounds after the
        NLL's) or the NLL decides.

    Returns
    -------
    list of (str, str or callable)
        The name in ``evals_result_`` and the objective's metric (a name
        of :data:`~structboost.objectives.params.METRICS` or the callable).
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


def round_logging(verbose, eval_set):
    """``fit``'s ``verbose`` as the engine's: None prints only for an ``eval_set`` given.

    Parameters
    ----------
    verbose : bool, int or None
    eval_set : list or None
        The user's evaluation sets.

    Returns
    -------
    bool or int
    """
    return bool(eval_set) if verbose is None else verbose


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


class Stopping(NamedTuple):
    """How one ``fit`` ends (see :meth:`BoostedCRFClassifier._stopping`).

    Attributes
    ----------
    rounds : int
        Most boosting rounds.
    patience : int or None
        Rounds without improvement before the fit stops; None never stops early.
    held_out : (v,) int64 ndarray or None
        Training sequences held out as the validation set, 0-based positions
        in row order, sorted; None when the fit holds none out.
    """

    rounds: int
    patience: int | None
    held_out: np.ndarray | None


class LabelledRows(NamedTuple):
    """Labelled sequences as a chain estimator hands them to its engine.

    Attributes
    ----------
    X : (n, d) array, sparse matrix or DataFrame
        The engine's features, one row per position.
    codes : (n,) int64 ndarray
        Label indices into ``classes_``.
    lengths : (m,) int64 ndarray
        Rows per sequence.
    seq_weight : (m,) float64 ndarray or None
        One weight per sequence.
    base_margin : (n, K) float64 ndarray or None
        Node scores to boost from (a base model's).
    """

    X: Any
    codes: np.ndarray
    lengths: np.ndarray
    seq_weight: np.ndarray | None
    base_margin: np.ndarray | None


def _take_rows(X, rows):
    """Rows ``rows`` (int array) of an array, sparse matrix or DataFrame (None stays None)."""
    if X is None:
        return None
    if isinstance(X, pd.DataFrame):
        return X.iloc[rows].reset_index(drop=True)
    return np.asarray(X)[rows] if isinstance(X, (list, tuple)) else X[rows]


def split_sequences(held_out, lengths, per_row, per_sequence=()):
    """The kept and the held-out parts of a training set, whole sequences each.

    Parameters
    ----------
    held_out : (v,) int array
        Positions of the held-out sequences.
    lengths : (m,) int array
    per_row : tuple
        Arrays, sparse matrices or DataFrames with one row per position, or None.
    per_sequence : tuple
        Arrays with one entry per sequence, or None.

    Returns
    -------
    kept, held : tuple
        Each ``(lengths, *per_row, *per_sequence)`` of its sequences.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    held = np.zeros(len(lengths), dtype=bool)
    held[held_out] = True
    rows = np.repeat(held, lengths)
    return tuple(
        (lengths[seqs], *(_take_rows(a, np.flatnonzero(r)) for a in per_row),
         *(None if a is None else np.asarray(a)[seqs] for a in per_sequence))
        for seqs, r in ((~held, ~rows), (held, rows))
    )  # fmt: skip


_Self = TypeVar("_Self", bound="BoostedCRFClassifier")


def all_or_nothing(fit):
    """Decorate a ``fit`` so that a failed one leaves the estimator as it was.

    The fitted attributes (names ending in ``_``, scikit-learn's convention)
    are put back as they were before the call when it raises or is
    interrupted: a refit that fails never leaves a new feature count beside
    the old booster, and a first fit that fails leaves an unfitted estimator.
    A fit that succeeds records the parameters it trained with
    (:func:`changed_params` compares them with the current ones).
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


#: Parameters that do not describe the trained model: set after fit, they may be saved.
_NOT_THE_MODEL = ("callbacks", "n_jobs")


def changed_params(estimator):
    """Names of the model's parameters set since the estimator was fitted or loaded (sorted)."""
    before = getattr(estimator, "_params_at_fit_", None)
    if before is None:
        return []
    now = estimator.get_params(deep=False)
    return sorted(name for name in set(before) | set(now) if name not in _NOT_THE_MODEL
                  and not _same(before.get(name), now.get(name)))  # fmt: skip


def _same(a, b):
    if a is b:
        return True
    try:
        return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) else bool(a == b)
    except (TypeError, ValueError):
        return False


def keep_params(estimator, arguments):
    """Store a constructor's arguments, unchanged, as scikit-learn expects.

    Parameters
    ----------
    estimator : BaseEstimator
    arguments : dict
        The constructor's ``locals()``: its named parameters, ``self`` and
        ``kwargs`` (the engine's and the objective's keywords, kept as
        attributes as well; :meth:`BoostedCRFClassifier._check_params`
        refuses the unknown ones at ``fit``).
    """
    for name, value in {**arguments, **arguments.get("kwargs", {})}.items():
        if name not in ("self", "kwargs", "__class__"):
            setattr(estimator, name, value)


class BoostedCRFClassifier(SequenceInputs, ClassifierMixin, BaseEstimator):
    """Base of the boosted CRF estimators (see the module notes).

    Subclasses implement ``_kept_rounds()`` (rounds the model uses) and
    ``_gain_importance()`` (total split gain per feature).
    """

    # Accepted values of the estimator-level parameters, checked once at fit.
    _param_checks = BOOSTING
    # The engine that reads the keyword arguments outside the signature.
    _engine = "xgboost"

    def __init__(
        self,
        **kwargs: Any,
    ) -> None:
        keep_params(self, locals())

    def _check_params(self):
        """A ValueError naming the first parameter outside :attr:`_param_checks`, or unknown."""
        check_keywords(self, self._keywords(), self._engine, _SPEC_KEYWORDS,
                       self._get_param_names())
        check_params(self, self._param_checks)

    # -- parameters -------------------------------------------------------
    def _keywords(self):
        """The keyword arguments given outside the signature: ``{name: value}``."""
        named = set(self._get_param_names())
        return {
            key: value
            for key, value in vars(self).items()
            if key not in named and not key.startswith("_") and not key.endswith("_")
        }

    def _engine_kwargs(self):
        """The engine parameters given as keyword arguments (not the objective's)."""
        return {k: v for k, v in self._keywords().items() if k not in _SPEC_KEYWORDS}

    def get_params(
        self,
        deep: bool = True,
    ) -> dict[str, Any]:
        """Parameters of this estimator, engine keyword arguments included."""
        params = super().get_params(deep=deep)
        params.update(self._keywords())
        return params

    def set_params(
        self: _Self,
        **params: Any,
    ) -> _Self:
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
            **{k: v for k, v in self._keywords().items() if k in _SPEC_KEYWORDS},
            **route,
        )

    # -- weights ------------------------------------------------------------
    def _class_weighted(self, seq_weight, codes, lengths, classes):
        """Sequence weights ``(m,)`` times each sequence's mean ``class_weight`` of its labels.

        A CRF's likelihood is a sum over sequences, so a weight applies to a
        whole sequence: per-row weights in G and H would make them the
        gradient of no function, which the adaptive step, the transition
        solver and early stopping all measure. ``class_weight`` (a dict
        ``{label: weight}`` or ``"balanced"``, as in scikit-learn) therefore
        weighs every sequence by the mean class weight of its labels, on top
        of ``sample_weight``.

        Parameters
        ----------
        seq_weight : (m,) array-like or None
        codes : (n,) int array
            Label indices into ``classes``.
        lengths : (m,) int array
        classes : (K,) ndarray

        Returns
        -------
        (m,) float64 ndarray, or ``seq_weight`` when ``class_weight`` is None
        """
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
            raise ValueError(
                f"class_weight names labels not in y: {unknown}; known labels: "
                f"{classes.tolist()}."
            )
        per_class = compute_class_weight(class_weight, classes=classes, y=classes[codes])
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        factor = np.add.reduceat(per_class[codes], starts) / lengths
        return factor if seq_weight is None else np.asarray(seq_weight) * factor

    # -- early stopping ---------------------------------------------------
    def _stopping(self, lengths, has_eval_set):
        """Rounds, patience and held-out sequences of one ``fit``.

        ``early_stopping`` decides whether ``fit`` holds out
        ``validation_fraction`` of the training sequences (drawn with
        ``random_state``) and stops after ``n_iter_no_change`` rounds
        without improvement on them: ``"auto"`` when the training set has
        more than :data:`AUTO_EARLY_STOPPING_ROWS` rows and at least two
        sequences, ``True`` always, ``False`` never. An ``eval_set`` or
        ``early_stopping_rounds`` keeps XGBoost's behaviour instead (nothing
        held out; ``early_stopping=True`` with an ``eval_set`` stops on it
        with ``n_iter_no_change`` patience). ``n_estimators=None`` gives
        :data:`ROUNDS_STOPPED` rounds at most when the patience is
        ``n_iter_no_change``, :data:`ROUNDS_FIXED` otherwise.

        Parameters
        ----------
        lengths : (m,) array-like of int
            Rows per training sequence.
        has_eval_set : bool

        Returns
        -------
        Stopping
        """
        # Types and ranges were checked once, by _check_params (estimators/checks.py).
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
        """How the refit on all the training sequences ends, or None when there is none.

        After automatic early stopping held out sequences and the fit kept
        ``validation_best_iteration_ + 1`` rounds, ``refit=True`` trains again
        on every training sequence, for that many rounds divided by ``1 -
        validation_fraction`` (rounded up: the same number of passes over
        each sequence's gradient, with 1 / (1 - fraction) more sequences),
        at most ``stopping.rounds``, with no early stopping. Called after
        :meth:`_set_fitted` of the held-out run.

        Parameters
        ----------
        stopping : Stopping
            The held-out run's (from :meth:`_stopping`).

        Returns
        -------
        Stopping or None
        """
        if stopping.held_out is None or not self.refit:
            return None
        chosen = self.validation_best_iteration_ + 1
        # rounded to 9 places first, so that 90 / 0.9 = 100.00000000000001 gives 100
        rounds = math.ceil(round(chosen / (1.0 - self.validation_fraction), 9))
        return Stopping(min(rounds, stopping.rounds), None, None)

    # -- threads ----------------------------------------------------------
    def _threads(self):
        """The thread count of a fit or prediction, from ``n_jobs``.

        :func:`structboost._config.resolve_n_jobs`: None is one thread, -1
        every core; the same count for the engine and the numba kernels.
        """
        return _config.resolve_n_jobs(self._engine_kwargs().get("n_jobs"))

    def _engine_params(self):
        """The engine keyword arguments, with the thread count of :meth:`_threads`."""
        return {**self._engine_kwargs(), "n_jobs": self._threads()}

    @contextlib.contextmanager
    def _thread_limits(self):
        """numba's kernels on :meth:`_threads` threads inside the block (prediction)."""
        with _config.threads(self._threads()):
            yield

    def __sklearn_is_fitted__(self):
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
    def _set_fitted(self, classes, booster, evals_result, metrics, held_out=None):
        self.classes_ = classes
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

    def _set_refitted(self, booster):
        """Swap in the model refit on all sequences (``evals_result_`` stays the held-out run's)."""
        self.booster_ = booster
        self._set_best_iteration()

    #: The engine's number of its first round in ``best_iteration_`` (XGBoost's
    #: 0, LightGBM's 1); ``best_iteration`` counts from 0 on every estimator.
    _FIRST_ROUND = 0

    def _set_best_iteration(self):
        self.best_iteration_ = self._kept_rounds() - 1 + self._FIRST_ROUND

    @property
    def best_iteration(self):
        """XGBoost's name: the 0-based index of the last round the model uses.

        ``best_iteration + 1`` rounds are kept; ``best_iteration_`` is the
        same round in the engine's numbering (LightGBM counts from 1).
        """
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

    def get_booster(
        self,
    ) -> Any:
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
