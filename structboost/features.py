"""Per-position features for sequences: sliding windows and missing values.

Flat rows, one per position, with sequence boundaries as ``lengths`` or
``groups``. Missing values: each split of the engines learns a default
direction for rows missing its feature ("native"); :class:`MissingValues`
also imputes or adds indicators. XGBoost reads entries absent from a sparse
matrix as missing; the estimators read a stored zero the same way
(:func:`canonical_sparse`), while the functions that take a booster read data
as the engine does.
"""

import numbers
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .sequences import offsets_from_lengths, resolve_lengths

__all__ = ["SlidingWindow", "MissingValues", "canonical_sparse"]

STRATEGIES = ("native", "impute", "indicator")


def canonical_sparse(X):
    """CSR/CSC ``X (n, d)`` with duplicates summed and stored zeros dropped (a copy if needed).

    Anything else, and a canonical matrix without stored zeros, comes back as it is.
    """
    if not (sp.issparse(X) and X.format in ("csr", "csc")):
        return X
    if X.has_canonical_format and X.data.all():
        return X
    X = X.copy()
    X.sum_duplicates()
    X.eliminate_zeros()
    return X


def _output_dtype(dtype, fill):
    """The input dtype if it holds ``fill`` exactly, else the promotion of both."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore", over="ignore"):
        warnings.simplefilter("ignore")
        cast = np.asarray(fill).astype(dtype)
    if np.array_equal(cast.astype(np.float64), np.float64(fill), equal_nan=True):
        return dtype
    return np.result_type(dtype, np.asarray(fill).dtype)


def _as_2d(X):
    """DataFrames and scipy sparse matrices as they are; anything else as an ndarray."""
    if not (isinstance(X, pd.DataFrame) or sp.issparse(X)):
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (rows, features); got shape {X.shape}.")
    return X


def _input_names(X):
    """Column names of a DataFrame as strings, else None."""
    if isinstance(X, pd.DataFrame):
        return np.asarray([str(c) for c in X.columns], dtype=object)
    return None


def _dense_values(X, fill=None):
    """Values of a numeric DataFrame or array-like, 2-D (in a dtype that also holds ``fill``)."""
    if isinstance(X, pd.DataFrame):
        bad = [str(c) for c, dt in X.dtypes.items()
               if not (pd.api.types.is_numeric_dtype(dt) or pd.api.types.is_bool_dtype(dt))]
        if bad:
            raise ValueError(f"columns {bad} are not numeric: encode them first (e.g. with "
                             "sklearn.preprocessing.OneHotEncoder).")
        if all(isinstance(dt, np.dtype) for dt in X.dtypes):
            values = X.to_numpy(dtype=np.result_type(*X.dtypes))
        else:  # pandas extension dtypes (Int64, boolean, ...): NA becomes NaN
            values = X.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        values = np.asarray(X)
    if values.dtype.kind not in "biuf":
        raise ValueError(f"X must be numeric; got dtype {values.dtype}.")
    if fill is not None:
        values = values.astype(_output_dtype(values.dtype, fill), copy=False)
    return values


def _check_names(estimator, X):
    """Column count (and names, for DataFrames) must match those seen in ``fit``."""
    n_features = X.shape[1]
    if n_features != estimator.n_features_in_:
        raise ValueError(
            f"X has {n_features} features but {type(estimator).__name__} was fitted with "
            f"{estimator.n_features_in_}; transform data with the training columns."
        )
    names = _input_names(X)
    fitted = getattr(estimator, "feature_names_in_", None)
    if names is not None and fitted is not None and not np.array_equal(names, fitted):
        raise ValueError(
            f"X's columns {list(names)} differ from the fitted ones {list(fitted)}; pass the "
            "columns in the training order."
        )


def _default_names(estimator, input_features):
    """sklearn's rule: given names, else ``feature_names_in_``, else ``x0, x1, ...``."""
    check_is_fitted(estimator, "n_features_in_")
    fitted = getattr(estimator, "feature_names_in_", None)
    if input_features is None:
        if fitted is not None:
            return fitted
        return np.asarray([f"x{j}" for j in range(estimator.n_features_in_)], dtype=object)
    names = np.asarray(input_features, dtype=object)
    if names.shape != (estimator.n_features_in_,):
        raise ValueError(
            f"input_features has {names.size} names but {estimator.n_features_in_} features "
            "were fitted."
        )
    if fitted is not None and not np.array_equal(names, fitted):
        raise ValueError("input_features differ from the feature names seen in fit.")
    return names


