"""What both chain estimators share: base models, constraints, fit and predict signatures.

:class:`~structboost.XGBCRFClassifier` (:mod:`.chain`) and
:class:`~structboost.LGBMCRFClassifier` (:mod:`.lgbm`) add the engine run
(``_train``), its prediction data (``_engine_data``) and its model-file part.
"""

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.metrics import accuracy_score
from sklearn.utils.validation import check_is_fitted

from .. import _config
from .._compile_log import reports
from .._typing import ArrayLike, Floats
from ..engines.predict import DECODINGS
from ..engines.predict import predict as _viterbi
from ..engines.predict import predict_marginals as _marginals
from ..engines.predict import sequence_log_likelihood as _log_likelihood
from ..objectives.constraints import resolve as resolve_constraints
from ..objectives.params import fill_doc
from ._docs import VERBOSE
from .base import BoostedCRFClassifier
from .inputs import flatten_y, kind, nest
from .serving import serving_marginals, serving_predict


_Self = TypeVar("_Self", bound="_CRFClassifier")


class ChainTransitions:
    """The fitted ``transitions_`` table of the chain estimators (from ``_load_state()``)."""

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
        return pd.DataFrame(params.transitions, index=labels.rename("from"),
                            columns=labels.rename("to"))


class _CRFClassifier(ChainTransitions, BoostedCRFClassifier):
    """What both chain estimators share (see the module notes)."""

    def __sklearn_tags__(self):
        """scikit-learn's tags: sparse input and NaN accepted."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True
        return tags

    def _fit_structure(self, rows):
        self.constraints_ = resolve_constraints(self.allowed_transitions, len(self.classes_),
                                                labels=self.classes_)
        return {"allowed_transitions": self.constraints_}

    # -- base model -------------------------------------------------------
    def _fit_base_model(self, train):
        """``base_model_``: a clone of ``base_model`` fitted on the training rows, or None."""
        self.base_model_ = None
        if self.base_model is not None:
            inputs = train.X if train.base_X is None else train.base_X
            self.base_model_ = clone(self.base_model).fit(inputs, train.codes, train.lengths,
                                                          sample_weight=train.seq_weight)

    def _base_margin(self, rows):
        """Node scores ``(n, K)`` of the base model on ``rows.base_X`` (default ``X``), or None."""
        X, base_X, n_classes = rows.X, rows.base_X, len(self.classes_)
        if self.base_model_ is None:
            if base_X is not None:
                raise ValueError("base_X is the input of base_model, but base_model is None: set "
                                 "base_model= or drop base_X.")
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
    @fill_doc(verbose=VERBOSE)
    def fit(self: _Self, X: Any, y: Any, *, groups: ArrayLike | str | None = None,
            lengths: ArrayLike | None = None, sample_weight: ArrayLike | None = None,
            eval_set: Sequence[Any] | None = None, base_X: Any = None,
            verbose: bool | int | None = None) -> _Self:
        """Train on labelled sequences.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d), or list
            One row per position, the rows of a sequence contiguous; or one
            entry per sequence (2-D arrays or lists of feature dicts).
        y : array-like, shape (n,), or list of label lists
            Labels of any hashable type.
        groups : array-like of shape (n,) or str, optional
            Per-row sequence id, or the name of the DataFrame column holding
            it; with no boundaries at all every row is its own sequence (a
            warning).
        lengths : array-like of int, shape (m,), optional
            Rows per sequence (instead of ``groups``).
        sample_weight : array-like, shape (n,), optional
            Per-row weights; equal within each sequence.
        eval_set : list of tuple or dict, optional
            ``(X, y, groups)`` or ``(X, y, lengths)`` tuples, ``(X, y)`` when
            ``X`` carries its boundaries, or dicts (see
            :func:`structboost.estimators.inputs.eval_entry`, with
            ``"base_X"`` for a ``base_X``); the last one drives early stopping.
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of ``base_model``; ``X`` by default.
        {verbose}

        Returns
        -------
        self
        """
        return self._fit(X, y, eval_set, verbose, groups=groups, lengths=lengths,
                         sample_weight=sample_weight, base_X=base_X)  # fmt: skip

    # -- predict ----------------------------------------------------------
    def _run(self, engine_fn, X, groups, lengths, base_X, y=None, **options):
        """``engine_fn`` on one prediction's rows (label codes first when ``y`` is given).

        Returns
        -------
        result : what ``engine_fn`` returns
        rows : LabelledRows
        """
        check_is_fitted(self)
        rows = self._rows(X, y, groups=groups, lengths=lengths, base_X=base_X)
        return self._run_rows(engine_fn, rows, with_labels=y is not None, **options), rows

    def _run_rows(self, engine_fn, rows, with_labels=False, **options):
        """``engine_fn`` on LabelledRows ``rows`` (label codes first when ``with_labels``)."""
        data, margin = self._engine_data(rows.X), self._base_margin(rows)
        codes = (rows.codes,) if with_labels else ()
        with _config.threads(self._threads()):  # numba's kernels
            return engine_fn(self.booster_, data, *codes, lengths=rows.lengths,
                             base_margin=margin, allowed_transitions=self.constraints_, **options)

    def _chosen_decode(self, rows, held_out):
        """``decode_``: ``decode``, or for ``"auto"`` the decoding with the lower weighted token
        error on the ``held_out`` sequences of ``rows`` (Viterbi without them or on a tie, and
        under ``allowed_transitions``, whose paths marginal labels need not follow).
        """
        if self.decode != "auto":
            return self.decode
        if held_out is None or self.constraints_ is not None:
            return "viterbi"
        held = rows.split(held_out)[1]
        weight = None if held.seq_weight is None else np.repeat(held.seq_weight, held.lengths)
        errors = [1.0 - accuracy_score(held.codes, self._run_rows(_viterbi, held, decode=d),
                                       sample_weight=weight) for d in DECODINGS]
        return DECODINGS[int(np.argmin(errors))]

    def predict(self, X: Any, *, groups: ArrayLike | str | None = None,
                lengths: ArrayLike | None = None, decode: str | None = None,
                base_X: Any = None) -> Any:
        """Predicted labels, in the original label values.

        Parameters
        ----------
        X : array-like, pandas DataFrame or scipy sparse matrix, shape (n, d), or list
            As in :meth:`fit`.
        groups : array-like of shape (n,) or str, optional
        lengths : array-like of int, shape (m,), optional
        decode : {"viterbi", "marginal"}, optional
            None: the fitted ``decode_``.
        base_X : array-like or scipy sparse matrix, shape (n, p), optional
            Input of the base model, when ``fit`` was given one.

        Returns
        -------
        (n,) ndarray of ``classes_`` values, or a list of label lists when
        ``X`` was a list of sequences
        """
        check_is_fitted(self)
        if base_X is None:
            labels = serving_predict(self, X, groups, lengths, decode)
            if labels is not None:
                return labels
        decode = self.decode_ if decode is None else decode
        codes, rows = self._run(_viterbi, X, groups, lengths, base_X, decode=decode)
        labels = self.classes_[codes]
        return nest(labels, rows.lengths) if rows.nested else labels

    def predict_single(self, xseq: Any, *, decode: str | None = None, base_X: Any = None) -> Any:
        """Labels of one sequence, as sklearn-crfsuite's ``predict_single``.

        Parameters
        ----------
        xseq : list of dict or array-like of shape (n_i, d)
            The sequence's feature dicts or rows, the kind of input ``fit`` got.
        decode, base_X
            As in :meth:`predict`.

        Returns
        -------
        list
            ``n_i`` labels (``classes_`` values).
        """
        return self.predict([xseq], decode=decode, base_X=base_X)[0]

    def predict_marginals(self, X: Any, *, groups: ArrayLike | str | None = None,
                          lengths: ArrayLike | None = None, base_X: Any = None) -> Any:
        """Posterior marginals ``P(y_t = c | x)``, columns in ``classes_`` order.

        Parameters are those of :meth:`predict`.

        Returns
        -------
        (n, n_classes) ndarray, or a list of ``(n_i, n_classes)`` arrays when
        ``X`` was a list of sequences
        """
        if base_X is None:
            marginals = serving_marginals(self, X, groups, lengths)
            if marginals is not None:
                return marginals
        marginals, rows = self._run(_marginals, X, groups, lengths, base_X)
        return nest(marginals, rows.lengths, as_lists=False) if rows.nested else marginals

    def predict_proba(self, X: Any, *, groups: ArrayLike | str | None = None,
                      lengths: ArrayLike | None = None, base_X: Any = None) -> Any:
        """scikit-learn's name for :meth:`predict_marginals` (rows sum to 1, ``classes_`` order)."""
        return self.predict_marginals(X, groups=groups, lengths=lengths, base_X=base_X)

    def predict_log_likelihood(self, X: Any, y: Any, *, groups: ArrayLike | str | None = None,
                               lengths: ArrayLike | None = None, base_X: Any = None) -> Floats:
        """Log-likelihood ``log P(y | x)`` of every sequence, shape ``(m,)``."""
        return self._run(_log_likelihood, X, groups, lengths, base_X, y)[0]

    def score(self, X: Any, y: Any, *, groups: ArrayLike | str | None = None,
              lengths: ArrayLike | None = None, sample_weight: ArrayLike | None = None,
              base_X: Any = None) -> float:
        """Token accuracy of :meth:`predict` (weighted by ``sample_weight`` per row)."""
        predicted = self.predict(X, groups=groups, lengths=lengths, base_X=base_X)
        if kind(X) is not None:
            lengths = np.array([len(p) for p in predicted])
            predicted = np.asarray([label for seq in predicted for label in seq])
            y = flatten_y(y, lengths)
        return accuracy_score(y, predicted, sample_weight=sample_weight)
