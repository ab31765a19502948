"""The engines' version shims (structboost._compat)."""

import inspect

import numpy as np
import pytest
import xgboost as xgb

from structboost import _compat


def test_the_intercept_shim_matches_the_installed_xgboost():
    booster = xgb.train({"objective": "reg:squarederror", "num_target": 2, "nthread": 1},
                        xgb.DMatrix(np.zeros((4, 1)), label=np.zeros((4, 2))), 1)  # fmt: skip
    saved = booster.save_config()
    vector = saved.count('"base_score":"[') == 1
    assert _compat.XGB_VECTOR_INTERCEPT == vector
    assert _compat._release("3.1.0rc1") == (3, 1) and _compat._release("2.0.3") == (2, 0)


def test_the_eval_set_keywords_are_the_installed_lightgbms():
    lgb = pytest.importorskip("lightgbm")
    keywords = _compat.lgb_eval_sets([np.zeros((2, 1))], [np.zeros(2)])
    assert set(keywords) <= set(inspect.signature(lgb.LGBMModel.fit).parameters)
    assert all(len(v) == 1 for v in keywords.values())
