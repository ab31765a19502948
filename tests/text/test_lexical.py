"""TokenFeatures against hand-made expectations and a naive per-token oracle."""

import pickle
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone

from structboost.text.lexical import (
    KINDS,
    OPTIONAL_KINDS,
    TokenFeatures,
    token_attributes,
    word_shape,
)


@pytest.fixture
def frame():
    """Two sentences in read_conll's layout."""
    return pd.DataFrame(
        {
            "sentence": [0, 0, 0, 1, 1],
            "token": ["John", "lives", "in", "New-York", "1996"],
            "pos": ["NNP", "VBZ", "IN", "NNP", "CD"],
        }
    )


def row_names(tf, X, row):
    return set(tf.get_feature_names_out()[X[row].indices].tolist())


def naive_rows(tokens, lengths, w, kinds=("word", "shape", "prefix", "suffix", "flags"),
               affixes=(1, 2, 3), extra=()):
    """Feature names of every token, one window position at a time."""
    rows = []
    start = 0
    for length in lengths:
        for t in range(length):
            names = set()
            for shift in range(-w, w + 1):
                label = "0" if shift == 0 else f"{shift:+d}"
                src = t + shift
                if src < 0:
                    names.add(f"w[{label}]=<S>")
                elif src >= length:
                    names.add(f"w[{label}]=</S>")
                else:
                    for kind, value in token_attributes(tokens[start + src], kinds, affixes):
                        names.add(f"{kind}[{label}]={value}")
                    for column, values in extra:
                        names.add(f"{column}[{label}]={values[start + src]}")
            rows.append(names)
        start += length
    return rows


def test_word_shape_and_attributes():
    assert word_shape("Washington") == "Xxxxx"
    assert word_shape("1996") == "dddd"
    assert word_shape("U.S.") == "X.X."
    assert word_shape("McDonald's") == "XxXxxxx'x"
    assert word_shape("") == ""
    assert token_attributes("New-York", affix_lengths=(1, 2)) == [
        ("w", "new-york"),
        ("shape", "Xxx-Xxxx"),
        ("pre1", "n"),
        ("pre2", "ne"),
        ("suf1", "k"),
        ("suf2", "rk"),
        ("flag", "title"),
        ("flag", "hyphen"),
    ]
    assert token_attributes("1996", kinds=("flags",)) == [("flag", "digit")]
    assert token_attributes("A4", kinds=("flags",)) == [
        ("flag", "title"), ("flag", "upper"), ("flag", "has_digit")
    ]
    assert token_attributes(",", kinds=("flags",)) == [("flag", "punct")]
    # affixes only for words at least that long
    assert token_attributes("in", kinds=("prefix",)) == [("pre1", "i"), ("pre2", "in")]


def test_hand_made_rows_respect_sentence_boundaries(frame):
    tf = TokenFeatures(half_width=1, affix_lengths=(1, 2), extra_columns=("pos",))
    X = tf.fit_transform(frame)
    assert row_names(tf, X, 0) == {
        "w[-1]=<S>",
        "w[0]=john", "shape[0]=Xxxx", "pre1[0]=j", "pre2[0]=jo", "suf1[0]=n", "suf2[0]=hn",
        "flag[0]=title", "pos[0]=NNP",
        "w[+1]=lives", "shape[+1]=xxxx", "pre1[+1]=l", "pre2[+1]=li", "suf1[+1]=s",
        "suf2[+1]=es", "flag[+1]=lower", "pos[+1]=VBZ",
    }
    # "in" ends sentence 0: its right neighbour is the marker, not "New-York"
    last = row_names(tf, X, 2)
    assert "w[+1]=</S>" in last and not any("new" in name for name in last)
    first = row_names(tf, X, 3)
    assert "w[-1]=<S>" in first and "w[-1]=in" not in first


def test_sparse_output_layout(frame):
    tf = TokenFeatures(extra_columns=("pos",))
    X = tf.fit_transform(frame)
    names = tf.get_feature_names_out()
    assert sp.isspmatrix_csr(X) and X.dtype == np.float32
    assert X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    assert X.shape == (5, tf.n_features_out_) == (5, names.size)
    assert X.has_sorted_indices and np.all(X.data == 1.0)
    assert len(set(names.tolist())) == names.size
    # every column is used by some training token at min_count=1
    assert np.all(np.diff(X.tocsc().indptr) > 0)
    np.testing.assert_array_equal(tf.transform(frame).toarray(), X.toarray())


