"""Lexical features of token windows as a sparse binary matrix (NER, chunking).

:class:`TokenFeatures` turns tokens (a :func:`structboost.datasets.read_conll`
DataFrame, flat tokens with sentence lengths, or a list of token lists) into
a scipy CSR matrix, one row per token and one binary column per feature seen
often enough in training. Each feature is an attribute of the token at an
offset ``-w .. +w`` from the current one, named ``kind[offset]=value``:

==============  ==============================  =====================
kind            value                           example
==============  ==============================  =====================
``w``           lower-cased word                ``w[-1]=the``
``shape``       X / x / d for upper / lower /   ``shape[0]=Xxxxx``
                digit, other characters kept,
                runs cut at 4
``pre1`` ...    prefix of the lower-cased word  ``pre2[+1]=ge``
``suf1`` ...    suffix of the lower-cased word  ``suf3[0]=ion``
``flag``        ``title``, ``upper``,            ``flag[0]=title``
                ``lower``, ``digit``,
                ``has_digit``, ``punct``,
                ``hyphen``
extra column    its value (e.g. POS, chunk)     ``pos[+2]=NNP``
==============  ==============================  =====================

Opt-in kinds (:data:`OPTIONAL_KINDS`, off by default):

===============  ==============================  =====================
kind             value                           example
===============  ==============================  =====================
``document``     the lower-cased word occurs     ``doc[0]=title``
                 elsewhere in the token's
                 document title-cased (not
                 sentence-initial), ``upper``
                 or ``lower`` (Ratinov & Roth
                 2009); needs a document column
===============  ==============================  =====================

Windows never cross a sentence boundary: offsets outside the sentence give
``w[offset]=<S>`` / ``w[offset]=</S>``. Affixes of length ``L`` exist only for
words of at least ``L`` characters. ``document`` features read only the
tokens of the same document (no labels), so they are as legal at test time as
the others. A feature becomes a column when it fires on at least
``min_count`` training tokens; others are ignored at transform time. The
matrix is built directly in CSR form (float32 ones, int32 indices).
"""

import itertools
import numbers
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._typing import ArrayLike
from ._lexical import window_columns
from ..sequences import offsets_from_lengths, resolve_lengths

__all__ = ["TokenFeatures", "word_shape", "token_attributes", "KINDS", "OPTIONAL_KINDS", "FLAGS"]

KINDS = ("word", "shape", "prefix", "suffix", "flags")
"""Attribute groups :class:`TokenFeatures` extracts by default."""

OPTIONAL_KINDS = ("document",)
"""Further attribute groups, extracted only when named in ``kinds``."""

FLAGS = ("title", "upper", "lower", "digit", "has_digit", "punct", "hyphen")
"""Flag values, in the order :func:`token_attributes` emits them."""

_BEFORE = ("w", "<S>")
_AFTER = ("w", "</S>")
_MAX_RUN = 4


def word_shape(token):
    """Shape of a token: ``X`` upper, ``x`` lower, ``d`` digit, others kept, runs cut at 4.

    ``"Washington"`` -> ``"Xxxxx"``, ``"U.S."`` -> ``"X.X."``.
    """
    out = []
    prev, run = "", 0
    for ch in token:
        sym = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        run = run + 1 if sym == prev else 1
        prev = sym
        if run <= _MAX_RUN:
            out.append(sym)
    return "".join(out)


def _flags(token):
    """The :data:`FLAGS` that hold for ``token``, in order."""
    has_digit = any(ch.isdigit() for ch in token)
    holds = (token.istitle(), token.isupper(), token.islower(), token.isdigit(),
             has_digit and not token.isdigit(),
             bool(token) and not any(ch.isalnum() for ch in token), "-" in token)
    return [name for name, ok in zip(FLAGS, holds) if ok]


def token_attributes(token, kinds=KINDS, affix_lengths=(1, 2, 3)):
    """The ``(kind, value)`` attributes of one token, before any window offset.

    Parameters
    ----------
    token : str
    kinds : sequence of str
        Names from :data:`KINDS` and :data:`OPTIONAL_KINDS`; ``"document"``
        depends on the context and gives nothing here.
    affix_lengths : sequence of int
        Prefix and suffix lengths.

    Returns
    -------
    list of (str, str)
        E.g. ``[("w", "the"), ("shape", "Xxx"), ("pre1", "t"), ...]``.
    """
    word = token.lower()
    out = []
    if "word" in kinds:
        out.append(("w", word))
    if "shape" in kinds:
        out.append(("shape", word_shape(token)))
    for kind, tag in (("prefix", "pre"), ("suffix", "suf")):
        if kind in kinds:
            out.extend(
                (f"{tag}{n}", word[:n] if tag == "pre" else word[-n:])
                for n in affix_lengths
                if len(word) >= n
            )
    if "flags" in kinds:
        out.extend(("flag", name) for name in _flags(token))
    return out


