"""The input dialects of the estimators, converted once into flat rows and ``lengths (m,)``.

- Flat rows with boundaries (:class:`SequenceInputs`): ``groups`` (per-row
  sequence ids, or the name of the DataFrame column holding them),
  ``lengths`` (rows per sequence) or the estimator's ``sequence_column``;
  with none of them every row is its own sequence.
- sklearn-crfsuite's contract (:func:`kind`, :func:`flatten_X`,
  :func:`flatten_y`, :func:`nest`): ``X`` a list of per-sequence 2-D arrays
  or lists of feature dicts; ``y`` a list of label lists.
- ``eval_set`` entries (:func:`eval_entry`): tuples or dicts naming the
  same arguments as ``fit``.
"""

import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction import DictVectorizer
from sklearn.utils.validation import validate_data

from ..features import canonical_sparse
from ..sequences import resolve_lengths


def _is_2d(item):
    """Whether ``item`` is a 2-D array, sparse matrix or DataFrame."""
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
    """Inverse of :func:`vectorizer_document`: a fitted DictVectorizer of ``n_features`` names."""
    names = doc.get("feature_names") if isinstance(doc, dict) else None
    if not isinstance(names, list) or len(names) != n_features or len(set(names)) != len(names) \
            or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"{where} is damaged: the vectorizer must hold {n_features} distinct feature names."
        )
    vectorizer = DictVectorizer(dtype=np.float32)
    vectorizer.feature_names_ = list(names)
    vectorizer.vocabulary_ = {name: i for i, name in enumerate(names)}
    return vectorizer


def flatten_X(X, vectorizer=None):
    """Flat rows ``(n, d)``, lengths ``(m,)`` and vectorizer of per-sequence input ``X``.

    ``vectorizer``: the DictVectorizer of the training dicts (None in ``fit``:
    a new one is fitted; None back for arrays).
    """
    found = kind(X)
    lengths = np.array([np.shape(item)[0] if found == "arrays" else len(item) for item in X],
                       dtype=np.int64)
    for i, item in enumerate(X):
        if (found == "arrays") != _is_2d(item) or (
            found == "dicts" and not all(isinstance(d, dict) for d in item)
        ):
            shape = "a 2-D array" if found == "arrays" else "a list of feature dicts"
            raise ValueError(f"X[{i}] is not {shape} like X[0]: give every sequence in the same "
                             "form.")
    if (lengths == 0).any():
        raise ValueError(f"X[{int(np.argmax(lengths == 0))}] is an empty sequence: drop it.")
    if found == "dicts":
        if vectorizer is None:
            vectorizer = DictVectorizer(dtype=np.float32).fit(d for seq in X for d in seq)
        return vectorizer.transform(d for seq in X for d in seq), lengths, vectorizer
    if isinstance(X[0], pd.DataFrame):
        return pd.concat(list(X), ignore_index=True), lengths, None
    if any(sp.issparse(item) for item in X):
        return sp.vstack(X, format="csr"), lengths, None
    return np.concatenate([np.asarray(item) for item in X]), lengths, None


def flatten_y(y, lengths, name="y"):
    """Flat values ``(n,)`` of a list of per-sequence lists ``name`` (flat ones pass through)."""
    if isinstance(y, (list, tuple)) and y and isinstance(y[0], (list, tuple, np.ndarray)):
        sizes = np.array([len(seq) for seq in y])
        if sizes.shape != lengths.shape or (sizes != lengths).any():
            bad = next(
                (i for i in range(min(len(sizes), len(lengths))) if sizes[i] != lengths[i]),
                min(len(sizes), len(lengths)),
            )
            raise ValueError(
                f"{name} has {len(sizes)} {'label lists' if name == 'y' else 'lists'} and X "
                f"{len(lengths)} sequences; they first "
                f"differ at sequence {bad}: give one value per position of every sequence."
            )
        return np.asarray([label for seq in y for label in seq])
    return y


