"""Sequence-labelling metrics: token and sequence accuracy, CoNLL span scores.

Span scores follow the CoNLL evaluation script ``conlleval``: a predicted
chunk counts as correct only when its start, end and type all match a true
chunk, and chunks are read from the tags with conlleval's rules (see
:func:`extract_spans`), so IOB1 files are scored as they are, without
conversion, and ill-formed sequences are scored rather than rejected.
"""

from collections import Counter

import numpy as np
import pandas as pd

from .text.tags import as_tags, check_scheme, sentence_offsets, span_arrays
from .sequences import check_lengths, offsets_from_lengths

__all__ = [
    "token_accuracy",
    "sequence_accuracy",
    "extract_spans",
    "span_prf",
    "span_report",
]


def _paired(y_true, y_pred):
    """``y_true`` and ``y_pred`` as 1-D arrays of equal, non-zero length."""
    true = np.asarray(y_true)
    pred = np.asarray(y_pred)
    if true.ndim != 1 or pred.ndim != 1:
        raise ValueError(
            f"y_true and y_pred must be 1-D (one label per row); got shapes {true.shape} "
            f"and {pred.shape}. Concatenate the sequences and pass lengths."
        )
    if true.shape != pred.shape:
        raise ValueError(
            f"y_true has {true.size} rows but y_pred has {pred.size}: predict every row."
        )
    if true.size == 0:
        raise ValueError("y_true and y_pred are empty: there is nothing to score.")
    return true, pred


def token_accuracy(y_true, y_pred):
    """Fraction of rows (tokens, letters, residues) whose label is right.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Labels of any comparable type (ints, tag strings).

    Returns
    -------
    accuracy : float
    """
    true, pred = _paired(y_true, y_pred)
    return float(np.mean(true == pred))


def sequence_accuracy(y_true, y_pred, lengths):
    """Fraction of sequences whose every label is right.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Labels, sequences concatenated.
    lengths : array-like of int, shape (m,)
        Rows per sequence, in row order.

    Returns
    -------
    accuracy : float
    """
    true, pred = _paired(y_true, y_pred)
    lengths = check_lengths(lengths, true.size)
    wrong = np.add.reduceat((true != pred).astype(np.int64), offsets_from_lengths(lengths)[:-1])
    return float(np.mean(wrong == 0))


def extract_spans(tags, scheme="iob2", lengths=None, tag_names=None):
    """Chunks of a tag sequence, read with conlleval's rules.

    A chunk starts at ``B-`` (or BIOES ``S-``), at an ``I-``/``E-`` that
    follows ``O`` or a closed chunk, or where the type changes; it ends before
    ``B-``, ``S-`` or ``O``, after ``E-`` or ``S-``, or where the type changes.
    So IOB1 and IOB2 read the same way, and ill-formed sequences still yield
    chunks: a leading ``I-PER`` opens one, as in conlleval (seqeval's strict
    mode drops it instead).

    Parameters
    ----------
    tags : array-like, shape (n,)
        ``"O"`` or ``"P-TYPE"`` with a prefix legal in ``scheme``.
    scheme : {"iob2", "iob1", "bioes"}
        Decides which prefixes are legal (``B``, ``I``; plus ``E``, ``S`` in
        BIOES).
    lengths : array-like of int, shape (m,), optional
        Tokens per sentence when ``tags`` holds several sentences back to back;
        chunks never cross a sentence boundary. ``None``: one sentence.
    tag_names : sequence of str, optional
        Decode integer ``tags`` as ``tag_names[tags]``.

    Returns
    -------
    spans : list of (str, int, int)
        ``(type, start, end)`` per chunk, in order; the chunk covers
        ``tags[start:end]`` (end exclusive; positions index the flat array).

    Examples
    --------
    >>> extract_spans(["I-PER", "I-PER", "B-PER", "O", "I-LOC"], "iob1")
    [('PER', 0, 2), ('PER', 2, 3), ('LOC', 4, 5)]
    """
    scheme = check_scheme(scheme)
    tags = as_tags(tags, tag_names)
    starts, ends, types = span_arrays(tags, scheme, sentence_offsets(lengths, tags.size))
    return list(zip(types.tolist(), starts.tolist(), ends.tolist()))


