import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structboost.datasets import (
    OCR_LETTERS,
    SequenceData,
    convert_tags,
    load_ocr,
    make_hmm_sequences,
    ocr_split,
    read_conll,
    read_protein_qs,
)
from structboost.metrics import extract_spans

# ---------------------------------------------------------------- synthetic HMM


def test_hmm_shapes_and_one_hot():
    X, y, lengths = make_hmm_sequences(n_sequences=7, length=11, random_state=0)
    assert X.shape == (77, 24) and X.dtype == np.float64
    assert y.shape == (77,) and y.dtype == np.int64
    assert lengths.dtype == np.int64 and lengths.tolist() == [11] * 7
    np.testing.assert_array_equal(X.sum(axis=1), 1.0)
    assert set(np.unique(y)) <= {0, 1, 2}


def test_hmm_is_seeded():
    a = make_hmm_sequences(n_sequences=5, length=(2, 9), window=1, random_state=3)
    b = make_hmm_sequences(n_sequences=5, length=(2, 9), window=1, random_state=3)
    c = make_hmm_sequences(n_sequences=5, length=(2, 9), window=1, random_state=4)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[1], c[1]) or not np.array_equal(a[2], c[2])


def test_hmm_lengths_variants():
    _, y, lengths = make_hmm_sequences(n_sequences=3, length=[1, 4, 2], random_state=0)
    assert lengths.tolist() == [1, 4, 2] and y.size == 7
    _, _, lengths = make_hmm_sequences(n_sequences=200, length=(3, 5), random_state=0)
    assert set(lengths.tolist()) == {3, 4, 5}


def test_hmm_statistics_match_the_model():
    """Empirical stay and emission rates match the parameters (n = 200,000 rows)."""
    stay, emission, K, V = 0.9, 0.7, 4, 20
    X, y, lengths = make_hmm_sequences(
        n_sequences=400, length=500, n_labels=K, n_observations=V, stay=stay,
        emission=emission, random_state=1,
    )
    symbols = X.argmax(axis=1)
    within = np.ones(y.size, dtype=bool)
    within[np.cumsum(lengths)[:-1]] = False  # pairs (t-1, t) inside a sequence
    same = y[1:] == y[:-1]
    assert same[within[1:]].mean() == pytest.approx(stay, abs=0.005)
    moves = np.stack([y[:-1], y[1:]])[:, within[1:] & ~same]
    counts = np.zeros((K, K))
    np.add.at(counts, tuple(moves), 1)
    off = counts[~np.eye(K, dtype=bool)].reshape(K, K - 1)
    np.testing.assert_allclose(off / off.sum(axis=1, keepdims=True), 1 / (K - 1), atol=0.02)
    block = V // K
    own = symbols // block == y
    assert own.mean() == pytest.approx(emission, abs=0.005)
    # Inside and outside the own block the symbol is uniform.
    np.testing.assert_allclose(np.bincount(symbols[own] % block) / own.sum(), 1 / block, atol=0.01)
    other = symbols[~own & (y == 0)]
    np.testing.assert_allclose(np.bincount(other, minlength=V)[block:] / other.size,
                               1 / (V - block), atol=0.01)
    np.testing.assert_allclose(np.bincount(y) / y.size, 1 / K, atol=0.02)


def test_hmm_window_blocks_are_shifted_observations():
    w, V = 2, 6
    X0, y0, l0 = make_hmm_sequences(n_sequences=4, length=(1, 6), n_observations=V, random_state=5)
    X, y, lengths = make_hmm_sequences(
        n_sequences=4, length=(1, 6), n_observations=V, window=w, random_state=5
    )
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(lengths, l0)
    assert X.shape == (y.size, (2 * w + 1) * V)
    np.testing.assert_array_equal(X[:, w * V:(w + 1) * V], X0)  # centre block
    start = 0
    for n in lengths:
        seq0, seq = X0[start:start + n], X[start:start + n]
        for j, d in enumerate(range(-w, w + 1)):
            for t in range(n):
                expected = seq0[t + d] if 0 <= t + d < n else np.zeros(V)
                np.testing.assert_array_equal(seq[t, j * V:(j + 1) * V], expected)
        start += n


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_labels": 1}, "n_labels must be an integer >= 2"),
        ({"n_observations": 25}, "multiple of n_labels=3"),
        ({"stay": 1.5}, r"stay is a probability"),
        ({"emission": -0.1}, r"emission is a probability"),
        ({"window": -1}, "window must be an integer >= 0"),
        ({"length": [3, 4]}, "pass n_sequences=2"),
        ({"length": (5, 2)}, "low <= high"),
        ({"length": (1, 2, 3)}, r"\(low, high\)"),
        ({"length": 0}, "at least 1"),
        ({"length": 2.5}, "length must be an int"),
    ],
)
def test_hmm_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_hmm_sequences(**kwargs)