def nest(values, lengths, as_lists=True):
    """Split flat ``values`` (n, ...) into one entry per sequence (lists or arrays)."""
    parts = np.split(np.asarray(values), np.cumsum(lengths)[:-1])
    return [part.tolist() for part in parts] if as_lists else parts


def eval_entry(item, index, structure=()):
    """One ``eval_set`` entry as a dict.

    Parameters
    ----------
    item : tuple or dict
        ``(X, y, groups_or_lengths, *structure)``, ``(X, y)`` when ``X``
        carries its boundaries, or a dict with keys ``"X"``, ``"y"``,
        ``"groups"`` or ``"lengths"``, the ``structure`` names, and
        optionally ``"sample_weight"``, ``"base_X"`` and ``"name"``. A third
        tuple element with one entry per row of ``X`` (or a column name) is
        ``groups``, anything else ``lengths``.
    index : int
        Position in ``eval_set``.
    structure : tuple of str
        Names of the further per-row arrays (trees: ``("parents", "edge_types")``).

    Returns
    -------
    dict
        Every key above (None when absent; ``name`` defaults to ``"validation_{index}"``).
    """
    keys = ("X", "y", "groups", "lengths", "sample_weight", "base_X", "name") + tuple(structure)
    default_name = f"validation_{index}"
    if isinstance(item, dict):
        unknown = set(item) - set(keys)
        if unknown or "X" not in item or "y" not in item:
            raise ValueError(f"eval_set[{index}] must have keys 'X', 'y' and 'groups' or 'lengths' "
                             f"(optional: {list(keys[4:])}); got {sorted(item)}.")
        entry = {key: item.get(key) for key in keys}
        entry["name"] = str(entry["name"] or default_name)
        return entry
    required = 2 if not structure else 3 + len(structure) - 1
    if not isinstance(item, (tuple, list)) or not required <= len(item) <= 3 + len(structure):
        tail = "".join(f", {name}" for name in structure)
        raise ValueError(
            f"eval_set[{index}] must be an (X, y, groups{tail}) or (X, y, lengths{tail}) "
            "tuple, (X, y) when X carries its boundaries, or a dict; a CRF needs the "
            "sequence boundaries of every evaluation set."
        )
    X, y, *rest = item
    third = rest.pop(0) if rest else None
    entry = dict.fromkeys(keys)
    entry.update(X=X, y=y, name=default_name, **dict(zip(structure, rest)))
    if third is None:
        pass
    elif isinstance(third, str) or len(third) == (X.shape[0] if hasattr(X, "shape") else len(X)):
        entry["groups"] = third
    else:
        entry["lengths"] = third
    return entry


