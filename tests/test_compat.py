"""The engines' version shims (structboost._compat)."""

import numpy as np
import xgboost as xgb

from structboost import _compat


def test_the_intercept_shim_matches_the_installed_xgboost():
    booster = xgb.train({"objective": "reg:squarederror", "num_target": 2, "nthread": 1},
                        xgb.DMatrix(np.zeros((4, 1)), label=np.zeros((4, 2))), 1)  # fmt: skip
    saved = booster.save_config()
    vector = saved.count('"base_score":"[') == 1
    assert _compat.XGB_VECTOR_INTERCEPT == vector
    assert _compat._release("3.1.0rc1") == (3, 1) and _compat._release("2.0.3") == (2, 0)
