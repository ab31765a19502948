"""Data for sequence labelling: a synthetic HMM, and readers for the OCR letters, the Qian &
Sejnowski protein files and CoNLL column files.

Arrays come back flat, one row per position, with ``lengths (m,)``.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .features import SlidingWindow
from .text.tags import as_tags, check_scheme, encode_spans, sentence_offsets, span_arrays
from .sequences import check_lengths, offsets_from_lengths

__all__ = ["SequenceData", "make_hmm_sequences", "load_ocr", "ocr_split", "read_protein_qs",
           "read_conll", "convert_tags", "OCR_LETTERS", "AMINO_ACIDS", "PROTEIN_LABELS"]

OCR_LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")
"""Label names of the OCR letters: class ``k`` is ``OCR_LETTERS[k]``."""

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
"""The 20 standard one-letter amino-acid codes, sorted."""

PROTEIN_LABELS = ("_", "e", "h")
"""Secondary-structure labels, sorted: coil/other, beta strand, alpha helix."""


@dataclass(frozen=True, eq=False)
class SequenceData:
    """Labelled sequences stored flat, one row per position.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Features, sequences concatenated in order.
    y : array-like of int, shape (n,)
        Labels ``0..len(label_names) - 1``.
    lengths : array-like of int, shape (m,)
        Rows per sequence, in row order; sums to ``n``.
    folds : array-like of int, shape (m,), optional
        Cross-validation fold of every sequence.
    label_names : tuple of str
        Name of every label; empty when unnamed (then ``y`` only needs to be
        non-negative).
    """

    X: np.ndarray
    y: np.ndarray
    lengths: np.ndarray
    folds: np.ndarray | None = None
    label_names: tuple = ()

    def __post_init__(self):
        X = np.asarray(self.X)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (rows, features); got shape {X.shape}.")
        y = np.asarray(self.y)
        if y.shape != (X.shape[0],):
            raise ValueError(
                f"y must have one label per row of X ({X.shape[0]}); got shape {y.shape}."
            )
        if y.size and y.dtype.kind not in "iu":
            raise ValueError(f"y must hold integer labels, got dtype {y.dtype}.")
        y = y.astype(np.int64)
        n_names = len(self.label_names)
        bad = (y < 0) | (y >= n_names) if n_names else y < 0
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            expected = f"0..{n_names - 1}" if n_names else "non-negative"
            raise ValueError(f"label {y[first]} of row {first} is outside {expected}.")
        lengths = check_lengths(self.lengths, X.shape[0])
        folds = self.folds
        if folds is not None:
            folds = np.asarray(folds)
            if folds.shape != lengths.shape or (folds.size and folds.dtype.kind not in "iu"):
                raise ValueError(
                    f"folds must hold one integer per sequence ({lengths.size}); got shape "
                    f"{folds.shape}, dtype {folds.dtype}."
                )
            folds = folds.astype(np.int64)
        for name, value in (("X", X), ("y", y), ("lengths", lengths), ("folds", folds),
                            ("label_names", tuple(self.label_names))):
            object.__setattr__(self, name, value)

    @property
    def n_sequences(self):
        """Number of sequences ``m``."""
        return self.lengths.size

    @property
    def offsets(self):
        """``(m + 1,)`` row offsets: sequence ``i`` is rows ``offsets[i]:offsets[i + 1]``."""
        return offsets_from_lengths(self.lengths)

    def subset(self, mask):
        """The data of the sequences selected by ``mask (m,)`` bool, each kept whole, in order."""
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (self.n_sequences,):
            raise ValueError(
                f"mask must be boolean with one entry per sequence ({self.n_sequences}); got "
                f"shape {mask.shape}, dtype {mask.dtype}."
            )
        rows = np.repeat(mask, self.lengths)
        folds = None if self.folds is None else self.folds[mask]
        return SequenceData(X=self.X[rows], y=self.y[rows], lengths=self.lengths[mask],
                            folds=folds, label_names=self.label_names)


def _hmm_lengths(n_sequences, length, rng):
    """Per-sequence lengths from an int, a ``(low, high)`` tuple or an array."""
    if isinstance(length, tuple):
        if len(length) != 2 or not all(isinstance(v, (int, np.integer)) for v in length):
            raise ValueError(f"a tuple length must be (low, high) integers; got {length!r}.")
        low, high = length
        if not 1 <= low <= high:
            raise ValueError(f"length range {length!r} needs 1 <= low <= high.")
        return rng.integers(low, high + 1, size=n_sequences).astype(np.int64)
    arr = np.asarray(length)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise ValueError(
            f"length must be an int, a (low, high) tuple or a 1-D array of ints; got {length!r}."
        )
    if arr.ndim == 0:
        arr = np.full(n_sequences, int(arr))
    elif arr.size != n_sequences:
        raise ValueError(
            f"length gives {arr.size} sequence lengths but n_sequences={n_sequences}; pass "
            f"n_sequences={arr.size}."
        )
    if np.any(arr < 1):
        raise ValueError("every sequence length must be at least 1.")
    return arr.astype(np.int64)


def make_hmm_sequences(n_sequences=100, length=100, n_labels=3, n_observations=24, stay=0.6,
                       emission=0.6, window=0, random_state=None):
    """Sample labelled sequences from the HMM of Dietterich et al. (2008, s. 7.3).

    Label ``l`` emits uniformly from its own block of symbols with probability
    ``emission``, else from the others; it repeats with probability ``stay``,
    else moves uniformly. The defaults are the paper's.

    Parameters
    ----------
    n_sequences : int
        Number of sequences ``m``.
    length : int, (int, int) tuple or array-like of int
        Every sequence's length; ``(low, high)`` draws each from ``low..high``;
        an array gives the ``n_sequences`` lengths.
    n_labels : int
        Number of labels ``K >= 2``.
    n_observations : int
        Number of observation symbols; a multiple of ``n_labels``.
    stay, emission : float
        Probabilities of keeping the label and of emitting from its own block.
    window : int
        Half-width ``w``: each row holds the one-hot symbols of positions
        ``t - w .. t + w`` (zeros outside the sequence).
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    X : (n, (2 * window + 1) * n_observations) float64 ndarray
        Block ``j`` holds the one-hot symbol at offset ``j - window``.
    y : (n,) int64 ndarray
    lengths : (m,) int64 ndarray
    """
    for name, value, low in (("n_sequences", n_sequences, 1), ("n_labels", n_labels, 2),
                             ("n_observations", n_observations, 1), ("window", window, 0)):
        if not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")
    if n_observations % n_labels:
        raise ValueError(
            f"n_observations={n_observations} must be a multiple of n_labels={n_labels} "
            "(each label owns an equal block of symbols)."
        )
    for name, value in (("stay", stay), ("emission", emission)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} is a probability and must lie in [0, 1]; got {value!r}.")
    rng = np.random.default_rng(random_state)
    lengths = _hmm_lengths(n_sequences, length, rng)
    offsets = offsets_from_lengths(lengths)
    starts = offsets[:-1]
    n = int(offsets[-1])

    # y_t = (y_start + sum of shifts) mod K, a shift 0 (stay) or uniform in 1..K-1
    shift = np.where(rng.random(n) < stay, 0, rng.integers(1, n_labels, size=n))
    shift[starts] = rng.integers(0, n_labels, size=starts.size)
    total = np.cumsum(shift)
    y = (total - np.repeat(total[starts] - shift[starts], lengths)) % n_labels

    block = n_observations // n_labels
    own = rng.random(n) < emission
    inside = rng.integers(0, block, size=n)
    outside = rng.integers(0, n_observations - block, size=n)
    outside += block * (outside >= y * block)  # skip the label's own block
    symbols = np.where(own, y * block + inside, outside)

    onehot = np.eye(n_observations)[symbols]
    X = SlidingWindow(half_width=window, fill=0.0).fit_transform(onehot, lengths=lengths)
    return X, y.astype(np.int64), lengths


def load_ocr(path, dtype=np.float64):
    """Load the OCR letters (Taskar's handwritten words) from ``letters.npz`` or its folder.

    Returns
    -------
    SequenceData
        ``X (n, 128)`` 0/1 pixels of the 16 x 8 images (``dtype``), row-major;
        ``y`` letters 0..25; ``folds`` 0..9 per word.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "letters.npz"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: pass the letters.npz file or the folder that holds it."
        )
    with np.load(path, allow_pickle=False) as archive:
        missing = [k for k in ("pixels", "labels", "lengths", "folds") if k not in archive]
        if missing:
            raise ValueError(
                f"{path} lacks the arrays {missing}: expected pixels, labels, lengths and folds "
                "(the letters.npz layout)."
            )
        arrays = {k: archive[k] for k in ("pixels", "labels", "lengths", "folds")}
    try:
        return SequenceData(X=arrays["pixels"].astype(dtype), y=arrays["labels"],
                            lengths=arrays["lengths"], folds=arrays["folds"],
                            label_names=OCR_LETTERS)
    except ValueError as err:
        raise ValueError(f"{path} is not a valid letters file: {err}") from err


