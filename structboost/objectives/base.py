"""The mode, Hessian and weighting of a CRF boosting objective, for any structure.

:class:`NodeObjective` turns node marginals into the engine's ``G`` and ``H``;
the chain (:mod:`.chain`) and tree (:mod:`.tree`) objectives subclass it and
supply only the structure: the transition problem, the NLL and decoding.

=================  ==========================================  ==========================
mode               Hessian per row and label                    transitions
=================  ==========================================  ==========================
``"gbcrf"``        ``gamma_t * p * (1 - p)`` (Theorem 4.1)      refit every round
``"treecrf"``      ``1`` (first order, Dietterich et al.)       refit every round
``"logitboost"``   ``2 * p * (1 - p)``                          none (independent rows)
=================  ==========================================  ==========================

The gradient is always ``G = p - onehot(y)`` with ``p`` the CRF node
marginals. Sequence weights multiply both ``G`` and ``H``; the Hessian is
floored at ``hess_floor`` before weighting (as XGBoost floors its softmax
Hessian), so no row loses all weight.
"""

import time

import numpy as np
from threadpoolctl import ThreadpoolController

from .. import _config
from ..transitions.base import identity
from ..transitions.chain import refit
from ..transitions.lbfgs import LBFGSMemory
from .params import DEFAULT_ITER, DEFAULTS, METRICS, SOLVERS, check_params, fill_doc
from .step import SecantScale, floor_at_logitboost

# The objective multiplies (rows x K) by (K x K) matrices: threaded BLAS
# gains nothing there and, beside numba's and the engine's threads, its
# spin-waits cost ~10x CPU (measured on OCR). One controller, made once,
# limits BLAS while the objective runs.
_BLAS = ThreadpoolController()


# Node scores beyond this size mean a diverged model: a probability of
# exp(-1e12) is not a prediction, and from about 1e16 float64 can no longer
# resolve score differences of order 1 (marginals become NaN).
MARGIN_LIMIT = 1e12
DIVERGED = (
    "training has diverged: lower the learning rate (eta), raise min_child_weight or "
    "reg_lambda, or use gamma='mixing' instead of a fixed gamma below the Hessian bound"
)


def check_margin_values(margins, what, cause):
    """Raise naming the first row whose margin is NaN, infinite or beyond :data:`MARGIN_LIMIT`.

    Parameters
    ----------
    margins : (n, K) float64
    what : str
        What the margins are, for the message (``"the margins"``).
    cause : str
        Where such margins come from and what to do.
    """
    bad = ~(np.abs(margins) <= MARGIN_LIMIT)  # NaN compares False
    if bad.any():
        row, label = (int(i) for i in np.argwhere(bad)[0])
        value = float(margins[row, label])
        kind = "not finite" if not np.isfinite(value) else f"beyond +-{MARGIN_LIMIT:g}"
        raise ValueError(
            f"{what} of row {row}, label {label} is {value:g} ({kind}; {int(bad.sum())} "
            f"value(s) in all): {cause}."
        )


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


def softmax(margins):
    """Row-wise softmax of ``(n, K)`` margins."""
    z = margins - margins.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


