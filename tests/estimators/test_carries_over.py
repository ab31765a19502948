"""README's "what carries over" table, one test per row (issue 29 item 5).

Rows and where else they are checked: XGBoost (here), LightGBM (here),
sklearn-crfsuite (here, and the whole tutorial in test_crfsuite_tutorial.py),
scikit-learn (here; ``check_estimator`` in test_chain_estimators.py, grid
searches in test_ecosystem.py, automatic early stopping in
test_early_stopping.py).
"""

import json

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

import structboost as sb
from structboost import metrics
from structboost.datasets import make_hmm_sequences

pytestmark = pytest.mark.usefixtures("single_threaded")

LABELS = np.array(["B-X", "I-X", "O"])


@pytest.fixture(scope="module")
def data():
    X, y, lengths = make_hmm_sequences(
        n_sequences=50, length=(6, 14), stay=0.9, emission=0.7, random_state=4
    )
    cut = int(lengths[:35].sum())
    return {"X": X, "y": LABELS[y], "lengths": lengths, "cut": cut, "m": 35}


def parts(data):
    X, y, lengths, cut, m = (data[k] for k in ("X", "y", "lengths", "cut", "m"))
    return (X[:cut], y[:cut], lengths[:m]), (X[cut:], y[cut:], lengths[m:])


class CountRounds(xgb.callback.TrainingCallback):
    def __init__(self):
        super().__init__()
        self.rounds = 0

    def after_iteration(self, model, epoch, evals_log):
        self.rounds += 1
        return False


def test_xgboost_row(data, capsys, tmp_path):
    (X, y, lengths), valid = parts(data)
    counter = CountRounds()
    est = sb.XGBCRFClassifier(
        n_estimators=40, learning_rate=1.0, max_depth=3, n_jobs=1, min_child_weight=2.0,
        early_stopping_rounds=2, eval_metric=["crf-error", "crf-nll"], callbacks=[counter],
    )  # fmt: skip
    est.fit(X, y, lengths=lengths, eval_set=[valid])
    # fit logs every round by default, as XGBClassifier.fit(verbose=True).
    logged = capsys.readouterr().out
    assert "validation_0-crf-error" in logged and "validation_0-crf-nll" in logged
    # XGBoost's names next to the trailing-underscore ones, 0-based, the last metric stops.
    history = est.evals_result_["validation_0"]["crf-nll"]
    assert est.best_iteration == est.best_iteration_ == int(np.argmin(history))
    assert est.best_score == est.best_score_ == pytest.approx(min(history))
    assert counter.rounds == len(history) == est.best_iteration + 3
    booster = est.get_booster()
    assert booster is est.booster_ and int(booster.attr("best_iteration")) == est.best_iteration
    config = json.loads(booster.save_config())["learner"]["gradient_booster"]
    assert float(config["tree_train_param"]["min_child_weight"]) == 2.0  # any XGBoost keyword
    assert list(est.classes_) == list(LABELS) and est.n_classes_ == 3
    assert est.feature_importances_.shape == (X.shape[1],)
    assert set(est.predict(valid[0], lengths=valid[2])) <= set(LABELS)
    proba = est.predict_proba(valid[0], lengths=valid[2])
    assert proba.shape == (len(valid[1]), 3) and est.score(*valid[:2], lengths=valid[2]) > 0.5
    # Model files: JSON under a .json name; another extension is refused, never silently JSON.
    est.set_params(callbacks=None).save_model(tmp_path / "m.json")  # callbacks are code
    back = sb.XGBCRFClassifier().load_model(tmp_path / "m.json")
    assert back.best_iteration == est.best_iteration
    np.testing.assert_array_equal(back.predict(valid[0], lengths=valid[2]),
                                  est.predict(valid[0], lengths=valid[2]))  # fmt: skip
    for name in ("m.ubj", "m.model", "m"):
        with pytest.raises(ValueError, match=r"writes JSON.*name the file \*\.json"):
            est.save_model(tmp_path / name)
        assert not (tmp_path / name).exists()


def test_lightgbm_row(data, capsys):
    pytest.importorskip("lightgbm")
    (X, y, lengths), valid = parts(data)
    seen = []
    est = sb.LGBMCRFClassifier(
        n_estimators=40, learning_rate=1.0, num_leaves=8, min_child_samples=5, n_jobs=1,
        early_stopping_rounds=2, callbacks=[lambda env: seen.append(env.iteration)],
    )  # fmt: skip
    est.fit(X, y, lengths=lengths, eval_set=[valid])
    assert "validation_0's crf-nll" in capsys.readouterr().out  # logs by default, as XGBoost
    history = est.evals_result_["validation_0"]["crf-nll"]
    # LightGBM's numbering: best_iteration_ counts from 1, as LGBMClassifier's.
    assert est.best_iteration_ == est.booster_.best_iteration == int(np.argmin(history)) + 1
    assert est.best_iteration == est.best_iteration_ - 1
    assert len(seen) == len(history) == est.best_iteration_ + 2
    raw = est.booster_.predict(valid[0], raw_score=True)
    np.testing.assert_array_equal(
        raw, est.booster_.predict(valid[0], raw_score=True, num_iteration=est.best_iteration_)
    )
    assert est.booster_.params["min_child_samples"] == 5  # any LightGBM keyword


