"""Tree and multi-label estimators as equals of the chain ones.

Model files (bit-identical round trips, damaged files refused), eval sets,
callable metrics and lists of instances.
"""

import json

import numpy as np
import pytest

from structboost import XGBCRFClassifier
from structboost.datasets import make_hmm_sequences
from structboost.estimators.multilabel import ESSTreeCRFClassifier
from structboost.estimators.tree import TreeCRFClassifier


def tree_data(seed, m=40):
    """Instances of 5 nodes; type-0 children copy their parent, type-1 children flip it."""
    rng = np.random.default_rng(seed)
    shape, kinds = np.array([-1, 0, 0, 1, 1]), np.array([0, 0, 1, 0, 1])
    X = rng.normal(size=(m * 5, 2))
    y = np.zeros(m * 5, dtype=np.int64)
    for i in range(m):
        o = i * 5
        y[o] = int(X[o, 0] + 0.5 * rng.normal() > 0)
        for v in range(1, 5):
            keep = (rng.random() < 0.9) ^ (kinds[v] == 1)
            y[o + v] = y[o + shape[v]] if keep else 1 - y[o + shape[v]]
    labels = np.array(["no", "yes"])[y]
    return X, labels, {"lengths": np.full(m, 5), "parents": np.tile(shape, m),
                       "edge_types": np.tile(kinds, m)}  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    X, y, tree = tree_data(0)
    Xv, yv, tree_v = tree_data(1, m=15)
    est = TreeCRFClassifier(n_estimators=30, max_depth=2, learning_rate=1.0, n_jobs=1,
                            early_stopping_rounds=2, n_edge_types=3)  # fmt: skip
    est.fit(X, y, eval_set=[(Xv, yv, tree_v["lengths"], tree_v["parents"],
                             tree_v["edge_types"])], verbose=False, **tree)  # fmt: skip
    path = tmp_path_factory.mktemp("tree") / "tree.json"
    est.save_model(path)
    return est, path, (Xv, yv, tree_v)


def test_tree_round_trip_is_bit_identical_and_replaces_the_fitted_state(saved):
    est, path, (X, y, tree) = saved
    assert est.best_iteration_ < 29  # early stopping kept fewer rounds than it trained
    # A loaded estimator fitted before on other data keeps nothing of that fit.
    other = TreeCRFClassifier(n_estimators=2, n_jobs=1, mode="logitboost")
    Xo, yo, tree_o = tree_data(2, m=10)
    other.fit(np.c_[Xo, Xo], np.where(yo == "no", 7, 8), verbose=False, **tree_o)
    back = other.load_model(path)
    assert back is other and back.get_params() == est.get_params()
    assert list(back.classes_) == ["no", "yes"] and back.n_edge_types_ == 3
    assert back.n_features_in_ == 2 and back.best_iteration == est.best_iteration
    assert back.evals_result_ == est.evals_result_ and back.best_score_ == est.best_score_
    np.testing.assert_array_equal(back.predict(X, **tree), est.predict(X, **tree))
    np.testing.assert_array_equal(back.predict_marginals(X, **tree),
                                  est.predict_marginals(X, **tree))  # fmt: skip
    np.testing.assert_array_equal(back.predict_log_likelihood(X, y, **tree),
                                  est.predict_log_likelihood(X, y, **tree))  # fmt: skip
    np.testing.assert_array_equal(back.feature_importances_, est.feature_importances_)


def _tampered(path, tmp_path, change):
    doc = json.loads(path.read_text())
    change(doc)
    out = tmp_path / "bad.json"
    out.write_text(json.dumps(doc))
    return out


def _tree_state(doc):
    model = json.loads(doc["engine"]["xgboost_json"])
    return model, model["learner"]["attributes"]


def _set_edges(doc, edges):
    model, attrs = _tree_state(doc)
    state = json.loads(attrs["structboost_tree_crf"])
    state["edge_transitions"] = edges
    attrs["structboost_tree_crf"] = json.dumps(state)
    doc["engine"]["xgboost_json"] = json.dumps(model)


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: _set_edges(d, [[[0.0, 1.0, 2.0]] * 3] * 3), "edge_transitions"),
        (lambda d: _set_edges(d, [[[float("nan")] * 2] * 2] * 3), "edge_transitions"),
        (lambda d: d["params"].update(n_edge_types=2), "n_edge_types"),
        (lambda d: d["classes"].update(values=["a", "b", "c"]), "has 3 labels"),
        (lambda d: d["params"].update(_secret=1), "_secret"),
        (lambda d: d.update(n_features_in=5), "features"),
    ],
)
def test_damaged_tree_files_are_refused(saved, tmp_path, change, problem):
    est, path, (X, _, tree) = saved
    bad = _tampered(path, tmp_path, change)
    target = TreeCRFClassifier().fit(X, np.arange(len(X)) % 2, verbose=False, **tree)
    before = target.predict_marginals(X, **tree)
    with pytest.raises(ValueError, match=str(bad)) as err:
        target.load_model(bad)
    assert problem in str(err.value)
    # A refused file leaves the estimator as it was.
    np.testing.assert_array_equal(target.predict_marginals(X, **tree), before)


