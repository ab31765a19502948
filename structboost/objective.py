"""The CRF boosting objective: node potentials and sequences in, G and H out.

Engine-agnostic (numpy only). The XGBoost and LightGBM adapters read the
margins and the sequence structure from their data objects and call
:meth:`CRFObjective.grad_hess` once per boosting round. The mode, Hessian and
weighting live in :class:`NodeObjective`, shared with the tree objective
(:mod:`structboost.tree_objective`); subclasses only supply the structure.

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
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from . import _config
from .constraints import resolve as resolve_constraints
from .inference import GAMMA_METHODS, Workspace, map_labels, path_scores, posterior
from .sequences import check_labels, check_lengths, offsets_from_lengths
from .transitions import SOLVERS, TransitionParams, TransitionProblem, observed_counts, refit

MODES = ("gbcrf", "treecrf", "logitboost")
# The objective multiplies (rows x K) by (K x K) matrices: threaded BLAS
# gains nothing there and, beside numba's and the engine's threads, its
# spin-waits cost ~10x CPU (measured on OCR). One controller, made once,
# limits BLAS while the objective runs.
_BLAS = ThreadpoolController()
METRICS = ("nll", "error")
_DEFAULT_ITER = {"lbfgs": 5, "newton": 1, "majorize": 1}


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


@dataclass
class SequenceBatch:
    """Validated labels and sequence structure of one dataset.

    Attributes
    ----------
    labels : (n,) int64
    offsets : (m + 1,) int64
    seq_weight : (m,) float64
    counts : (K*K + 2K,) float64
        Weighted observed transition, start and end counts.
    """

    labels: np.ndarray
    offsets: np.ndarray
    seq_weight: np.ndarray
    counts: np.ndarray

    @classmethod
    def build(cls, labels, lengths, num_labels, seq_weight=None):
        """Validate ``labels (n,)``, ``lengths (m,)`` and optional ``seq_weight (m,)``."""
        n = len(labels)
        lengths = check_lengths(lengths, n)
        y = check_labels(labels, num_labels, n)
        offsets = offsets_from_lengths(lengths)
        w = check_sequence_weights(seq_weight, lengths)
        return cls(y, offsets, w, observed_counts(y, offsets, w, num_labels))

    @property
    def lengths(self):
        return np.diff(self.offsets)


def softmax(margins):
    """Row-wise softmax of ``(n, K)`` margins."""
    z = margins - margins.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


class NodeObjective:
    """Mode, Hessian and weighting of a CRF boosting objective, for any structure.

    Subclasses supply the structure: ``_zero_params()`` (independent rows),
    ``_problem(unary, batch)`` (a
    :class:`~structboost.transitions.PenalisedProblem` whose posterior has
    ``marginals()`` and ``node_gamma(method, marginals=)``), and
    ``sequence_nll``/``decode``. ``batch`` has ``labels``, ``offsets`` and
    ``seq_weight``.

    Parameters
    ----------
    num_labels : int
        Number of labels K (the engine's number of outputs per row).
    mode : {"gbcrf", "treecrf", "logitboost"}
    gamma : {"mixing", "length", "exact"} or float
        Node bound for ``mode="gbcrf"``; a float fixes gamma everywhere.
    transitions : {"lbfgs", "newton", "majorize"}
        Solver that refits the transition parameters every round.
    reg_transitions : float
        L2 penalty on the transition parameters.
    transition_iter : int, optional
        Iterations of the solver per round (default 5 for L-BFGS, 1 for Newton
        and for majorization).
    hess_floor : float
        Smallest Hessian per row and label before weighting.
    nthread : int, optional
        Threads of the numba kernels while the objective runs (pass the
        engine's ``nthread``); None leaves numba's setting. BLAS runs on one
        thread meanwhile, so nothing oversubscribes. Batches of fewer than
        ``structboost._config.SERIAL_ROWS`` rows always run serially.

    Attributes
    ----------
    params
        The current transition parameters (all zero in ``"logitboost"`` mode).
    timings : dict
        CPU seconds of this process (``time.process_time``, all threads) spent so far
        in ``"transitions"``, ``"inference"`` and ``"gamma"``.
    """

    def __init__(
        self,
        num_labels,
        mode="gbcrf",
        gamma="mixing",
        transitions="lbfgs",
        reg_transitions=1.0,
        transition_iter=None,
        hess_floor=1e-16,
        nthread=None,
    ):
        if int(num_labels) != num_labels or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer; got {num_labels!r}.")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {mode!r}.")
        if isinstance(gamma, str):
            if gamma not in GAMMA_METHODS:
                raise ValueError(
                    f"gamma must be one of {GAMMA_METHODS} or a float >= 2; got {gamma!r}."
                )
        elif not np.isfinite(gamma) or gamma <= 0:
            raise ValueError(f"a fixed gamma must be a positive float; got {gamma!r}.")
        if transitions not in SOLVERS:
            raise ValueError(f"transitions must be one of {SOLVERS}; got {transitions!r}.")
        if reg_transitions < 0:
            raise ValueError("reg_transitions must be >= 0.")
        self.num_labels = int(num_labels)
        self.mode = mode
        self.gamma = gamma
        self.transitions = transitions
        self.reg_transitions = float(reg_transitions)
        self.transition_iter = (
            _DEFAULT_ITER[transitions] if transition_iter is None else int(transition_iter)
        )
        self.hess_floor = float(hess_floor)
        self.nthread = _config.check_nthread(nthread)
        self.params = self._zero_params()
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
        if not np.isfinite(m).all():
            raise ValueError("margins contain NaN or inf; training has diverged.")
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
            self.params = refit(problem, self.params, self.transitions, self.transition_iter)
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
        elif isinstance(self.gamma, str):
            hess *= post.node_gamma(self.gamma, marginals=p)[:, None]
        else:
            hess *= float(self.gamma)
        np.maximum(hess, self.hess_floor, out=hess)
        row_w = np.repeat(batch.seq_weight, lengths)[:, None]
        grad *= row_w
        hess *= row_w
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
            return "crf-nll", float(w @ self.sequence_nll(margins, batch) / w.sum())
        if metric == "error":
            wrong = self.decode(margins, batch) != batch.labels
            per_seq = np.add.reduceat(wrong.astype(np.float64), batch.offsets[:-1])
            return "crf-error", float(w @ per_seq / (w @ batch.lengths))
        raise ValueError(f"metric must be one of {METRICS}; got {metric!r}.")


class CRFObjective(NodeObjective):
    """Gradient and Hessian of the chain-CRF negative log-likelihood.

    Parameters are those of :class:`NodeObjective`, plus
    ``allowed_transitions``; the transition parameters are a
    :class:`~structboost.transitions.TransitionParams` (K x K transitions,
    start and end scores), and ``batch`` is a :class:`SequenceBatch`.

    Parameters
    ----------
    allowed_transitions : Constraints or (K, K) bool array-like, optional
        Moves the model may make (see :mod:`structboost.constraints`). The
        forbidden transition, start and end scores stay at ``-inf`` through
        training: the solvers never refit them, so training, the metric and
        decoding all use the constrained model. Training labels must obey
        the constraints. In ``"logitboost"`` mode, training ignores them
        (positions are independent) but the metric and decoding do not.

    Attributes
    ----------
    constraints : Constraints or None
    """

    def __init__(
        self,
        num_labels,
        mode="gbcrf",
        gamma="mixing",
        transitions="lbfgs",
        reg_transitions=1.0,
        transition_iter=None,
        hess_floor=1e-16,
        allowed_transitions=None,
        nthread=None,
    ):
        super().__init__(
            num_labels, mode, gamma, transitions, reg_transitions, transition_iter, hess_floor,
            nthread,
        )
        self.constraints = resolve_constraints(allowed_transitions, self.num_labels)
        self._workspace = None
        if self.constraints is not None:
            self.params = self.constraints.apply(self.params)

    def _zero_params(self):
        return TransitionParams.zeros(self.num_labels)

    def _check_allowed(self, batch):
        """Raise if the labels of ``batch`` make a move the constraints forbid."""
        if self.constraints is not None:
            if (batch.counts[~self.constraints.free_vector()] > 0).any():
                self.constraints.check_labels(batch.labels, batch.lengths)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_workspace"] = None  # buffers, rebuilt on the next round
        return state

    def _problem(self, unary, batch):
        free = None if self.constraints is None else self.constraints.free_vector()
        shape = unary.shape + (batch.offsets.shape[0] - 1,)
        if self._workspace is None or self._workspace.shape != shape:
            self._workspace = Workspace(*shape)
        return TransitionProblem(
            unary, batch.offsets, batch.seq_weight, batch.counts, self.reg_transitions, free,
            workspace=self._workspace,
        )

    def grad_hess(self, margins, batch):
        """As :meth:`NodeObjective.grad_hess`, after checking the labels against the constraints."""
        self._check_allowed(batch)
        return super().grad_hess(margins, batch)

    def sequence_nll(self, margins, batch):
        """Per-sequence negative log-likelihood ``(m,)`` under the current transitions."""
        self._check_allowed(batch)
        u = self.check_margins(margins)
        p = self.params
        post = posterior(u, batch.offsets, p.transitions, p.start, p.end)
        return post.log_z - path_scores(u, batch.offsets, batch.labels, p.transitions, p.start, p.end)

    def decode(self, margins, batch):
        """Viterbi labels ``(n,)`` of the sequences of ``batch`` under the current transitions."""
        u = self.check_margins(margins)
        p = self.params
        return map_labels(u, batch.offsets, p.transitions, p.start, p.end)
