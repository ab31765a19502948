"""structboost: conditional random field objectives for XGBoost and LightGBM.

Each training row is one position of one sequence; the engine's K outputs
per row are the CRF node potentials. See :func:`crf_objective`.
"""

from . import datasets, inference, majorize, metrics
from .objective import CRFObjective
from .predict import predict, predict_marginals, sequence_log_likelihood
from .transitions import TransitionParams
from .xgboost import crf_objective, xgb_params

__version__ = "0.1.0.dev0"

__all__ = [
    "CRFObjective",
    "TransitionParams",
    "__version__",
    "crf_objective",
    "datasets",
    "inference",
    "majorize",
    "metrics",
    "predict",
    "predict_marginals",
    "sequence_log_likelihood",
    "xgb_params",
]