def _fold_set(folds, name, present):
    """The sorted folds ``folds`` (int or ints) names, each one of ``present``."""
    values = np.unique(np.atleast_1d(np.asarray(folds, dtype=np.int64)))
    unknown = np.setdiff1d(values, present)
    if unknown.size:
        raise ValueError(
            f"{name} {unknown.tolist()} not in the data; its folds are {present.tolist()}."
        )
    return values


def ocr_split(data, test_folds, valid_folds=()):
    """Split the sequences of ``data`` (with ``folds``) by fold into train, validation and test.

    Returns
    -------
    train : SequenceData
        The sequences of every other fold.
    valid : SequenceData or None
        ``None`` when ``valid_folds`` is empty.
    test : SequenceData
    """
    if data.folds is None:
        raise ValueError("data has no folds: build it with folds=... to split by fold.")
    present = np.unique(data.folds)
    test = _fold_set(test_folds, "test_folds", present)
    valid = _fold_set(valid_folds, "valid_folds", present)
    both = np.intersect1d(test, valid)
    if both.size:
        raise ValueError(f"folds {both.tolist()} are in both test_folds and valid_folds.")
    in_test = np.isin(data.folds, test)
    in_valid = np.isin(data.folds, valid)
    if test.size == 0 or not in_test.any():
        raise ValueError("test_folds is empty: name at least one fold to test on.")
    in_train = ~(in_test | in_valid)
    if not in_train.any():
        raise ValueError("no fold is left for training: leave some folds out of test and valid.")
    return data.subset(in_train), data.subset(in_valid) if valid.size else None, data.subset(in_test)


