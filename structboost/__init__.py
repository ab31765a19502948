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

from ._extras import require_xgboost

require_xgboost()  # before the imports below need it

from . import _compile_log, inference
from .engines.predict import predict, predict_marginals, sequence_log_likelihood
from .engines.xgboost import crf_objective, xgb_params
from .estimators.chain import LGBMCRFClassifier, XGBCRFClassifier
from .estimators.crfsuite import LGBMSequenceCRF, XGBSequenceCRF
from .estimators.latent import LatentLogLinearClassifier
from .estimators.linear import LinearChainCRF
from .estimators.multilabel import ESSTreeCRFClassifier
from .estimators.tree import TreeCRFClassifier
from .objectives.constraints import allowed_transitions
from ._version import __version__

# A library logs and lets the application decide: silent unless configured
# (the ``structboost`` command logs at INFO).
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ESSTreeCRFClassifier",
    "LGBMCRFClassifier",
    "LGBMSequenceCRF",
    "LatentLogLinearClassifier",
    "LinearChainCRF",
    "TreeCRFClassifier",
    "XGBCRFClassifier",
    "XGBSequenceCRF",
    "__version__",
    "allowed_transitions",
    "crf_objective",
    "inference",
    "predict",
    "predict_marginals",
    "sequence_log_likelihood",
    "xgb_params",
]
