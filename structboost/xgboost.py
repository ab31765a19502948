"""The functional API on XGBoost boosters: objectives, parameters, data and prediction.

``import structboost.xgboost as sbx``. The chain objective and its
parameters are also at the top level (``structboost.crf_objective``,
``structboost.xgb_params``, the design's contract); here besides them are
boosted, input-dependent transitions (:func:`edge_crf_objective` with
:func:`edge_dmatrix`) and tree CRFs (:func:`tree_crf_objective` with
:func:`tree_dmatrix` or :func:`register_tree`, predicted by
:func:`predict_tree`, :func:`predict_tree_marginals` and
:func:`tree_log_likelihood`). Chains of either engine predict with
:func:`structboost.predict` and friends.
"""

from .engines.edge import edge_crf_objective, edge_dmatrix
from .engines.predict import predict_tree, predict_tree_marginals, tree_log_likelihood
from .engines.xgboost import crf_objective, xgb_params
from .engines.xgboost_tree import register_tree, tree_crf_objective, tree_dmatrix

__all__ = [
    "crf_objective",
    "edge_crf_objective",
    "edge_dmatrix",
    "predict_tree",
    "predict_tree_marginals",
    "register_tree",
    "tree_crf_objective",
    "tree_dmatrix",
    "tree_log_likelihood",
    "xgb_params",
]
