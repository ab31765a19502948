"""structboost: conditional random field objectives for XGBoost and LightGBM.

Each training row is one position of one sequence; the engine's K outputs
per row are the CRF node potentials. See :func:`crf_objective`.
"""

from . import datasets, inference, majorize, metrics, multilabel
from .multilabel import ESSTreeCRFClassifier, read_arff_multilabel
from .tree_estimators import TreeCRFClassifier
from .tree_xgboost import (
    predict_tree,
    predict_tree_marginals,
    register_tree,
    tree_crf_objective,
    tree_dmatrix,
    tree_log_likelihood,
)
from .objective import CRFObjective
from .predict import predict, predict_marginals, sequence_log_likelihood
from .transitions import TransitionParams
from .xgboost import crf_objective, xgb_params

__version__ = "0.1.0.dev0"

__all__ = [
    "CRFObjective",
    "ESSTreeCRFClassifier",
    "TreeCRFClassifier",
    "TransitionParams",
    "__version__",
    "crf_objective",
    "datasets",
    "inference",
    "majorize",
    "metrics",
    "multilabel",
    "predict_tree",
    "predict_tree_marginals",
    "read_arff_multilabel",
    "register_tree",
    "tree_crf_objective",
    "tree_dmatrix",
    "tree_log_likelihood",
    "predict",
    "predict_marginals",
    "sequence_log_likelihood",
    "xgb_params",
]