@st.composite
def corpora(draw):
    words = ["a", "Ab", "abc", "ABC", "x-1", "42", ".", "Zed", "zed"]
    lengths = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    picks = draw(st.lists(st.sampled_from(words), min_size=sum(lengths), max_size=sum(lengths)))
    tags = draw(st.lists(st.sampled_from(["N", "V"]), min_size=sum(lengths), max_size=sum(lengths)))
    return picks, np.array(lengths), tags


@settings(max_examples=30, deadline=None)
@given(corpora(), corpora(), st.integers(0, 3), st.integers(1, 3))
def test_matches_naive_oracle_with_threshold_and_unseen(train, test, w, min_count):
    tokens, lengths, tags = train
    df = pd.DataFrame({"token": tokens, "tag": tags})
    tf = TokenFeatures(half_width=w, extra_columns=("tag",), min_count=min_count)
    X = tf.fit_transform(df, lengths=lengths)
    expected = naive_rows(tokens, lengths, w, extra=[("tag", tags)])
    counts = Counter(name for names in expected for name in names)
    vocab = {name for name, c in counts.items() if c >= min_count}
    assert set(tf.get_feature_names_out().tolist()) == vocab
    for row, names in enumerate(expected):
        assert row_names(tf, X, row) == names & vocab
    # transform: unseen features are ignored, known ones kept
    t_tokens, t_lengths, t_tags = test
    Xt = tf.transform(pd.DataFrame({"token": t_tokens, "tag": t_tags}), lengths=t_lengths)
    assert Xt.shape == (len(t_tokens), X.shape[1])
    for row, names in enumerate(naive_rows(t_tokens, t_lengths, w, extra=[("tag", t_tags)])):
        assert row_names(tf, Xt, row) == names & vocab


def test_min_count_drops_rare_features_and_unknown_words_keep_their_shape(frame):
    tf = TokenFeatures(half_width=0, kinds=("word", "shape"), min_count=2)
    X = tf.fit_transform(pd.DataFrame({"token": ["the", "The", "cat", "the"], "sentence": 0}))
    # "the" fires 3 times, shape "xxx" 3 times, shape "Xxx" once, "cat" once
    assert tf.get_feature_names_out().tolist() == ["shape[0]=xxx", "w[0]=the"]
    assert X.toarray().tolist() == [[1, 1], [0, 1], [1, 0], [1, 1]]
    unseen = tf.transform(pd.DataFrame({"token": ["dog", "Dog"], "sentence": 0}))
    assert unseen.toarray().tolist() == [[1, 0], [0, 0]]


def test_flat_tokens_nested_lists_and_dataframe_agree(frame):
    tf = TokenFeatures(half_width=1)
    by_frame = tf.fit_transform(frame)
    tokens = frame["token"].tolist()
    expected = by_frame.toarray()
    np.testing.assert_array_equal(tf.transform(tokens, lengths=[3, 2]).toarray(), expected)
    np.testing.assert_array_equal(
        tf.transform(tokens, groups=frame["sentence"]).toarray(), by_frame.toarray()
    )
    nested = [tokens[:3], tokens[3:]]
    np.testing.assert_array_equal(tf.transform(nested).toarray(), by_frame.toarray())
    np.testing.assert_array_equal(TokenFeatures(half_width=1).fit_transform(nested).toarray(),
                                  by_frame.toarray())


def test_missing_extra_values_give_no_feature():
    df = pd.DataFrame({"token": ["a", "b"], "pos": ["DT", None], "sentence": 0})
    tf = TokenFeatures(half_width=0, kinds=(), extra_columns=("pos",))
    assert tf.fit(df).get_feature_names_out().tolist() == ["pos[0]=DT"]
    assert tf.transform(df).toarray().tolist() == [[1], [0]]


def test_sklearn_conventions(frame):
    tf = TokenFeatures(half_width=1, min_count=2, extra_columns=("pos",))
    assert tf.get_params()["min_count"] == 2
    copy = clone(tf).set_params(half_width=0)
    assert copy.half_width == 0 and tf.half_width == 1
    fitted = pickle.loads(pickle.dumps(tf.fit(frame)))
    np.testing.assert_array_equal(fitted.transform(frame).toarray(), tf.transform(frame).toarray())


