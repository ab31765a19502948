"""Linear transition potentials of a chain CRF and the solvers that refit them.

The transition parameters ``theta = (transitions (K, K), start (K,), end (K,))``
are shared by every position. With the node potentials ``F`` held fixed, the
penalised negative log-likelihood is::

    f(theta) = sum_i w_i (log Z_i(F, theta) - score_i(F, theta)) + reg / 2 * ||theta||^2

whose gradient is (expected - observed) transition, start and end counts plus
``reg * theta``. Three solvers refit ``theta`` once per boosting round:

``"lbfgs"``
    A few warm-started L-BFGS iterations on the exact ``f``, monotone, whose
    curvature pairs carry over from round to round
    (:mod:`structboost.transitions.lbfgs`).
``"newton"``
    One diagonal Newton step on the upper bound of Lemma 2.1 with the edge
    bound gamma^(e) of Theorem 4.2 (Algorithm 1 of Chen et al. with U =
    edges), aggregated over the positions that share each parameter. Start and
    end scores are node potentials of the first and last positions, bounded
    by the node gamma; updating both groups at once doubles both bounds
    (``(a + b)' H (a + b) <= 2 a' H a + 2 b' H b`` for PSD ``H``), which keeps
    the step monotone.
``"majorize"``
    Steps of Jebara & Choromanska (2012): the quadratic upper bound of
    :func:`structboost.transitions.majorize.chain_bound` on the summed ``log Z`` at the
    current ``theta``, plus the penalty, minimised in closed form. Monotone
    by construction, without a line search; each step costs ``O(K^4)`` per
    row. Above ``majorize.LOW_RANK_DIM`` parameters the curvature is kept
    at low rank (Algorithm 4). Chain CRFs only.
"""

from dataclasses import dataclass

import numpy as np

from ..inference.chain import Workspace, posterior
from . import majorize
from .base import PenalisedProblem, identity

SOLVERS = ("lbfgs", "newton", "majorize")


@dataclass
class TransitionParams:
    """Transition, start and end scores of a chain CRF.

    Attributes
    ----------
    transitions : (K, K) float64
        ``transitions[a, b]`` scores label ``a`` followed by label ``b``.
    start, end : (K,) float64
        Scores of the first and the last label of a sequence.
    """

    transitions: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def zeros(cls, num_labels):
        """All-zero parameters (independent positions)."""
        k = int(num_labels)
        return cls(np.zeros((k, k)), np.zeros(k), np.zeros(k))

    @property
    def num_labels(self):
        return self.start.shape[0]

    def to_vector(self):
        """``(K*K + 2K,)`` vector ``[transitions.ravel(), start, end]``."""
        return np.concatenate((self.transitions.ravel(), self.start, self.end))

    @classmethod
    def from_vector(cls, vec, num_labels):
        k = int(num_labels)
        kk = k * k
        return cls(
            np.ascontiguousarray(vec[:kk].reshape(k, k)),
            np.ascontiguousarray(vec[kk : kk + k]),
            np.ascontiguousarray(vec[kk + k :]),
        )

    def copy(self):
        return TransitionParams(self.transitions.copy(), self.start.copy(), self.end.copy())

    def to_dict(self):
        """JSON-ready dict; floats round-trip exactly through :func:`json.dumps`."""
        return {
            "transitions": self.transitions.tolist(),
            "start": self.start.tolist(),
            "end": self.end.tolist(),
        }

    @classmethod
    def from_dict(cls, d):
        return cls(
            np.ascontiguousarray(d["transitions"], dtype=np.float64),
            np.ascontiguousarray(d["start"], dtype=np.float64),
            np.ascontiguousarray(d["end"], dtype=np.float64),
        )


def observed_counts(labels, offsets, seq_weight, num_labels):
    """Weighted empirical transition, start and end counts as one vector.

    Parameters
    ----------
    labels : (n,) int64
    offsets : (m + 1,) int64
    seq_weight : (m,) float64
    num_labels : int

    Returns
    -------
    (K*K + 2K,) float64
        In the order of :meth:`TransitionParams.to_vector`.
    """
    k = num_labels
    lengths = np.diff(offsets)
    row_w = np.repeat(seq_weight, lengths)
    inner = np.ones(labels.shape[0], dtype=bool)
    inner[offsets[1:] - 1] = False
    idx = np.flatnonzero(inner)
    trans = np.bincount(
        labels[idx] * k + labels[idx + 1], weights=row_w[idx], minlength=k * k
    )
    start = np.bincount(labels[offsets[:-1]], weights=seq_weight, minlength=k)
    end = np.bincount(labels[offsets[1:] - 1], weights=seq_weight, minlength=k)
    return np.concatenate((trans, start, end)).astype(np.float64)


