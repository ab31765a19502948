"""The adaptive step of GBCRF: the gamma Hessian scaled to the curvature trees meet.

:class:`SecantScale` measures the NLL's curvature along the step the engine
took (all of a round's trees) and scales the node bound to it::

    tau   = 2 (f(m + d) - f(m) - G . d) / (d' H d)     # true / model curvature along d
    scale = clip(scale * tau, scale / 4, 1)
    H     = max(2 p (1 - p), scale * gamma_t p (1 - p))   # per row and label, if scale < 1

with ``f`` the weighted NLL at fixed transitions, ``G``, ``H`` last round's
and ``d`` the change of the margins; the floor is LogitBoost's Hessian, and
the scale starts at 1 (the bound).

In a one-pass round the transitions moved too: ``f`` is the whole NLL, the
transition step's share removed by the trapezoid rule, and the curvature is
the larger of that value secant and the gradient secant ``(G_new - G) . d``.
"""

import numpy as np

from .. import _config
from ..sequences import weighted_total
from ._kernels import step_sums

#: Largest factor by which the scale may shrink in one round.
MAX_SHRINK = 4.0
#: Smallest scale (a floor for the controller; the Hessian floor is ``2 p (1 - p)``).
MIN_SCALE = 1e-3


class SecantScale:
    """Trust-region scale of the GBCRF Hessian, fitted to the measured curvature.

    Attributes
    ----------
    scale : float
        Multiplier of the bound in the next Hessian, in ``[MIN_SCALE, 1]``.
    history : list of float
        The scale used in each round so far.
    """

    _copies = None  # float32 copies of the margins, G and H (see remember)
    _stamp = None  # checksum of borrowed margins

    def __init__(self):
        self.scale = 1.0
        self.history = []
        self._last = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_last"] = state["_copies"] = state["_stamp"] = None  # a copy starts a new secant
        return state

    @staticmethod
    def nll(log_z, node, batch):
        """Weighted NLL of ``batch`` up to the transition path term, from ``log_z (m,)`` and the
        labels' weighted node score ``node``.
        """
        return float(weighted_total(batch.seq_weight, log_z)) - node

    def local_sums(self, margins, nll, measured=None):
        """This worker's ``[change, slope, model, new_slope]`` of the secant, or None without a last
        round of this shape.

        ``change`` is that of :meth:`nll`; the others are ``measured`` (see
        :meth:`kept`), by default :meth:`measure` of ``margins (n, K)`` now.
        Summed over the workers they go to :meth:`fit`.
        """
        if measured is None:
            measured = self.measure(margins)
        return None if measured is None else np.array([nll - self._last[3], *measured])

    def measure(self, margins):
        """``[slope, model, 0]`` = ``[G . d, d' H d, 0]`` of the step ``d`` to ``margins (n, K)``
        with last round's G and H, or None.
        """
        last = self.kept(margins)
        return None if last is None else np.array([*self._along(margins, *last[1:]), 0.0])

    def kept(self, margins):
        """The last round's float32 ``(margins, G, H)`` ``(n, K)`` for sums taken while this round's
        are written; None as :meth:`measure`.
        """
        last = self._last
        return None if last is None or last[0].shape != margins.shape else last[:3]

    def check(self, checksum):
        """Raise if borrowed margins no longer have the stamp :meth:`remember` took."""
        if self._stamp is not None and checksum != self._stamp:
            raise ValueError(
                "the margins of the objective's last round changed after it returned (the "
                "adaptive step keeps them, with float32 results, until this round): hand "
                "the objective a fresh margin array each round, as xgboost.train does, or "
                "a copy."
            )

    def _along(self, margins, grad, hess):
        """``[grad . d, d' hess d]``, ``d`` the step to ``margins``; checks borrowed margins' stamp
        in the same read.
        """
        sums, checksum = step_sums(
            margins, self._last[0], grad, hess, _config.parallel(margins.shape[0])
        )
        self.check(checksum)
        return sums

    def fit(self, sums, moved=False, explained=0.0):
        """Fit the scale to the summed secant ``[change, slope, model, new_slope]`` (None keeps it);
        the scale for this round.

        At fixed transitions the curvature is the value secant
        ``2 (change - slope)``; when the transitions ``moved`` it is also taken
        from the gradient secant ``new_slope - slope``.
        """
        if sums is not None:
            change, slope, model, new_slope = sums
            if model > 0.0:
                curvature = 2.0 * (change - explained - slope)
                if moved:
                    curvature = max(curvature, new_slope - slope)
                tau = max(curvature / model, 0.0)
                self.scale = float(np.clip(self.scale * tau, self.scale / MAX_SHRINK, 1.0))
                self.scale = max(self.scale, MIN_SCALE)
        self.history.append(self.scale)
        return self.scale

    def remember(self, margins, nll, grad, hess, borrow=False, stamp=None):
        """Keep what the next round's :meth:`local_sums` needs, in float32.

        ``margins``, ``grad``, ``hess`` are ``(n, K)`` (what the engine got);
        ``nll`` is :meth:`nll` at their transitions. ``borrow``: keep float32
        arrays uncopied; the caller leaves them unchanged until the next
        :meth:`local_sums`, which checks the margins against ``stamp``
        (:func:`~.base.check_margin_values`; without it they are copied).
        """
        arrays = (margins, grad, hess)
        self._stamp = None
        if (
            borrow and stamp is not None and margins.flags.c_contiguous
            and all(a.dtype == np.float32 for a in arrays)
        ):  # fmt: skip
            self._stamp = stamp
        else:
            if self._copies is None or self._copies[0].shape != margins.shape:  # (the
                # margins' order, so that the next round's sums read them in one order)
                self._copies = tuple(np.empty_like(margins, np.float32) for _ in range(3))
            for copy, new in zip(self._copies, arrays):
                np.copyto(copy, new, casting="same_kind")
            arrays = self._copies
        self._last = (*arrays, nll)