def read_protein_qs(path):
    """Read a Qian & Sejnowski (1988) protein secondary-structure file.

    ``#`` comments and blank lines are skipped; ``<>`` starts a protein, which
    ends at ``end``, ``<end>``, the next ``<>`` or the end of the file; other
    lines are ``RESIDUE LABEL`` (``h``, ``e`` or ``_``).

    Returns
    -------
    residues : (n,) ndarray of str
        One-letter codes, proteins concatenated.
    labels : (n,) ndarray of str
    lengths : (m,) int64 ndarray
        Residues per protein, in file order.
    """
    residues, labels, lengths = [], [], []
    opened = None  # line number of the current protein's "<>", None outside a protein

    def close(lineno):
        """End the open protein; a protein without residues is an error."""
        size = len(residues) - sum(lengths)
        if size == 0:
            raise ValueError(
                f"{path}, line {lineno}: the protein opened at line {opened} has no residues."
            )
        lengths.append(size)

    with open(path, encoding="ascii") as handle:
        for lineno, line in enumerate(handle, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if text == "<>":
                if opened is not None:
                    close(lineno)
                opened = lineno
            elif text in ("end", "<end>"):
                if opened is None:
                    raise ValueError(
                        f"{path}, line {lineno}: {text!r} outside a protein; each protein "
                        "starts with '<>'."
                    )
                close(lineno)
                opened = None
            else:
                fields = text.split()
                if len(fields) != 2 or len(fields[0]) != 1 or not fields[0].isupper() \
                        or fields[1] not in PROTEIN_LABELS:
                    raise ValueError(
                        f"{path}, line {lineno}: expected 'RESIDUE LABEL' (a capital "
                        f"one-letter code and h, e or _), '<>', 'end' or '<end>'; got {text!r}."
                    )
                if opened is None:
                    raise ValueError(
                        f"{path}, line {lineno}: residue line outside a protein; add '<>' "
                        "before it."
                    )
                residues.append(fields[0])
                labels.append(fields[1])
        if opened is not None:
            close(lineno)
    if not lengths:
        raise ValueError(f"{path} holds no proteins: each protein starts with a '<>' line.")
    return np.array(residues, "<U1"), np.array(labels, "<U1"), np.array(lengths, np.int64)


def read_conll(path, columns=("token", "pos", "chunk", "tag"), encoding="utf-8", line_numbers=False,
               documents=False):
    """Read a CoNLL column file (CoNLL-2000 chunking, CoNLL-2003 NER).

    One token per line, whitespace-separated fields; a blank line or a
    ``-DOCSTART-`` line ends a sentence. A byte-order mark is ignored.

    Parameters
    ----------
    path : str or path-like
    columns : sequence of str
        Names of the fields of every token line, in order (CoNLL-2000: three).
    encoding : str
        Text encoding (German CoNLL-2003: ``"latin-1"``); invalid text raises
        ``ValueError`` naming the file and line.
    line_numbers : bool
        Add a ``line`` column: the 1-based line of every token.
    documents : bool
        Add a ``document`` column: int64 id in file order, a ``-DOCSTART-``
        line starting the next document (0 throughout a file without one).

    Returns
    -------
    pandas.DataFrame
        One row per token: ``sentence`` (int64 id in file order), the named
        columns (strings) and, with ``line_numbers``, ``line``; with
        ``documents``, ``document`` after ``sentence``.

    """
    columns = tuple(columns)
    if not columns or len(set(columns)) != len(columns) \
            or {"sentence", "line", "document"} & set(columns):
        raise ValueError(
            "columns must be distinct names other than 'sentence', 'document' and 'line', at "
            f"least one; got {columns!r}."
        )
    rows, sentence_ids, lines, document_ids = [], [], [], []  # per token
    sentence = document = 0
    in_sentence = in_document = False
    raw = Path(path).read_bytes()
    try:
        text = raw.decode(encoding)
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r}; e.g. 'utf-8' or 'latin-1'.") from None
    except UnicodeDecodeError as err:
        bad_line = raw[: err.start].count(b"\n") + 1
        raise ValueError(
            f"{path}, line {bad_line}: not {encoding} text "
            f"({err.reason}, byte {raw[err.start:err.start + 1]!r}). Pass the file's encoding "
            "(encoding='latin-1', or --encoding latin-1 on the command line)."
        ) from None
    for lineno, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            sentence += in_sentence
            in_sentence = False
            if fields:
                document += in_document
                in_document = False
            continue
        if len(fields) != len(columns):
            raise ValueError(
                f"{path}, line {lineno}: expected {len(columns)} columns {columns} but "
                f"found {len(fields)}: {line.rstrip()!r}. Pass columns= naming every field."
            )
        rows.append(fields)
        sentence_ids.append(sentence)
        lines.append(lineno)
        document_ids.append(document)
        in_sentence = in_document = True
    table = np.array(rows, dtype=object).reshape(len(rows), len(columns))
    data = {"sentence": np.array(sentence_ids, dtype=np.int64)}
    if documents:
        data["document"] = np.array(document_ids, dtype=np.int64)
    data.update({name: table[:, j] for j, name in enumerate(columns)})
    if line_numbers:
        data["line"] = np.array(lines, dtype=np.int64)
    return pd.DataFrame(data)


def convert_tags(tags, source, target, lengths=None):
    """Rewrite chunk tags from one scheme to another ("iob1", "iob2", "bioes").

    Chunks are read with conlleval's rules; converting a scheme to itself puts
    ill-formed sequences in canonical form.

    Parameters
    ----------
    tags : array-like of str, shape (n,)
        Tags of one sentence, or of several back to back with ``lengths``.
    source, target : {"iob1", "iob2", "bioes"}
    lengths : array-like of int, shape (m,), optional
        Tokens per sentence; ``None``: one sentence.

    Returns
    -------
    tags : (n,) object ndarray of str
    """
    source = check_scheme(source, "source scheme")
    target = check_scheme(target, "target scheme")
    tags = as_tags(tags)
    offsets = sentence_offsets(lengths, tags.size)
    starts, ends, types = span_arrays(tags, source, offsets)
    return encode_spans(tags.size, starts, ends, types, target, offsets)