class TransitionProblem(PenalisedProblem):
    """The penalised NLL in the chain transition parameters, node potentials fixed.

    Parameters
    ----------
    unary : (n, K) float64
        Node potentials (validated, C-contiguous).
    offsets : (m + 1,) int64
    seq_weight : (m,) float64
    counts : (K*K + 2K,) float64
        From :func:`observed_counts`.
    reg : float
        L2 penalty on every free transition, start and end score.
    free : (K*K + 2K,) bool ndarray, optional
        Entries to fit (:meth:`Constraints.free_vector
        <structboost.objectives.constraints.Constraints.free_vector>`); the others stay
        at ``-inf``. All entries are free by default.
    workspace : Workspace, optional
        Message buffers of the batch's shape to reuse (an objective keeps one
        across rounds); fresh ones otherwise.
    """

    param_type = TransitionParams
    newton_scale = 2.0

    def __init__(self, unary, offsets, seq_weight, counts, reg, free=None, workspace=None):
        self.free = None if free is None or free.all() else free
        self.unary = unary
        self.offsets = offsets
        self.seq_weight = seq_weight
        self.counts = counts
        self.reg = float(reg)
        self.num_labels = unary.shape[1]
        if workspace is None:
            workspace = Workspace(*unary.shape, offsets.shape[0] - 1)
        self._workspace = workspace.load(unary, offsets)
        inner = np.ones(unary.shape[0], dtype=bool)
        inner[offsets[1:] - 1] = False
        self._edges = np.flatnonzero(inner)
        self._edge_weight = np.repeat(seq_weight, np.diff(offsets))[self._edges]

    def _posterior(self, params, rates):
        return posterior(
            self.unary,
            self.offsets,
            params.transitions,
            params.start,
            params.end,
            workspace=self._workspace,
            rates=rates,
        )

    def expected_counts(self, post, with_curvature=False):
        """Expected counts and, on request, their curvature bound, in vector order.

        Returns
        -------
        expected : (K*K + 2K,) float64
        curvature : (K*K + 2K,) float64 or None
            ``sum w gamma p (1 - p)`` per parameter (the edge bound
            gamma^(e) for transitions, the node gamma at first/last rows for
            start/end).
        """
        w = self.seq_weight
        first, last = self.offsets[:-1], self.offsets[1:] - 1
        p_first = post.marginals(first)
        p_last = post.marginals(last)
        if not with_curvature:
            marg, _ = post.edge_sums(self._edges, self._edge_weight)
            return np.concatenate((marg.ravel(), w @ p_first, w @ p_last)), None
        marg, curv = post.edge_sums(
            self._edges, self._edge_weight, self._edge_weight * post.edge_gamma()[self._edges]
        )
        node_gamma = post.node_gamma("mixing")
        expected = np.concatenate((marg.ravel(), w @ p_first, w @ p_last))
        curvature = np.concatenate(
            (
                np.maximum(curv, 0.0).ravel(),
                (w * node_gamma[first]) @ (p_first * (1.0 - p_first)),
                (w * node_gamma[last]) @ (p_last * (1.0 - p_last)),
            )
        )
        return expected, curvature

    def majorize_step(self, params):
        """One majorization step: minimise the Algorithm 3 bound plus the penalty.

        The bound touches the penalised NLL at ``params`` and lies above it
        everywhere, so the returned parameters never score worse. Only the
        free entries move: the bound is restricted to them. Above
        ``majorize.LOW_RANK_DIM`` parameters (``K >= 64``) with ``reg > 0``
        its curvature is streamed at rank ``majorize.DEFAULT_RANK``
        (Algorithm 4) instead of formed densely.
        """
        rank = majorize.default_rank(self.num_labels * (self.num_labels + 2), self.reg)
        if rank is not None and self.allreduce is not identity:
            raise ValueError(
                f"transitions='majorize' with K = {self.num_labels} labels uses the low-rank "
                "bound, whose curvature cannot be summed across workers: use "
                "transitions='lbfgs' or 'newton' in a distributed run."
            )
        if self.seq_weight.size:
            log_z, mu, sigma = majorize.chain_bound(
                self.unary,
                np.diff(self.offsets),
                params.transitions,
                params.start,
                params.end,
                weights=self.seq_weight,
                rank=rank,
            )
        else:  # an empty partition of a distributed run adds nothing to the bound
            size = self.counts.shape[0]
            log_z, mu, sigma = np.zeros(0), np.zeros(size), np.zeros((size, size))
        if self.free is not None:
            mu = mu[self.free]
            sigma = sigma[np.ix_(self.free, self.free)] if rank is None else sigma.take(self.free)
        x = self._free_part(params.to_vector())
        counts = self._free_part(self.counts)
        log_z = float(self.seq_weight @ log_z)
        if rank is None:  # one allreduce carries every term of the bound
            d = x.shape[0]
            summed = self.allreduce(np.concatenate(([log_z], mu, counts, sigma.ravel())))
            log_z, mu, counts, sigma = np.split(summed, [1, d + 1, 2 * d + 1])
            log_z, sigma = float(log_z[0]), sigma.reshape(d, d)
        bound = majorize.QuadraticBound(x, log_z, mu, sigma)
        step = majorize.majorize_step(bound, counts, self.reg)
        return TransitionParams.from_vector(self._full(step), self.num_labels)


def refit(problem, params, solver, max_iter, memory=None):
    """Refit the transition parameters with the named solver.

    Parameters
    ----------
    problem : TransitionProblem
    params : TransitionParams
        Warm start (the previous round's parameters).
    solver : {"lbfgs", "newton", "majorize"}
        ``"majorize"`` needs a :class:`TransitionProblem` (a chain).
    max_iter : int
        L-BFGS iterations (``"lbfgs"``), Newton steps (``"newton"``) or
        majorization steps (``"majorize"``).
    memory : LBFGSMemory, optional
        The curvature pairs ``"lbfgs"`` continues and updates (an objective
        keeps one across rounds; see :mod:`structboost.transitions.lbfgs`);
        a fresh one when None. The other solvers ignore it.

    Returns
    -------
    TransitionParams
    """
    if solver == "lbfgs":
        return problem.lbfgs(params, max_iter, memory)
    if solver == "newton":
        for _ in range(max_iter):
            params = problem.newton_step(params)
        return params
    if solver == "majorize":
        if not isinstance(problem, TransitionProblem):
            raise ValueError(
                'transitions="majorize" bounds chain CRFs only; use "lbfgs" or "newton" here.'
            )
        for _ in range(max_iter):
            params = problem.majorize_step(params)
        return params
    raise ValueError(f"transitions solver must be one of {SOLVERS}; got {solver!r}.")
