import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structboost.datasets import convert_tags
from structboost.metrics import (
    extract_spans,
    sequence_accuracy,
    span_prf,
    span_report,
    token_accuracy,
)

seqeval = pytest.importorskip("seqeval.metrics")
from seqeval.metrics import v1 as seqeval_strict  # noqa: E402
from seqeval.metrics.sequence_labeling import (  # noqa: E402
    get_entities,
    precision_recall_fscore_support,
)
from seqeval.scheme import IOB2  # noqa: E402

TYPES = ("PER", "LOC")


def random_sentences(rng, prefixes, lengths):
    """Random (often ill-formed) tags over ``prefixes`` and two types, per sentence."""
    tags = [f"{p}-{t}" for p in prefixes for t in TYPES] + ["O"] * 3
    return [list(rng.choice(tags, size=n)) for n in lengths]


def well_formed_iob2(rng, lengths):
    """Random valid IOB2 sentences: an I- only continues a chunk of its own type."""
    out = []
    for n in lengths:
        sent = []
        for _ in range(n):
            if sent and sent[-1] != "O" and rng.random() < 0.5:
                sent.append("I-" + sent[-1][2:])
            else:
                sent.append(str(rng.choice(["O", "B-PER", "B-LOC"])))
        out.append(sent)
    return out


def random_lengths(rng, n_sentences=30, max_len=8):
    return rng.integers(1, max_len + 1, size=n_sentences)


def flat(sentences):
    """Sentences as one flat object array plus their lengths."""
    tags = np.concatenate([np.asarray(s, dtype=object) for s in sentences])
    return tags, [len(s) for s in sentences]


def seqeval_spans(sentences):
    """seqeval's default-mode chunks as (type, start, end exclusive) over the flat array."""
    spans, offset = [], 0
    for sent in sentences:
        spans += [(t, offset + b, offset + e + 1) for t, b, e in get_entities(list(sent))]
        offset += len(sent)
    return spans


def assert_matches_seqeval(y_true, y_pred, scheme, strict=False):
    """Our per-type and overall scores equal seqeval's (default or strict IOB2 mode)."""
    true, lengths = flat(y_true)
    pred, _ = flat(y_pred)
    table = span_prf(true, pred, lengths, scheme)
    if strict:
        def prf(average):
            return seqeval_strict.precision_recall_fscore_support(
                y_true, y_pred, average=average, scheme=IOB2, zero_division=0
            )
    else:
        def prf(average):
            return precision_recall_fscore_support(
                y_true, y_pred, average=average, zero_division=0
            )
    per_type = table.drop(index="overall")
    p, r, f, s = prf(None)
    assert len(per_type) == len(p)
    np.testing.assert_allclose(per_type["precision"], p)
    np.testing.assert_allclose(per_type["recall"], r)
    np.testing.assert_allclose(per_type["f1"], f)
    np.testing.assert_array_equal(per_type["support"], s)
    p, r, f, _ = prf("micro")
    overall = table.loc["overall", ["precision", "recall", "f1"]].astype(float)
    np.testing.assert_allclose(overall, [p, r, f])


# ---------------------------------------------------------------- accuracies


def test_token_accuracy():
    assert token_accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
    assert token_accuracy(["B-X", "O"], ["B-X", "O"]) == 1.0


def test_sequence_accuracy():
    y = np.array([0, 1, 2, 2, 1, 0])
    p = np.array([0, 1, 2, 0, 1, 0])
    assert sequence_accuracy(y, p, [2, 2, 2]) == pytest.approx(2 / 3)
    assert sequence_accuracy(y, p, [3, 3]) == 0.5
    assert sequence_accuracy(y, y, [6]) == 1.0


