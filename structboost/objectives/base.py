"""What the objectives and prediction check of their inputs (margins, sequence weights), and a
round's blocks of whole sequences.
"""

import numpy as np

from .. import _config
from ..sequences import sequence_blocks
from ._kernels import scan_values

# Node scores beyond this size mean a diverged model: a probability of
# exp(-1e12) is not a prediction, and from about 1e16 float64 can no longer
# resolve score differences of order 1 (marginals become NaN).
MARGIN_LIMIT = 1e12
DIVERGED = (
    "training has diverged: lower the learning rate (eta), raise min_child_weight or "
    "reg_lambda, or use hessian_bound='mixing' instead of a fixed bound below the true one"
)


def check_margin_values(margins, what, cause):
    """Raise naming the first row of ``margins (n, K)`` that is NaN, infinite or beyond
    :data:`MARGIN_LIMIT` (``what`` they are, the ``cause`` and fix in the message).

    Returns
    -------
    int or None
        The checksum of C- or F-contiguous float32 margins (:func:`~._kernels.scan_values`).
    """
    flat = margins.ravel(order="K") if margins.flags.forc else None
    if flat is not None:
        within, checksum = scan_values(flat, MARGIN_LIMIT, _config.parallel(margins.shape[0]))
        if within:
            return checksum
    step = max(1, _config.BLOCK_ENTRIES // max(1, margins.shape[1]))
    beyond = lambda a: ~(np.abs(margins[a : a + step]) <= MARGIN_LIMIT)  # noqa: E731 (NaN too)
    for lo in range(0, margins.shape[0], step):
        bad = beyond(lo)
        if bad.any():
            row, label = (int(i) for i in np.argwhere(bad)[0])
            row += lo
            value = float(margins[row, label])
            count = sum(int(beyond(a).sum()) for a in range(lo, margins.shape[0], step))
            kind = "not finite" if not np.isfinite(value) else f"beyond +-{MARGIN_LIMIT:g}"
            raise ValueError(
                f"{what} of row {row}, label {label} is {value:g} ({kind}; {count} "
                f"value(s) in all): {cause}."
            )
    return None


def check_sequence_weights(seq_weight, lengths):
    """One finite non-negative weight per sequence ``(m,)``; ones when None or empty."""
    if seq_weight is None or len(seq_weight) == 0:
        return np.ones(len(lengths))
    w = np.asarray(seq_weight, dtype=np.float64)
    if w.shape != lengths.shape:
        raise ValueError(
            f"weights must be one per sequence ({len(lengths)}); got shape {w.shape}. "
            "Give each sequence one weight (XGBoost stores group weights)."
        )
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("sequence weights must be finite and non-negative.")
    return w


def row_blocks(offsets, shape):
    """The ``(rows, sequences)`` slices of the blocks of whole sequences a round over ``shape = (n,
    K)`` takes.
    """
    bounds = sequence_blocks(offsets, _config.block_rows(*shape))
    for s0, s1 in zip(bounds[:-1], bounds[1:]):
        yield slice(offsets[s0], offsets[s1]), slice(s0, s1)