def _ratio(num, den):
    return num / den if den else 0.0


def _scores(n_correct, n_predicted, n_true):
    precision = _ratio(n_correct, n_predicted)
    recall = _ratio(n_correct, n_true)
    f1 = _ratio(2 * precision * recall, precision + recall)
    return precision, recall, f1


def span_prf(y_true, y_pred, lengths=None, scheme="iob2", tag_names=None):
    """Precision, recall and F1 of chunks, per type and overall (CoNLL semantics).

    A predicted chunk is correct when a true chunk has the same start, end and
    type. Chunks are read from the tags by :func:`extract_spans` (conlleval's
    rules). Scores with a zero denominator are 0, as in conlleval.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Tags (or integer codes with ``tag_names``), sentences concatenated.
    lengths : array-like of int, shape (m,), optional
        Tokens per sentence. ``None``: one sentence.
    scheme : {"iob2", "iob1", "bioes"}
    tag_names : sequence of str, optional
        Decode integer labels as ``tag_names[label]``.

    Returns
    -------
    scores : pandas.DataFrame
        One row per chunk type (sorted) and a last row ``"overall"`` (micro
        average); columns ``precision``, ``recall``, ``f1`` (fractions),
        ``support`` (true chunks), ``predicted`` and ``correct`` (chunk counts).
    """
    scheme = check_scheme(scheme)
    true, pred = _paired(as_tags(y_true, tag_names), as_tags(y_pred, tag_names))
    offsets = sentence_offsets(lengths, true.size)
    true_spans = set(zip(*(a.tolist() for a in span_arrays(true, scheme, offsets))))
    pred_spans = set(zip(*(a.tolist() for a in span_arrays(pred, scheme, offsets))))
    n_true = Counter(span[2] for span in true_spans)
    n_pred = Counter(span[2] for span in pred_spans)
    n_correct = Counter(span[2] for span in true_spans & pred_spans)
    types = sorted(n_true.keys() | n_pred.keys())
    if "overall" in types:
        raise ValueError(
            "a chunk type is named 'overall', which span_prf uses for the micro average; "
            "rename that type."
        )
    rows = {t: (n_correct[t], n_pred[t], n_true[t]) for t in types}
    rows["overall"] = (sum(n_correct.values()), len(pred_spans), len(true_spans))
    table = pd.DataFrame(
        [(*_scores(*counts), counts[2], counts[1], counts[0]) for counts in rows.values()],
        index=pd.Index(list(rows), name="type"),
        columns=["precision", "recall", "f1", "support", "predicted", "correct"],
    )
    return table.astype({"support": np.int64, "predicted": np.int64, "correct": np.int64})


def span_report(y_true, y_pred, lengths=None, scheme="iob2", tag_names=None):
    """Chunk scores as text, laid out like conlleval's output.

    Parameters
    ----------
    y_true, y_pred, lengths, scheme, tag_names
        As in :func:`span_prf`.

    Returns
    -------
    report : str
        A header line with token and chunk counts, the overall token accuracy
        and chunk precision, recall and F1 (in percent), then one line per
        chunk type ending with the number of predicted chunks of that type.
    """
    scheme = check_scheme(scheme)
    true = as_tags(y_true, tag_names)
    pred = as_tags(y_pred, tag_names)
    table = span_prf(true, pred, lengths, scheme)
    total = table.loc["overall"]
    lines = [
        f"processed {true.size} tokens with {int(total['support'])} phrases; "
        f"found: {int(total['predicted'])} phrases; correct: {int(total['correct'])}.",
        f"accuracy: {100 * token_accuracy(true, pred):6.2f}%; "
        f"precision: {100 * total['precision']:6.2f}%; "
        f"recall: {100 * total['recall']:6.2f}%; FB1: {100 * total['f1']:6.2f}",
    ]
    for name, row in table.drop(index="overall").iterrows():
        lines.append(
            f"{name:>17}: precision: {100 * row['precision']:6.2f}%; "
            f"recall: {100 * row['recall']:6.2f}%; FB1: {100 * row['f1']:6.2f}  "
            f"{int(row['predicted'])}"
        )
    return "\n".join(lines) + "\n"
