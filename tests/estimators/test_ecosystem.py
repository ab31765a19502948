"""What scikit-learn, XGBoost and sklearn-crfsuite users expect of the estimators (issue 18)."""

import importlib.util
import warnings

import numba
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.estimators import chain
from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.lgbm import LGBMCRFClassifier
from structboost.estimators.tree import TreeCRFClassifier

pytestmark = pytest.mark.usefixtures("single_threaded")

LABELS = np.array(["B", "I", "O"])
SMALL = {
    XGBCRFClassifier: {"n_estimators": 6, "learning_rate": 1.0, "max_depth": 3, "n_jobs": 1},
    LGBMCRFClassifier: {"n_estimators": 6, "learning_rate": 1.0, "num_leaves": 8, "n_jobs": 1,
                        "min_child_samples": 5},
}
ESTIMATORS = pytest.mark.parametrize(
    "cls", [XGBCRFClassifier, LGBMCRFClassifier], ids=["xgboost", "lightgbm"]
)


def small(cls, **kw):
    return cls(**{**SMALL[cls], **kw})


@pytest.fixture(scope="module")
def data():
    X, y, lengths = make_hmm_sequences(
        n_sequences=40, length=(6, 14), stay=0.9, emission=0.7, random_state=1
    )
    ids = np.repeat(np.arange(len(lengths)) * 3 % 41, lengths)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    frame.insert(0, "sentence_id", ids)
    return {"frame": frame, "X": X, "y": LABELS[y], "codes": y, "lengths": lengths, "ids": ids}


# -- boundaries that travel with the data -------------------------------------
@ESTIMATORS
def test_sequence_column_in_grid_search_without_routing(data, cls):
    frame, y = data["frame"], data["y"]
    est = small(cls, sequence_column="sentence_id")
    search = GridSearchCV(est, {"learning_rate": [0.5, 1.0]}, cv=GroupKFold(n_splits=2),
                          error_score="raise")  # fmt: skip
    search.fit(frame, y, groups=frame["sentence_id"])
    assert search.cv_results_["mean_test_score"].min() > 0.5
    scores = cross_val_score(est, frame, y, groups=frame["sentence_id"], cv=GroupKFold(2),
                             error_score="raise")  # fmt: skip
    assert np.isfinite(scores).all()
    fitted = est.fit(frame, y)
    assert "sentence_id" not in fitted.feature_names_in_
    by_name = small(cls).fit(frame, y, groups="sentence_id")
    np.testing.assert_array_equal(fitted.predict(frame), by_name.predict(frame, groups="sentence_id"))
    with pytest.raises(ValueError, match="gives the sequence boundaries already"):
        fitted.predict(frame, groups=data["ids"])
    with pytest.raises(ValueError, match="needs a DataFrame|is ndarray"):
        fitted.predict(data["X"])


@ESTIMATORS
def test_forgotten_boundaries_and_id_column_left_in_X(data, cls):
    frame, y = data["frame"], data["y"]
    est = small(cls).fit(frame, y, groups="sentence_id")
    with pytest.raises(ValueError, match="still has the column 'sentence_id'.*groups='sentence_id'"):
        est.predict(frame)
    with pytest.raises(ValueError, match="still has the column 'sentence_id'.*drop it"):
        est.predict(frame, groups=data["ids"])
    arrays = small(cls).fit(data["X"], y, lengths=data["lengths"])
    with pytest.raises(ValueError, match="fitted on sequences, so X needs their boundaries"):
        arrays.predict(data["X"])
    with pytest.raises(ValueError, match="fitted on sequences"):
        arrays.predict_proba(data["X"])


@ESTIMATORS
def test_no_boundaries_means_one_row_per_sequence(data, cls):
    X, y = data["X"], data["y"]
    with pytest.warns(UserWarning, match="every row is its own sequence"):
        rows = small(cls).fit(X, y)
    assert rows.boundaries_ == "rows"
    ones = np.ones(len(y), dtype=int)
    np.testing.assert_array_equal(rows.predict(X), rows.predict(X, lengths=ones))
    np.testing.assert_allclose(rows.predict_proba(X), rows.predict_marginals(X, lengths=ones))


# -- XGBoost's and scikit-learn's attributes and parameters --------------------
@ESTIMATORS
def test_proba_classes_best_score_and_booster(data, cls):
    X, y, lengths = data["X"], data["y"], data["lengths"]
    est = small(cls, n_estimators=30, early_stopping_rounds=2).fit(
        X, y, lengths=lengths, eval_set=[{"X": X, "y": y, "lengths": lengths, "name": "dev"}]
    )
    proba = est.predict_proba(X, lengths=lengths)
    np.testing.assert_array_equal(proba, est.predict_marginals(X, lengths=lengths))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert est.n_classes_ == 3 == proba.shape[1]
    assert est.get_booster() is est.booster_
    history = est.evals_result_["dev"]["crf-nll"]
    assert est.best_score_ == pytest.approx(history[est.best_iteration])
    assert est.best_score_ == pytest.approx(min(history), rel=1e-6)
    assert not hasattr(small(cls).fit(X, y, lengths=lengths), "best_score_")


