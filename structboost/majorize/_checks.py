"""Input checks shared by the bound modules (each raises a ValueError naming the fix)."""

import numpy as np


def as_float_array(name, value, ndim):
    array = np.ascontiguousarray(value, dtype=np.float64)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {array.shape}.")
    return array


def check_finite(name, array):
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds NaN or infinite values; pass finite numbers.")


def check_weights(weights, count, what):
    if weights is None:
        return np.ones(count)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (count,):
        raise ValueError(f"weights must have shape ({count},), one per {what}, got {weights.shape}.")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be finite and non-negative.")
    return weights
