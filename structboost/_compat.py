"""Version shims of XGBoost and LightGBM, in one place.

Each shim names the engine release that changed and what structboost does
on either side of it; the rest of the package asks here instead of reading
versions or signatures itself.
"""

import xgboost as xgb


def _release(version):
    """``(major, minor)`` of a version string such as ``"3.1.0rc1"``."""
    return tuple(int(part) for part in version.split(".")[:2])


#: XGBoost 3.1 made the intercept one value per output: a model saved by it
#: stores K values, and continuing training with a scalar ``base_score`` fails.
XGB_VECTOR_INTERCEPT = _release(xgb.__version__) >= (3, 1)