def _nll_of(est, X, y, lengths):
    return -np.mean(est.predict_log_likelihood(X, y, lengths=lengths))


@ESTIMATORS
def test_eval_metric_names_and_callables(data, cls):
    X, y, lengths, codes = data["X"], data["y"], data["lengths"], data["codes"]

    def proba_loss(y_true, y_proba):
        return log_loss(y_true, y_proba, labels=[0, 1, 2])

    est = small(cls, eval_metric=["crf-error", proba_loss, "crf-nll"]).fit(
        X, y, lengths=lengths, eval_set=[(X, y, lengths)]
    )
    result = est.evals_result_["validation_0"]
    assert set(result) == {"crf-error", "proba_loss", "crf-nll"}
    # Last round: the metrics equal what the fitted model predicts (the oracle).
    assert result["proba_loss"][-1] == pytest.approx(
        log_loss(codes, est.predict_proba(X, lengths=lengths)), rel=1e-5
    )
    assert result["crf-nll"][-1] == pytest.approx(_nll_of(est, X, y, lengths), rel=1e-5)
    assert result["crf-error"][-1] == pytest.approx(
        np.mean(est.predict(X, lengths=lengths) != y), rel=1e-5
    )
    assert est.best_score_ == pytest.approx(result["crf-nll"][-1])  # the last metric
    for bad in ("mlogloss", ["crf-nll", 3], []):
        with pytest.raises(ValueError, match="eval_metric"):
            small(cls, eval_metric=bad).fit(X, y, lengths=lengths)


class Rounds(xgb.callback.TrainingCallback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def after_iteration(self, model, epoch, evals_log):
        self.seen.append((epoch, numba.get_num_threads()))
        return False


def test_xgboost_callbacks_run_and_are_not_engine_params(data):
    X, y, lengths = data["X"], data["y"], data["lengths"]
    recorder = Rounds()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # XGBoost warns of unused parameters
        est = small(XGBCRFClassifier, callbacks=[recorder]).fit(X, y, lengths=lengths)
    assert [epoch for epoch, _ in recorder.seen] == list(range(6))
    assert "callbacks" not in est.booster_.save_config()


def test_lightgbm_callbacks_run(data):
    X, y, lengths = data["X"], data["y"], data["lengths"]
    seen = []
    small(LGBMCRFClassifier, callbacks=[lambda env: seen.append(env.iteration)]).fit(
        X, y, lengths=lengths
    )
    assert seen == list(range(6))


def test_tree_estimator_callbacks_eval_metric_and_proba():
    rng = np.random.default_rng(0)
    parents = np.tile([-1, 0, 0, 1], 15)
    lengths = np.full(15, 4)
    y = rng.integers(0, 2, 60)
    X = np.column_stack([y + rng.normal(scale=0.5, size=60), rng.normal(size=60)])
    recorder = Rounds()
    est = TreeCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1, callbacks=[recorder],
                            eval_metric=["crf-error", "crf-nll"])  # fmt: skip
    est.fit(X, y, parents=parents, lengths=lengths, eval_set=[(X, y, lengths, parents)])
    assert len(recorder.seen) == 3 and est.n_classes_ == 2
    assert set(est.evals_result_["validation_0"]) == {"crf-error", "crf-nll"}
    np.testing.assert_array_equal(
        est.predict_proba(X, parents=parents, lengths=lengths),
        est.predict_marginals(X, parents=parents, lengths=lengths),
    )
    # a callable gets the node marginals, as on chains
    est.set_params(eval_metric=log_loss).fit(
        X, y, parents=parents, lengths=lengths, eval_set=[(X, y, lengths, parents)]
    )
    assert est.evals_result_["validation_0"]["log_loss"][-1] == pytest.approx(
        log_loss(y, est.predict_proba(X, parents=parents, lengths=lengths)), rel=1e-5
    )


# -- one thread setting --------------------------------------------------------
@ESTIMATORS
def test_n_jobs_reaches_objective_numba_and_blas(data, cls, monkeypatch):
    """``n_jobs`` becomes the spec's ``nthread``, which the objective's round sets once."""
    from threadpoolctl import threadpool_info

    seen, inside = {}, []
    if cls is XGBCRFClassifier:
        module, name = chain, "crf_objective"
    else:
        from structboost.engines import lightgbm as module

        name = "lgb_crf_objective"
    real = getattr(module, name)

    def spy(num_labels, spec, **kwargs):
        seen["nthread"] = spec.nthread
        obj = real(num_labels, spec, **kwargs)
        round_ = obj.crf._grad_hess

        def probed(*args):
            blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
            inside.append((numba.get_num_threads(), blas))
            return round_(*args)

        obj.crf._grad_hess = probed
        return obj

    monkeypatch.setattr(module, name, spy)
    small(cls, n_jobs=1).fit(data["X"], data["y"], lengths=data["lengths"])
    assert seen["nthread"] == 1
    assert inside and all(n == 1 and all(b == 1 for b in blas) for n, blas in inside)
    # n_jobs=None is one thread, as in scikit-learn, whatever the environment
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    small(cls, n_jobs=None).fit(data["X"], data["y"], lengths=data["lengths"])
    assert seen["nthread"] == 1
    for spelling in ("nthread", "num_threads"):
        with pytest.raises(ValueError, match="n_jobs"):
            small(cls, **{spelling: 1}).fit(data["X"], data["y"], lengths=data["lengths"])


