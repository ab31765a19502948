"""The feature window of benchmarks/ocr.py, on a tiny hand-made batch of words."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ocr.py"


@pytest.fixture(scope="module")
def ocr():
    spec = importlib.util.spec_from_file_location("ocr_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_window_features_shift_within_words(ocr):
    X = np.arange(12, dtype=np.float32).reshape(6, 2)  # rows 0..5, two "pixels" each
    lengths = np.array([1, 3, 2])
    W = ocr.window_features(X, lengths, width=1, fill=np.nan)
    assert W.shape == (6, 6)
    np.testing.assert_array_equal(W[:, 2:4], X)
    prev, nxt = W[:, :2], W[:, 4:]
    # word 0 is one letter: no neighbours at all
    assert np.isnan(prev[0]).all() and np.isnan(nxt[0]).all()
    # word 1 (rows 1..3): previous of row 2 is row 1, next of row 2 is row 3
    assert np.isnan(prev[1]).all()
    np.testing.assert_array_equal(prev[2], X[1])
    np.testing.assert_array_equal(nxt[2], X[3])
    assert np.isnan(nxt[3]).all()
    # word 2 (rows 4..5) never sees word 1
    assert np.isnan(prev[4]).all()
    np.testing.assert_array_equal(nxt[4], X[5])


def test_window_zero_fill_and_identity(ocr):
    X = np.ones((4, 3), dtype=np.float32)
    lengths = np.array([2, 2])
    W = ocr.window_features(X, lengths, width=2, fill=0.0)
    assert W.shape == (4, 15)
    assert np.isfinite(W).all()
    # every letter has exactly one neighbour inside its two-letter word
    assert (W.sum(axis=1) == 3 * 2).all()
    np.testing.assert_array_equal(ocr.window_features(X, lengths, width=0, fill=0.0), X)
