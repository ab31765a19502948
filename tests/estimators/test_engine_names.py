"""An estimator parameter named like an engine's means what the engine means by it.

The estimators forward every keyword outside their signature to XGBoost or
LightGBM, so a signature name that an ``XGBClassifier`` or ``LGBMClassifier``
user knows must reach the engine with the engine's meaning (or be the
scikit-learn wrapper's own, such as ``eval_metric``); the objective's
settings carry names no engine uses (``hessian_bound``, not ``gamma``).
"""

import json

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.estimators.base import BoostedCRFClassifier
from structboost.estimators.dask import DaskXGBCRFClassifier
from structboost.objectives.params import DEFAULTS

pytestmark = pytest.mark.usefixtures("single_threaded")

ENGINE_NAMES = set(xgb.XGBClassifier().get_params()) | set(lgb.LGBMClassifier().get_params())
#: Shared names and what they are in the engines' scikit-learn wrappers, which they stay here.
WITH_ENGINE_MEANING = {
    "n_estimators": "boosting rounds",
    "learning_rate": "shrinkage (XGBoost's eta)",
    "max_depth": "tree depth",
    "num_leaves": "LightGBM's leaves per tree",
    "early_stopping_rounds": "patience on the last eval_set entry",
    "eval_metric": "the metrics recorded on eval_set (the CRF's own names or callables)",
    "callbacks": "the engine's training callbacks",
    "random_state": "the engine's seed",
    "class_weight": "LightGBM's per-class weights ({label: w} or 'balanced'), on sequences",
}
ESTIMATORS = sorted(
    {
        DaskXGBCRFClassifier,
        *(c for c in vars(sb).values() if isinstance(c, type) and issubclass(c, BoostedCRFClassifier)),
    },
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_no_estimator_parameter_borrows_an_engine_name(cls):
    shared = set(cls._get_param_names()) & ENGINE_NAMES
    assert shared <= set(WITH_ENGINE_MEANING), sorted(shared - set(WITH_ENGINE_MEANING))
    assert not set(DEFAULTS) & ENGINE_NAMES  # the objective's names are its own


@pytest.fixture(scope="module")
def data():
    X, y, lengths = make_hmm_sequences(n_sequences=30, length=(5, 10), random_state=3)
    return X, y, lengths


def _xgb_config(booster):
    return json.loads(booster.save_config())["learner"]["gradient_booster"]["tree_train_param"]


def test_xgboost_names_reach_xgboost(data):
    X, y, lengths = data
    est = sb.XGBCRFClassifier(n_estimators=2, learning_rate=0.7, max_depth=2, n_jobs=1)
    config = _xgb_config(est.fit(X, y, lengths=lengths).booster_)
    assert float(config["eta"]) == pytest.approx(0.7) and int(config["max_depth"]) == 2
    assert est.booster_.num_boosted_rounds() == 2
    assert any('"split"' in t for t in est.booster_.get_dump(dump_format="json"))
    # gamma is XGBoost's split penalty: a huge one leaves every tree a stump
    stumps = sb.XGBCRFClassifier(n_estimators=2, gamma=1e9, n_jobs=1).fit(X, y, lengths=lengths)
    assert float(_xgb_config(stumps.booster_)["gamma"]) == pytest.approx(1e9)
    assert all(t.count('"split"') == 0 for t in stumps.booster_.get_dump(dump_format="json"))
    assert stumps.get_params()["hessian_bound"] == DEFAULTS["hessian_bound"]


def test_lightgbm_names_reach_lightgbm(data):
    X, y, lengths = data
    est = sb.LGBMCRFClassifier(
        n_estimators=2, learning_rate=0.7, max_depth=2, num_leaves=3, n_jobs=1,
        min_child_samples=2,
    ).fit(X, y, lengths=lengths)  # fmt: skip
    params = est.booster_.params
    assert (params["learning_rate"], params["max_depth"], params["num_leaves"]) == (0.7, 2, 3)
    assert est.booster_.current_iteration() == 2
    assert np.isfinite(est.predict_proba(X, lengths=lengths)).all()


@pytest.mark.parametrize(
    "cls, keyword, message",
    [
        (sb.XGBCRFClassifier, {"verbose": False}, "an argument of fit"),
        (sb.XGBCRFClassifier, {"eta": 0.1}, "learning_rate="),
        (sb.XGBCRFClassifier, {"min_child_weigth": 2}, "did you mean 'min_child_weight'"),
        (sb.LGBMCRFClassifier, {"num_boost_round": 5}, "n_estimators"),
        (sb.TreeCRFClassifier, {"hessian_floor": 1e-3}, "hessian_floor"),
    ],
)
def test_an_unknown_keyword_is_refused_by_name_before_any_training(cls, keyword, message, data):
    X, y, lengths = data
    clf = cls(n_estimators=2, **keyword)
    with pytest.raises(ValueError, match=message):
        if cls is sb.TreeCRFClassifier:
            clf.fit([X[:5]], [y[:5]], parents=[np.array([-1, 0, 0, 1, 1])])
        else:
            clf.fit(X, y, lengths=lengths)


def test_the_objectives_keywords_reach_the_objective_not_the_engine(data):
    X, y, lengths = data
    clf = sb.XGBCRFClassifier(n_estimators=2, transition_iter=3, hess_floor=1e-6)
    clf.fit(X, y, lengths=lengths, verbose=False)
    params = json.loads(clf.booster_.save_config())["learner"]
    assert "transition_iter" not in json.dumps(params) and "hess_floor" not in json.dumps(params)
    assert clf.get_params()["transition_iter"] == 3
    spec = clf._objective_spec([("crf-nll", "crf-nll")])
    assert (spec.transition_iter, spec.hess_floor) == (3, 1e-6)
