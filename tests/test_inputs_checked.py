"""Every estimator parameter and data problem gets a ValueError naming it (issue 28)."""

import warnings
from numbers import Integral

import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.estimators.checks import Interval, Options, check_params

lgb = pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def data():
    X, y, L = make_hmm_sequences(30, length=(3, 8), random_state=0)
    return X, y, L


@pytest.fixture(scope="module")
def fitted(data):
    X, y, L = data
    names = np.array(["a", "b", "c"], dtype=object)[y]
    return {
        "xgb": sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1).fit(X, names, lengths=L),
        "lgb": sb.LGBMCRFClassifier(n_estimators=2, num_leaves=4, min_child_samples=2,
                                    n_jobs=1).fit(X, y, lengths=L),
        "edge": sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1,
                                    transitions_from="input").fit(X, y, lengths=L),
    }  # fmt: skip


BAD_PARAMS = [
    ("n_jobs", "two"), ("n_jobs", 1.5), ("n_estimators", 0), ("n_estimators", 2.5),
    ("n_estimators", True), ("n_estimators", "10"), ("learning_rate", float("nan")),
    ("learning_rate", 0), ("learning_rate", -0.1), ("learning_rate", float("inf")),
    ("learning_rate", "0.1"), ("max_depth", -2), ("max_depth", None),
    ("early_stopping_rounds", 0), ("early_stopping_rounds", 1.0), ("sequence_column", 3),
    ("callbacks", "print"),
]  # fmt: skip


@pytest.mark.parametrize("cls", [sb.XGBCRFClassifier, sb.LGBMCRFClassifier, sb.TreeCRFClassifier])
@pytest.mark.parametrize("name,value", BAD_PARAMS)
def test_bad_estimator_parameters_are_named_at_fit(data, cls, name, value, monkeypatch):
    X, y, L = data
    if cls is sb.LGBMCRFClassifier and name == "max_depth" and value == -2:
        value = -5  # -1 is LightGBM's "no limit"
    est = cls(**{"n_estimators": 2, name: value})

    def never(*args, **kwargs):
        raise AssertionError("trained despite a bad parameter")

    monkeypatch.setattr(xgb, "train", never)
    monkeypatch.setattr(lgb, "train", never)
    with pytest.raises(ValueError, match=f"parameter {name} must be .*; got {value!r:.20}"):
        if cls is sb.TreeCRFClassifier:
            est.fit(X, y, parents=np.where(np.arange(len(y)) == 0, -1, np.arange(len(y)) - 1),
                    lengths=[len(y)])  # fmt: skip
        else:
            est.fit(X, y, lengths=L)


def test_valid_parameters_of_numpy_types_pass(data):
    X, y, L = data
    est = sb.XGBCRFClassifier(n_estimators=np.int64(2), learning_rate=np.float32(0.3),
                              max_depth=np.int32(2), n_jobs=np.int64(1))  # fmt: skip
    assert est.fit(X, y, lengths=L).best_iteration_ == 1
    lgbm = sb.LGBMCRFClassifier(n_estimators=2, max_depth=-1, num_leaves=2, min_child_samples=2,
                                n_jobs=1)  # fmt: skip
    assert lgbm.fit(X, y, lengths=L).best_iteration_ == 2  # LightGBM counts from 1
    with pytest.raises(ValueError, match="parameter num_leaves must be an int >= 2; got 1"):
        sb.LGBMCRFClassifier(num_leaves=1).fit(X, y, lengths=L)


def test_check_params_rules():
    class Est:
        def get_params(self, deep=False):
            return {"a": 3, "b": "x", "c": None}

    check_params(Est(), {"a": [Interval(Integral, 0, 3)], "b": [Options("x", "y")], "c": [None]})
    with pytest.raises(ValueError, match=r"parameter a must be an int >= 0 and < 3; got 3"):
        check_params(Est(), {"a": [Interval(Integral, 0, 3, closed="left")]})
    with pytest.raises(ValueError, match="parameter b must be one of 'y'"):
        check_params(Est(), {"b": [Options("y")]})


def test_bad_group_ids_are_refused(data, fitted):
    X, y, L = data
    clf = fitted["xgb"]
    ids = np.repeat(np.arange(len(L)), L)
    nan_ids = ids.astype(float)
    nan_ids[L[0]] = np.nan  # was: its sequence silently split in two
    with pytest.raises(ValueError, match="groups has a missing sequence id \\(nan\\) at row"):
        clf.predict(X, groups=nan_ids)
    none_ids = ids.astype(object)
    none_ids[3] = None
    with pytest.raises(ValueError, match="missing sequence id \\(None\\) at row 3"):
        clf.predict(X, groups=none_ids)
    mixed = ids.astype(object)
    mixed[: L[0]] = "first"
    with pytest.raises(ValueError, match="groups mixes sequence id types"):
        sb.XGBCRFClassifier(n_estimators=1).fit(X, y, groups=mixed)
    with pytest.raises(ValueError, match="missing sequence id"):
        sb.predict(clf.booster_, X, groups=nan_ids)
    as_str = ids.astype(str).astype(object)  # one type: accepted
    np.testing.assert_array_equal(clf.predict(X, groups=as_str), clf.predict(X, lengths=L))


def test_bad_labels_are_refused(data, fitted):
    X, y, L = data
    mixed = np.array(["a", "b", "c"], dtype=object)[y]
    mixed[5] = 3
    with pytest.raises(ValueError, match="y mixes label types: .* row 5 holds 3"):
        sb.XGBCRFClassifier(n_estimators=1).fit(X, mixed, lengths=L)
    clf = fitted["xgb"]
    names = np.array(["a", "b", "c"], dtype=object)[y]
    for unseen in ["zzz", 7, 1.5, None]:  # the str used to be an AttributeError
        labels = names.copy()
        labels[4] = unseen
        with pytest.raises(ValueError, match=f"not seen in fit, e.g. {unseen!r}; .*row 4"):
            clf.predict_log_likelihood(X, labels, lengths=L)
    np.testing.assert_array_equal(
        clf.predict_log_likelihood(X, names.astype(str), lengths=L),
        clf.predict_log_likelihood(X, names, lengths=L),
    )


@pytest.mark.parametrize("kind", ["xgb", "lgb", "edge"])
def test_another_feature_count_is_refused_everywhere(data, fitted, kind):
    X, y, L = data
    booster = fitted[kind].booster_
    for bad in (X[:, :2], np.hstack([X, X])):
        calls = [
            lambda: sb.predict(booster, bad, lengths=L),
            lambda: sb.predict_marginals(booster, bad, lengths=L),
            lambda: sb.sequence_log_likelihood(booster, bad, y, lengths=L),
        ]
        if kind == "xgb":  # a DMatrix with the boundaries (the example)
            calls.append(lambda: sb.predict(booster, xgb.DMatrix(bad, group=L)))
        for call in calls:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pytest.raises(ValueError, match=f"has {bad.shape[1]} features but the "
                                                     "booster was trained on 24"):  # fmt: skip
                    call()
    assert sb.predict(booster, X, lengths=L).shape == y.shape
