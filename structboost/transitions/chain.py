"""Linear transition potentials of a chain CRF and the solvers that refit them.

``theta = (transitions (K, K), start (K,), end (K,))`` is shared by every
position. With the node potentials ``F`` fixed, the penalised NLL is::

    f(theta) = sum_i w_i (log Z_i(F, theta) - score_i(F, theta)) + reg / 2 * ||theta||^2

with gradient (expected - observed) counts plus ``reg * theta``. Solvers:

``"lbfgs"``
    Warm-started L-BFGS on the exact ``f``, its curvature pairs carried
    from round to round (:mod:`structboost.transitions.lbfgs`).
``"newton"``
    Diagonal Newton steps on the bound of Lemma 2.1 with the edge bound
    gamma^(e) of Theorem 4.2 (start and end bounded by the node gamma;
    both groups' bounds doubled, ``(a + b)' H (a + b) <= 2 a' H a + 2 b' H b``,
    so the step stays monotone).
``"majorize"``
    Jebara & Choromanska (2012): the quadratic upper bound of
    :func:`structboost.majorize.chain_bound` plus the penalty, minimised in
    closed form (``O(K^4)`` per row; low rank above
    ``majorize.LOW_RANK_DIM`` parameters). Chain CRFs only.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _config
from .._typing import Floats
from ..inference.chain import Workspace, posterior
from ..sequences import offsets_from_lengths, sequence_blocks, weighted_total
from .. import majorize
from .base import CURVATURE, GRADIENT, VALUE, Evaluation, PenalisedProblem, identity

SOLVERS = ("lbfgs", "newton", "majorize")
#: What each solver's first evaluation asks for at the warm start
#: (:meth:`~.base.PenalisedProblem.evaluate`): a caller that passes there
#: first (the adaptive step's NLL) computes it in the same pass.
FIRST_NEED = {"lbfgs": GRADIENT, "newton": CURVATURE, "majorize": VALUE}


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

    def to_vector(self) -> Floats:
        """``(K*K + 2K,)`` vector ``[transitions.ravel(), start, end]``."""
        return np.concatenate((self.transitions.ravel(), self.start, self.end))

    @classmethod
    def from_vector(cls, vec, num_labels):
        k = int(num_labels)
        kk = k * k
        parts = (vec[:kk].reshape(k, k), vec[kk : kk + k], vec[kk + k :])
        return cls(*(np.ascontiguousarray(part) for part in parts))

    def copy(self) -> "TransitionParams":
        return TransitionParams(self.transitions.copy(), self.start.copy(), self.end.copy())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; floats round-trip exactly through :func:`json.dumps`."""
        return {name: getattr(self, name).tolist() for name in _FIELDS}

    @classmethod
    def from_dict(cls, d):
        return cls(*(np.ascontiguousarray(d[name], dtype=np.float64) for name in _FIELDS))


_FIELDS = ("transitions", "start", "end")


def observed_counts(labels, offsets, seq_weight, num_labels):
    """Weighted observed transition, start and end counts ``(K*K + 2K,)`` (in
    :meth:`TransitionParams.to_vector` order) of ``labels (n,)``
    (:func:`structboost.majorize.chain_features`).
    """
    return majorize.chain_features(labels, np.diff(offsets), num_labels, seq_weight)


@dataclass
class _Block:
    """Rows and sequences of a batch: ``unary (c, K)`` view, ``offsets`` from zero, ``edges`` (rows
    with a successor) and their sequences' weights.
    """

    rows: slice
    seqs: slice
    unary: np.ndarray
    offsets: np.ndarray
    seq_weight: np.ndarray
    edges: np.ndarray
    edge_weight: np.ndarray