@pytest.mark.parametrize("cls", [sb.XGBCRFClassifier, sb.LGBMCRFClassifier],
                         ids=["xgboost", "lightgbm"])  # fmt: skip
def test_class_weight_weighs_each_sequence_by_its_labels(data, cls, tmp_path):
    if cls is sb.LGBMCRFClassifier:
        pytest.importorskip("lightgbm")
    (X, y, lengths), valid = parts(data)
    common = {"n_estimators": 4, "learning_rate": 1.0, "n_jobs": 1}
    weights = {"B-X": 4.0, "O": 0.5}
    est = cls(**common, class_weight=weights).fit(X, y, lengths=lengths, verbose=False)
    # The oracle: the documented sequence weights, the mean class weight of each sequence.
    per_row = np.array([weights.get(label, 1.0) for label in y])
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    per_seq = np.add.reduceat(per_row, starts) / lengths
    ref = cls(**common).fit(X, y, lengths=lengths, sample_weight=np.repeat(per_seq, lengths),
                            verbose=False)  # fmt: skip
    Xv, lv = valid[0], valid[2]
    np.testing.assert_allclose(est.predict_proba(Xv, lengths=lv), ref.predict_proba(Xv, lengths=lv),
                               rtol=1e-6)  # fmt: skip
    plain = cls(**common).fit(X, y, lengths=lengths, verbose=False)
    assert not np.allclose(plain.predict_proba(valid[0], lengths=valid[2]),
                           est.predict_proba(valid[0], lengths=valid[2]))  # fmt: skip
    assert "class_weight" not in est._engine_kwargs()  # the engine never sees it
    est.save_model(tmp_path / "m.json")
    assert cls().load_model(tmp_path / "m.json").class_weight == weights
    codes = cls(**common, class_weight={0: 2.0}).fit(X, np.unique(y, return_inverse=True)[1],
                                                     lengths=lengths, verbose=False)  # fmt: skip
    codes.save_model(tmp_path / "c.json")
    assert cls().load_model(tmp_path / "c.json").class_weight == {0: 2.0}  # int labels stay ints
    with pytest.raises(ValueError, match="class_weight names labels not in y"):
        cls(**common, class_weight={"B-Y": 2.0}).fit(X, y, lengths=lengths)
    with pytest.raises(ValueError, match="every training sequence with weight zero"):
        cls(**common, class_weight=dict.fromkeys(np.unique(y), 0.0)).fit(X, y, lengths=lengths)


def test_sklearn_crfsuite_row():
    rng = np.random.default_rng(0)
    words = ["Paris", "visits", "the", "EU", "in", "June"]
    tags = {"Paris": "B-LOC", "EU": "B-ORG"}
    sents = [list(rng.choice(words, size=rng.integers(3, 7))) for _ in range(40)]
    X = [[{"w": w, "title": w.istitle()} for w in s] for s in sents]
    y = [[tags.get(w, "O") for w in s] for s in sents]
    crf = sb.XGBSequenceCRF(n_estimators=5, learning_rate=1.0, n_jobs=1)
    crf.fit(X, y)
    pred = crf.predict(X)
    assert pred == y
    assert crf.predict_single(X[0]) == y[0]
    marginals = crf.predict_marginals(X)
    assert [m.shape for m in marginals] == [(len(s), len(crf.classes_)) for s in y]
    assert metrics.flat_f1_score(y, pred, average="macro") == 1.0
    assert metrics.span_prf(y, pred).loc["overall", "f1"] == 1.0


def test_scikit_learn_row(data):
    X, y, lengths = data["X"], data["y"], data["lengths"]
    ids = np.repeat(np.arange(len(lengths)), lengths)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(sid=ids)
    est = sb.XGBCRFClassifier(n_estimators=4, learning_rate=1.0, n_jobs=1,
                              sequence_column="sid")  # fmt: skip
    assert clone(est).get_params() == est.get_params()
    pipe = Pipeline([("copy", FunctionTransformer(lambda f: f.copy())), ("crf", est)])
    scores = cross_val_score(pipe, frame, y, groups=ids, cv=GroupKFold(3), error_score="raise")
    assert scores.shape == (3,) and (scores > 0.5).all()
    # HistGradientBoosting's early stopping names, sequences held out (see test_early_stopping).
    assert {"early_stopping", "validation_fraction", "n_iter_no_change"} <= set(est.get_params())
    assert est.early_stopping == "auto"