def test_tree_and_chain_files_do_not_mix(saved, tmp_path):
    _, path, _ = saved
    with pytest.raises(ValueError, match="holds a TreeCRFClassifier"):
        XGBCRFClassifier().load_model(path)
    X, y, lengths = make_hmm_sequences(10, length=(3, 5), random_state=0)
    XGBCRFClassifier(n_estimators=2, n_jobs=1).fit(X, y, lengths=lengths).save_model(
        tmp_path / "chain.json"
    )
    with pytest.raises(ValueError, match="holds a XGBCRFClassifier"):
        TreeCRFClassifier().load_model(tmp_path / "chain.json")
    # A chain file without a saved parameter takes its default and still predicts.
    drop = lambda d: d["params"].pop("allowed_transitions")  # noqa: E731
    bare = _tampered(tmp_path / "chain.json", tmp_path, drop)
    chain = XGBCRFClassifier().load_model(bare)
    assert chain.allowed_transitions is None and chain.predict(X, lengths=lengths).shape == y.shape


@pytest.mark.parametrize("structure", ["independent", "chow-liu", "ess"])
def test_multilabel_round_trip_is_bit_identical(structure, tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 3))
    Y = (X[:, [0, 1, 0, 2]] + rng.normal(size=(80, 4)) > 0).astype(int)
    est = ESSTreeCRFClassifier(structure=structure, n_estimators=4, max_depth=2, n_jobs=1,
                               max_pairs=3, pairwise_estimators=3)  # fmt: skip
    est.fit(X, Y, eval_set=[(X[:20], Y[:20])], verbose=False)
    est.save_model(tmp_path / "ml.json")
    back = ESSTreeCRFClassifier(structure="independent").fit(X[:, :2], Y[:, :2], verbose=False)
    back.load_model(tmp_path / "ml.json")
    assert back.get_params() == est.get_params() and back.n_labels_ == 4
    assert back.evals_result_ == est.evals_result_ and back.best_iteration_ == est.best_iteration_
    Xt = rng.normal(size=(30, 3))
    np.testing.assert_array_equal(back.structures(Xt), est.structures(Xt))
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    np.testing.assert_array_equal(back.predict_proba(Xt), est.predict_proba(Xt))
    np.testing.assert_array_equal(back.predict_log_likelihood(Xt, Y[:30]),
                                  est.predict_log_likelihood(Xt, Y[:30]))  # fmt: skip


@pytest.fixture(scope="module")
def multilabel_file(tmp_path_factory):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 2))
    Y = (X[:, [0, 1, 0]] + rng.normal(size=(60, 3)) > 0).astype(int)
    est = ESSTreeCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1, pairwise_estimators=2)
    path = tmp_path_factory.mktemp("ml") / "ml.json"
    est.fit(X, Y, verbose=False).save_model(path)
    return path, X


def _crf_params(doc, **changes):
    doc["crf"]["params"].update(changes)


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: d.update(mutual_information=[[0.0, 1.0]] * 2), "mutual_information"),
        (lambda d: d["mutual_information"][0].__setitem__(1, float("inf")), "mutual_information"),
        (lambda d: d["pairwise"][0].pop(), "pairwise must hold"),
        (lambda d: d["pairwise"][1].__setitem__(0, "{}"), "XGBoost"),
        (lambda d: _crf_params(d, n_edge_types=3), "damaged: n_edge_types is 3"),
        (lambda d: _crf_params(d, mode="logitboost"), "tree CRF does not match"),
        (lambda d: d["params"].update(structure="dense"), "structure must be"),
        (lambda d: d.update(n_features_in=3), "num_feature"),
    ],
)
def test_damaged_multilabel_files_are_refused(multilabel_file, tmp_path, change, problem):
    path, X = multilabel_file
    bad = _tampered(path, tmp_path, change)
    target = ESSTreeCRFClassifier().load_model(path)
    before = target.predict_proba(X)
    with pytest.raises(ValueError, match=str(bad)) as err:
        target.load_model(bad)
    assert problem in str(err.value)
    np.testing.assert_array_equal(target.predict_proba(X), before)


def test_logistic_pair_models_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(40, 2)), rng.integers(0, 2, size=(40, 3))
    Y[:, 1:] = 1  # pairs (0, j) see two joint states, pair (1, 2) one: its counts
    est = ESSTreeCRFClassifier(pairwise="logistic", n_estimators=2, n_jobs=1).fit(
        X, Y, verbose=False
    )
    est.save_model(tmp_path / "ml.json")
    back = ESSTreeCRFClassifier().load_model(tmp_path / "ml.json")
    Xt = rng.normal(size=(25, 2))
    np.testing.assert_array_equal(back.pairwise_.predict_joint(Xt), est.pairwise_.predict_joint(Xt))
    np.testing.assert_array_equal(back.predict_proba(Xt), est.predict_proba(Xt))
    doc = json.loads((tmp_path / "ml.json").read_text())
    assert sorted(len(m) for m in doc["pairwise"][0]) == [1, 5, 5]  # counts, two logistic
    model = next(m for m in doc["pairwise"][0] if "coef" in m)
    model["scale"][0] = 0.0
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"{tmp_path / 'bad.json'} is damaged.*scale"):
        back.load_model(tmp_path / "bad.json")