@pytest.mark.parametrize(
    "kwargs, call, match",
    [
        ({}, lambda tf, df: tf.fit(df.drop(columns="token")), "lacks the columns"),
        ({"extra_columns": ("chunk",)}, lambda tf, df: tf.fit(df), r"lacks the columns \['chunk"),
        ({}, lambda tf, df: tf.fit(df.drop(columns="sentence")), "no sentence column"),
        ({}, lambda tf, df: tf.fit(df, lengths=[3, 3]), "sum to 6 but there are 5 rows"),
        ({}, lambda tf, df: tf.fit(df["token"].tolist()), "sequence boundaries are required"),
        ({"extra_columns": ("pos",)}, lambda tf, df: tf.fit(["a"], lengths=[1]), "needs X as"),
        ({}, lambda tf, df: tf.fit([["a"], ["b"]], lengths=[1, 1]), "list of sentences"),
        ({}, lambda tf, df: tf.fit(["a", 3], lengths=[2]), "must be a string"),
        ({}, lambda tf, df: tf.fit([], lengths=[]), "no tokens"),
        ({"half_width": -1}, lambda tf, df: tf.fit(df), "half_width must be an integer"),
        ({"min_count": 0}, lambda tf, df: tf.fit(df), "min_count must be an integer"),
        ({"kinds": ("word", "lemma")}, lambda tf, df: tf.fit(df), "kinds must be distinct"),
        ({"affix_lengths": (2, 2)}, lambda tf, df: tf.fit(df), "affix_lengths must be"),
        ({"extra_columns": "pos"}, lambda tf, df: tf.fit(df), "extra_columns must be a sequence"),
        ({}, lambda tf, df: tf.fit(df).set_params(half_width=1).transform(df), "refit"),
    ],
)
def test_bad_input_is_a_clear_value_error(frame, kwargs, call, match):
    with pytest.raises(ValueError, match=match):
        call(TokenFeatures(**kwargs), frame)


def test_optional_token_kinds():
    # the document kind gives nothing from the string alone; defaults unchanged by it
    assert token_attributes("Paris", kinds=("document",)) == []
    assert TokenFeatures().kinds == KINDS and not set(KINDS) & set(OPTIONAL_KINDS)


def test_document_kind_reads_the_case_elsewhere_in_the_same_document():
    df = pd.DataFrame({
        "document": [0, 0, 0, 0, 0, 1, 1],
        "sentence": [0, 0, 1, 1, 1, 2, 2],
        "token": ["Bank", "CHIEF", "the", "Bank", "chief", "BANK", "Chief"],
    })
    tf = TokenFeatures(half_width=0, kinds=("document",))
    X = tf.fit_transform(df)
    docs = [{n.split("=")[1] for n in row_names(tf, X, r)} for r in range(len(df))]
    # "Bank" at 0 is sentence-initial: it does not make the other "Bank" title case
    assert docs == [{"title"}, {"lower"}, set(), set(), {"upper"}, set(), set()]
    # another document's tokens never count; the tokens alone, no labels
    alone = tf.transform(df[df["document"] == 1])
    assert alone.nnz == 0
    named = TokenFeatures(half_width=0, kinds=("document",), document_column="doc")
    renamed = named.fit_transform(df.rename(columns={"document": "doc"}))
    np.testing.assert_array_equal(renamed.toarray(), X.toarray())


def test_document_kind_round_trips_and_checks_its_input():
    df = pd.DataFrame({"document": [0, 0], "sentence": [0, 1], "token": ["x", "X"]})
    tf = TokenFeatures(half_width=1, kinds=("word", "document")).fit(df)
    again = TokenFeatures.from_document(tf.to_document())
    np.testing.assert_array_equal(again.transform(df).toarray(), tf.transform(df).toarray())
    with pytest.raises(ValueError, match=r"lacks the columns \['document'\]"):
        tf.transform(df.drop(columns="document"))
    with pytest.raises(ValueError, match="'document' kind needs X as a pandas DataFrame"):
        tf.transform([["x"], ["X"]])
    with pytest.raises(ValueError, match="missing values"):
        tf.transform(df.assign(document=[0, None]))