def test_accuracy_errors():
    with pytest.raises(ValueError, match="3 rows but y_pred has 2"):
        token_accuracy([0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match="empty"):
        token_accuracy([], [])
    with pytest.raises(ValueError, match="1-D"):  # a list of label lists is sequences
        token_accuracy(np.array([[0, 1]]), np.array([[0, 1]]))
    with pytest.raises(ValueError, match="sum to 5"):
        sequence_accuracy([0, 1, 2], [0, 1, 2], [2, 3])
    with pytest.raises(ValueError, match="at least one"):
        sequence_accuracy([0, 1, 2], [0, 1, 2], [3, 0])


# ---------------------------------------------------------------- spans


@pytest.mark.parametrize(
    ("tags", "scheme", "spans"),
    [
        # IOB1 as in CoNLL-2003: B- only between two adjacent chunks of one type.
        ("I-PER I-PER B-PER O I-LOC", "iob1", [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]),
        # The two stray B-MISC of eng.train (after O) open a chunk like I-MISC would.
        ("O B-MISC I-MISC O", "iob1", [("MISC", 1, 3)]),
        ("B-PER I-PER B-PER O B-LOC", "iob2", [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]),
        # conlleval: a leading I- opens a chunk; so does an I- after O.
        ("I-PER I-PER O I-LOC", "iob2", [("PER", 0, 2), ("LOC", 3, 4)]),
        # A type change inside I- runs splits the chunk.
        ("B-PER I-LOC I-LOC", "iob2", [("PER", 0, 1), ("LOC", 1, 3)]),
        ("B-PER E-PER S-PER O B-LOC I-LOC E-LOC", "bioes",
         [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 7)]),
        # Ill-formed BIOES: E- closes, I- after E- reopens.
        ("E-PER I-PER S-LOC S-LOC", "bioes",
         [("PER", 0, 1), ("PER", 1, 2), ("LOC", 2, 3), ("LOC", 3, 4)]),
        ("O O", "iob2", []),
        # Types may contain dashes: the tag splits at the first one.
        ("B-NP-SBJ I-NP-SBJ", "iob2", [("NP-SBJ", 0, 2)]),
    ],
)
def test_extract_spans_examples(tags, scheme, spans):
    assert extract_spans(tags.split(), scheme) == spans


def test_extract_spans_sentence_boundaries_and_codes():
    tags = ["I-PER", "I-PER", "I-PER", "O"]
    assert extract_spans(tags, "iob1") == [("PER", 0, 3)]
    assert extract_spans(tags, "iob1", lengths=[2, 2]) == [("PER", 0, 2), ("PER", 2, 3)]
    names = ["O", "B-PER", "I-PER"]
    assert extract_spans([1, 2, 0, 1], tag_names=names) == [("PER", 0, 2), ("PER", 3, 4)]


def test_extract_spans_errors():
    with pytest.raises(ValueError, match=r"'E-PER' at position 1 is not a iob2 tag"):
        extract_spans(["B-PER", "E-PER"], "iob2")
    with pytest.raises(ValueError, match="'B-' at position 0"):
        extract_spans(["B-", "O"])
    with pytest.raises(ValueError, match="'PER' at position 0"):
        extract_spans(["PER"])
    with pytest.raises(ValueError, match="unknown scheme 'ioe'"):
        extract_spans(["O"], "ioe")
    with pytest.raises(ValueError, match="tag_names"):
        extract_spans([0, 1])
    with pytest.raises(ValueError, match="code 3 at position 1"):
        extract_spans([0, 3], tag_names=["O", "B-X"])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scheme=st.sampled_from(["iob1", "iob2", "bioes"]))
def test_extract_spans_matches_seqeval_default_mode(seed, scheme):
    """seqeval's default mode reimplements conlleval's chunk rules (plus E-/S-)."""
    rng = np.random.default_rng(seed)
    sentences = random_sentences(rng, "BIES" if scheme == "bioes" else "BI", random_lengths(rng))
    tags, lengths = flat(sentences)
    assert extract_spans(tags, scheme, lengths) == seqeval_spans(sentences)


# ---------------------------------------------------------------- span scores


def test_span_prf_by_hand():
    true = "B-PER I-PER O B-LOC O B-ORG".split()
    pred = "B-PER I-PER O B-ORG O B-ORG".split()
    table = span_prf(true, pred)
    assert list(table.index) == ["LOC", "ORG", "PER", "overall"]
    assert table.loc["ORG", "precision"] == 0.5
    assert table.loc["ORG", "recall"] == 1.0
    assert table.loc["LOC", "f1"] == 0.0  # no predicted LOC: 0, not NaN
    assert table.loc["overall"].tolist() == pytest.approx([2 / 3, 2 / 3, 2 / 3, 3, 3, 2])
    assert table["support"].dtype == np.int64
    names = ["O", "B-LOC", "B-ORG", "B-PER", "I-PER"]
    codes = {name: k for k, name in enumerate(names)}
    from_codes = span_prf([codes[t] for t in true], [codes[t] for t in pred], tag_names=names)
    pd.testing.assert_frame_equal(from_codes, table)


