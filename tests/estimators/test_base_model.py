"""Boosting from a base model: estimators with base_model=, and the xgboost.train recipe."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import xgboost as xgb
from sklearn.base import clone

import structboost as sb
from structboost import inference
from structboost.datasets import make_hmm_sequences
from structboost.estimators.linear import LinearChainCRF
from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.lgbm import LGBMCRFClassifier

pytestmark = pytest.mark.usefixtures("single_threaded")

SMALL = {
    XGBCRFClassifier: {"max_depth": 3, "n_jobs": 1},
    LGBMCRFClassifier: {"num_leaves": 8, "min_child_samples": 5, "n_jobs": 1},
}
ESTIMATORS = pytest.mark.parametrize(
    "cls", [XGBCRFClassifier, LGBMCRFClassifier], ids=["xgboost", "lightgbm"]
)


def converged_base():
    return LinearChainCRF(reg=1.0, max_iter=500, tol=1e-12)


@pytest.fixture(scope="module")
def data():
    X, y, lengths = make_hmm_sequences(
        n_sequences=40, length=(5, 12), stay=0.85, random_state=0
    )
    return X, y, lengths


def base_nll(model, X, y, lengths):
    p = model.transitions_
    unary = model.decision_function(X)
    return inference.sequence_nll(unary, lengths, y, p.transitions, p.start, p.end).sum()


@ESTIMATORS
def test_a_vanishing_round_predicts_like_the_base_model(cls, data):
    X, y, lengths = data
    est = cls(n_estimators=1, learning_rate=1e-9, base_model=converged_base(), **SMALL[cls])
    est.fit(X, y, lengths=lengths)
    base = est.base_model_
    assert base is not est.base_model and not hasattr(est.base_model, "coef_")
    np.testing.assert_array_equal(est.predict(X, lengths=lengths), base.predict(X, lengths))
    np.testing.assert_allclose(
        est.predict_marginals(X, lengths=lengths), base.predict_marginals(X, lengths), atol=1e-5
    )
    np.testing.assert_allclose(
        -est.predict_log_likelihood(X, y, lengths=lengths).sum(),
        base_nll(base, X, y, lengths),
        rtol=1e-6,
    )


@ESTIMATORS
def test_boosting_lowers_the_base_models_nll_and_survives_pickle(cls, data):
    X, y, lengths = data
    est = cls(n_estimators=5, learning_rate=0.3, base_model=converged_base(), **SMALL[cls])
    est.fit(X, y, lengths=lengths, eval_set=[(X, y, lengths)])
    combined = -est.predict_log_likelihood(X, y, lengths=lengths).sum()
    assert combined < base_nll(est.base_model_, X, y, lengths)
    history = next(iter(est.evals_result_.values()))
    assert history[next(iter(history))][-1] == pytest.approx(combined / len(lengths), rel=1e-6)
    loaded = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(
        loaded.predict_marginals(X, lengths=lengths), est.predict_marginals(X, lengths=lengths)
    )
    assert loaded.score(X, y, lengths=lengths) == est.score(X, y, lengths=lengths)


@ESTIMATORS
def test_base_model_on_its_own_sparse_input(cls, data):
    X, y, lengths = data
    base_X = sp.csr_matrix(X, dtype=np.float32)  # the base model sees every symbol
    trees_X = X[:, :4]  # the trees see a few columns only
    est = cls(n_estimators=2, base_model=converged_base(), **SMALL[cls])
    est.fit(
        trees_X, y, lengths=lengths, base_X=base_X,
        eval_set=[{"X": trees_X, "y": y, "lengths": lengths, "base_X": base_X}],
    )
    assert est.base_model_.coef_.shape == (X.shape[1], 3)
    labels = est.predict(trees_X, lengths=lengths, base_X=base_X)
    assert labels.shape == y.shape
    with pytest.raises(ValueError, match="dicts with a 'base_X' key"):
        clone(est).fit(trees_X, y, lengths=lengths, base_X=base_X,
                       eval_set=[(trees_X, y, lengths)])
    with pytest.raises(ValueError, match="features but the model was fit on"):
        est.predict(trees_X, lengths=lengths)  # base_X forgotten
    with pytest.raises(ValueError, match="one row per row of X"):
        est.predict(trees_X, lengths=lengths, base_X=base_X[:-1])


def test_base_x_without_base_model_and_nested_params(data):
    X, y, lengths = data
    with pytest.raises(ValueError, match="base_model is None"):
        XGBCRFClassifier(n_estimators=1, n_jobs=1).fit(X, y, lengths=lengths, base_X=X)
    est = XGBCRFClassifier(base_model=LinearChainCRF(reg=2.0))
    assert est.get_params()["base_model__reg"] == 2.0
    copy = clone(est).set_params(base_model__reg=0.5)
    assert copy.base_model.reg == 0.5 and est.base_model.reg == 2.0


def test_the_xgboost_train_recipe_matches_the_estimator(data):
    X, y, lengths = data
    params = {"max_depth": 3, "n_jobs": 1}
    est = XGBCRFClassifier(n_estimators=3, base_model=converged_base(), **params)
    est.fit(X, y, lengths=lengths)

    crf = converged_base().fit(X, y, lengths)
    margin = crf.decision_function(X)
    obj = sb.crf_objective(num_labels=3)
    obj.crf.params = crf.transitions_.copy()
    dtrain = xgb.DMatrix(X, label=y, group=lengths, base_margin=margin)
    booster = xgb.train(
        sb.xgb_params(3, eta=0.3, **params), dtrain, num_boost_round=3, obj=obj,
        callbacks=[obj.callback()],
    )
    recipe = sb.predict_marginals(booster, xgb.DMatrix(X, base_margin=margin), lengths=lengths)
    np.testing.assert_allclose(est.predict_marginals(X, lengths=lengths), recipe, atol=1e-6)
    same = sb.predict_marginals(booster, X, lengths=lengths, base_margin=margin)
    np.testing.assert_allclose(same, recipe, atol=1e-6)
    with pytest.raises(ValueError, match="base_margin has shape"):
        sb.predict(booster, X, lengths=lengths, base_margin=margin[:, :2])
