"""What both chain estimators share: input checks, base models, fit and predict.

:class:`~structboost.XGBCRFClassifier` and :class:`~structboost.LGBMCRFClassifier`
(:mod:`structboost.estimators.chain`) add the engine: its training loop,
its data and its model-file part.
"""

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
from sklearn.base import clone
from sklearn.metrics import accuracy_score
from sklearn.utils.validation import check_is_fitted

from .._compile_log import reports
from .._typing import ArrayLike, Floats
from ..engines.predict import predict as _viterbi
from ..engines.predict import predict_marginals as _marginals
from ..engines.predict import sequence_log_likelihood as _log_likelihood
from ..objectives.constraints import resolve as resolve_constraints
from .base import (
    HELD_OUT_NAME,
    BoostedCRFClassifier,
    LabelledRows,
    ChainTransitions,
    all_or_nothing,
    eval_metrics,
    round_logging,
    split_sequences,
)
from .inputs import ChainInputs, flatten_y, kind, nest
from .model_file import ModelFile
from .serving import serving_predict


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
    @all_or_nothing
    def fit(
        self: _Self,
        X: Any,
        y: Any,
        *,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        eval_set: Sequence[Any] | None = None,
        base_X: Any = None,
        verbose: bool | int | None = None,
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
        verbose : bool or int, optional
            Print the metrics every round (``True``) or every ``verbose``
            rounds; ``False``: silent. None (the default): every round for an
            ``eval_set`` you pass, as ``XGBClassifier.fit`` does, and nothing
            for the held-out sequences of automatic early stopping.

        Returns
        -------
        self
        """
        self._require_engine()
        self._check_params()
        X, lengths, nested = self._check_X(X, groups, lengths, reset=True)
        classes, codes = self._fit_classes(flatten_y(y, lengths) if nested else y,
                                           X.shape[0])  # fmt: skip
        stopping = self._stopping(lengths, bool(eval_set))
        metrics = eval_metrics(
            self.eval_metric, held_out=stopping.held_out is not None, decode=self.decode
        )
        self.constraints_ = resolve_constraints(
            self.allowed_transitions, len(classes), labels=classes
        )
        spec = self._objective_spec(
            metrics, allowed_transitions=self.constraints_, **self._route()
        )
        seq_weight = self._class_weighted(
            self._sequence_weights(sample_weight, lengths), codes, lengths, classes
        )
        data = (X, codes, lengths, base_X, seq_weight)
        run = (eval_set, classes, spec, round_logging(verbose, eval_set), metrics)
        booster, evals_result = self._boost(data, stopping, *run)
        self._set_fitted(classes, booster, evals_result, metrics, stopping.held_out)
        refit = self._refit_stopping(stopping)
        if refit is not None:
            self._set_refitted(self._boost(data, refit, *run)[0])
        return self

    def _boost(self, data, stopping, eval_set, classes, spec, verbose, metrics):
        """Base model and boosting of one run of :meth:`fit`, held-out sequences split off.

        Parameters
        ----------
        data : tuple
            ``(X, codes, lengths, base_X, seq_weight)`` of all the training
            sequences (``base_X`` and ``seq_weight`` may be None).
        stopping : Stopping
            From :meth:`_stopping` or :meth:`_refit_stopping`.
        eval_set, classes, spec, verbose, metrics
            As in :meth:`fit`.

        Returns
        -------
        booster, evals_result
            Of :meth:`_train`; sets ``base_model_``.
        """
        X, codes, lengths, base_X, seq_weight = data
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
        train = LabelledRows(X, codes, lengths, seq_weight,
                             self._base_margin(X, base_X, len(classes)))  # fmt: skip
        evals, names = self._eval_data(eval_set, classes, base_X)
        if stopping.held_out is not None:
            lengths_h, Xh, codes_h, base_h, weight_h = held
            margin_h = self._base_margin(Xh, base_h, len(classes))
            evals.append(LabelledRows(Xh, codes_h, lengths_h, weight_h, margin_h))
            names.append(HELD_OUT_NAME)
        return self._train(train, evals, spec, len(classes), verbose, names, metrics, stopping)

    # -- predict ----------------------------------------------------------
    def _data(self, X, groups, lengths, base_X):
        """Engine data, lengths ``(m,)``, base margin ``(n, K)`` (or None), nested flag."""
        check_is_fitted(self)
        X, lengths, nested = self._check_X(X, groups, lengths, reset=False)
        margin = self._base_margin(X, base_X, len(self.classes_))
        return self._engine_data(X), lengths, margin, nested

    def predict(
        self,
        X: Any,
        *,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        decode: str | None = None,
        base_X: Any = None,
    ) -> Any:
        """Predicted labels, in the original label values.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d), or list
            As in :meth:`fit`.
        groups : array-like of shape (n,) or str, optional
        lengths : array-like of int, shape (m,), optional
        decode : {"viterbi", "marginal"}, optional
            The most probable sequence, or each position's most probable
            label (see :func:`structboost.engines.predict`); None: the
            estimator's ``decode``.
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of the base model, when ``fit`` was given one.

        Returns
        -------
        (n,) ndarray of ``classes_`` values, or a list of label lists when
        ``X`` was a list of sequences
        """
        if base_X is None:
            labels = serving_predict(self, X, groups, lengths, decode)
            if labels is not None:
                return labels
        data, lengths, margin, nested = self._data(X, groups, lengths, base_X)
        with self._thread_limits():
            codes = _viterbi(
                self.booster_,
                data,
                lengths=lengths,
                decode=self.decode if decode is None else decode,
                base_margin=margin,
                allowed_transitions=self.constraints_,
            )
        labels = self.classes_[codes]
        return nest(labels, lengths) if nested else labels

    def predict_single(
        self,
        xseq: Any,
        *,
        decode: str | None = None,
        base_X: Any = None,
    ) -> Any:
        """Labels of one sequence, as sklearn-crfsuite's ``predict_single``.

        Parameters
        ----------
        xseq : list of dict or array-like of shape (n_i, d)
            The sequence's feature dicts (one per position) or rows, the
            same kind of input as ``fit`` got.
        decode : {"viterbi", "marginal"}, optional
            As in :meth:`predict` (None: the estimator's ``decode``).
        base_X : array-like of shape (n_i, p), optional
            The base model's input, when ``fit`` was given one.

        Returns
        -------
        list
            ``n_i`` labels (``classes_`` values).
        """
        return self.predict([xseq], decode=decode, base_X=base_X)[0]

    def predict_marginals(
        self,
        X: Any,
        *,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        base_X: Any = None,
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
        self,
        X: Any,
        *,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        base_X: Any = None,
    ) -> Any:
        """scikit-learn's name for :meth:`predict_marginals` (rows sum to 1, ``classes_`` order)."""
        return self.predict_marginals(X, groups=groups, lengths=lengths, base_X=base_X)

    def predict_log_likelihood(
        self,
        X: Any,
        y: Any,
        *,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        base_X: Any = None,
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
        self,
        X: Any,
        y: Any,
        *,
        groups: ArrayLike | str | None = None,
        lengths: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        base_X: Any = None,
    ) -> float:
        """Token accuracy of :meth:`predict` (weighted by ``sample_weight`` per row)."""
        predicted = self.predict(X, groups=groups, lengths=lengths, base_X=base_X)
        if kind(X) is not None:
            lengths = np.array([len(p) for p in predicted])
            predicted = np.asarray([label for seq in predicted for label in seq])
            y = flatten_y(y, lengths)
        return accuracy_score(y, predicted, sample_weight=sample_weight)