class SequenceInputs:
    """Flat rows or lists of sequences and their boundaries, validated (mixed into every estimator).

    Reads ``sequence_column``; ``fit`` (``reset=True``) sets ``id_column_``,
    ``boundaries_`` and ``vectorizer_`` (feature-dict input).
    """

    def _validate(self, X, reset):
        """Validated features (DataFrames keep their columns; arrays may be sparse or hold NaN)."""
        if isinstance(X, pd.DataFrame):
            validate_data(self, X, reset=reset, skip_check_array=True)
            return X
        return canonical_sparse(validate_data(self, X, reset=reset, accept_sparse=("csr", "csc"),
                                              ensure_all_finite=False))

    def _boundaries(self, X, groups, lengths, *, reset, where="X"):
        """Validated features without the id column, and lengths ``(m,)`` (see module notes)."""
        column = groups if isinstance(groups, str) else None
        if column is None and getattr(self, "sequence_column", None) is not None:
            column = self.sequence_column
            if groups is not None or lengths is not None:
                raise ValueError(
                    f"sequence_column={column!r} gives the sequence boundaries already: drop "
                    "groups= and lengths=, or set sequence_column=None."
                )
            if not isinstance(X, pd.DataFrame):
                raise ValueError(
                    f"sequence_column={column!r} reads the sequence ids from a DataFrame "
                    f"column, but {where} is {type(X).__name__}: pass a DataFrame, or "
                    "groups=/lengths= with sequence_column=None."
                )
        if column is not None:
            if not isinstance(X, pd.DataFrame):
                raise ValueError(f"groups={column!r} names a column, but {where} is not a pandas "
                                 "DataFrame: pass the per-row sequence ids instead.")
            if column not in X.columns:
                raise ValueError(f"{where} has no column {column!r} to read the sequence ids from.")
            X, groups = X.drop(columns=column), X[column].to_numpy()
        elif not reset:
            self._check_id_column(X, groups, lengths)
        X = self._validate(X, reset)
        n_rows = X.shape[0]
        given = groups is not None or lengths is not None
        if reset:
            self.id_column_ = column
            self.boundaries_ = "sequences" if given else "rows"
        if not given:
            if getattr(self, "boundaries_", "sequences") != "rows":
                raise ValueError(
                    f"{type(self).__name__} was fitted on sequences, so {where} needs their "
                    "boundaries: pass groups= (a per-row sequence id, or the name of the "
                    "DataFrame column holding it) or lengths= (rows per sequence), or set "
                    "sequence_column= to read them from a DataFrame column on every call."
                )
            if reset:
                warnings.warn(
                    f"{type(self).__name__}.fit got no sequence boundaries, so every row is "
                    "its own sequence and the transitions learn nothing. Pass groups= or "
                    "lengths=, set sequence_column=, or give X as a list of sequences.",
                    UserWarning,
                    stacklevel=3,
                )
            lengths = np.ones(n_rows, dtype=np.int64)
        return X, resolve_lengths(n_rows, groups=groups, lengths=lengths)

    def _eval_set(self, eval_set, convert, structure=()):
        """``convert(entry, "eval_set[i]")`` of each :func:`eval_entry`, and their distinct names."""
        converted, names = [], []
        for i, item in enumerate(eval_set or ()):
            entry = eval_entry(item, i, structure)
            converted.append(convert(entry, f"eval_set[{i}]"))
            names.append(entry["name"])
        if len(set(names)) != len(names):
            raise ValueError(f"eval_set names must differ; got {names}.")
        return converted, names

    def _check_id_column(self, X, groups, lengths):
        """A clear error when the column that held the ids in ``fit`` is still in ``X``."""
        column = getattr(self, "id_column_", None)
        if column is None or not isinstance(X, pd.DataFrame) or column not in X.columns:
            return
        if column in getattr(self, "feature_names_in_", ()):
            return
        given = "groups=" if groups is not None else "lengths=" if lengths is not None else None
        fix = f"drop it (the boundaries come from {given})" if given else (
            f"pass groups={column!r} to read and drop it"
        )
        raise ValueError(
            f"X still has the column {column!r} that held the sequence ids in fit; it is no "
            f"feature: {fix}, or set sequence_column={column!r} to have it read on every call."
        )

    def _check_X(self, X, groups, lengths, *, reset, where="X"):
        """Validated flat features, lengths ``(m,)`` and whether ``X`` was a list of sequences."""
        if isinstance(X, (list, tuple)) and X and isinstance(X[0], dict):
            raise ValueError(f"{where} is one sequence of feature dicts: pass a list of sequences "
                             f"([{where}]) or call predict_single for one.")
        if reset:
            self.vectorizer_ = None  # a refit on arrays forgets an earlier fit's dicts
        if kind(X) is None:
            return (*self._boundaries(X, groups, lengths, reset=reset, where=where), False)
        if groups is not None or lengths is not None:
            raise ValueError(
                f"{where} is a list of sequences, which gives the boundaries already: drop "
                "groups= and lengths=."
            )
        if not reset and kind(X) == "dicts" and getattr(self, "vectorizer_", None) is None:
            raise ValueError(
                f"{where} holds feature dicts, but fit got arrays: give the same kind of input."
            )
        rows, lengths, vectorizer = flatten_X(X, getattr(self, "vectorizer_", None))
        if reset:
            self.vectorizer_ = vectorizer
        rows, lengths = self._boundaries(rows, None, lengths, reset=reset, where=where)
        return rows, lengths, True
