"""The serving path of ``predict`` / ``predict_single`` against the general route.

The general route (``DictVectorizer.transform``, a ``DMatrix``, the engine's
``predict``) is reached by switching the serving path off; both must give the
same rows, margins and tags, and raise alike.
"""

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction import DictVectorizer

import structboost as sb
from structboost.features import canonical_sparse
from structboost.datasets import convert_tags
from structboost.engines.predict import crf_inputs
from structboost.estimators import chain_base
from structboost.estimators.serving import serving_path, vectorize

pytestmark = pytest.mark.usefixtures("single_threaded")

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "a", "Paris", "1996"]


def token(words, i, rng):
    """Feature dict of token ``i``: strings, bools, ints, floats, None."""
    w = words[i]
    d = {"bias": 1.0, "w": w, "suffix": w[-2:], "title": w.istitle(), "digit": w.isdigit(),
         "len": len(w), "noise": float(rng.normal()), 7: "int-key"}  # fmt: skip
    if i:
        d["-1:w"] = words[i - 1]
    else:
        d["BOS"] = True
    if rng.random() < 0.2:
        d["maybe"] = None
    return d


def corpus(n, seed, vocab=WORDS):
    rng = np.random.default_rng(seed)
    X, y = [], []
    for _ in range(n):
        words = [str(w) for w in rng.choice(vocab, int(rng.integers(1, 9)))]
        X.append([token(words, i, rng) for i in range(len(words))])
        y.append(["N" if w in ("cat", "dog", "mat", "Paris") else "V" if w in ("sat", "ran")
                  else "O" for w in words])  # fmt: skip
    return X, y


@pytest.fixture(scope="module")
def tagger():
    X, y = corpus(80, 0)
    return sb.XGBSequenceCRF(n_estimators=6, max_depth=3, n_jobs=1,
                             early_stopping=False).fit(X, y)  # fmt: skip


def unseen():
    """Sentences with unseen words and features, and every value type."""
    X, _ = corpus(40, 1, vocab=WORDS + ["zebra", "Oslo", "2024"])
    X[0][0]["never-seen"] = "x"
    X[1][0]["big"] = 10**40
    X[2][0]["numpy"] = np.str_("cat")
    return X


def test_vectorize_gives_the_rows_of_dictvectorizer(tagger):
    X = unseen()
    rows, lengths = vectorize(X, tagger.vectorizer_)
    # the rows the estimators read of DictVectorizer's (zeros absent)
    expected = canonical_sparse(tagger.vectorizer_.transform(d for seq in X for d in seq))
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(rows, name), getattr(expected, name))
    assert rows.shape == expected.shape and rows.dtype == expected.dtype
    np.testing.assert_array_equal(lengths, [len(seq) for seq in X])


def test_vectorize_keeps_the_separator_and_leaves_odd_input_to_dictvectorizer():
    vec = DictVectorizer(separator="|").fit([{"a": "x", "b": 2.0}])
    rows, _ = vectorize([[{"a": "x", "b": 2.0, "c": "y"}]], vec)
    np.testing.assert_array_equal(rows.toarray(), [[1.0, 2.0]])
    for odd in ([[{"a": ["x", "y"]}]], [[{"b": np.float64(2.0)}]], [[]], [[{"a": "x"}, 3]], [],
                [{"a": "x"}]):  # fmt: skip
        assert vectorize(odd, vec) == (None, None)


def test_serving_path_gives_the_margins_and_tags_of_the_general_route(tagger, monkeypatch):
    X = unseen()
    rows, lengths = vectorize(X, tagger.vectorizer_)
    path = serving_path(tagger, 1)
    margins, _, _, _ = crf_inputs(tagger.booster_, canonical_sparse(tagger.vectorizer_.transform(
        d for seq in X for d in seq)), lengths=lengths)  # fmt: skip
    np.testing.assert_array_equal(path.margins(tagger, rows), margins)
    fast = tagger.predict(X)
    fast_single = [tagger.predict_single(seq) for seq in X]
    fast_marginal = tagger.predict(X, decode="marginal")
    fast_marginals = tagger.predict_marginals(X)
    monkeypatch.setattr(chain_base, "serving_predict", lambda *args: None)
    monkeypatch.setattr(chain_base, "serving_marginals", lambda *args: None)
    assert fast == tagger.predict(X) == fast_single
    assert fast_marginal == tagger.predict(X, decode="marginal")
    for served, general in zip(fast_marginals, tagger.predict_marginals(X)):
        np.testing.assert_array_equal(served, general)