def _document_values(tokens, documents, lengths):
    """``doc`` values of every token: its lower-cased word's case elsewhere in its document.

    Returns three ``(name, (n,) object)`` slots, ``title`` (title case, not
    sentence-initial), ``upper`` and ``lower``, each None where the word has
    no other occurrence of that case in the document.
    """
    n = tokens.size
    codes, types = pd.factorize(tokens)
    lowered, low_types = pd.factorize(np.asarray([t.lower() for t in types], dtype=object))
    doc_codes, _ = pd.factorize(documents)
    key, _ = pd.factorize(doc_codes.astype(np.int64) * len(low_types) + lowered[codes])
    initial = np.zeros(n, dtype=bool)
    initial[offsets_from_lengths(lengths)[:-1]] = True
    slots = []
    for name, test in (("title", str.istitle), ("upper", str.isupper), ("lower", str.islower)):
        holds = np.fromiter(map(test, types), dtype=bool, count=len(types))[codes]
        if name == "title":
            holds &= ~initial
        elsewhere = np.bincount(key, weights=holds)[key] - holds > 0
        slots.append(("doc", np.where(elsewhere, name, None).astype(object)))
    return slots


def _check_int(name, value, low):
    """ValueError unless ``value`` is an integer ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")


_Self = TypeVar("_Self", bound="TokenFeatures")


class TokenFeatures(TransformerMixin, BaseEstimator):
    """Sparse binary features of token windows (see the module notes).

    Parameters
    ----------
    half_width : int
        ``w >= 0``: features of the tokens at offsets ``-w .. +w``.
    kinds : sequence of str
        Attribute groups to extract, names from :data:`KINDS` (``"word"``,
        ``"shape"``, ``"prefix"``, ``"suffix"``, ``"flags"``) and
        :data:`OPTIONAL_KINDS` (``"document"``; see the module notes).
    affix_lengths : sequence of int
        Lengths of the prefixes and suffixes (distinct, >= 1).
    extra_columns : sequence of str
        DataFrame columns whose values become features too (CoNLL-2003:
        ``("pos", "chunk")``); missing values (NaN/None) give no feature.
    min_count : int
        Keep a feature only if it fires on at least this many training tokens.
    token_column : str
        DataFrame column holding the tokens.
    sentence_column : str or None
        DataFrame column holding a per-token sentence id (rows of a sentence
        contiguous), read when neither ``lengths`` nor ``groups`` is given.
    document_column : str
        DataFrame column holding a per-token document id (e.g.
        ``read_conll(path, documents=True)``), read only with the
        ``"document"`` kind, which needs X as a DataFrame.

    Attributes
    ----------
    attributes_ : dict
        ``(kind, value) -> attribute id`` of every attribute kept at some
        offset.
    columns_ : (2w + 1, n_attributes) int64 ndarray
        Output column of each attribute at offset ``j - w``; ``-1`` where it
        was dropped. Columns run offset by offset, attributes sorted within.
    n_features_out_ : int

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"sentence": [0, 0, 1], "token": ["The", "cat", "Sat"]})
    >>> tf = TokenFeatures(half_width=1, kinds=("word",))
    >>> X = tf.fit_transform(df)
    >>> X.shape, X.dtype
    ((3, 7), dtype('float32'))
    >>> [str(name) for name in tf.get_feature_names_out()[X[0].indices]]
    ['w[-1]=<S>', 'w[0]=the', 'w[+1]=cat']
    """

    def __init__(self, half_width: int = 2, kinds: Sequence[Any] = KINDS,
                 affix_lengths: Sequence[Any] = (1, 2, 3), extra_columns: Sequence[str] = (),
                 min_count: int = 1, token_column: str = "token",
                 sentence_column: str = "sentence", document_column: str = "document") -> None:
        self.half_width = half_width
        self.kinds = kinds
        self.affix_lengths = affix_lengths
        self.extra_columns = extra_columns
        self.min_count = min_count
        self.token_column = token_column
        self.sentence_column = sentence_column
        self.document_column = document_column

    # -- checks -----------------------------------------------------------
    def _check_params(self):
        """The checked ``(kinds, affix_lengths, extra_columns)`` tuples."""
        _check_int("half_width", self.half_width, 0)
        _check_int("min_count", self.min_count, 1)
        kinds = tuple(self.kinds)
        unknown = [k for k in kinds if k not in KINDS + OPTIONAL_KINDS]
        if unknown or len(set(kinds)) != len(kinds):
            raise ValueError(
                f"kinds must be distinct names from {KINDS + OPTIONAL_KINDS}; got {kinds!r}."
            )
        affixes = tuple(self.affix_lengths)
        for n in affixes:
            _check_int("every affix length", n, 1)
        if len(set(affixes)) != len(affixes):
            raise ValueError(f"affix_lengths must be distinct; got {affixes!r}.")
        extra = tuple(self.extra_columns)
        if isinstance(self.extra_columns, str) or len(set(extra)) != len(extra) \
                or self.token_column in extra:
            raise ValueError(
                f"extra_columns must be a sequence of distinct column names other than the "
                f"token column {self.token_column!r}; got {self.extra_columns!r}."
            )
        return kinds, affixes, extra

    def _inputs(self, X, lengths, groups, kinds, extra_names):
        """Tokens ``(n,)`` object, per-token slots, lengths ``(m,)``.

        The slots are ``(name, (n,) object values)`` pairs: the extra columns,
        then the ``document`` values; None gives no feature.
        """
        documents = None
        if isinstance(X, pd.DataFrame):
            needed = (self.token_column, *extra_names)
            if "document" in kinds:
                needed += (self.document_column,)
            missing = [c for c in needed if c not in X.columns]
            if missing:
                raise ValueError(f"X lacks the columns {missing}; it has {list(X.columns)}. Set "
                                 "token_column=, extra_columns= and document_column= to columns "
                                 "of X (read_conll(path, documents=True) gives 'document').")
            tokens = X[self.token_column].to_numpy(dtype=object)
            slots = [(c, X[c].to_numpy(dtype=object)) for c in extra_names]
            if "document" in kinds:
                documents = X[self.document_column].to_numpy()
                if pd.isna(documents).any():
                    raise ValueError(f"the document column {self.document_column!r} has "
                                     "missing values: give every token a document id.")
            if lengths is None and groups is None:
                if self.sentence_column is None or self.sentence_column not in X.columns:
                    raise ValueError(
                        f"X has no sentence column {self.sentence_column!r}: pass lengths= "
                        "(tokens per sentence) or groups= (a per-token sentence id)."
                    )
                groups = X[self.sentence_column].to_numpy()
        else:
            if extra_names or "document" in kinds:
                what = f"extra_columns={extra_names!r}" if extra_names else "the 'document' kind"
                raise ValueError(f"{what} needs X as a pandas DataFrame holding those columns.")
            if isinstance(X, str):
                raise ValueError("X is a single string: pass a sequence of tokens.")
            if len(X) and isinstance(X[0], (list, tuple, np.ndarray)):
                if lengths is not None or groups is not None:
                    raise ValueError(
                        "X is a list of sentences, which gives the lengths: do not pass "
                        "lengths= or groups= as well."
                    )
                lengths = [len(sentence) for sentence in X]
                X = list(itertools.chain.from_iterable(X))
            tokens = np.empty(len(X), dtype=object)
            tokens[:] = list(X)
            slots = []
        if tokens.size == 0:
            raise ValueError("X holds no tokens.")
        lengths = resolve_lengths(tokens.size, groups=groups, lengths=lengths)
        bad = [t for t in pd.unique(tokens) if not isinstance(t, str)]
        if bad:
            raise ValueError(
                f"every token must be a string; found {bad[0]!r}. Drop or fill missing tokens."
            )
        if documents is not None:
            slots += _document_values(tokens, documents, lengths)
        return tokens, slots, lengths

    # -- attributes -------------------------------------------------------
    def _row_attributes(self, tokens, slots, kinds, affixes, lookup):
        """Attribute ids of every token, CSR-like, plus the two boundary rows.

        ``slots`` are :meth:`_inputs`'s per-token ``(name, values)`` pairs;
        ``lookup((kind, value))`` returns an id (``-1`` for unknown).

        Returns
        -------
        row_ptr : (n + 3,) int64
        row_attr : (row_ptr[-1],) int64
        """
        codes, types = pd.factorize(tokens)
        per_type = [[lookup(a) for a in token_attributes(t, kinds, affixes)] for t in types]
        type_len = np.fromiter(map(len, per_type), dtype=np.int64, count=len(per_type))
        type_attr = np.fromiter(itertools.chain.from_iterable(per_type), dtype=np.int64)
        type_ptr = offsets_from_lengths(type_len)

        n = codes.size
        lens = type_len[codes]
        row_ptr = np.empty(n + 3, dtype=np.int64)
        row_ptr[: n + 1] = offsets_from_lengths(lens + len(slots))
        row_ptr[n + 1] = row_ptr[n] + 1
        row_ptr[n + 2] = row_ptr[n] + 2
        row_attr = np.empty(row_ptr[-1], dtype=np.int64)
        within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        row_attr[np.repeat(row_ptr[:n], lens) + within] = type_attr[
            np.repeat(type_ptr[codes], lens) + within
        ]
        for c, (name, values) in enumerate(slots):
            value_codes, uniques = pd.factorize(values)  # missing values get code -1
            ids = np.array([lookup((name, str(v))) for v in uniques] + [-1], dtype=np.int64)
            row_attr[row_ptr[:n] + lens + c] = ids[value_codes]
        row_attr[row_ptr[n]] = lookup(_BEFORE)
        row_attr[row_ptr[n] + 1] = lookup(_AFTER)
        return row_ptr, row_attr

    def _assemble(self, row_ptr, row_attr, lengths):
        """The CSR matrix of the windowed attributes under the fitted columns."""
        indptr, indices = window_columns(
            row_ptr, row_attr, offsets_from_lengths(lengths), self.half_width, self.columns_
        )
        if indptr[-1] <= np.iinfo(np.int32).max:
            indptr = indptr.astype(np.int32)
        data = np.ones(indices.size, dtype=np.float32)
        out = sp.csr_matrix(
            (data, indices, indptr), shape=(indptr.size - 1, self.n_features_out_), copy=False
        )
        out.sort_indices()
        return out

    # -- public -------------------------------------------------------------
    def _fit(self, X, lengths, groups):
        """Fit the vocabulary; return what :meth:`_assemble` needs for ``X``."""
        kinds, affixes, extra_names = self._check_params()
        tokens, slots, lengths = self._inputs(X, lengths, groups, kinds, extra_names)
        seen = {}

        def lookup(key):
            return seen.setdefault(key, len(seen))

        row_ptr, row_attr = self._row_attributes(tokens, slots, kinds, affixes, lookup)
        width = 2 * self.half_width + 1
        n_seen = len(seen)
        every = np.arange(width * n_seen, dtype=np.int64).reshape(width, n_seen)
        offsets = offsets_from_lengths(lengths)
        _, keys = window_columns(row_ptr, row_attr, offsets, self.half_width, every)
        counts = np.bincount(keys, minlength=width * n_seen).reshape(width, n_seen)
        del keys
        keep = counts >= self.min_count
        names = list(seen)
        order = sorted(np.flatnonzero(keep.any(axis=0)).tolist(), key=names.__getitem__)
        kept = keep[:, order]
        columns = np.full(kept.shape, -1, dtype=np.int64)
        columns[kept] = np.arange(int(kept.sum()))
        self.attributes_ = {names[a]: i for i, a in enumerate(order)}
        self.columns_ = columns
        self.n_features_out_ = int(kept.sum())
        renumber = np.full(n_seen + 1, -1, dtype=np.int64)  # last entry: unknown (-1) stays
        renumber[order] = np.arange(len(order))
        return row_ptr, renumber[row_attr], lengths

    def fit(self: _Self, X: pd.DataFrame, y: Any = None, *, lengths: ArrayLike | None = None,
            groups: ArrayLike | str | None = None) -> _Self:
        """Learn the feature vocabulary.

        Parameters
        ----------
        X : pandas DataFrame, array-like of str shape (n,), or list of lists of str
            A DataFrame with ``token_column`` (and ``extra_columns``, and
            ``sentence_column`` unless ``lengths``/``groups`` is given), flat
            tokens with ``lengths`` or ``groups``, or one list of tokens per
            sentence.
        y : ignored
        lengths : array-like of int, shape (m,), optional
            Tokens per sentence, in order.
        groups : array-like, shape (n,), optional
            Per-token sentence id (tokens of a sentence contiguous).

        Returns
        -------
        self
        """
        self._fit(X, lengths, groups)
        return self

    def fit_transform(self, X: pd.DataFrame, y: Any = None, *, lengths: ArrayLike | None = None,
                      groups: ArrayLike | str | None = None) -> sp.csr_matrix:
        """:meth:`fit` and :meth:`transform` in one pass over the tokens.

        Returns
        -------
        scipy.sparse.csr_matrix, shape ``(n, n_features_out_)``, float32
        """
        row_ptr, row_attr, lengths = self._fit(X, lengths, groups)
        return self._assemble(row_ptr, row_attr, lengths)

    def transform(self, X: pd.DataFrame, *, lengths: ArrayLike | None = None,
                  groups: ArrayLike | str | None = None) -> sp.csr_matrix:
        """Binary features of every token's window; arguments as in :meth:`fit`.

        Returns
        -------
        scipy.sparse.csr_matrix, shape ``(n, n_features_out_)``, float32
        """
        check_is_fitted(self, "columns_")
        kinds, affixes, extra_names = self._check_params()
        if self.columns_.shape[0] != 2 * self.half_width + 1:
            raise ValueError(
                f"half_width was changed to {self.half_width} after fit: refit the transformer."
            )
        tokens, slots, lengths = self._inputs(X, lengths, groups, kinds, extra_names)
        row_ptr, row_attr = self._row_attributes(
            tokens, slots, kinds, affixes, lambda key: self.attributes_.get(key, -1)
        )
        return self._assemble(row_ptr, row_attr, lengths)

    def to_document(self) -> dict[str, Any]:
        """The fitted transformer as a JSON-ready dict: parameters and vocabulary.

        Returns
        -------
        dict
            ``params``, ``attributes`` (``[kind, value]`` pairs in id order)
            and ``columns`` (:attr:`columns_` as nested lists).
        """
        check_is_fitted(self, "columns_")
        params = {k: list(v) if isinstance(v, tuple) else v for k, v in self.get_params().items()}
        attrs = sorted(self.attributes_, key=self.attributes_.__getitem__)
        return {"params": params, "attributes": [list(a) for a in attrs],
                "columns": self.columns_.tolist()}  # fmt: skip

    @classmethod
    def from_document(cls, doc, where="the feature document"):
        """A fitted transformer from :meth:`to_document`'s dict, validated; errors name ``where``."""
        params, attrs, columns = (doc.get(k) if isinstance(doc, dict) else None
                                  for k in ("params", "attributes", "columns"))  # fmt: skip
        if not isinstance(params, dict) or not set(params) <= set(cls._get_param_names()):
            raise ValueError(f"{where} is damaged: 'params' must name TokenFeatures parameters.")
        tf = cls(**params)
        tf._check_params()
        if not isinstance(attrs, list) or not all(
            isinstance(a, list) and len(a) == 2 and all(isinstance(v, str) for v in a)
            for a in attrs
        ):
            raise ValueError(f"{where} is damaged: 'attributes' must be [kind, value] pairs.")
        arr = np.array(columns if isinstance(columns, list) else [])
        shape = (2 * tf.half_width + 1, len(attrs))
        n_out = int((arr >= 0).sum()) if arr.dtype.kind == "i" else -1
        if (
            arr.shape != shape
            or n_out < 0
            or arr.min(initial=-1) < -1
            or not np.array_equal(np.sort(arr[arr >= 0]), np.arange(n_out))
        ):
            raise ValueError(
                f"{where} is damaged: 'columns' must be a {shape} integer array numbering the "
                "output columns 0..n-1 once each, -1 elsewhere."
            )
        tf.attributes_ = {tuple(a): i for i, a in enumerate(attrs)}
        if len(tf.attributes_) != len(attrs):
            raise ValueError(f"{where} is damaged: 'attributes' repeats an attribute.")
        tf.columns_ = np.ascontiguousarray(arr, dtype=np.int64)
        tf.n_features_out_ = n_out
        return tf

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names ``kind[offset]=value`` of the output columns, ``(n_features_out_,)`` object.

        ``input_features`` is ignored: the names come from the fitted vocabulary.
        """
        check_is_fitted(self, "columns_")
        attrs = sorted(self.attributes_, key=self.attributes_.__getitem__)
        offset, attr = np.nonzero(self.columns_ >= 0)  # row-major: the column order
        shifts = range(-self.half_width, self.columns_.shape[0] - self.half_width)
        labels = [f"{shift:+d}" if shift else "0" for shift in shifts]  # offsets: -1, 0, +1
        pairs = zip(offset.tolist(), attr.tolist())
        names = [f"{attrs[a][0]}[{labels[j]}]={attrs[a][1]}" for j, a in pairs]
        return np.asarray(names, dtype=object)
