"""sklearn-crfsuite's data contract: one entry per sequence.

``X`` is a list with one entry per sequence, each either a 2-D array
(numpy, scipy sparse or pandas, one row per position) or a list of feature
dicts (one per position, as sklearn-crfsuite's ``sent2features``); ``y`` is
a list of label lists. These helpers turn that into the flat rows plus
``lengths (m,)`` the estimators work on, and back.
"""

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction import DictVectorizer


def _is_2d(item):
    return sp.issparse(item) or isinstance(item, pd.DataFrame) or (
        isinstance(item, np.ndarray) and item.ndim == 2
    )


def kind(X):
    """``"arrays"``, ``"dicts"`` or None (flat input) for an ``X``."""
    if not isinstance(X, (list, tuple)) or not X:
        return None
    first = X[0]
    if _is_2d(first):
        return "arrays"
    if isinstance(first, (list, tuple)) and first and isinstance(first[0], dict):
        return "dicts"
    return None


def vectorizer_document(vectorizer):
    """JSON-ready ``{"feature_names": [...]}`` of the DictVectorizer :func:`flatten_X` fits."""
    return {"feature_names": [str(name) for name in vectorizer.feature_names_]}


def vectorizer_from_document(doc, n_features, where):
    """Inverse of :func:`vectorizer_document`: a fitted DictVectorizer of ``n_features`` names.

    Raises
    ------
    ValueError
        Naming ``where`` unless ``doc`` holds ``n_features`` distinct strings.
    """
    names = doc.get("feature_names") if isinstance(doc, dict) else None
    if (
        not isinstance(names, list)
        or len(names) != n_features
        or not all(isinstance(n, str) for n in names)
        or len(set(names)) != len(names)
    ):
        raise ValueError(
            f"{where} is damaged: the vectorizer must hold {n_features} distinct feature names."
        )
    vectorizer = DictVectorizer(dtype=np.float32)
    vectorizer.feature_names_ = list(names)
    vectorizer.vocabulary_ = {name: i for i, name in enumerate(names)}
    return vectorizer


def flatten_X(X, vectorizer=None):
    """Flat rows and lengths ``(m,)`` of per-sequence input.

    Parameters
    ----------
    X : list
        Per-sequence 2-D arrays, or per-sequence lists of feature dicts.
    vectorizer : DictVectorizer, optional
        Fitted on the training dicts; None in ``fit`` (a new one is fitted).

    Returns
    -------
    rows : (n, d) ndarray, DataFrame or scipy CSR matrix
    lengths : (m,) int64 ndarray
    vectorizer : DictVectorizer or None
        For dict input: the vocabulary (unknown features are ignored later).
    """
    found = kind(X)
    lengths = np.array([np.shape(item)[0] if found == "arrays" else len(item) for item in X],
                       dtype=np.int64)
    for i, item in enumerate(X):
        if (found == "arrays") != _is_2d(item) or (
            found == "dicts" and not all(isinstance(d, dict) for d in item)
        ):
            shape = "a 2-D array" if found == "arrays" else "a list of feature dicts"
            raise ValueError(
                f"X[{i}] is not {shape} like X[0]: give every sequence in the same form."
            )
    if (lengths == 0).any():
        raise ValueError(
            f"X[{int(np.flatnonzero(lengths == 0)[0])}] is an empty sequence: drop it."
        )
    if found == "dicts":
        if vectorizer is None:
            vectorizer = DictVectorizer(dtype=np.float32).fit(d for seq in X for d in seq)
        return vectorizer.transform(d for seq in X for d in seq), lengths, vectorizer
    if isinstance(X[0], pd.DataFrame):
        return pd.concat(list(X), ignore_index=True), lengths, None
    if any(sp.issparse(item) for item in X):
        return sp.vstack(X, format="csr"), lengths, None
    return np.concatenate([np.asarray(item) for item in X]), lengths, None


def flatten_y(y, lengths):
    """Flat labels ``(n,)`` from a list of label lists (or flat labels), checked against ``lengths``."""
    if isinstance(y, (list, tuple)) and y and isinstance(y[0], (list, tuple, np.ndarray)):
        sizes = np.array([len(seq) for seq in y])
        if sizes.shape != lengths.shape or (sizes != lengths).any():
            bad = next(
                (i for i in range(min(len(sizes), len(lengths))) if sizes[i] != lengths[i]),
                min(len(sizes), len(lengths)),
            )
            raise ValueError(
                f"y has {len(sizes)} label lists and X {len(lengths)} sequences; they first "
                f"differ at sequence {bad}: give one label per position of every sequence."
            )
        return np.asarray([label for seq in y for label in seq])
    return y


def nest(values, lengths, as_lists=True):
    """Split flat ``values`` (n, ...) into one entry per sequence (lists or arrays)."""
    parts = np.split(np.asarray(values), np.cumsum(lengths)[:-1])
    return [part.tolist() for part in parts] if as_lists else parts
