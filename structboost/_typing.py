"""Type aliases of the public API's hints; the docstrings give the shapes."""

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: A float64 array, e.g. ``(n, K)`` marginals or ``(m,)`` log-likelihoods.
Floats = NDArray[np.float64]
#: An int64 array, e.g. ``(n,)`` labels.
Ints = NDArray[np.int64]

__all__ = ["ArrayLike", "Floats", "Ints"]