class TransitionProblem(PenalisedProblem):
    """The penalised NLL in the chain transition parameters, node potentials fixed.

    A batch above ``_config.WHOLE_BATCH_ENTRIES`` entries is passed in blocks
    of whole sequences with one block-sized workspace; only a batch of one
    block keeps its posterior between evaluations.

    Parameters
    ----------
    unary : (n, K) float32 or float64
        Validated node potentials, any memory layout.
    offsets : (m + 1,) int64
    seq_weight : (m,) float64
    counts : (K*K + 2K,) float64
        From :func:`observed_counts`.
    reg : float
        L2 penalty on every free score.
    free : (K*K + 2K,) bool ndarray, optional
        Entries to fit; the others stay at ``-inf``.
    workspace : Workspace, optional
        Buffers to reuse if a block fits them.
    allreduce : callable, optional
        Sums over the workers.
    keep_messages : bool
        False: a pass taking rates and counts in its sweep stores no ``alpha``, ``r``.

    Attributes
    ----------
    workspace : Workspace
    bounds : (b + 1,) int64
        Sequence boundaries of the blocks.
    """

    param_type = TransitionParams
    newton_scale = 2.0

    def __init__(self, unary, offsets, seq_weight, counts, reg, free=None, workspace=None,
                 allreduce=identity, keep_messages=True):  # fmt: skip
        self.allreduce, self.keep_messages = allreduce, keep_messages
        self.free = None if free is None or free.all() else free
        self.unary = unary
        self.offsets = offsets
        self.seq_weight = seq_weight
        self.counts = counts
        self.reg = float(reg)
        k = self.num_labels = unary.shape[1]
        self.bounds = sequence_blocks(offsets, _config.block_rows(unary.shape[0], k))
        rows = int(np.diff(offsets[self.bounds]).max())
        seqs = int(np.diff(self.bounds).max())
        if workspace is None or not workspace.fits(rows, k, seqs):
            workspace = Workspace(rows, k, seqs)
        self.workspace = workspace
        self._one = None
        if self.bounds.shape[0] == 2:  # one block: exponentiated once, messages kept
            self._one = self._block(0)
            workspace.load(self._one.unary, self._one.offsets)

    def by_length(self):
        """An equivalent problem over one sequence per length (weighted by the length's summed
        weights) when all rows are equal, as in the first round.

        Returns
        -------
        (TransitionProblem, (m,) int64) or None
            The problem and each sequence's index among its sequences (this
            problem's ``log_z`` is its ``log_z[index]``); None when rows differ.
        """
        if not _same_rows(self.unary):
            return None
        distinct, index = np.unique(np.diff(self.offsets), return_inverse=True)
        weight = np.bincount(index, weights=self.seq_weight, minlength=distinct.shape[0])
        offsets = offsets_from_lengths(distinct)
        small = TransitionProblem(self.unary[: offsets[-1]], offsets, weight, self.counts,
                                  self.reg, self.free, allreduce=self.allreduce,
                                  keep_messages=self.keep_messages)  # fmt: skip
        return small, index

    @property
    def num_blocks(self):
        return self.bounds.shape[0] - 1

    def _block(self, b):
        """The :class:`_Block` of block ``b``."""
        s0, s1 = int(self.bounds[b]), int(self.bounds[b + 1])
        r0, r1 = int(self.offsets[s0]), int(self.offsets[s1])
        offsets = self.offsets[s0 : s1 + 1] - r0
        seq_weight = self.seq_weight[s0:s1]
        inner = np.ones(r1 - r0, dtype=bool)
        inner[offsets[1:] - 1] = False
        edges = np.flatnonzero(inner)
        return _Block(
            slice(r0, r1), slice(s0, s1),
            self.unary[r0:r1], offsets, seq_weight,
            edges, np.repeat(seq_weight, np.diff(offsets))[edges],
        )  # fmt: skip

    def _pass(self, b, params, rates, edges):
        """The block ``b`` and its posterior at ``params``; ``edges``: sum the expected counts
        within the sweep.
        """
        block = self._one
        if block is None:
            block = self._block(b)
            self.workspace.load(block.unary, block.offsets)
        post = posterior(
            block.unary, block.offsets, params.transitions, params.start, params.end,
            workspace=self.workspace, rates=rates, seq_weight=block.seq_weight if edges else None,
            keep_messages=self.keep_messages or not (rates and edges),
        )  # fmt: skip
        return block, post

    def _posterior(self, params, rates, edges):
        return self._pass(0, params, rates, edges)[1]

    def _evaluate(self, params, need, rates, tap=None):
        """One block: as the base class. Several: the sums, block by block (to ``tap``, if given)."""
        if self._one is not None:
            return super()._evaluate(params, need, rates)
        # (only a tap reads the blocks: without it the rates would be lost)
        for rows, seqs, post in self.blocks(params, rates and tap is not None, need):
            if tap is not None:
                tap(rows, seqs, post)
        if tap is not None:
            self._tapped = params.to_vector()
        return self._last[1]

    def _sums_from(self, post, need):
        """Whether ``post`` gives the sums up to ``need``: curvature reads the stored messages."""
        return post.has_messages or need < CURVATURE

    def blocks(self, params, rates=False, need=VALUE):
        """The posterior at ``params`` block by block (:meth:`PenalisedProblem.blocks`); the sums up
        to ``need`` taken on the way.
        """
        if self._one is not None:
            yield from super().blocks(params, rates, need)
            return
        log_z = np.empty(self.seq_weight.shape[0])
        expected = curvature = None
        for b in range(self.num_blocks):
            block, post = self._pass(b, params, rates or need >= CURVATURE, need == GRADIENT)
            yield block.rows, block.seqs, post
            log_z[block.seqs] = post.log_z
            if need >= GRADIENT:
                e, c = self._block_counts(block, post, need >= CURVATURE)
                expected = e if expected is None else expected + e
                if c is not None:
                    curvature = c if curvature is None else curvature + c
        if curvature is not None:
            _clip_curvature(curvature, self.num_labels)
        self._last = (params.to_vector(), Evaluation(log_z, expected, curvature))

    def expected_counts(self, post, with_curvature=False):
        """Expected counts ``(K*K + 2K,)`` of a one-block batch and, on request, their curvature
        bound ``sum w gamma p (1 - p)`` (edge gamma; node gamma for start and end).
        """
        expected, curvature = self._block_counts(self._one, post, with_curvature)
        if curvature is not None:
            _clip_curvature(curvature, self.num_labels)
        return expected, curvature

    @staticmethod
    def _block_counts(block, post, with_curvature):
        """:meth:`expected_counts` of one block, transition curvature not yet clipped at zero."""
        w = block.seq_weight
        first, last = block.offsets[:-1], block.offsets[1:] - 1
        p_first = post.marginals(first)
        p_last = post.marginals(last)
        if not with_curvature:
            marg = post.edge_total  # (summed by the sweep when its pass was asked to)
            if marg is None:
                marg, _ = post.edge_sums(block.edges, block.edge_weight)
        else:
            marg, curv = post.edge_sums(
                block.edges, block.edge_weight, block.edge_weight * post.edge_gamma()[block.edges]
            )
        expected = np.concatenate((marg.ravel(), weighted_total(w, p_first), weighted_total(w, p_last)))
        if not with_curvature:
            return expected, None
        node_gamma = post.node_gamma("mixing")
        curvature = np.concatenate(
            (
                curv.ravel(),
                weighted_total(w * node_gamma[first], p_first * (1.0 - p_first)),
                weighted_total(w * node_gamma[last], p_last * (1.0 - p_last)),
            )
        )
        return expected, curvature

    def majorize_step(self, params):
        """One majorization step: the minimum of the Algorithm 3 bound plus the penalty over the
        free entries (low-rank curvature above ``majorize.LOW_RANK_DIM`` parameters).
        """
        rank = majorize.default_rank(self.num_labels * (self.num_labels + 2), self.reg)
        if rank is not None and self.allreduce is not identity:
            raise ValueError(
                f"transition_solver='majorize' with K = {self.num_labels} labels uses the low-rank "
                "bound, whose curvature cannot be summed across workers: use "
                "transition_solver='lbfgs' or 'newton' in a distributed run."
            )
        x = self._free_part(params.to_vector())
        counts = self._free_part(self.counts)
        if rank is not None:
            unary = self._one.unary if self._one is not None else self.unary
            log_z, mu, sigma = majorize.chain_bound(
                unary, np.diff(self.offsets), params.transitions, params.start, params.end,
                weights=self.seq_weight, rank=rank,
            )  # fmt: skip
            if self.free is not None:
                mu, sigma = mu[self.free], sigma.take(self.free)
            bound = majorize.QuadraticBound(x, float(weighted_total(self.seq_weight, log_z)), mu, sigma)
        else:  # one allreduce carries every term of the bound
            size = self.counts.shape[0]
            log_z, mu, sigma = 0.0, np.zeros(size), np.zeros((size, size))
            for b in range(self.num_blocks if self.seq_weight.size else 0):
                block = self._one if self._one is not None else self._block(b)
                z, m, s = majorize.chain_bound(
                    block.unary, np.diff(block.offsets), params.transitions, params.start,
                    params.end, weights=block.seq_weight,
                )  # fmt: skip
                log_z, mu, sigma = log_z + float(weighted_total(block.seq_weight, z)), mu + m, sigma + s
            if self.free is not None:
                mu, sigma = mu[self.free], sigma[np.ix_(self.free, self.free)]
            d = x.shape[0]
            summed = self.allreduce(np.concatenate(([log_z], mu, counts, sigma.ravel())))
            log_z, mu, counts, sigma = np.split(summed, [1, d + 1, 2 * d + 1])
            bound = majorize.QuadraticBound(x, float(log_z[0]), mu, sigma.reshape(d, d))
        step = majorize.majorize_step(bound, counts, self.reg)
        return TransitionParams.from_vector(self._full(step), self.num_labels)


