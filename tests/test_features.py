"""Sliding windows and missing values against naive loops; the decode option of predict."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.features import MissingValues, SlidingWindow

# ---------------------------------------------------------------- sliding windows


def naive_window(X, lengths, w, fill):
    """One row at a time: position t + s of the same sequence, else fill."""
    n, d = X.shape
    out = np.full((n, (2 * w + 1) * d), fill, dtype=np.float64)
    start = 0
    for length in lengths:
        for t in range(length):
            for j, s in enumerate(range(-w, w + 1)):
                if 0 <= t + s < length:
                    for c in range(d):
                        out[start + t, j * d + c] = X[start + t + s, c]
        start += length
    return out


@st.composite
def windowed_problems(draw):
    lengths = draw(st.lists(st.integers(1, 7), min_size=1, max_size=5))
    d = draw(st.integers(1, 3))
    w = draw(st.integers(0, 4))
    seed = draw(st.integers(0, 2**16))
    X = np.random.default_rng(seed).integers(-3, 4, size=(sum(lengths), d)).astype(np.float64)
    return X, np.array(lengths), w


@settings(max_examples=60, deadline=None)
@given(windowed_problems(), st.sampled_from([np.nan, 0.0, -1.5]))
def test_window_matches_naive_loop(problem, fill):
    X, lengths, w = problem
    expected = naive_window(X, lengths, w, fill)
    out = SlidingWindow(half_width=w, fill=fill).fit_transform(X, lengths=lengths)
    np.testing.assert_array_equal(out, expected)  # NaN == NaN here
    groups = np.repeat(np.arange(lengths.size)[::-1], lengths)  # unsorted ids are fine
    np.testing.assert_array_equal(
        SlidingWindow(half_width=w, fill=fill).fit(X).transform(X, groups=groups), expected
    )


@settings(max_examples=30, deadline=None)
@given(windowed_problems())
def test_sparse_window_stays_sparse_and_matches(problem):
    X, lengths, w = problem
    X[X < 1] = 0.0
    out = SlidingWindow(half_width=w, fill=0).fit_transform(sp.csr_matrix(X), lengths=lengths)
    assert sp.issparse(out) and out.format == "csr"
    np.testing.assert_array_equal(out.toarray(), naive_window(X, lengths, w, 0.0))
    assert out.nnz == np.count_nonzero(naive_window(X, lengths, w, 0.0))


def test_sparse_input_formats_and_fill_rule():
    X = sp.random(9, 4, density=0.4, format="csc", random_state=0)
    dense = SlidingWindow(2, fill=0).fit_transform(X.toarray(), lengths=[4, 5])
    for fmt in (X, X.tocoo(), sp.csr_array(X)):
        out = SlidingWindow(2, fill=0).fit_transform(fmt, lengths=[4, 5])
        np.testing.assert_array_equal(out.toarray(), dense)
    with pytest.raises(ValueError, match="fill=0"):
        SlidingWindow(2).fit(X)
    with pytest.raises(ValueError, match="fill=0"):
        SlidingWindow(2, fill=0).fit(X.toarray()).set_params(fill=1.0).transform(X, lengths=[9])


def test_feature_names_by_offset():
    window = SlidingWindow(half_width=1).fit(np.zeros((2, 4)))
    names = window.get_feature_names_out()
    assert list(names[:4]) == ["x0(t-1)", "x1(t-1)", "x2(t-1)", "x3(t-1)"]
    assert names[4 + 3] == "x3(t)" and names[-1] == "x3(t+1)"
    assert list(window.get_feature_names_out(["a", "b", "c", "d"])[4:6]) == ["a(t)", "b(t)"]
    with pytest.raises(ValueError, match="4 features"):
        window.get_feature_names_out(["a"])


def test_pandas_keeps_names_index_and_dtypes():
    df = pd.DataFrame(
        {
            "hydro": [1.5, 2.0, 3.0, 4.0],
            "charge": [1, 0, -1, 2],
            "aromatic": [True, False, True, True],
        },
        index=[10, 11, 12, 13],
    )
    out = SlidingWindow(half_width=1).fit_transform(df, lengths=[2, 2])
    assert isinstance(out, pd.DataFrame)
    assert list(out.index) == [10, 11, 12, 13]
    assert list(out.columns[3:6]) == ["hydro(t)", "charge(t)", "aromatic(t)"]
    expected = naive_window(df.to_numpy(dtype=np.float64), [2, 2], 1, np.nan)
    np.testing.assert_array_equal(out.to_numpy(dtype=np.float64), expected)
    # Integer data with a fill it can hold keeps its dtype; NaN makes it float.
    ints = np.arange(6).reshape(3, 2)
    assert SlidingWindow(1, fill=0).fit_transform(ints, lengths=[3]).dtype == ints.dtype
    assert SlidingWindow(1).fit_transform(ints, lengths=[3]).dtype == np.float64
    f32 = ints.astype(np.float32)
    assert SlidingWindow(1).fit_transform(f32, lengths=[3]).dtype == np.float32
    with pytest.raises(ValueError, match="columns"):
        SlidingWindow(1).fit(df).transform(df[["charge", "hydro", "aromatic"]], lengths=[4])
    with pytest.raises(ValueError, match="not numeric"):
        SlidingWindow(1).fit_transform(df.assign(name="x"), lengths=[4])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "sequence boundaries are required"),
        ({"lengths": [2, 2]}, "sum to 4 but there are 5 rows"),
        ({"lengths": [5, 0]}, "at least one row"),
        ({"groups": [0, 0, 1, 1, 0]}, "contiguous"),
        ({"groups": [0, 0], "lengths": [5]}, "not both"),
    ],
)
def test_window_boundary_errors(kwargs, match):
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match=match):
        SlidingWindow(1).fit(X).transform(X, **kwargs)


def test_window_parameter_and_shape_errors():
    X = np.zeros((5, 2))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="half_width"):
            SlidingWindow(half_width=bad).fit(X)
    with pytest.raises(ValueError, match="fill"):
        SlidingWindow(fill="pad").fit(X)
    with pytest.raises(ValueError, match="fitted with 2"):
        SlidingWindow(1).fit(X).transform(np.zeros((5, 3)), lengths=[5])
    with pytest.raises(ValueError, match="2-D"):
        SlidingWindow(1).fit(np.zeros(5))
    with pytest.raises(ValueError, match="not fitted"):
        SlidingWindow(1).transform(X, lengths=[5])


# ---------------------------------------------------------------- missing values

ONE_HOT = {"residue": [0, 1, 2]}


def one_hot(codes, k=3):
    """Rows of a one-hot block, all-NaN where the code is -1, plus a numeric column."""
    codes = np.asarray(codes)
    X = np.zeros((codes.size, k + 1))
    X[np.arange(codes.size), codes] = 1.0
    X[codes < 0, :k] = np.nan
    X[:, k] = np.arange(codes.size) % 2
    return X


def test_native_passes_data_through():
    X = one_hot([0, -1, 2])
    out = MissingValues("native", groups_of_columns=ONE_HOT).fit(X).transform(X)
    assert out is X
    S = sp.csr_matrix(np.eye(3))
    assert MissingValues("native").fit(S).transform(S) is S


def test_impute_one_hot_block_with_training_mode_only():
    train = one_hot([2, 2, 1, -1, 2, 0, 1])  # category 2 is the most frequent
    test = one_hot([1, 1, 1, -1, -1, 0])  # test's own mode (1) must not be used
    imputer = MissingValues("impute", groups_of_columns=ONE_HOT).fit(train)
    out = imputer.transform(test)
    np.testing.assert_array_equal(out[3:5, :3], [[0, 0, 1], [0, 0, 1]])
    np.testing.assert_array_equal(out[[0, 1, 2, 5]], test[[0, 1, 2, 5]])
    assert not np.isnan(out).any()
    names, cols = zip(*imputer.variables_)
    assert names == ("residue", "x3") and cols[0].tolist() == [0, 1, 2]
    # Train stays unchanged by later transforms of other data.
    np.testing.assert_array_equal(imputer.statistics_[0], [0, 0, 1])


def test_impute_single_columns_against_naive_mode():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 4, size=(60, 3)).astype(float)
    train[rng.random(train.shape) < 0.3] = np.nan
    test = rng.integers(0, 4, size=(20, 3)).astype(float)
    test[rng.random(test.shape) < 0.3] = np.nan
    out = MissingValues("impute").fit(train).transform(test)
    for c in range(3):
        observed = train[~np.isnan(train[:, c]), c]
        values, counts = np.unique(observed, return_counts=True)
        mode = values[np.argmax(counts)]
        np.testing.assert_array_equal(out[:, c], np.where(np.isnan(test[:, c]), mode, test[:, c]))


def test_indicator_adds_one_column_per_variable():
    X = one_hot([0, -1, 2])
    X[2, 3] = np.nan
    ind = MissingValues("indicator", groups_of_columns=ONE_HOT, fill_value=0.0).fit(X)
    out = ind.transform(X)
    assert out.shape == (3, 6)
    np.testing.assert_array_equal(out[:, :4], np.nan_to_num(X, nan=0.0))
    np.testing.assert_array_equal(out[:, 4:], [[0, 0], [1, 0], [0, 1]])
    assert list(ind.get_feature_names_out()[-2:]) == ["residue_missing", "x3_missing"]


def test_dataframe_groups_by_name():
    df = pd.DataFrame(one_hot([0, -1, 1, 1]), columns=["A", "C", "D", "pos"], index=list("wxyz"))
    imputer = MissingValues("impute", groups_of_columns=[["A", "C", "D"]]).fit(df)
    out = imputer.transform(df)
    assert isinstance(out, pd.DataFrame) and list(out.index) == list("wxyz")
    assert out.loc["x", ["A", "C", "D"]].tolist() == [0.0, 1.0, 0.0]
    ind = MissingValues("indicator", groups_of_columns={"aa": ["A", "C", "D"]}).fit(df)
    assert list(ind.transform(df).columns) == ["A", "C", "D", "pos", "aa_missing", "pos_missing"]


def test_missing_values_then_window():
    """The intended order: handle missing residues, then window them."""
    X = one_hot([0, -1, 2, 1, -1])
    imputed = MissingValues("indicator", groups_of_columns=ONE_HOT).fit_transform(X)
    windowed = SlidingWindow(1, fill=0).fit_transform(imputed, lengths=[2, 3])
    np.testing.assert_array_equal(windowed, naive_window(imputed, [2, 3], 1, 0.0))


@pytest.mark.parametrize(
    ("kwargs", "X", "match"),
    [
        ({"strategy": "mean"}, np.zeros((2, 3)), "strategy must be one of"),
        ({"strategy": "impute", "groups_of_columns": [[0, 1], [1, 2]]}, np.zeros((2, 3)),
         "appears twice"),
        ({"strategy": "impute", "groups_of_columns": [[0, 5]]}, np.zeros((2, 3)), "outside 0..2"),
        ({"strategy": "impute", "groups_of_columns": [["Q"]]}, np.zeros((2, 3)), "'Q'"),
        ({"strategy": "impute", "groups_of_columns": [[]]}, np.zeros((2, 3)), "at least one"),
        ({"strategy": "impute"}, np.array([[np.nan, 1.0], [np.nan, 2.0]]), "every training row"),
        ({"strategy": "indicator", "fill_value": np.nan}, np.zeros((2, 3)), "fill_value"),
        ({"strategy": "impute"}, sp.csr_matrix(np.eye(3)), "dense"),
    ],
)
def test_missing_values_errors(kwargs, X, match):
    with pytest.raises(ValueError, match=match):
        MissingValues(**kwargs).fit(X)


# ---------------------------------------------------------------- decode option of predict


@pytest.fixture(scope="module")
def booster():
    X, y, lengths = make_hmm_sequences(
        n_sequences=60, length=(5, 20), stay=0.9, emission=0.5, random_state=2
    )
    obj = sb.crf_objective(3)
    model = xgb.train(
        sb.xgb_params(3, max_depth=2, eta=1.0),
        xgb.DMatrix(X, label=y, group=lengths),
        num_boost_round=5,
        obj=obj,
        callbacks=[obj.callback()],
    )
    return model, X, lengths


def test_decode_marginal_is_argmax_of_marginals(booster):
    model, X, lengths = booster
    marginals = sb.predict_marginals(model, X, lengths=lengths)
    by_marginal = sb.predict(model, X, lengths=lengths, decode="marginal")
    assert by_marginal.dtype == np.int64
    np.testing.assert_array_equal(by_marginal, marginals.argmax(axis=1))
    np.testing.assert_array_equal(
        sb.predict(model, X, lengths=lengths, decode="viterbi"),
        sb.predict(model, X, lengths=lengths),
    )


def test_decode_rejects_unknown_value(booster):
    model, X, lengths = booster
    with pytest.raises(ValueError, match="decode must be one of"):
        sb.predict(model, X, lengths=lengths, decode="posterior")


@pytest.mark.parametrize("engine", ["XGBCRFClassifier", "LGBMCRFClassifier"])
def test_windowed_dataframe_names_are_accepted_by_the_engines(engine):
    X, y, lengths = make_hmm_sequences(n_sequences=20, length=(3, 8), random_state=0)
    frame = pd.DataFrame(X[:, :3], columns=["a", "b", "c"])
    windowed = SlidingWindow(half_width=1).fit_transform(frame, lengths=lengths)
    clf = getattr(sb, engine)(n_estimators=2, n_jobs=1).fit(windowed, y, lengths=lengths)
    assert clf.predict(windowed, lengths=lengths).shape == y.shape
