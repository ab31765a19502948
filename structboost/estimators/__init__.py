"""scikit-learn estimators: chain CRFs on XGBoost and LightGBM, tree CRFs,
multi-label structures, and the linear-chain CRF."""
