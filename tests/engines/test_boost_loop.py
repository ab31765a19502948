"""The kept-margins loop (the GPU's training path) trains the model xgboost.train trains.

On a GPU the loop keeps CuPy margins; here it keeps NumPy ones, which runs the
same code: the models must be identical, callbacks, early stopping, evaluation
history, base margins and stored transitions included.
"""

import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.engines.boost_loop import train_kept_margins
from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.linear import LinearChainCRF

K = 3


@pytest.fixture(scope="module")
def data():
    train = make_hmm_sequences(n_sequences=60, length=(5, 12), stay=0.85, random_state=0)
    valid = make_hmm_sequences(n_sequences=20, length=(5, 12), stay=0.85, random_state=1)
    return train, valid


def _train(kept, data, base_margin=None):
    (X, y, lengths), (Xv, yv, lv) = data
    obj = sb.crf_objective(K)
    dtrain = xgb.DMatrix(X, label=y, group=lengths, base_margin=base_margin)
    history = {}
    options = dict(evals=[(xgb.DMatrix(Xv, label=yv, group=lv), "valid")],
                   custom_metric=obj.metric, early_stopping_rounds=2, evals_result=history,
                   verbose_eval=False, callbacks=[obj.callback()])  # fmt: skip
    params = sb.xgb_params(K, max_depth=3, eta=1.0, nthread=1)
    if kept:
        booster = train_kept_margins(params, dtrain, X, 40, obj, **options)
    else:
        booster = xgb.train(params, dtrain, 40, obj=obj, **options)
    return booster, history


@pytest.mark.parametrize("with_base_margin", [False, True])
def test_the_loop_trains_what_xgboost_train_trains(data, with_base_margin):
    (X, _, lengths), (Xv, _, lv) = data
    base = np.random.default_rng(0).normal(size=(len(X), K)) if with_base_margin else None
    (expected, expected_history), (got, history) = _train(False, data, base), _train(True, data, base)
    assert got.num_boosted_rounds() == expected.num_boosted_rounds()
    assert got.best_iteration == expected.best_iteration
    assert history == expected_history
    assert got.save_raw("json") == expected.save_raw("json")
    np.testing.assert_array_equal(sb.predict(got, Xv, lengths=lv), sb.predict(expected, Xv, lengths=lv))


def test_the_estimator_on_the_loop_fits_the_same_model(data, monkeypatch):
    (X, y, lengths), (Xv, yv, lv) = data

    def fit():
        est = XGBCRFClassifier(n_estimators=30, max_depth=3, n_jobs=1, early_stopping_rounds=2,
                               base_model=LinearChainCRF(reg=1.0))  # fmt: skip
        return est.fit(X, y, lengths=lengths, eval_set=[(Xv, yv, lv)])

    expected = fit()
    monkeypatch.setattr(XGBCRFClassifier, "_device_rows", lambda self, train: train.X)
    got = fit()
    assert got.best_iteration_ == expected.best_iteration_
    assert got.evals_result_ == expected.evals_result_
    np.testing.assert_array_equal(got.predict(Xv, lengths=lv), expected.predict(Xv, lengths=lv))
    np.testing.assert_array_equal(got.predict_proba(Xv, lengths=lv),
                                  expected.predict_proba(Xv, lengths=lv))  # fmt: skip