# -- sklearn-crfsuite's data contract ----------------------------------------
@ESTIMATORS
def test_list_of_sequence_arrays(data, cls):
    X, y, lengths = data["X"], data["y"], data["lengths"]
    cuts = np.cumsum(lengths)[:-1]
    X_seq = np.split(X, cuts)
    y_seq = [list(part) for part in np.split(y, cuts)]
    nested = small(cls).fit(X_seq, y_seq)
    flat = small(cls).fit(X, y, lengths=lengths)
    pred = nested.predict(X_seq)
    assert isinstance(pred, list) and [len(p) for p in pred] == list(lengths)
    assert pred == [list(p) for p in np.split(flat.predict(X, lengths=lengths), cuts)]
    proba = nested.predict_proba(X_seq)
    np.testing.assert_allclose(np.concatenate(proba), flat.predict_proba(X, lengths=lengths))
    assert nested.score(X_seq, y_seq) == pytest.approx(flat.score(X, y, lengths=lengths))
    nested.fit(X_seq, y_seq, eval_set=[(X_seq, y_seq)])
    assert "validation_0" in nested.evals_result_
    with pytest.raises(ValueError, match="gives the boundaries already"):
        nested.predict(X_seq, lengths=lengths)
    with pytest.raises(ValueError, match="label lists"):
        small(cls).fit(X_seq, y_seq[:-1])


def _word_features(sentence):
    return [
        {"word": w.lower(), "title": w.istitle(), "len": float(len(w)),
         **({"prev": sentence[i - 1].lower()} if i else {"BOS": True})}
        for i, w in enumerate(sentence)
    ]  # fmt: skip


def test_lists_of_feature_dicts_like_sklearn_crfsuite(tmp_path):
    rng = np.random.default_rng(0)
    names, other = ["Ann", "Bob", "Eve"], ["saw", "met", "the", "cat", "a", "dog"]
    sentences, tags = [], []
    for _ in range(40):
        words = [rng.choice(names)] + list(rng.choice(other, size=rng.integers(2, 5)))
        sentences.append(words)
        tags.append(["PER"] + ["O"] * (len(words) - 1))
    X = [_word_features(s) for s in sentences]
    est = XGBCRFClassifier(n_estimators=5, max_depth=3, n_jobs=1).fit(X, tags)
    assert est.vectorizer_ is not None and "word=ann" in est.vectorizer_.vocabulary_
    unseen = [_word_features(["Zed", "saw", "a", "newt"])]  # unseen features are ignored
    pred = est.predict(X[:3] + unseen)
    assert pred[:3] == tags[:3] and pred[3][1:] == ["O", "O", "O"]
    with pytest.raises(ValueError, match="feature dicts, but fit got arrays"):
        XGBCRFClassifier(n_estimators=2, n_jobs=1).fit([np.ones((3, 2))] * 4,
                                                       [["a", "b", "a"]] * 4).predict(X)
    # The vectorizer travels in the model file (it used to be refused).
    est.save_model(tmp_path / "dicts.json")
    loaded = XGBCRFClassifier().load_model(tmp_path / "dicts.json")
    assert loaded.vectorizer_.feature_names_ == est.vectorizer_.feature_names_
    assert loaded.predict(X[:3] + unseen) == est.predict(X[:3] + unseen)


@ESTIMATORS
def test_save_model_keeps_the_sequence_column(data, cls, tmp_path):
    frame, y = data["frame"], data["y"]
    est = small(cls, sequence_column="sentence_id").fit(frame, y)
    est.save_model(tmp_path / "m.json")
    loaded = cls().load_model(tmp_path / "m.json")
    assert loaded.id_column_ == "sentence_id" and loaded.boundaries_ == "sequences"
    np.testing.assert_array_equal(loaded.predict(frame), est.predict(frame))


# -- optional extras ------------------------------------------------------------
def test_missing_lightgbm_is_named_with_its_install_command(data, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "lightgbm" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r'pip install "structboost-crf\[lightgbm\]"'):
        LGBMCRFClassifier().fit(data["X"], data["y"], lengths=data["lengths"])


def test_library_is_silent_by_default():
    import logging

    handlers = logging.getLogger("structboost").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
    assert sb.__version__
