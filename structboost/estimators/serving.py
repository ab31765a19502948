"""The chain estimators' ``predict`` with nothing per call beyond the trees.

For an XGBoost chain model with one transition table and no base model, a
:class:`ServingPath` (checked, constrained transitions; the estimator's
thread count) is built once per fitted model and kept in a weak mapping keyed
by the estimator (so ``__dict__``, pickles and clones carry none); a call
vectorises feature dicts through the fitted vocabulary (:func:`vectorize`),
lets the booster read the rows in place and decodes.
"""

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from .. import _config
from ..features import canonical_sparse
from ..engines.predict import (check_decode, check_node_scores, check_transition_values,
                                constrained, decode_labels, in_place, inplace_margins,
                                node_marginals, node_scores)
from ..sequences import offsets_from_lengths
from .inputs import kind, nest

#: Value types ``DictVectorizer`` reads as the feature's value (strings: one-hot columns).
_NUMBERS = frozenset({bool, int, float, type(None)})

_PATHS: "weakref.WeakKeyDictionary[Any, ServingPath]" = weakref.WeakKeyDictionary()


def vectorize(X, vectorizer):
    """The rows ``vectorizer.transform`` gives for a list of feature-dict sequences.

    Parameters
    ----------
    X : list of list of dict
        Non-empty sequences of feature dicts.
    vectorizer : sklearn.feature_extraction.DictVectorizer
        Fitted, sparse.

    Returns
    -------
    rows : (n, d) scipy CSR matrix or None
        Canonical rows; None when ``X`` is no such list or a value is neither
        a string nor bool, int, float or None (left to ``DictVectorizer``).
    lengths : (m,) int64 ndarray or None
    """
    if not isinstance(X, (list, tuple)) or not X or not vectorizer.sparse:
        return None, None
    vocabulary, separator = vectorizer.vocabulary_, vectorizer.separator
    get = vocabulary.get
    indices, values, indptr, lengths = [], [], [0], []
    for seq in X:
        if not isinstance(seq, (list, tuple)) or not seq:
            return None, None
        for d in seq:
            if not isinstance(d, dict):
                return None, None
            for f, v in d.items():
                if type(v) in _NUMBERS:
                    column = get(f)
                elif isinstance(v, str):
                    column = get("%s%s%s" % (f, separator, v))
                    v = 1
                else:
                    return None, None
                if column is not None:
                    indices.append(column)
                    values.append(v)
            indptr.append(len(indices))
        lengths.append(len(seq))
    rows = sp.csr_matrix(
        (np.asarray(values, dtype=vectorizer.dtype), np.asarray(indices, dtype=np.int32),
         np.asarray(indptr, dtype=np.int32)),
        shape=(len(indptr) - 1, len(vocabulary)),
    )  # fmt: skip
    return canonical_sparse(rows), np.asarray(lengths, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ServingPath:
    """What a fitted chain model's prediction needs, prepared once.

    Attributes
    ----------
    key : tuple
        The estimator's booster, vectorizer, constraints, classes and threads.
    booster : xgboost.Booster
    rounds : int
        The rounds the booster predicts with.
    params : TransitionParams
        Checked, with the estimator's constraints applied.
    """

    key: tuple
    booster: Any
    rounds: int
    params: Any

    def margins(self, est, rows):
        """Node scores ``(n, K)`` float64 of validated ``rows``."""
        if in_place(rows):
            margins = inplace_margins(self.booster, rows, self.rounds)
        else:
            from ..engines.xgboost import booster_margins

            margins = booster_margins(self.booster, est._engine_data(rows))
        margins = node_scores(margins, self.params.num_labels)
        check_node_scores(margins)
        return margins


def _servable(est):
    """Whether the serving path serves ``est``: XGBoost, one transition table, no base model."""
    check_is_fitted(est)
    return (type(est.booster_).__module__.split(".")[0] == "xgboost"
            and getattr(est, "transitions_from", "linear") == "linear"
            and est.base_model_ is None)


def serving_path(est, threads):
    """The estimator's :class:`ServingPath` on ``threads`` threads (rebuilt when its key changes),
    or None for the general route.
    """
    if not _servable(est):
        return None
    booster = est.booster_
    key = (booster, getattr(est, "vectorizer_", None), est.constraints_, est.classes_, threads)
    path = _PATHS.get(est)
    if path is not None and all(a is b for a, b in zip(path.key, key)):
        return path
    from ..engines.xgboost import kept_rounds, load_state

    _, _, params = load_state(booster)
    check_transition_values(params)
    booster.set_param({"nthread": threads})
    path = ServingPath(key, booster, kept_rounds(booster), constrained(params, est.constraints_))
    _PATHS[est] = path
    return path


def _served(est, X, groups, lengths, finish, as_lists):
    """``finish(margins, offsets, params)`` by the serving path, one entry per sequence (lists
    when ``as_lists``) where ``X`` was a list of sequences; None for the general route.
    """
    threads = est._threads()
    path = serving_path(est, threads)
    if path is None:
        return None
    rows, vectorizer = None, getattr(est, "vectorizer_", None)
    if groups is None and lengths is None and vectorizer is not None and kind(X) == "dicts":
        rows, lengths = vectorize(X, vectorizer)
    nested = rows is not None
    if rows is None:
        rows, lengths, nested = est._check_X(X, groups, lengths, reset=False)
    with _config.threads(threads):  # the margins' check is a kernel too
        margins = path.margins(est, rows)
        result = finish(margins, offsets_from_lengths(lengths), path.params)
    return nest(result, lengths, as_lists=as_lists) if nested else result


def serving_predict(est, X, groups, lengths, decode):
    """``est.predict(X, ...)`` (no ``base_X``) by the serving path, or None (general route)."""
    decode = est.decode_ if decode is None else decode
    check_decode(decode)
    return _served(est, X, groups, lengths,
                   lambda m, o, p: est.classes_[decode_labels(m, o, p, decode)], as_lists=True)


def serving_marginals(est, X, groups, lengths):
    """``est.predict_marginals(X, ...)`` by the serving path, or None (general route)."""
    return _served(est, X, groups, lengths, node_marginals, as_lists=False)