def _record_input(estimator, X):
    """Set ``n_features_in_`` (and ``feature_names_in_`` for DataFrames)."""
    estimator.n_features_in_ = int(X.shape[1])
    names = _input_names(X)
    if names is not None:
        estimator.feature_names_in_ = names
    elif hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_


def window_sources(lengths, half_width):
    """Source rows ``(2w + 1, n)`` of every window offset, and whether each is in the sequence.

    ``sources[j, i] = i + j - w``; ``lengths (m,)`` validated, ``half_width`` ``w``.
    """
    offsets = offsets_from_lengths(lengths)
    rows = np.arange(offsets[-1], dtype=np.int64)
    first = np.repeat(offsets[:-1], lengths)
    stop = np.repeat(offsets[1:], lengths)
    shifts = np.arange(-half_width, half_width + 1, dtype=np.int64)[:, None]
    sources = rows[None, :] + shifts
    inside = (sources >= first) & (sources < stop)
    return sources, inside


class SlidingWindow(TransformerMixin, BaseEstimator):
    """Features of the positions ``t - w`` to ``t + w`` side by side, per sequence.

    Output column ``j * d + c`` is input feature ``c`` at offset ``j - w``,
    named ``"<name>(t<offset>)"`` (``x3(t-1)``, ``x3(t)``).

    Parameters
    ----------
    half_width : int
        ``w >= 0``; the window holds ``2 w + 1`` positions.
    fill : float
        Value of positions outside the sequence; NaN (default) makes them
        missing. A scipy sparse input stays sparse and needs ``fill=0``.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : (d,) ndarray of str
        Only when fitted on a DataFrame.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0], [2.0], [3.0], [4.0]])
    >>> SlidingWindow(half_width=1, fill=0).fit_transform(X, lengths=[3, 1])
    array([[0., 1., 2.],
           [1., 2., 3.],
           [2., 3., 0.],
           [0., 4., 0.]])
    """

    def __init__(self, half_width=1, fill=np.nan):
        self.half_width = half_width
        self.fill = fill

    def _check_params(self):
        """ValueError for a bad ``half_width`` or ``fill``."""
        w = self.half_width
        if isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 0:
            raise ValueError(f"half_width must be an integer >= 0; got {w!r}.")
        if isinstance(self.fill, bool) or not isinstance(self.fill, numbers.Real):
            raise ValueError(f"fill must be a real number (NaN for missing); got {self.fill!r}.")

    def _check_sparse_fill(self):
        """ValueError unless ``fill`` is 0 (sparse input)."""
        if self.fill != 0:
            raise ValueError(
                f"a sparse X stays sparse, so positions outside a sequence must be 0; got "
                f"fill={self.fill!r}. Pass fill=0 or a dense X."
            )

    def fit(self, X, y=None, *, lengths=None, groups=None):
        """Record the number (and names) of the features of ``X (n, d)``; check any boundaries."""
        self._check_params()
        X = _as_2d(X)
        if sp.issparse(X):
            self._check_sparse_fill()
        _record_input(self, X)
        if lengths is not None or groups is not None:
            resolve_lengths(X.shape[0], groups=groups, lengths=lengths)
        return self

    def transform(self, X, *, lengths=None, groups=None):
        """Windowed rows.

        Parameters
        ----------
        X : array-like, DataFrame or scipy sparse matrix, shape (n, d)
            Numeric features, sequences concatenated in order.
        lengths : (m,) array-like of int, optional
            Rows per sequence.
        groups : (n,) array-like, optional
            Per-row sequence id (rows of a sequence contiguous); this or ``lengths``.

        Returns
        -------
        ndarray, DataFrame or scipy sparse CSR, shape (n, (2w + 1) d)
            Of the input's kind and dtype (promoted to hold ``fill``).
        """
        check_is_fitted(self, "n_features_in_")
        self._check_params()
        X = _as_2d(X)
        _check_names(self, X)
        lengths = resolve_lengths(X.shape[0], groups=groups, lengths=lengths)
        sources, inside = window_sources(lengths, self.half_width)
        if sp.issparse(X):
            return self._transform_sparse(X, sources, inside)
        values = _dense_values(X, self.fill)
        n, d = values.shape
        out = np.full((n, sources.shape[0] * d), self.fill, dtype=values.dtype)
        for j in range(sources.shape[0]):
            ok = inside[j]
            out[ok, j * d:(j + 1) * d] = values[sources[j, ok]]
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(out, columns=self.get_feature_names_out(), index=X.index)
        return out

    def _transform_sparse(self, X, sources, inside):
        """The windowed rows of sparse ``X`` as CSR."""
        self._check_sparse_fill()
        X = X.tocsr()
        n = X.shape[0]
        blocks = []
        for j in range(sources.shape[0]):
            rows = np.flatnonzero(inside[j])
            ones = np.ones(rows.size, dtype=X.dtype)
            blocks.append(type(X)((ones, (rows, sources[j, rows])), shape=(n, n)) @ X)
        return sp.hstack(blocks, format="csr")

    def fit_transform(self, X, y=None, *, lengths=None, groups=None):
        """:meth:`fit`, then :meth:`transform` with the same boundaries."""
        return self.fit(X, y, lengths=lengths, groups=groups).transform(X, lengths=lengths,
                                                                           groups=groups)

    def get_feature_names_out(self, input_features=None):
        """Output names ``"<name>(t<offset>)"`` ``(d (2w + 1),)``, offset by offset
        (``input_features`` default as sklearn's).
        """
        names = _default_names(self, input_features)
        return np.asarray([f"{name}(t{shift:+d})" if shift else f"{name}(t)"
                           for shift in range(-self.half_width, self.half_width + 1)
                           for name in names], dtype=object)  # fmt: skip