# ---------------------------------------------------------------- OCR


@pytest.fixture
def letters(tmp_path):
    """A tiny letters.npz in the real file's layout and dtypes: 6 words, folds 0..2."""
    rng = np.random.default_rng(0)
    lengths = np.array([3, 4, 2, 5, 3, 2], dtype=np.int32)
    n = int(lengths.sum())
    arrays = {
        "pixels": (rng.random((n, 128)) < 0.2).astype(np.uint8),
        "labels": rng.integers(0, 26, n).astype(np.uint8),
        "lengths": lengths,
        "folds": np.array([0, 1, 2, 0, 1, 2], dtype=np.int8),
    }
    path = tmp_path / "letters.npz"
    np.savez(path, **arrays)
    return path, arrays


def test_load_ocr(letters):
    path, arrays = letters
    data = load_ocr(path)
    assert data.X.dtype == np.float64 and data.X.shape == (19, 128)
    np.testing.assert_array_equal(data.X, arrays["pixels"])
    assert data.y.dtype == np.int64 and data.lengths.dtype == np.int64
    np.testing.assert_array_equal(data.y, arrays["labels"])
    assert data.folds.tolist() == [0, 1, 2, 0, 1, 2]
    assert data.label_names == OCR_LETTERS and data.label_names[25] == "z"
    assert data.n_sequences == 6 and data.offsets.tolist() == [0, 3, 7, 9, 14, 17, 19]
    assert load_ocr(path.parent, dtype=np.uint8).X.dtype == np.uint8  # folder works too


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lengths": np.array([3, 4, 2, 5, 3, 3])}, "sum to 20 but there are 19 rows"),
        ({"labels": np.full(19, 26, dtype=np.uint8)}, "label 26 of row 0 is outside 0..25"),
        ({"folds": np.zeros(5, dtype=np.int8)}, "one integer per sequence"),
        ({"pixels": np.zeros(19)}, "2-D"),
    ],
)
def test_load_ocr_rejects_inconsistent_files(letters, change, message):
    path, arrays = letters
    np.savez(path, **{**arrays, **change})
    with pytest.raises(ValueError, match=message):
        load_ocr(path)


def test_load_ocr_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="letters.npz"):
        load_ocr(tmp_path)
    np.savez(tmp_path / "letters.npz", pixels=np.zeros((1, 128)))
    with pytest.raises(ValueError, match=r"lacks the arrays \['labels', 'lengths', 'folds'\]"):
        load_ocr(tmp_path)


def test_ocr_split_keeps_words_whole(letters):
    data = load_ocr(letters[0])
    train, valid, test = ocr_split(data, test_folds=2, valid_folds=[1])
    assert train.folds.tolist() == [0, 0]
    assert valid.folds.tolist() == [1, 1] and test.folds.tolist() == [2, 2]
    assert train.lengths.tolist() == [3, 5] and test.lengths.tolist() == [2, 2]
    off = data.offsets
    words_0_3 = np.concatenate([data.X[off[0]:off[1]], data.X[off[3]:off[4]]])
    np.testing.assert_array_equal(train.X, words_0_3)
    words_2_5 = np.concatenate([data.y[off[2]:off[3]], data.y[off[5]:off[6]]])
    np.testing.assert_array_equal(test.y, words_2_5)
    assert train.y.size + valid.y.size + test.y.size == data.y.size
    train, valid, test = ocr_split(data, test_folds=range(1, 3))
    assert valid is None and train.n_sequences == 2 and test.n_sequences == 4


def test_ocr_split_errors(letters):
    data = load_ocr(letters[0])
    with pytest.raises(ValueError, match=r"test_folds \[7\] not in the data"):
        ocr_split(data, 7)
    with pytest.raises(ValueError, match=r"folds \[1\] are in both"):
        ocr_split(data, [1], [1, 2])
    with pytest.raises(ValueError, match="no fold is left for training"):
        ocr_split(data, [0, 1], [2])
    with pytest.raises(ValueError, match="test_folds is empty"):
        ocr_split(data, [])
    with pytest.raises(ValueError, match="no folds"):
        ocr_split(SequenceData(np.zeros((2, 1)), [0, 1], [2]), 0)


