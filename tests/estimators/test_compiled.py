"""Compiled trees (``clf.compile()``, the ``serving`` extra) against the booster."""

import pickle
import shutil
import sys

import numpy as np
import pytest

import structboost as sb
from structboost.engines.compiled import CompiledTrees
from structboost.estimators.serving import serving_path, vectorize

pytestmark = pytest.mark.usefixtures("single_threaded")

pytest.importorskip("treelite")
pytest.importorskip("tl2cgen")
if shutil.which("gcc") is None:
    pytest.skip("compiling the trees needs gcc", allow_module_level=True)


def sentences(n, seed):
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "Paris", "in", "1996", "ran"]
    X, y = [], []
    for _ in range(n):
        sent = [str(w) for w in rng.choice(words, int(rng.integers(1, 10)))]
        X.append([{"w": w, "title": w.istitle(), "n": len(w), "prev": sent[i - 1] if i else "",
                   "x": float(rng.normal()), "gap": None if rng.random() < 0.2 else 1.0}
                  for i, w in enumerate(sent)])  # fmt: skip
        y.append(["N" if w in ("cat", "mat", "Paris") else "V" if w in ("sat", "ran")
                  else "D" if w in ("the", "a") else "O" for w in sent])  # fmt: skip
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = sentences(120, 0)
    clf = sb.XGBSequenceCRF(n_estimators=8, max_depth=3, n_jobs=1, early_stopping=False)
    return clf.fit(X, y)


@pytest.fixture(scope="module")
def compiled(fitted):
    return pickle.loads(pickle.dumps(fitted)).compile()


def test_compiled_margins_and_paths_are_the_boosters(fitted, compiled):
    X, _ = sentences(200, 1)
    rows, _ = vectorize(X, fitted.vectorizer_)
    path = serving_path(compiled, 1)
    assert path.trees is compiled.compiled_trees_
    expected = fitted.booster_.inplace_predict(rows, predict_type="margin")
    got = path.trees.margins(rows)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    assert compiled.predict(X) == fitted.predict(X)
    assert compiled.predict(X, decode="marginal") == fitted.predict(X, decode="marginal")
    assert [compiled.predict_single(s) for s in X[:20]] == fitted.predict(X[:20])
    assert np.array_equal(path.trees.margins(rows, threads=2), got)


def test_dense_rows_keep_zeros_and_read_nan_as_missing():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 5))
    X[:, 1] = rng.integers(0, 2, 400)  # zeros are values, not missing
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.where(X[:, 0] > 0, "a", np.where(X[:, 1] > 0.5, "b", "c"))
    lengths = [10] * 40
    clf = sb.XGBCRFClassifier(n_estimators=5, max_depth=3, n_jobs=1, early_stopping=False)
    clf.fit(X, y, lengths=lengths)
    trees = CompiledTrees.build(clf.booster_, 5)
    expected = clf.booster_.inplace_predict(X, predict_type="margin")
    np.testing.assert_allclose(trees.margins(X), expected, rtol=0, atol=1e-5)
    before = clf.predict(X, lengths=lengths)
    assert np.array_equal(clf.compile().predict(X, lengths=lengths), before)


def test_saved_models_load_without_the_compiled_trees(fitted, compiled, tmp_path, monkeypatch):
    compiled.save_model(tmp_path / "m.json")
    monkeypatch.setitem(sys.modules, "treelite", None)  # the extra missing
    monkeypatch.setitem(sys.modules, "tl2cgen", None)
    loaded = sb.XGBSequenceCRF().load_model(tmp_path / "m.json")
    assert not hasattr(loaded, "compiled_trees_")
    X, _ = sentences(30, 3)
    assert loaded.predict(X) == fitted.predict(X)
    with pytest.raises(ImportError, match=r"serving\]"):
        loaded.compile()


def test_a_refit_leaves_the_compiled_trees_unused(compiled):
    clf = pickle.loads(pickle.dumps(compiled))
    assert serving_path(clf, 1).trees is not None
    clf.set_params(n_estimators=3).fit(*sentences(40, 4))
    assert serving_path(clf, 1).trees is None


def test_models_of_the_general_route_are_not_compiled():
    rng = np.random.default_rng(5)
    X = [rng.normal(size=(6, 3)) for _ in range(10)]
    y = [["a" if v > 0 else "b" for v in s[:, 0]] for s in X]
    clf = sb.XGBSequenceCRF(n_estimators=2, n_jobs=1, early_stopping=False,
                            transitions_from="input").fit(X, y)  # fmt: skip
    with pytest.raises(ValueError, match="general route"):
        clf.compile()
