"""structboost.metrics on lists of label lists, and sklearn-crfsuite's flat_* names."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import classification_report, f1_score

from structboost.metrics import (
    extract_spans,
    flat_accuracy_score,
    flat_classification_report,
    flat_f1_score,
    flat_fbeta_score,
    sequence_accuracy,
    sequence_accuracy_score,
    span_prf,
    span_report,
    token_accuracy,
)

# -- label lists, as the estimators return them for a list of sequences ---------
NESTED_TRUE = [["B-PER", "I-PER", "O"], ["O", "B-LOC"], ["I-ORG"]]
NESTED_PRED = [["B-PER", "O", "O"], ["O", "B-LOC"], ["B-ORG"]]


def _concat(nested):
    return np.array([tag for seq in nested for tag in seq]), np.array([len(s) for s in nested])


def test_span_and_accuracy_metrics_read_label_lists():
    true, lengths = _concat(NESTED_TRUE)
    pred, _ = _concat(NESTED_PRED)
    pd.testing.assert_frame_equal(
        span_prf(NESTED_TRUE, NESTED_PRED), span_prf(true, pred, lengths)
    )
    assert span_report(NESTED_TRUE, NESTED_PRED) == span_report(true, pred, lengths)
    assert extract_spans(NESTED_TRUE) == extract_spans(true, lengths=lengths)
    assert sequence_accuracy(NESTED_TRUE, NESTED_PRED) == sequence_accuracy(true, pred, lengths)
    assert sequence_accuracy(NESTED_TRUE, NESTED_PRED) == pytest.approx(1 / 3)
    assert token_accuracy(NESTED_TRUE, NESTED_PRED) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="disagree on the sequences"):
        span_prf(NESTED_TRUE, [["B-PER", "O"], ["O", "B-LOC", "O"], ["B-ORG"]])
    with pytest.raises(ValueError, match="pass lengths="):
        sequence_accuracy(true, pred)


def test_flat_metrics_are_sklearns_on_the_concatenation():
    true, _ = _concat(NESTED_TRUE)
    pred, _ = _concat(NESTED_PRED)
    labels = ["B-PER", "I-PER", "B-LOC"]
    assert flat_f1_score(NESTED_TRUE, NESTED_PRED, average="weighted", labels=labels) == (
        f1_score(true, pred, average="weighted", labels=labels)
    )
    assert flat_fbeta_score(NESTED_TRUE, NESTED_PRED, beta=1.0, average="micro") == (
        pytest.approx(f1_score(true, pred, average="micro"))
    )
    assert flat_accuracy_score(NESTED_TRUE, NESTED_PRED) == pytest.approx(4 / 6)
    assert flat_classification_report(NESTED_TRUE, NESTED_PRED, zero_division=0) == (
        classification_report(true, pred, zero_division=0)
    )
    assert sequence_accuracy_score(NESTED_TRUE, NESTED_PRED) == pytest.approx(1 / 3)
