"""XGBCRFClassifier(transitions_from="input"): boosted transitions behind the estimator API."""

import pickle

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from sklearn.base import clone

import structboost as sb
from structboost.engines.predict import crf_inputs

K = 3
NAMES = np.array(["down", "flat", "up"])


@pytest.fixture(scope="module")
def data(single_threaded):
    """Labels that keep or rotate as an input feature says: transitions depend on X."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 12, size=90)
    X, y, ids = [], [], []
    for i, length in enumerate(lengths):
        labels = [int(rng.integers(K))]
        switch = rng.normal(size=length)
        for t in range(1, length):
            labels.append(labels[-1] if switch[t] > 0 else (labels[-1] + 1) % K)
        labels = np.array(labels)
        X.append(np.column_stack([labels + rng.normal(scale=1.2, size=length), switch]))
        y.append(NAMES[labels])
        ids.append(np.full(length, i))
    frame = pd.DataFrame(np.concatenate(X), columns=["obs", "switch"])
    frame["sentence_id"] = np.concatenate(ids)
    cut = int(lengths[:60].sum())
    y = np.concatenate(y)
    return {
        "train": (frame.iloc[:cut], y[:cut]),
        "test": (frame.iloc[cut:].reset_index(drop=True), y[cut:]),
    }


def small(**kw):
    settings = dict(n_estimators=15, learning_rate=1.0, max_depth=3, min_child_weight=0.1)
    return sb.XGBCRFClassifier(transitions_from="input", n_jobs=1, **{**settings, **kw})


@pytest.fixture(scope="module")
def fitted(data):
    frame, y = data["train"]
    return small().fit(frame, y, groups="sentence_id")


def test_fit_predict_and_consistency(data, fitted):
    frame, y = data["test"]
    labels = fitted.predict(frame, groups="sentence_id")
    assert set(labels) <= set(NAMES)
    marg = fitted.predict_marginals(frame, groups="sentence_id")
    assert marg.shape == (len(y), K)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0)
    by_marginal = fitted.predict(frame, groups="sentence_id", decode="marginal")
    np.testing.assert_array_equal(by_marginal, fitted.classes_[marg.argmax(axis=1)])
    loglik = fitted.predict_log_likelihood(frame, y, groups="sentence_id")
    assert loglik.shape == (frame["sentence_id"].nunique(),) and (loglik < 0).all()
    lengths = frame.groupby("sentence_id", sort=False).size().to_numpy()
    u, offsets, params, _ = crf_inputs(fitted.booster_, frame.drop(columns="sentence_id"), lengths=lengths)
    assert params.transitions.shape == (len(y), K, K)
    imp = fitted.feature_importances_
    assert imp.shape == (2,) and imp.sum() == pytest.approx(1.0)
    assert fitted.booster_.get_score(importance_type="total_gain")["prev_label"] > 0


def test_early_stopping_model_files_and_clone(data, tmp_path):
    frame, y = data["train"]
    frame_v, y_v = data["test"]
    est = small(early_stopping_rounds=3, n_estimators=60, hessian_bound=2.0).fit(
        frame, y, groups="sentence_id", eval_set=[(frame_v, y_v, "sentence_id")]
    )
    assert est.best_iteration_ < 59
    assert len(est.evals_result_["validation_0"]["crf-nll"]) == est.best_iteration_ + 4
    labels = est.predict(frame_v, groups="sentence_id")
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict(frame_v, groups="sentence_id"), labels)
    path = tmp_path / "edge.ubj"
    est.booster_.save_model(path)
    codes = sb.predict(
        xgb.Booster(model_file=str(path)), frame_v.drop(columns="sentence_id"),
        groups=frame_v["sentence_id"].to_numpy(),
    )  # fmt: skip
    np.testing.assert_array_equal(est.classes_[codes], labels)
    assert clone(est).get_params()["transitions_from"] == "input"


def test_estimator_model_file_keeps_the_boosted_route(data, fitted, tmp_path):
    """``save_model`` / ``load_model``: the previous-label column, the edge state, no table."""
    frame_v, _ = data["test"]
    fitted.save_model(tmp_path / "edge.json")
    back = sb.XGBCRFClassifier().load_model(tmp_path / "edge.json")
    assert back.transitions_from == "input"
    np.testing.assert_array_equal(
        back.predict_marginals(frame_v, groups="sentence_id"),
        fitted.predict_marginals(frame_v, groups="sentence_id"),
    )
    np.testing.assert_array_equal(back.feature_importances_, fitted.feature_importances_)
    with pytest.raises(ValueError, match="single table"):
        back.transitions_


def test_numpy_and_allowed_transitions(data):
    frame, y = data["train"]
    X, groups = frame[["obs", "switch"]].to_numpy(), frame["sentence_id"].to_numpy()
    allowed = np.ones((K, K), dtype=bool)
    allowed[0, 2] = False  # "down" -> "up": the rotation never makes this move
    est = small(allowed_transitions=allowed).fit(X, y, groups=groups)
    frame_t, _ = data["test"]
    labels = est.predict(frame_t[["obs", "switch"]].to_numpy(), groups=frame_t["sentence_id"].to_numpy())
    same = frame_t["sentence_id"].to_numpy()[1:] == frame_t["sentence_id"].to_numpy()[:-1]
    assert not ((labels[:-1] == "down") & (labels[1:] == "up") & same).any()


def test_multi_output_trees(data):
    frame, y = data["train"]
    est = small(multi_strategy="multi_output_tree", n_estimators=5).fit(frame, y, groups="sentence_id")
    assert est.booster_.feature_types[-1] != "c"  # numeric previous label
    frame_t, _ = data["test"]
    assert est.predict(frame_t, groups="sentence_id").shape == (len(frame_t),)


def test_clear_errors(data, fitted):
    frame, y = data["train"]
    with pytest.raises(ValueError, match="single table"):
        fitted.transitions_
    with pytest.raises(ValueError, match="transitions_from must be one of"):
        small().set_params(transitions_from="nodes").fit(frame, y, groups="sentence_id")
    with pytest.raises(ValueError, match="base_model"):
        small(base_model=sb.LinearChainCRF()).fit(frame, y, groups="sentence_id")
    with pytest.raises(ValueError, match="logitboost"):
        small(mode="logitboost").fit(frame, y, groups="sentence_id")
