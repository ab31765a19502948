"""The functional API on XGBoost boosters: objectives, parameters, data and prediction.

``import structboost.xgboost as sbx``: the chain objective and parameters
(also at the top level), boosted input-dependent transitions
(:func:`edge_crf_objective`, :func:`edge_dmatrix`) and tree CRFs
(:func:`tree_crf_objective`, :func:`tree_dmatrix`, :func:`register_tree`,
:func:`predict_tree`, ...). Chains predict with :func:`structboost.predict`.
"""

from .engines.edge import edge_crf_objective, edge_dmatrix
from .engines.predict import predict_tree, predict_tree_marginals, tree_log_likelihood
from .engines.xgboost import crf_objective, xgb_params
from .engines.xgboost_tree import register_tree, tree_crf_objective, tree_dmatrix

__all__ = ["crf_objective", "edge_crf_objective", "edge_dmatrix", "predict_tree",
           "predict_tree_marginals", "register_tree", "tree_crf_objective", "tree_dmatrix",
           "tree_log_likelihood", "xgb_params"]
