"""Multi-output trees by default where they pay: dense features and many labels, on the CPU."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from structboost import XGBCRFClassifier
from structboost.estimators.chain import MULTI_OUTPUT_LABELS

LENGTHS = np.full(20, 6)


def tree_strategy(X, n_labels, **params):
    """The ``multi_strategy`` of a two-round fit on ``X`` with ``n_labels`` labels."""
    y = np.arange(LENGTHS.sum()) % n_labels
    est = XGBCRFClassifier(n_estimators=2, n_jobs=1, **params).fit(X, y, lengths=LENGTHS)
    config = est.booster_.save_config()
    return "multi_output_tree" if '"multi_strategy":"multi_output_tree"' in config else "per label"


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).normal(size=(LENGTHS.sum(), 4))


def test_dense_features_and_many_labels_get_multi_output_trees(X):
    assert tree_strategy(X, MULTI_OUTPUT_LABELS) == "multi_output_tree"
    assert tree_strategy(pd.DataFrame(X), MULTI_OUTPUT_LABELS) == "multi_output_tree"


def test_few_labels_keep_a_tree_per_label(X):
    assert tree_strategy(X, MULTI_OUTPUT_LABELS - 1) == "per label"


@pytest.mark.parametrize("params", [
    {"multi_strategy": "one_output_per_tree"},  # the user's choice wins
    {"booster": "dart"},  # vector-leaf trees: no dart, no exact or approx method
    {"tree_method": "exact"},
    {"transitions_from": "input"},  # boosted transitions: unmeasured
], ids=lambda p: next(iter(p.values())))
def test_other_settings_keep_a_tree_per_label(X, params):
    assert tree_strategy(X, MULTI_OUTPUT_LABELS, **params) == "per label"


@pytest.mark.parametrize("kind", ["sparse", "categorical"])
def test_sparse_or_categorical_features_keep_a_tree_per_label(X, kind):
    if kind == "sparse":
        data = sp.csr_matrix(X)
    else:
        data = pd.DataFrame(X, columns=list("abcd")).assign(code=pd.Categorical(np.arange(len(X)) % 3))
    assert tree_strategy(data, MULTI_OUTPUT_LABELS) == "per label"


def test_a_default_multi_output_model_keeps_importances_and_saves(X, tmp_path):
    y = np.arange(LENGTHS.sum()) % MULTI_OUTPUT_LABELS
    est = XGBCRFClassifier(n_estimators=2, n_jobs=1).fit(X, y, lengths=LENGTHS)
    assert est.feature_importances_.shape == (X.shape[1],)
    est.save_model(tmp_path / "model.json")
    back = XGBCRFClassifier().load_model(tmp_path / "model.json")
    np.testing.assert_array_equal(back.predict(X, lengths=LENGTHS), est.predict(X, lengths=LENGTHS))