@fill_doc(
    "mode", "gamma", "step", "transitions", "reg_transitions", "transition_iter", "hess_floor",
    "nthread",
)
class NodeObjective:
    """Mode, Hessian and weighting of a CRF boosting objective, for any structure.

    Subclasses supply the structure: ``_zero_params()`` (independent rows),
    ``_problem(unary, batch)`` (a
    :class:`~structboost.transitions.base.PenalisedProblem` whose posterior has
    ``marginals()`` and ``node_gamma(method, marginals=)``), and
    ``sequence_nll``/``decode``. ``batch`` has ``labels``, ``offsets`` and
    ``seq_weight``.

    Parameters
    ----------
    num_labels : int
        Number of labels K (the engine's number of outputs per row).
    {objective_params}

    Attributes
    ----------
    params
        The current transition parameters (all zero in ``"logitboost"`` mode).
    timings : dict
        CPU seconds of this process (``time.process_time``, all threads) spent so far
        in ``"transitions"``, ``"inference"`` and ``"gamma"``.
    step_scale : SecantScale or None
        The adaptive step's controller (``step="adaptive"`` in ``"gbcrf"``
        mode): its ``history`` holds the scale of the bound in each round.
    allreduce : callable
        Sums a float64 array over the workers of a distributed run; the
        objective hands it to each round's transition problem and sums the
        metric's numerator and denominator with it. The default,
        :func:`~structboost.transitions.base.identity`, is a single
        process; :mod:`structboost.engines.dask` sets XGBoost's collective.
    """

    #: The transition solvers this structure supports.
    solvers = SOLVERS
    allreduce = staticmethod(identity)

    def __init__(
        self,
        num_labels,
        mode=DEFAULTS["mode"],
        gamma=DEFAULTS["gamma"],
        transitions=DEFAULTS["transitions"],
        reg_transitions=DEFAULTS["reg_transitions"],
        transition_iter=None,
        hess_floor=DEFAULTS["hess_floor"],
        nthread=None,
        step=DEFAULTS["step"],
    ):
        check_params(num_labels, mode, gamma, transitions, reg_transitions, self.solvers, step)
        self.num_labels = int(num_labels)
        self.mode = mode
        self.gamma = gamma
        self.transitions = transitions
        self.reg_transitions = float(reg_transitions)
        self.transition_iter = (
            DEFAULT_ITER[transitions] if transition_iter is None else int(transition_iter)
        )
        self.hess_floor = float(hess_floor)
        self.nthread = _config.check_nthread(nthread)
        self.step = step
        self.step_scale = SecantScale() if mode == "gbcrf" and step == "adaptive" else None
        self.params = self._zero_params()
        # the L-BFGS refit's curvature pairs, carried from round to round
        # (a copied or pickled objective starts with none)
        self._lbfgs_memory = LBFGSMemory()
        self.timings = {"transitions": 0.0, "inference": 0.0, "gamma": 0.0}

    @property
    def uses_transitions(self):
        return self.mode != "logitboost"

    def check_margins(self, margins):
        """``(n, K)`` C-contiguous float64 margins, or a clear error."""
        m = np.asarray(margins)
        if m.ndim == 1 and m.size % self.num_labels == 0:
            m = m.reshape(-1, self.num_labels)
        if m.ndim != 2 or m.shape[1] != self.num_labels:
            raise ValueError(
                f"margins have shape {m.shape} but the objective has num_labels="
                f"{self.num_labels}: the booster must have one output per label "
                "(num_target / num_class = num_labels)."
            )
        m = np.ascontiguousarray(m, dtype=np.float64)
        check_margin_values(m, "the margin", DIVERGED)
        return m

    def grad_hess(self, margins, batch):
        """Refit the transitions, then return the node gradient and Hessian.

        Parameters
        ----------
        margins : (n, K) array-like
            Current node potentials (the engine's raw scores).
        batch
            The labels and structure (:class:`SequenceBatch` for chains).

        Returns
        -------
        grad, hess : (n, K) float64
        """
        u = self.check_margins(margins)
        with _BLAS.limit(limits=1, user_api="blas"), _config.threads(self.nthread):
            return self._grad_hess(u, batch)

    def _grad_hess(self, u, batch):
        lengths = np.diff(batch.offsets)
        t0 = time.process_time()
        if self.uses_transitions:
            problem = self._problem(u, batch)
            problem.allreduce = self.allreduce
            if self.step_scale is not None:  # the NLL at the last round's transitions
                # (the Newton step reuses this pass, and its mixing rates)
                before = problem.posterior(self.params, rates=self.transitions == "newton").log_z
                scale = self.step_scale.update(u, before, batch, self.allreduce)
            self.params = refit(
                problem, self.params, self.transitions, self.transition_iter, self._lbfgs_memory
            )
            t1 = time.process_time()
            post = problem.posterior(self.params)
            p = post.marginals()
        else:
            t1 = t0
            p = softmax(u)
        t2 = time.process_time()
        grad = p.copy()
        grad[np.arange(u.shape[0]), batch.labels] -= 1.0
        hess = p * (1.0 - p)
        if self.mode == "treecrf":
            hess[:] = 1.0
        elif self.mode == "logitboost":
            hess *= 2.0
        else:
            if isinstance(self.gamma, str):
                hess *= post.node_gamma(self.gamma, marginals=p)[:, None]
            else:
                hess *= float(self.gamma)
            if self.step_scale is not None and scale < 1.0:
                hess *= scale  # never below an uncoupled position's bound 2 p (1 - p)
                floor_at_logitboost(hess, p)
        np.maximum(hess, self.hess_floor, out=hess)
        row_w = np.repeat(batch.seq_weight, lengths)[:, None]
        grad *= row_w
        hess *= row_w
        if self.step_scale is not None:
            self.step_scale.remember(u, post.log_z, batch, grad, hess)
        t3 = time.process_time()
        self.timings["transitions"] += t1 - t0
        self.timings["inference"] += t2 - t1
        self.timings["gamma"] += t3 - t2
        return grad, hess

    def evaluate(self, margins, batch, metric="nll"):
        """Weighted metric of one dataset under the current transitions.

        Parameters
        ----------
        margins : (n, K) array-like
        batch
            As for :meth:`grad_hess`.
        metric : {"nll", "error"}

        Returns
        -------
        (str, float)
            ``("crf-nll", weighted mean NLL per sequence)`` or
            ``("crf-error", weighted token error of the MAP labelling)``.
        """
        w = batch.seq_weight
        if metric == "nll":
            name, ratio = "crf-nll", (w @ self.sequence_nll(margins, batch), w.sum())
        elif metric == "error":
            wrong = (self.decode(margins, batch) != batch.labels).astype(np.float64)
            per_seq = np.add.reduceat(wrong, batch.offsets[:-1]) if len(w) else w
            name, ratio = "crf-error", (w @ per_seq, w @ batch.lengths)
        else:
            raise ValueError(f"metric must be one of {METRICS}; got {metric!r}.")
        numerator, denominator = self.allreduce(np.array(ratio, dtype=np.float64))
        return name, float(numerator / denominator)