def raised(call):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    "X", [[[]], [[{"w": "cat"}], []], [{"w": "cat"}], [[{"w": ["a", 3]}]], [[{"w": {}}]]]
)
def test_bad_input_raises_as_on_the_general_route(tagger, X, monkeypatch):
    fast = raised(lambda: tagger.predict(X)), raised(lambda: tagger.predict_single([]))
    monkeypatch.setattr(chain_base, "serving_predict", lambda *args: None)
    assert fast == (raised(lambda: tagger.predict(X)), raised(lambda: tagger.predict_single([])))


def test_iterable_values_go_to_dictvectorizer_with_the_same_tags(tagger, monkeypatch):
    X = [[{**d, "tags": ["w=cat"]} for d in seq] for seq in unseen()]
    fast = tagger.predict(X)
    monkeypatch.setattr(chain_base, "serving_predict", lambda *args: None)
    assert fast == tagger.predict(X)


def test_array_input_and_constraints(monkeypatch):
    rng = np.random.default_rng(3)
    X = [rng.normal(size=(int(n), 4)) for n in rng.integers(2, 9, 50)]
    iob1 = [["I-X" if row[0] > 0 else "O" for row in seq] for seq in X]
    y = [list(convert_tags(tags, "iob1", "iob2")) for tags in iob1]
    clf = sb.XGBSequenceCRF(n_estimators=4, max_depth=2, n_jobs=1, early_stopping=False,
                            allowed_transitions="iob2").fit(X, y)  # fmt: skip
    flat = sb.XGBCRFClassifier(n_estimators=4, max_depth=2, n_jobs=1, early_stopping=False)
    flat.fit(np.concatenate(X), np.concatenate(y), lengths=[len(s) for s in X])
    lengths = [len(s) for s in X]
    assert serving_path(clf, 1) is not None and serving_path(flat, 1) is not None
    fast = (clf.predict(X), clf.predict_single(X[0]), flat.predict(np.concatenate(X),
            lengths=lengths), flat.predict(np.concatenate(X).astype(np.float32), lengths=lengths))
    monkeypatch.setattr(chain_base, "serving_predict", lambda *args: None)
    slow = (clf.predict(X), clf.predict_single(X[0]), flat.predict(np.concatenate(X),
            lengths=lengths), flat.predict(np.concatenate(X).astype(np.float32), lengths=lengths))
    assert fast[:2] == slow[:2]
    for a, b in zip(fast[2:], slow[2:]):
        np.testing.assert_array_equal(a, b)


def test_dataframe_input(monkeypatch):
    rng = np.random.default_rng(4)
    X = pd.DataFrame(rng.normal(size=(120, 3)), columns=["a", "b", "c"])
    X["d"] = rng.integers(0, 3, 120)  # an int column: the DataFrame is no float array
    y = np.where(X["a"] > 0, "p", "q")
    clf = sb.XGBCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1, early_stopping=False)
    clf.fit(X, y, lengths=[12] * 10)
    fast = clf.predict(X, lengths=[12] * 10), clf.predict(X[["a", "b", "c", "d"]].astype(float),
                                                          lengths=[12] * 10)  # fmt: skip
    monkeypatch.setattr(chain_base, "serving_predict", lambda *args: None)
    slow = clf.predict(X, lengths=[12] * 10), clf.predict(X[["a", "b", "c", "d"]].astype(float),
                                                          lengths=[12] * 10)  # fmt: skip
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


def test_the_path_follows_refits_loads_and_threads(tagger, tmp_path):
    X, y = corpus(30, 5)
    clf = sb.XGBSequenceCRF(n_estimators=3, max_depth=2, n_jobs=1, early_stopping=False)
    clf.fit(X, y)
    before = dict(vars(clf))
    first = serving_path(clf, 1)
    clf.predict(X)
    assert vars(clf).keys() == before.keys() and all(vars(clf)[k] is v for k, v in before.items())
    assert serving_path(clf, 1) is first and serving_path(clf, 2) is not first
    clf.fit(*corpus(30, 6))
    assert serving_path(clf, 1).booster is clf.booster_
    clf.save_model(tmp_path / "m.json")
    loaded = sb.XGBSequenceCRF().load_model(tmp_path / "m.json")
    assert loaded.predict(X) == clf.predict(X)
    copy = pickle.loads(pickle.dumps(loaded))
    assert copy.predict(X) == clf.predict(X)