def _same_rows(unary):
    """Whether every row of ``unary (n, K)`` equals the first (False for no rows)."""
    n = unary.shape[0]
    if n == 0:
        return False
    first = unary[0]
    if not (np.array_equal(first, unary[n // 2]) and np.array_equal(first, unary[-1])):
        return False
    return bool((unary.min(axis=0) == unary.max(axis=0)).all())


def _clip_curvature(curvature, num_labels):
    """Clip the transition part of a summed curvature bound at zero, in place (rounding)."""
    kk = num_labels * num_labels
    np.maximum(curvature[:kk], 0.0, out=curvature[:kk])


def refit(problem, params, solver, max_iter, memory=None, rates=False, tap=None):
    """Refit the transition parameters with the named solver.

    Parameters
    ----------
    problem : TransitionProblem
    params : TransitionParams
        Warm start.
    solver : {"lbfgs", "newton", "majorize"}
    max_iter : int
    memory : LBFGSMemory, optional
        ``"lbfgs"``'s curvature pairs, continued and updated.
    rates, tap
        ``"lbfgs"``: the mixing rates at the result; a callable receiving the
        blocks of its last passes.

    Returns
    -------
    TransitionParams
    """
    if solver == "lbfgs":
        return problem.lbfgs(params, max_iter, memory, rates, tap)
    if solver == "newton":
        for _ in range(max_iter):
            params = problem.newton_step(params)
        return params
    if solver == "majorize":
        if not isinstance(problem, TransitionProblem):
            raise ValueError(
                'transition_solver="majorize" bounds chain CRFs only; use "lbfgs" or "newton" here.'
            )
        for _ in range(max_iter):
            params = problem.majorize_step(params)
        return params
    raise ValueError(f"transitions solver must be one of {SOLVERS}; got {solver!r}.")