def test_span_prf_partial_overlap_is_wrong():
    table = span_prf(["B-PER", "I-PER", "I-PER"], ["B-PER", "I-PER", "O"])
    assert table.loc["overall", "correct"] == 0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_span_prf_matches_seqeval_on_random_iob2(seed):
    """Arbitrary (mostly ill-formed) IOB2: seqeval's default mode follows conlleval."""
    rng = np.random.default_rng(seed)
    lengths = random_lengths(rng)
    y_true = random_sentences(rng, "BI", lengths)
    noise = random_sentences(rng, "BI", lengths)
    y_pred = [[n if rng.random() < 0.3 else t for t, n in zip(ts, ns)]
              for ts, ns in zip(y_true, noise)]
    assert_matches_seqeval(y_true, y_pred, "iob2")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_span_prf_matches_seqeval_strict_on_well_formed_iob2(seed):
    rng = np.random.default_rng(seed)
    lengths = random_lengths(rng)
    y_true = well_formed_iob2(rng, lengths)
    other = well_formed_iob2(rng, lengths)
    y_pred = [t if rng.random() < 0.5 else p for t, p in zip(y_true, other)]
    assert_matches_seqeval(y_true, y_pred, "iob2", strict=True)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_span_prf_iob1_equals_seqeval_on_converted_iob2(seed):
    """IOB1 scored as is equals seqeval (strict IOB2) on our IOB1 -> IOB2 conversion."""
    rng = np.random.default_rng(seed)
    lengths = random_lengths(rng)
    # IOB1 is mostly I-; B- appears between adjacent chunks of one type (or stray).
    y_true = [["I" + t[1:] if t[0] == "B" and rng.random() < 0.8 else t for t in s]
              for s in random_sentences(rng, "BI", lengths)]
    y_pred = random_sentences(rng, "BI", lengths)
    true, _ = flat(y_true)
    pred, _ = flat(y_pred)
    ours = span_prf(true, pred, lengths, "iob1")
    t2 = [list(convert_tags(s, "iob1", "iob2")) for s in y_true]
    p2 = [list(convert_tags(s, "iob1", "iob2")) for s in y_pred]
    pd.testing.assert_frame_equal(ours, span_prf(flat(t2)[0], flat(p2)[0], lengths, "iob2"))
    assert_matches_seqeval(t2, p2, "iob2", strict=True)
    assert_matches_seqeval(y_true, y_pred, "iob1")  # seqeval's default mode reads IOB1 too


def test_leading_inside_tag_follows_conlleval_not_seqeval_strict():
    """Where seqeval's strict mode and conlleval disagree we follow conlleval.

    conlleval (and seqeval's default mode) read a chunk that opens with I-
    (sentence start, or after O) as a chunk. seqeval's strict IOB2 mode drops
    it as invalid, so a tagger that writes I- for B- would score 0 there. The
    CoNLL-2003 files themselves are IOB1, where I- after O is the normal way
    to open a chunk, so conlleval's reading is the one whose numbers match
    published CoNLL results.
    """
    y = [["I-PER", "I-PER", "O", "I-LOC"]]
    tags, lengths = flat(y)
    table = span_prf(tags, tags, lengths, "iob2")
    assert table.loc["overall", "support"] == 2
    assert table.loc["overall", "f1"] == 1.0
    assert seqeval.f1_score(y, y) == 1.0  # default mode agrees with conlleval
    assert seqeval.f1_score(y, y, mode="strict", scheme=IOB2, zero_division=0) == 0.0
    assert seqeval.classification_report(
        y, y, mode="strict", scheme=IOB2, output_dict=True, zero_division=0
    )["micro avg"]["support"] == 0  # strict mode sees no chunk at all


def test_span_prf_errors():
    with pytest.raises(ValueError, match="3 rows but y_pred has 2"):
        span_prf(["O", "O", "O"], ["O", "O"])
    with pytest.raises(ValueError, match="named 'overall'"):
        span_prf(["B-overall"], ["O"])
    with pytest.raises(ValueError, match="sum to 3 but there are 2"):
        span_prf(["O", "O"], ["O", "O"], lengths=[1, 2])


def test_span_report_layout():
    true = "B-PER I-PER O B-LOC O B-ORG".split()
    pred = "B-PER I-PER O B-ORG O B-ORG".split()
    lines = span_report(true, pred).splitlines()
    assert lines[0] == "processed 6 tokens with 3 phrases; found: 3 phrases; correct: 2."
    assert lines[1] == "accuracy:  83.33%; precision:  66.67%; recall:  66.67%; FB1:  66.67"
    assert lines[2] == "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  0"
    assert lines[3] == "              ORG: precision:  50.00%; recall: 100.00%; FB1:  66.67  2"
    assert len(lines) == 5
