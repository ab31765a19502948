"""structboost: conditional random field objectives for XGBoost and LightGBM.

Each training row is one position of one sequence; the engine's K outputs
per row are the CRF node potentials. See :func:`crf_objective`.
"""

from . import constraints, datasets, inference, lexical, majorize, metrics, multilabel
from .constraints import allowed_transitions
from .lexical import TokenFeatures
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
from .latent import LatentLogLinearClassifier
from .linear import LinearChainCRF
from .sklearn import LGBMCRFClassifier, XGBCRFClassifier
from .xgboost import crf_objective, xgb_params

# LightGBM is optional (the ``lightgbm`` extra): its functions load on first use.
_LIGHTGBM_NAMES = ("lgb_crf_objective", "lgb_params", "load_lgb_model", "save_lgb_model")


def __getattr__(name):
    if name in _LIGHTGBM_NAMES:
        from . import lightgbm

        return getattr(lightgbm, name)
    raise AttributeError(f"module 'structboost' has no attribute {name!r}")


__version__ = "0.1.0.dev0"

__all__ = [
    "CRFObjective",
    "ESSTreeCRFClassifier",
    "LGBMCRFClassifier",
    "LatentLogLinearClassifier",
    "LinearChainCRF",
    "TokenFeatures",
    "TreeCRFClassifier",
    "TransitionParams",
    "XGBCRFClassifier",
    "__version__",
    "allowed_transitions",
    "constraints",
    "crf_objective",
    "datasets",
    "inference",
    "lexical",
    "lgb_crf_objective",
    "lgb_params",
    "load_lgb_model",
    "majorize",
    "metrics",
    "multilabel",
    "predict_tree",
    "predict_tree_marginals",
    "read_arff_multilabel",
    "register_tree",
    "save_lgb_model",
    "tree_crf_objective",
    "tree_dmatrix",
    "tree_log_likelihood",
    "predict",
    "predict_marginals",
    "sequence_log_likelihood",
    "xgb_params",
]
