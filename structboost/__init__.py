"""structboost: conditional random field objectives for XGBoost and LightGBM.

Each training row is one position of one sequence; the engine's K outputs
per row are the CRF node potentials. Three doors:

- scikit-learn estimators: :class:`XGBCRFClassifier`,
  :class:`LGBMCRFClassifier`, :class:`TreeCRFClassifier`,
  :class:`ESSTreeCRFClassifier`, :class:`LinearChainCRF`,
  :class:`LatentLogLinearClassifier`;
- raw boosters: :func:`crf_objective` and :func:`xgb_params` for
  ``xgboost.train``, :func:`predict`, :func:`predict_marginals` and
  :func:`sequence_log_likelihood` for XGBoost and LightGBM boosters;
  engine-specific functions in :mod:`structboost.xgboost` (boosted
  transitions, tree CRFs) and :mod:`structboost.lightgbm`;
- research: :mod:`structboost.inference` (exact inference, numpy in and
  out), :mod:`structboost.majorize` (the Jebara & Choromanska bound),
  :mod:`structboost.objectives`, :mod:`structboost.transitions`.
"""

import logging

from . import _compile_log, inference
from ._extras import installed, require_xgboost
from .engines.predict import predict, predict_marginals, sequence_log_likelihood
from .estimators.latent import LatentLogLinearClassifier
from .estimators.lgbm import LGBMCRFClassifier, LGBMSequenceCRF
from .estimators.linear import LinearChainCRF
from .objectives.constraints import allowed_transitions
from ._version import __version__

#: The names that need XGBoost: imported with the package where XGBoost is
#: installed; elsewhere using one raises ImportError with the install command.
_XGBOOST_NAMES = (
    "ESSTreeCRFClassifier", "TreeCRFClassifier", "XGBCRFClassifier", "XGBSequenceCRF",
    "crf_objective", "xgb_params",
)  # fmt: skip
if installed("xgboost"):
    from .engines.xgboost import crf_objective, xgb_params
    from .estimators.chain import XGBCRFClassifier, XGBSequenceCRF
    from .estimators.multilabel import ESSTreeCRFClassifier
    from .estimators.tree import TreeCRFClassifier


def __getattr__(name):
    """ImportError with the install command for the XGBoost names where XGBoost is missing."""
    if name in _XGBOOST_NAMES:
        require_xgboost()
    raise AttributeError(f"module 'structboost' has no attribute {name!r}")


# A library logs and lets the application decide: silent unless configured
# (the ``structboost`` command logs at INFO).
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = sorted(
    name
    for name in ("LGBMCRFClassifier", "LGBMSequenceCRF", "LatentLogLinearClassifier",
                 "LinearChainCRF", "__version__", "allowed_transitions", "inference", "predict",
                 "predict_marginals", "sequence_log_likelihood", *_XGBOOST_NAMES)
    if name in globals()
)  # fmt: skip
