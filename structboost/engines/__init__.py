"""Engine adapters: XGBoost and LightGBM objectives, metrics and callbacks, the
CRF state stored in model files, and engine-neutral prediction.

LightGBM is optional: :mod:`.lightgbm` is imported only when used.
"""