def test_sequence_data_validation_and_subset():
    X = np.arange(10.0).reshape(5, 2)
    data = SequenceData(X, [0, 1, 1, 0, 1], [2, 3], label_names=("x", "y"))
    sub = data.subset([False, True])
    assert sub.lengths.tolist() == [3] and sub.y.tolist() == [1, 0, 1]
    assert sub.X[:, 0].tolist() == [4.0, 6.0, 8.0] and sub.folds is None
    assert data.subset([False, False]).X.shape == (0, 2)
    with pytest.raises(ValueError, match="outside 0..1"):
        SequenceData(np.zeros((2, 1)), [0, 2], [2], label_names=("x", "y"))
    with pytest.raises(ValueError, match="one label per row"):
        SequenceData(np.zeros((2, 1)), [0], [2])
    with pytest.raises(ValueError, match="integer labels"):
        SequenceData(np.zeros((2, 1)), [0.0, 1.0], [2])
    with pytest.raises(ValueError, match=r"one entry per sequence \(2\); got shape \(1,\)"):
        data.subset([True])
    with pytest.raises(ValueError, match="mask must be boolean"):
        data.subset([0, 1])


# ---------------------------------------------------------------- proteins

PROTEIN_FILE = """\
# Training set for study of secondary structure
# comment line


<>
G _
V e
W h
end
<>
A h
C h
<>
D _
E e

<end>
<>
F _
"""


def test_read_protein_qs(tmp_path):
    path = tmp_path / "proteins.train"
    path.write_text(PROTEIN_FILE)
    residues, labels, lengths = read_protein_qs(path)
    assert residues.tolist() == list("GVWACDEF")
    assert labels.tolist() == list("_ehhh_e_")
    assert lengths.tolist() == [3, 2, 2, 1] and lengths.dtype == np.int64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<>\nG x\n", r"line 2: expected 'RESIDUE LABEL'"),
        ("<>\nG _ extra\n", r"line 2: expected"),
        ("G _\n", "line 1: residue line outside a protein; add '<>'"),
        ("<>\nG _\nend\nA h\n", "line 4: residue line outside a protein"),
        ("<>\n<>\nG _\n", "line 2: the protein opened at line 1 has no residues"),
        ("<>\nG _\nend\n<end>\n", r"line 4: '<end>' outside a protein"),
        ("# only comments\n\n", "holds no proteins"),
    ],
)
def test_read_protein_qs_errors(tmp_path, text, message):
    path = tmp_path / "bad.train"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_protein_qs(path)


# ---------------------------------------------------------------- CoNLL

CONLL_FILE = (
    "-DOCSTART- -X- -X- O\n"
    "\n"
    "SOCCER NN I-NP O\n"
    "JAPAN NNP I-NP I-LOC  \n"  # trailing spaces
    "\n"
    "\n"  # two blank lines: still one boundary
    "Nadim NNP I-NP I-PER\n"
    "Ladki NNP I-NP I-PER\n"
    "-DOCSTART- -X- O O\n"
    "\n"
    "Atlanta NNP I-NP B-MISC\n"
    "\n"
)


def test_read_conll(tmp_path):
    path = tmp_path / "eng.tiny"
    path.write_text(CONLL_FILE)
    df = read_conll(path)
    assert list(df.columns) == ["sentence", "token", "pos", "chunk", "tag"]
    assert df["sentence"].dtype == np.int64
    assert df["sentence"].tolist() == [0, 0, 1, 1, 2]
    assert df["token"].tolist() == ["SOCCER", "JAPAN", "Nadim", "Ladki", "Atlanta"]
    assert df["tag"].tolist() == ["O", "I-LOC", "I-PER", "I-PER", "B-MISC"]
    assert np.bincount(df["sentence"]).tolist() == [2, 2, 1]


def test_read_conll_documents(tmp_path):
    path = tmp_path / "eng.tiny"
    path.write_text(CONLL_FILE)
    df = read_conll(path, documents=True, line_numbers=True)
    assert list(df.columns) == ["sentence", "document", "token", "pos", "chunk", "tag", "line"]
    assert df["document"].dtype == np.int64 and df["document"].tolist() == [0, 0, 0, 0, 1]
    path.write_text("a NN I-NP O\n\nb NN I-NP O\n")  # no -DOCSTART-: one document
    assert read_conll(path, documents=True)["document"].tolist() == [0, 0]