class MissingValues(TransformerMixin, BaseEstimator):
    """Missing-value handling for boosted trees: native, imputation or indicators.

    A *variable* is one column or a block of columns in ``groups_of_columns``
    (e.g. a residue's 20 one-hot indicators); a row misses it when any of its
    columns is NaN. Impute and indicator need dense input.

    Parameters
    ----------
    strategy : {"native", "impute", "indicator"}
        - ``"native"``: leave NaN for the engine's default direction;
          ``transform`` returns ``X``.
        - ``"impute"``: write the variable's most frequent complete training
          value (row of the block) over it.
        - ``"indicator"``: set missing entries to ``fill_value`` and append one
          0/1 column ``"<variable>_missing"`` per variable.
    groups_of_columns : dict or sequence of sequences, optional
        ``{"residue": [0, ..., 19]}`` or ``[[0, ..., 19], ...]`` (named
        ``group0``, ...); indices or DataFrame names; disjoint blocks.
    fill_value : float
        Value written over missing entries by ``"indicator"``.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : (d,) ndarray of str
        Only when fitted on a DataFrame.
    variables_ : list of (str, (c,) int64 ndarray)
        Name and columns of every variable, in order of first column.
    statistics_ : list of (c,) float64 ndarray
        ``"impute"`` only: the value written over each missing variable.
    """

    def __init__(self, strategy="native", groups_of_columns=None, fill_value=0.0):
        self.strategy = strategy
        self.groups_of_columns = groups_of_columns
        self.fill_value = fill_value

    def _check_params(self):
        """ValueError for a bad ``strategy`` or ``fill_value``."""
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}; got {self.strategy!r}.")
        fill = self.fill_value
        if isinstance(fill, bool) or not isinstance(fill, numbers.Real) or np.isnan(fill):
            raise ValueError(f"fill_value must be a real number other than NaN; got {fill!r}.")

    def _column_index(self, column, names):
        """The index of ``column`` (an index or one of ``names``)."""
        d = self.n_features_in_
        if isinstance(column, (numbers.Integral, np.integer)) and not isinstance(column, bool):
            if not 0 <= column < d:
                raise ValueError(f"column index {column} in groups_of_columns is outside 0..{d-1}.")
            return int(column)
        if names is not None and str(column) in names:
            return int(np.flatnonzero(names == str(column))[0])
        raise ValueError(
            f"groups_of_columns names column {column!r}, which is not among the columns of X."
        )

    def _resolve_variables(self, names):
        """``[(name, columns)]`` of every variable, in order of first column."""
        groups = self.groups_of_columns
        if groups is None:
            groups = {}
        elif not isinstance(groups, dict):
            groups = {f"group{i}": cols for i, cols in enumerate(groups)}
        owner = np.full(self.n_features_in_, -1, dtype=np.int64)
        blocks = []
        for name, cols in groups.items():
            if isinstance(cols, (str, bytes)) or np.ndim(cols) != 1 or len(cols) == 0:
                raise ValueError(
                    f"group {name!r} must list at least one column (a sequence of indices or "
                    f"names); got {cols!r}."
                )
            idx = np.array([self._column_index(c, names) for c in cols], dtype=np.int64)
            taken = idx[owner[idx] >= 0]
            if taken.size or np.unique(idx).size != idx.size:
                col = int(taken[0]) if taken.size else int(idx[np.argmax(np.bincount(idx))])
                raise ValueError(
                    f"column {col} appears twice in groups_of_columns; the blocks must be "
                    "disjoint."
                )
            owner[idx] = len(blocks)
            blocks.append((str(name), idx))
        column_names = _default_names(self, None)
        variables = []
        for col in range(self.n_features_in_):
            if owner[col] < 0:
                variables.append((str(column_names[col]), np.array([col], dtype=np.int64)))
            elif col == blocks[owner[col]][1].min():
                variables.append(blocks[owner[col]])
        return variables

    def fit(self, X, y=None):
        """Find the variables of ``X (n, d)`` (NaN where missing) and, for ``"impute"``, their
        most frequent values.
        """
        self._check_params()
        X = _as_2d(X)
        if self.strategy != "native":
            self._check_dense(X)
        _record_input(self, X)
        self.variables_ = self._resolve_variables(getattr(self, "feature_names_in_", None))
        if self.strategy == "impute":
            values = _dense_values(X)
            self.statistics_ = [self._most_frequent(values, name, cols)
                                for name, cols in self.variables_]
        elif hasattr(self, "statistics_"):
            del self.statistics_
        return self

    def _check_dense(self, X):
        """ValueError for a sparse ``X`` (impute and indicator)."""
        if sp.issparse(X):
            raise ValueError(
                f"strategy={self.strategy!r} needs a dense X (NaN marks a missing entry); "
                "pass X.toarray() or use strategy='native'."
            )

    @staticmethod
    def _most_frequent(values, name, cols):
        """The most frequent complete row ``(c,)`` of the block ``cols``."""
        block = values[:, cols].astype(np.float64)
        complete = block[~np.isnan(block).any(axis=1)]
        if complete.shape[0] == 0:
            raise ValueError(
                f"variable {name!r} is missing in every training row, so it has no most "
                "frequent value; drop it or use strategy='indicator'."
            )
        patterns, counts = np.unique(complete, axis=0, return_counts=True)
        return patterns[np.argmax(counts)]

    def transform(self, X):
        """Apply the strategy to ``X (n, d)``.

        Returns
        -------
        ndarray or DataFrame
            ``X`` itself for ``"native"``; ``(n, d)`` float for ``"impute"``;
            ``(n, d + number of variables)`` for ``"indicator"``.
        """
        check_is_fitted(self, "variables_")
        self._check_params()
        X = _as_2d(X)
        _check_names(self, X)
        if self.strategy == "native":
            return X
        self._check_dense(X)
        values = _dense_values(X)
        values = values.astype(np.result_type(values.dtype, np.float32))  # a copy
        missing = np.stack([np.isnan(values[:, cols]).any(axis=1) for _, cols in self.variables_],
                           axis=1)
        if self.strategy == "impute":
            for v, (_, cols) in enumerate(self.variables_):
                values[np.ix_(missing[:, v], cols)] = self.statistics_[v]
            out = values
        else:
            values[np.isnan(values)] = self.fill_value
            out = np.hstack([values, missing.astype(values.dtype)])
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(out, columns=self.get_feature_names_out(), index=X.index)
        return out

    def get_feature_names_out(self, input_features=None):
        """The input names, plus ``"<variable>_missing"`` for ``"indicator"``."""
        check_is_fitted(self, "variables_")
        names = _default_names(self, input_features)
        if self.strategy != "indicator":
            return names
        extra = [f"{name}_missing" for name, _ in self.variables_]
        return np.concatenate([names, np.asarray(extra, dtype=object)])
