"""The adaptive step of GBCRF: the gamma Hessian scaled to the curvature trees meet.

Chen et al.'s node bound ``gamma_t p (1 - p)`` (Theorem 4.1) holds in every
direction at once, so a tree step taken with it never raises the NLL, but it
is as small as the worst direction demands: on long, strongly coupled
chains (gamma about 9 on protein chains, more on CoNLL sentences) GBCRF
then needs many times LogitBoost's rounds for the same progress, and the
learning rate loses its usual meaning.

:class:`SecantScale` measures, after every round, the curvature of the NLL
along the step the engine actually took (all of the round's trees
together) and scales the bound to it for the next round::

    tau   = 2 (f(m + d) - f(m) - G . d) / (d' H d)     # true / model curvature along d
    scale = clip(scale * tau, scale / 4, 1)
    H     = max(2 p (1 - p), scale * gamma_t p (1 - p))   # per row and label, if scale < 1

with ``f`` the weighted NLL at fixed transitions, ``G`` and ``H`` the
gradient and Hessian handed to the engine last round and ``d`` the change
of the margins since then. The NLL is convex in the node scores, so
``tau >= 0``; for a quadratic it is exactly the ratio of the curvature
along ``d`` to the model's. The scale never exceeds 1 (the bound) and never
lets the Hessian fall below ``2 p (1 - p)``, the bound of a position with no
neighbours (XGBoost's softmax Hessian): a step is never longer than
LogitBoost's at the same learning rate, which keeps its usual meaning. The
scale shrinks by at most a factor 4 per round, and one round that meets
more curvature than the model assumed restores it. It starts at 1, the
bound.

In a one-pass round (:mod:`structboost.transitions.onestep`) the
transitions too moved between the two passes. Then ``f`` is the whole
weighted NLL, the transition step's share of its change is removed by the
trapezoid rule, and the curvature taken is the larger of that value secant
and the gradient secant ``(G_new - G) . d`` (for a quadratic both are the
curvature along ``d`` plus the cross term of the two steps).
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
        """Weighted NLL ``(float)`` of ``batch`` up to the transition path term.

        The transition part of the path score is the same for any node
        scores, so differences at fixed transitions need only ``log_z (m,)``
        and ``node``, the weighted sum of the labels' node scores (the
        round computes it once, see :func:`~.round.label_score`).
        """
        return float(weighted_total(batch.seq_weight, log_z)) - node

    def local_sums(self, margins, nll, measured=None):
        """This worker's ``[change, slope, model, new_slope]`` of the secant, or None.

        ``change`` is that of :meth:`nll` (``nll`` this round's); the others
        are ``measured`` (:meth:`measure`, taken before the last round's G
        and H were overwritten, or while this round's were written, see
        :meth:`kept`), by default :meth:`measure` now without this round's
        gradient (``margins (n, K)``: this round's, any layout). None
        without a last round (or one of another shape). Summed over the
        workers (with others, in one allreduce), they go to :meth:`fit`.
        """
        if measured is None:
            measured = self.measure(margins)
        return None if measured is None else np.array([nll - self._last[3], *measured])

    def measure(self, margins):
        """``[slope, model, 0]`` of the step ``d`` to ``margins (n, K)``, or None.

        ``slope = G . d`` and ``model = d' H d`` with the G and H the last
        round handed the engine (no ``new_slope``: this round's G is not
        written yet). None without a last round (or one of another shape).
        Reads the last round's G and H: a caller that reuses their buffers
        measures first.
        """
        last = self.kept(margins)
        return None if last is None else np.array([*self._along(margins, *last[1:]), 0.0])

    def kept(self, margins):
        """The last round's float32 ``(margins, G, H)``, each ``(n, K)``; None as :meth:`measure`.

        For a caller that takes the secant's sums while it writes this
        round's G and H (:func:`~._kernels.node_grad_hess`), instead of
        :meth:`measure` before and a read of ``G_new`` after; it hands the
        checksum of the kept margins to :meth:`check`.
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
        """``[grad . d, d' hess d]``, ``d`` the step to ``margins``.

        The same read checks that borrowed margins kept their stamp (see
        :meth:`remember`).
        """
        sums, checksum = step_sums(
            margins, self._last[0], grad, hess, _config.parallel(margins.shape[0])
        )
        self.check(checksum)
        return sums

    def fit(self, sums, moved=False, explained=0.0):
        """Fit the scale to the summed secant ``[change, slope, model, new_slope]``; None keeps it.

        At fixed transitions the curvature along the trees' step is the
        value secant ``2 (change - slope)``. ``moved``: the transitions
        took a step between the two rounds (a one-pass round, see
        :mod:`structboost.transitions.onestep`), whose share of ``change``
        is large beside the trees' and known only to first order: the
        gradient secant ``new_slope - slope`` then (the same for a
        quadratic at fixed transitions; the transition step enters only
        through the cross term of the two steps). Returns the scale for
        this round's Hessian.
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
        """Keep what the next round's :meth:`local_sums` needs.

        ``margins``, ``grad`` and ``hess`` are ``(n, K)`` (the weighted
        gradient and Hessian handed to the engine) and ``nll`` is
        :meth:`nll` with ``log_z`` at the transitions they were computed
        with. Kept in float32: the engines' margins are float32 already,
        and the scale needs three sums.

        ``borrow``: keep float32 arrays as they are instead of copies
        (XGBoost's fresh margins of each round, and the float32 buffers an
        objective hands the engine, see :meth:`NodeObjective.grad_hess
        <structboost.objectives.round.NodeObjective.grad_hess>`): the caller
        leaves them unchanged until the next :meth:`local_sums`, which checks
        the margins against ``stamp``, their checksum (taken by the round's
        margin check, :func:`~.base.check_margin_values`; without it they
        are copied). Copies otherwise (LightGBM updates its margins in
        place).
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