def test_read_conll_custom_columns_and_empty(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("a\tB-X\nb\tI-X\n\nc\tO")  # tabs, no final newline
    df = read_conll(path, columns=["word", "label"])
    assert df.to_dict("list") == {"sentence": [0, 0, 1], "word": ["a", "b", "c"],
                                  "label": ["B-X", "I-X", "O"]}
    path.write_text("\n\n")
    empty = read_conll(path)
    assert len(empty) == 0 and list(empty.columns) == ["sentence", "token", "pos", "chunk", "tag"]


def test_read_conll_errors(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a NN I-NP O\n\nb NN O\n")
    with pytest.raises(ValueError, match=r"line 3: expected 4 columns .* but found 3"):
        read_conll(path)
    with pytest.raises(ValueError, match="distinct names other than 'sentence'"):
        read_conll(path, columns=("sentence", "tag"))
    with pytest.raises(ValueError, match="'document'"):
        read_conll(path, columns=("document", "tag"))
    with pytest.raises(ValueError, match="distinct"):
        read_conll(path, columns=("tag", "tag"))


# ---------------------------------------------------------------- tag schemes


@pytest.mark.parametrize(
    ("tags", "source", "target", "expected"),
    [
        ("I-PER I-PER B-PER O I-LOC", "iob1", "iob2", "B-PER I-PER B-PER O B-LOC"),
        ("I-PER I-PER B-PER O I-LOC", "iob1", "bioes", "B-PER E-PER S-PER O S-LOC"),
        ("B-PER I-PER B-PER O B-LOC I-LOC", "iob2", "iob1", "I-PER I-PER B-PER O I-LOC I-LOC"),
        ("B-PER E-PER S-PER S-LOC", "bioes", "iob1", "I-PER I-PER B-PER I-LOC"),
        # A stray IOB1 B- after O (as in eng.train) is a chunk start like I-.
        ("O B-MISC I-MISC", "iob1", "iob2", "O B-MISC I-MISC"),
        # Ill-formed IOB2 is put into canonical form.
        ("I-PER O I-LOC B-LOC", "iob2", "iob2", "B-PER O B-LOC B-LOC"),
        ("", "iob2", "bioes", ""),
    ],
)
def test_convert_tags_examples(tags, source, target, expected):
    out = convert_tags(tags.split(), source, target)
    assert isinstance(out, np.ndarray) and out.tolist() == expected.split()


def test_convert_tags_flat_with_lengths_and_series():
    tags = pd.Series(["I-PER", "I-PER", "I-PER", "O"])
    # In one sentence these are one chunk; split 2 + 2 they are two, and IOB1
    # never opens a sentence with B-.
    assert convert_tags(tags, "iob1", "iob2").tolist() == ["B-PER", "I-PER", "I-PER", "O"]
    split = convert_tags(tags, "iob1", "iob2", lengths=[2, 2])
    assert split.tolist() == ["B-PER", "I-PER", "B-PER", "O"]
    iob2 = ["B-PER", "B-PER", "B-PER", "O"]
    iob1 = convert_tags(iob2, "iob2", "iob1", lengths=[1, 3])
    assert iob1.tolist() == ["I-PER", "I-PER", "B-PER", "O"]


def test_convert_tags_errors():
    with pytest.raises(ValueError, match="unknown target scheme 'bilou'"):
        convert_tags(["O"], "iob1", "bilou")
    with pytest.raises(ValueError, match="'S-PER' at position 0 is not a iob1 tag"):
        convert_tags(["S-PER"], "iob1", "iob2")
    with pytest.raises(ValueError, match="sum to 3 but there are 2"):
        convert_tags(["O", "O"], "iob1", "iob2", lengths=[3])


@st.composite
def chunked_sentences(draw):
    """Sentences with random non-overlapping typed chunks, as (lengths, spans)."""
    lengths = draw(st.lists(st.integers(1, 7), min_size=1, max_size=6))
    spans, offset = [], 0
    for n in lengths:
        t = 0
        while t < n:
            if draw(st.booleans()):
                size = draw(st.integers(1, n - t))
                spans.append((draw(st.sampled_from(["PER", "LOC"])), offset + t, offset + t + size))
                t += size
            else:
                t += 1
        offset += n
    return lengths, spans


def encode(lengths, spans, scheme):
    """Direct, loop-by-loop encoding of chunks in a scheme (the test's oracle)."""
    tags = ["O"] * sum(lengths)
    starts = set(np.cumsum([0] + list(lengths[:-1])).tolist())
    previous = None
    for typ, b, e in spans:
        for t in range(b, e):
            tags[t] = "I-" + typ
        if scheme == "iob2" or (scheme == "iob1" and previous == (typ, b) and b not in starts):
            tags[b] = "B-" + typ
        if scheme == "bioes":
            tags[b] = "B-" + typ
            tags[e - 1] = ("S-" if e - b == 1 else "E-") + typ
        previous = (typ, e)
    return tags


@settings(max_examples=60, deadline=None)
@given(chunked_sentences(), st.sampled_from(["iob1", "iob2", "bioes"]),
       st.sampled_from(["iob1", "iob2", "bioes"]))
def test_convert_tags_round_trips(sentences, source, target):
    lengths, spans = sentences
    tags = encode(lengths, spans, source)
    assert extract_spans(tags, source, lengths) == spans
    assert convert_tags(tags, source, target, lengths).tolist() == encode(lengths, spans, target)
