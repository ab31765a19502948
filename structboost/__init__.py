"""structboost: conditional random field objectives for XGBoost and LightGBM.

Each training row is one position of one sequence; the engine's K outputs
per row are the CRF node potentials. See :func:`crf_objective`.
"""

import importlib.util
import logging

from . import _config

# Before anything loads an OpenMP runtime (XGBoost, scikit-learn, numba):
# their idle threads wait without spinning unless the user chose otherwise.
_config.request_passive_openmp()

from ._extras import require_xgboost

require_xgboost()  # before the imports below need it

from . import _compile_log, datasets, features, inference, metrics
from .engines.edge import edge_crf_objective, edge_dmatrix
from .engines.predict import (
    predict,
    predict_marginals,
    predict_tree,
    predict_tree_marginals,
    sequence_log_likelihood,
    tree_log_likelihood,
)
from .engines.xgboost import crf_objective, xgb_params
from .engines.xgboost_tree import register_tree, tree_crf_objective, tree_dmatrix
from .estimators.chain import LGBMCRFClassifier, XGBCRFClassifier
from .estimators.latent import LatentLogLinearClassifier
from .estimators.linear import LinearChainCRF
from .estimators.multilabel import ESSTreeCRFClassifier, read_arff_multilabel
from .estimators.tree import TreeCRFClassifier
from .objectives.chain import CRFObjective
from .objectives.constraints import allowed_transitions
from .text.lexical import TokenFeatures
from .transitions.chain import TransitionParams
from ._version import __version__

# LightGBM is optional (the ``lightgbm`` extra): its functions load on first use.
_LIGHTGBM_NAMES = ("lgb_crf_objective", "lgb_params", "load_lgb_model", "save_lgb_model")


def __getattr__(name):
    if name in _LIGHTGBM_NAMES:
        from ._extras import require

        require("lightgbm", "lightgbm", f"structboost.{name}")
        from .engines import lightgbm

        return getattr(lightgbm, name)
    raise AttributeError(f"module 'structboost' has no attribute {name!r}")



# A library logs and lets the application decide: silent unless configured
# (the ``structboost`` command logs at INFO).
logging.getLogger(__name__).addHandler(logging.NullHandler())

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
    "crf_objective",
    "datasets",
    "edge_crf_objective",
    "edge_dmatrix",
    "features",
    "inference",
    "lgb_crf_objective",
    "lgb_params",
    "load_lgb_model",
    "metrics",
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
if importlib.util.find_spec("lightgbm") is None:  # `from structboost import *` works without it
    __all__ = [name for name in __all__ if name not in _LIGHTGBM_NAMES]
