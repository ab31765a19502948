"""Multi-label label trees: ARFF reader, Chow-Liu, spanning trees, ESS, estimator."""

import gzip

import numpy as np
import pytest
from scipy.sparse.csgraph import minimum_spanning_tree
from sklearn.base import clone

from structboost.estimators.arff import read_arff_multilabel
from structboost.estimators.multilabel import (
    ESSTreeCRFClassifier,
    PairwiseLabelModels,
    ess_parents,
    label_edge_types,
    label_mutual_information,
    label_node_features,
    mutual_information,
    spanning_tree_parents,
)
from structboost.inference.tree import check_tree


def chow_liu_parents(Y, alpha=1.0):
    """Chow-Liu tree of the labels: maximum spanning tree of their mutual information."""
    return spanning_tree_parents(label_mutual_information(Y, alpha))


DENSE = """% a comment
@relation 'tiny: -C -2'

@attribute f1 numeric
@attribute 'f two' real
@attribute colour {red,green}
@attribute 'lab b' {0,1}
@attribute lab_a {0,1}

@data
1.5,2,red,0,1
-1,?,green,1,1
0,0.25,'green',0,0
"""

SPARSE = """@relation sparse
@attribute w0 {0,1}
@attribute w1 {0,1}
@attribute w2 {0,1}
@attribute L1 {0,1}
@attribute L2 {0,1}
@data
{0 1,3 1}
{1 1,2 1,4 1}
{}
"""

XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels">
<label name="lab_a"></label>
<label name="lab b"></label>
</labels>
"""


def test_arff_dense_gzip_and_xml(tmp_path):
    gz = tmp_path / "tiny.arff.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(DENSE)
    xml = tmp_path / "tiny.xml"
    xml.write_text(XML)
    X, Y, features, labels = read_arff_multilabel(gz, xml)
    assert features == ["f1", "f two", "colour"] and labels == ["lab b", "lab_a"]
    np.testing.assert_array_equal(Y, [[0, 1], [1, 1], [0, 0]])
    np.testing.assert_allclose(X[[0, 2]], [[1.5, 2, 0], [0, 0.25, 1]])
    assert np.isnan(X[1, 1]) and X[1, 2] == 1
    plain = tmp_path / "tiny.arff"
    plain.write_text(DENSE)
    X2, Y2, _, _ = read_arff_multilabel(plain, 2)
    np.testing.assert_array_equal(Y2, Y)


def test_arff_sparse(tmp_path):
    path = tmp_path / "sparse.arff"
    path.write_text(SPARSE)
    X, Y, _, labels = read_arff_multilabel(path, 2)
    assert labels == ["L1", "L2"]
    np.testing.assert_array_equal(X, [[1, 0, 0], [0, 1, 1], [0, 0, 0]])
    np.testing.assert_array_equal(Y, [[1, 0], [0, 1], [0, 0]])


def test_arff_errors(tmp_path):
    path = tmp_path / "tiny.arff"
    path.write_text(DENSE)
    xml = tmp_path / "other.xml"
    xml.write_text(XML.replace("lab_a", "zzz"))
    with pytest.raises(ValueError, match="not the last"):
        read_arff_multilabel(path, xml)
    with pytest.raises(ValueError, match="only 0 and 1"):
        read_arff_multilabel(path, 4)
    bad = tmp_path / "bad.arff"
    bad.write_text(DENSE.replace("-1,?,green,1,1", "-1,green,1,1"))
    with pytest.raises(ValueError, match="row 1 has 4 values"):
        read_arff_multilabel(bad, 2)
    bad.write_text(DENSE.replace("numeric", "string"))
    with pytest.raises(ValueError, match="only numeric and nominal"):
        read_arff_multilabel(bad, 2)


def sample_tree_labels(parents, n, flip, seed):
    """Labels from a directed tree: each label copies its parent with prob 1 - flip."""
    rng = np.random.default_rng(seed)
    Y = np.zeros((n, len(parents)), dtype=np.int64)
    for v, p in enumerate(parents):  # parents listed before children
        if p < 0:
            Y[:, v] = rng.random(n) < 0.5
        else:
            Y[:, v] = np.where(rng.random(n) < flip[v], 1 - Y[:, p], Y[:, p])
    return Y


def undirected(parents):
    return {frozenset((v, int(p))) for v, p in enumerate(parents) if p >= 0}


def test_chow_liu_recovers_a_known_tree():
    truth = np.array([-1, 0, 0, 1, 1, 2])
    Y = sample_tree_labels(truth, 4000, flip=[0, 0.1, 0.2, 0.15, 0.05, 0.1], seed=0)
    parents = chow_liu_parents(Y)
    assert undirected(parents) == undirected(truth)
    assert parents[0] == -1


def test_mutual_information_of_known_joints():
    assert mutual_information([0.25, 0.25, 0.25, 0.25]) == pytest.approx(0.0, abs=1e-15)
    assert mutual_information([0.5, 0, 0, 0.5]) == pytest.approx(np.log(2))
    mi = label_mutual_information(np.array([[0, 0], [1, 1], [0, 0], [1, 1]]), alpha=0.0)
    np.testing.assert_allclose(mi, [[0, np.log(2)], [np.log(2), 0]])


def test_spanning_trees_are_maximal_and_spanning():
    rng = np.random.default_rng(1)
    w = rng.random((30, 7, 7))
    w = w + np.swapaxes(w, 1, 2)
    parents = spanning_tree_parents(w)
    for wi, par in zip(w, parents):
        check_tree(np.zeros((7, 2)), [7], par, np.zeros((2, 2)))  # no cycle, one root
        assert (par < 0).sum() == 1 and par[0] == -1
        total = sum(wi[v, p] for v, p in enumerate(par) if p >= 0)
        best = -minimum_spanning_tree(-wi).sum()
        assert total == pytest.approx(best)
    with pytest.raises(ValueError, match="symmetric"):
        spanning_tree_parents(rng.random((3, 3)) + np.eye(3))


def test_ess_per_input_trees_are_spanning_trees_and_follow_the_evidence():
    # labels 0,1 coupled when x > 0, labels 1,2 coupled otherwise
    rng = np.random.default_rng(2)
    n = 600
    X = rng.normal(size=(n, 2))
    y0 = rng.integers(0, 2, n)
    y2 = rng.integers(0, 2, n)
    y1 = np.where(X[:, 0] > 0, y0, y2) ^ (rng.random(n) < 0.05)
    Y = np.column_stack((y0, y1, y2, rng.integers(0, 2, n)))
    pairs = np.array([[0, 1], [1, 2], [0, 2], [0, 3]])
    models = PairwiseLabelModels(pairs, n_estimators=20, max_depth=2, folds=2)
    joint = models.fit_out_of_fold(X, Y)
    assert joint.shape == (n, 4, 4)
    np.testing.assert_allclose(joint.sum(-1), 1.0, rtol=1e-5)
    parents = ess_parents(models.predict_joint(X), pairs, 4, label_mutual_information(Y))
    for par in parents:
        check_tree(np.zeros((4, 2)), [4], par, np.zeros((2, 2)))
        assert (par < 0).sum() == 1
    edges = [undirected(p) for p in parents]
    pos = np.mean([frozenset((0, 1)) in e for e, x in zip(edges, X[:, 0]) if x > 1])
    neg = np.mean([frozenset((1, 2)) in e for e, x in zip(edges, X[:, 0]) if x < -1])
    assert pos > 0.9 and neg > 0.9


def test_node_features_and_edge_types():
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    rows = label_node_features(X, 3)
    assert rows.shape == (6, 5)
    np.testing.assert_array_equal(rows[4], [3, 4, 0, 1, 0])
    par = np.array([[-1, 0, 1]])
    np.testing.assert_array_equal(label_edge_types(par, "pair"), [[0, 1, 5]])
    np.testing.assert_array_equal(label_edge_types(par, "shared"), [[0, 0, 0]])


@pytest.mark.parametrize(
    "structure, extra",
    [("independent", {}), ("chow-liu", {}), ("ess", {"pairwise": "logistic", "max_pairs": 3})],
)
def test_estimator_fits_and_predicts(structure, extra):
    rng = np.random.default_rng(3)
    n = 120
    X = rng.normal(size=(n, 3))
    truth = np.array([-1, 0, 1])
    Y = sample_tree_labels(truth, n, flip=[0, 0.1, 0.1], seed=4)
    Y[:, 0] = np.where(X[:, 0] > 0, Y[:, 0], 1 - Y[:, 0])
    est = ESSTreeCRFClassifier(
        structure=structure, n_estimators=5, max_depth=2, n_jobs=1, **extra
    )
    assert clone(est).get_params() == est.get_params()
    est.fit(X, Y, eval_set=[(X[:40], Y[:40])])
    assert est.best_iteration_ == 4 and len(est.evals_result_["validation_0"]["crf-nll"]) == 5
    assert est.feature_importances_.shape == (3,)
    pred = est.predict(X)
    assert pred.shape == Y.shape and set(np.unique(pred)) <= {0, 1}
    proba = est.predict_proba(X)
    assert proba.shape == Y.shape and np.all((proba >= 0) & (proba <= 1))
    ll = est.predict_log_likelihood(X, Y)
    assert ll.shape == (n,) and np.all(ll < 0)
    parents = est.structures(X)
    assert parents.shape == Y.shape
    if structure == "independent":
        assert np.all(parents == -1)
    else:
        assert np.all((parents < 0).sum(axis=1) == 1)
    assert 0.0 <= est.score(X, Y) <= 1.0


def test_estimator_rejects_bad_input():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="structure must be"):
        ESSTreeCRFClassifier(structure="dense").fit(X, np.eye(4, 2, dtype=int))
    with pytest.raises(ValueError, match="only 0 and 1"):
        ESSTreeCRFClassifier().fit(X, np.full((4, 2), 2))
    with pytest.raises(ValueError, match="rows"):
        ESSTreeCRFClassifier().fit(X, np.eye(3, 2, dtype=int))
