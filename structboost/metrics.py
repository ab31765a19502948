"""Sequence-labelling metrics: token and sequence accuracy, CoNLL span scores.

Labels come flat (``(n,)``, with ``lengths`` where sentences matter) or as
a list of label lists. The ``flat_*`` functions are sklearn-crfsuite's:
scikit-learn's token metrics on the concatenated labels, so
``make_scorer(flat_f1_score, average="weighted", labels=labels)`` works in
model selection. Span scores follow ``conlleval``: a chunk is correct when
start, end and type match, with chunks read by conlleval's rules
(:func:`extract_spans`), so IOB1 is scored as is and ill-formed sequences
are scored, not rejected.
"""

from collections import Counter

import numpy as np
import pandas as pd
from sklearn import metrics as _sk

from .text.tags import as_tags, check_scheme, sentence_offsets, span_arrays
from .sequences import check_lengths, offsets_from_lengths

__all__ = [
    "token_accuracy",
    "sequence_accuracy",
    "extract_spans",
    "span_prf",
    "span_report",
    "flat_accuracy_score",
    "flat_precision_score",
    "flat_recall_score",
    "flat_f1_score",
    "flat_fbeta_score",
    "flat_classification_report",
    "sequence_accuracy_score",
]


def _unnest(y):
    """Flat labels ``(n,)`` and lengths ``(m,)`` of a list of label lists, else ``(y, None)``."""
    if not isinstance(y, (list, tuple)) or not y or isinstance(y[0], (str, bytes)):
        return y, None
    if np.ndim(y[0]) != 1:
        return y, None
    lengths = np.array([len(seq) for seq in y], dtype=np.int64)
    return np.asarray([label for seq in y for label in seq]), lengths


def _flat(y_true, y_pred, lengths=None):
    """Flat ``y_true``, ``y_pred`` and the lengths: those of nested labels, else ``lengths``."""
    true, true_lengths = _unnest(y_true)
    pred, pred_lengths = _unnest(y_pred)
    found = [x for x in (true_lengths, pred_lengths, lengths) if x is not None]
    for other in found[1:]:
        other = np.asarray(other)
        if other.shape != found[0].shape or (other != found[0]).any():
            raise ValueError(
                "y_true, y_pred and lengths disagree on the sequences: give one label list "
                "per sequence with one label per token in each (or flat labels and lengths)."
            )
    return true, pred, found[0] if found else None


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
    """Fraction of rows whose label is right; ``y_true``, ``y_pred`` ``(n,)`` or lists of label
    lists.
    """
    true, pred, _ = _flat(y_true, y_pred)
    true, pred = _paired(true, pred)
    return float(np.mean(true == pred))


def sequence_accuracy(y_true, y_pred, lengths=None):
    """Fraction of sequences whose every label is right.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,), or list of label lists
    lengths : array-like of int, shape (m,), optional
        Rows per sequence; needed for flat labels.

    Returns
    -------
    accuracy : float
    """
    true, pred, lengths = _flat(y_true, y_pred, lengths)
    if lengths is None:
        raise ValueError(
            "sequence_accuracy needs the sequences: pass lengths= or one label list per sequence."
        )
    true, pred = _paired(true, pred)
    lengths = check_lengths(lengths, true.size)
    wrong = np.add.reduceat((true != pred).astype(np.int64), offsets_from_lengths(lengths)[:-1])
    return float(np.mean(wrong == 0))


def extract_spans(tags, scheme="iob2", lengths=None, tag_names=None):
    """Chunks of a tag sequence, read with conlleval's rules.

    A chunk starts at ``B-`` (or ``S-``), at an ``I-``/``E-`` after ``O`` or a
    closed chunk, or where the type changes; it ends before ``B-``, ``S-`` or
    ``O``, after ``E-`` or ``S-``, or where the type changes. IOB1 and IOB2 read
    alike, and a leading ``I-PER`` opens a chunk (as in conlleval).

    Parameters
    ----------
    tags : array-like, shape (n,), or list of tag lists
        ``"O"`` or ``"P-TYPE"`` with a prefix legal in ``scheme``; positions
        index the concatenation.
    scheme : {"iob2", "iob1", "bioes"}
    lengths : array-like of int, shape (m,), optional
        Tokens per sentence; chunks never cross a sentence. ``None``: one.
    tag_names : sequence of str, optional
        Decode integer ``tags`` as ``tag_names[tags]``.

    Returns
    -------
    spans : list of (str, int, int)
        ``(type, start, end)`` per chunk, in order, ``end`` exclusive.

    Examples
    --------
    >>> extract_spans(["I-PER", "I-PER", "B-PER", "O", "I-LOC"], "iob1")
    [('PER', 0, 2), ('PER', 2, 3), ('LOC', 4, 5)]
    """
    scheme = check_scheme(scheme)
    tags, _, lengths = _flat(tags, None, lengths)
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
    """Precision, recall and F1 of chunks, per type and overall (CoNLL semantics; zero denominators
    give 0).

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,), or list of tag lists
        Tags (or integer codes with ``tag_names``).
    lengths : array-like of int, shape (m,), optional
        Tokens per sentence. ``None``: one sentence, or the lists' lengths.
    scheme : {"iob2", "iob1", "bioes"}
    tag_names : sequence of str, optional

    Returns
    -------
    scores : pandas.DataFrame
        One row per chunk type (sorted) and ``"overall"`` (micro average);
        columns ``precision``, ``recall``, ``f1``, ``support``, ``predicted``,
        ``correct``.
    """
    scheme = check_scheme(scheme)
    y_true, y_pred, lengths = _flat(y_true, y_pred, lengths)
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
    """Chunk scores as text laid out like conlleval's output (arguments as :func:`span_prf`)."""
    y_true, y_pred, lengths = _flat(y_true, y_pred, lengths)
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


# -- sklearn-crfsuite's names: scikit-learn's token metrics on concatenated labels -----
def _token_metric(metric):
    """sklearn-crfsuite's ``flat_<name>``: ``metric`` of the concatenated labels."""

    def flat(y_true, y_pred, **kwargs):
        true, pred, _ = _flat(y_true, y_pred)
        return metric(*_paired(true, pred), **kwargs)

    flat.__name__ = f"flat_{metric.__name__}"
    flat.__qualname__ = flat.__name__
    flat.__doc__ = f"""scikit-learn's ``{metric.__name__}`` of every token, as sklearn-crfsuite's.

    Parameters
    ----------
    y_true, y_pred : list of label lists, or array-like of shape (n,)
        One label list per sequence (what the estimators' ``predict``
        returns for a list of sequences), or the labels concatenated.
    **kwargs
        ``sklearn.metrics.{metric.__name__}``'s (``labels=``, ``average=``, ...).

    Returns
    -------
    float, or the report for ``flat_classification_report``
    """
    return flat


flat_accuracy_score = _token_metric(_sk.accuracy_score)
flat_precision_score = _token_metric(_sk.precision_score)
flat_recall_score = _token_metric(_sk.recall_score)
flat_f1_score = _token_metric(_sk.f1_score)
flat_fbeta_score = _token_metric(_sk.fbeta_score)
flat_classification_report = _token_metric(_sk.classification_report)


def sequence_accuracy_score(y_true, y_pred):
    """sklearn-crfsuite's name of :func:`sequence_accuracy` for lists of label lists."""
    return sequence_accuracy(y_true, y_pred)
