"""structboost: conditional random field objectives for XGBoost and LightGBM."""

from . import inference

__version__ = "0.1.0.dev0"

__all__ = ["inference", "__version__"]
