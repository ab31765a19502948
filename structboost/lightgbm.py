"""The functional API on LightGBM boosters: objective, parameters, model files.

``import structboost.lightgbm as sbl`` (needs ``pip install
"structboost-crf[lightgbm]"``). :func:`lgb_crf_objective` with
:func:`lgb_params` trains a chain CRF through ``lightgbm.train``;
:func:`save_lgb_model` / :func:`load_lgb_model` keep its transitions with
the model; :func:`structboost.predict` and friends predict from it.
"""

from ._extras import require

require("lightgbm", "lightgbm", "structboost.lightgbm")

from .engines.lightgbm import lgb_crf_objective, lgb_params, load_lgb_model, save_lgb_model  # noqa: E402

__all__ = ["lgb_crf_objective", "lgb_params", "load_lgb_model", "save_lgb_model"]