def test_every_estimator_reads_eval_set_alike():
    """One eval-set routine: named dict entries, distinct names, the dialect's checks."""
    X, y, tree = tree_data(0, m=10)
    entry = {"X": X, "y": y, **tree}
    est = TreeCRFClassifier(n_estimators=2, n_jobs=1)
    est.fit(X, y, eval_set=[{**entry, "name": "train"}], verbose=False, **tree)
    assert list(est.evals_result_) == ["train"]
    with pytest.raises(ValueError, match="names must differ"):
        est.fit(X, y, eval_set=[entry, {**entry, "name": "validation_0"}], verbose=False, **tree)
    rng = np.random.default_rng(0)
    Xm, Ym = rng.normal(size=(30, 2)), rng.integers(0, 2, size=(30, 3))
    multi = ESSTreeCRFClassifier(structure="chow-liu", n_estimators=2, n_jobs=1)
    multi.fit(Xm, Ym, eval_set=[(Xm, Ym), {"X": Xm, "y": Ym, "name": "all"}], verbose=False)
    assert list(multi.evals_result_) == ["validation_0", "all"]
    assert multi.evals_result_["all"] == multi.evals_result_["validation_0"]
    with pytest.raises(ValueError, match=r"eval_set\[0\] must be an \(X, Y\) tuple.*lengths"):
        multi.fit(Xm, Ym, eval_set=[(Xm, Ym, [3] * 10)], verbose=False)


def test_multilabel_takes_callable_metrics(tmp_path):
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(30, 2)), rng.integers(0, 2, size=(30, 3))
    seen = []

    def brier(y_true, y_proba):
        seen.append((y_true.shape, y_proba.shape))
        return float(np.mean((y_proba[:, 1] - y_true) ** 2))

    est = ESSTreeCRFClassifier(structure="independent", n_estimators=3, n_jobs=1,
                               eval_metric=["crf-error", brier])  # fmt: skip
    est.fit(X, Y, eval_set=[(X, Y)], verbose=False)
    history = est.evals_result_["validation_0"]
    assert list(history) == ["crf-error", "brier"] and len(history["brier"]) == 3
    assert seen[-1] == ((90,), (90, 2))
    proba = est.predict_proba(X)  # XGBoost keeps 6 digits of a metric
    assert history["brier"][-1] == pytest.approx(np.mean((proba - Y) ** 2), abs=1e-6)
    with pytest.raises(ValueError, match="eval_metric=.*cannot be written"):
        est.save_model(tmp_path / "m.json")


def test_tree_takes_lists_of_instances():
    X, y, tree = tree_data(0, m=12)
    cuts = np.cumsum(tree["lengths"])[:-1]

    def split(values):
        return [np.asarray(part) for part in np.split(values, cuts)]

    X_list, y_list = split(X), [list(p) for p in split(y)]
    par_list, type_list = split(tree["parents"]), split(tree["edge_types"])
    flat = TreeCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1)
    flat.fit(X, y, eval_set=[(X, y, tree["lengths"], tree["parents"], tree["edge_types"])],
             verbose=False, **tree)  # fmt: skip
    nested = TreeCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1)
    entry = {"X": X_list, "y": y_list, "parents": par_list, "edge_types": type_list}
    nested.fit(X_list, y_list, parents=par_list, edge_types=type_list, eval_set=[entry],
               verbose=False)  # fmt: skip
    assert nested.evals_result_ == flat.evals_result_
    structure = {"parents": par_list, "edge_types": type_list}
    pred = nested.predict(X_list, **structure)
    assert isinstance(pred, list) and [len(p) for p in pred] == list(tree["lengths"])
    np.testing.assert_array_equal(np.concatenate(pred), flat.predict(X, **tree))
    np.testing.assert_array_equal(np.concatenate(nested.predict_marginals(X_list, **structure)),
                                  flat.predict_marginals(X, **tree))  # fmt: skip
    np.testing.assert_array_equal(nested.predict_log_likelihood(X_list, y_list, **structure),
                                  flat.predict_log_likelihood(X, y, **tree))  # fmt: skip
    assert nested.score(X_list, y_list, **structure) == flat.score(X, y, **tree)
    # Flat structure arrays go with a list of instances too; a miscount names the argument.
    np.testing.assert_array_equal(
        np.concatenate(nested.predict(X_list, parents=tree["parents"])),
        flat.predict(X, parents=tree["parents"], lengths=tree["lengths"]),
    )
    with pytest.raises(ValueError, match="parents has 11 lists and X 12 sequences"):
        nested.predict(X_list, parents=par_list[:-1])
    with pytest.raises(ValueError, match="gives the boundaries already"):
        nested.predict(X_list, lengths=tree["lengths"], **structure)
