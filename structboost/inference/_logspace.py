"""Log-space helpers shared by the chain and tree kernels (numba, no validation)."""

import numpy as np

from .._config import KERNEL, njit


@njit(**KERNEL)
def logsumexp(x):
    """``log sum_j exp(x[j])`` of a ``(K,)`` vector; ``-inf`` when every entry is ``-inf``."""
    top = -np.inf
    for j in range(x.shape[0]):
        if x[j] > top:
            top = x[j]
    if top == -np.inf:
        return -np.inf
    s = 0.0
    for j in range(x.shape[0]):
        s += np.exp(x[j] - top)
    return top + np.log(s)
