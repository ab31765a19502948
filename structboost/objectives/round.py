"""One boosting round of a CRF objective, on the CPU or a GPU: margins in, G and H out.

=================  ==========================================  ==========================
mode               Hessian per row and label                    transitions
=================  ==========================================  ==========================
``"gbcrf"``        ``gamma_t * p * (1 - p)`` (Theorem 4.1)      a step every round
``"treecrf"``      ``1`` (first order, Dietterich et al.)       a step every round
``"logitboost"``   ``2 * p * (1 - p)``                          none (independent rows)
=================  ==========================================  ==========================

``G = p - onehot(y)`` with ``p`` the node marginals. Sequence weights
multiply G and H; H is floored at ``hess_floor`` before weighting.

A one-pass round (:mod:`structboost.transitions.onestep`) runs in phases:

1. the pass at the round's transitions, block by block, writing G and H
   (``p (1 - p)`` while H waits for the adaptive step's scale);
2. its sums and the secant's in one :class:`RoundSums`: one allreduce;
3. the next transition step and the secant's scale (:class:`~.step.SecantScale`);
4. H finished at that scale.

A refit round refits before its pass instead. Arrays live on a backend:
:class:`HostArrays` here, :mod:`structboost.objectives.gpu`'s on a device.
"""

import contextlib
import enum
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .. import _config
from .._typing import Floats
from ..inference.chain import label_node_scores, node_softmax
from ..sequences import weighted_total
from ..transitions.base import CURVATURE, VALUE, identity
from ..transitions.chain import FIRST_NEED, refit
from ..transitions.lbfgs import LBFGSMemory
from ..transitions.onestep import OneStep
from ._kernels import finish_bound_hess, node_grad_hess
from .base import DIVERGED, check_margin_values, row_blocks
from .params import DEFAULT_ITER, SOLVERS, ObjectiveSpec, is_integer, metric_name
from .step import SecantScale

#: Rows per task of the G and H kernel's parallel loop
#: (:func:`~._kernels.node_grad_hess`).
GH_ROWS = 1024


class Hessian(enum.Enum):
    """The Hessian a round writes, by mode (see the module notes)."""

    BOUND = "gbcrf"
    UNIT = "treecrf"
    SOFTMAX = "logitboost"


#: The secant's sums: ``[change, slope, model, new_slope]`` (:meth:`~.step.SecantScale.local_sums`).
SECANT_SUMS = 4


class RoundSums(NamedTuple):
    """What a one-pass round sums over its rows, crossing the workers in one allreduce.

    Attributes
    ----------
    secant : (4,) float64 or None
        The adaptive step's sums (:meth:`~.step.SecantScale.local_sums`).
    steps : (d,) float64
        The transition step's (:meth:`~structboost.transitions.onestep.OneStep.local_sums`).
    """

    secant: np.ndarray | None
    steps: np.ndarray

    def summed(self, allreduce):
        """These sums over every worker, in one call of ``allreduce``."""
        secant = np.zeros(SECANT_SUMS) if self.secant is None else self.secant
        total = allreduce(np.concatenate((secant, self.steps)))
        return RoundSums(
            None if self.secant is None else total[:SECANT_SUMS], total[SECANT_SUMS:]
        )


def checked_rows(margins, num_labels):
    """``(n, K)`` float32 or float64 margins as given (other dtypes to float64) and their checksum,
    or a clear error.
    """
    m = np.asarray(margins)
    if m.ndim == 1 and m.size % num_labels == 0:
        m = m.reshape(-1, num_labels)
    if m.ndim != 2 or m.shape[1] != num_labels:
        raise ValueError(
            f"margins have shape {m.shape} but the objective has num_labels={num_labels}: "
            "the booster must have one output per label (num_target / num_class = num_labels)."
        )
    if m.dtype not in (np.float32, np.float64):
        m = m.astype(np.float64)
    return m, check_margin_values(m, "the margin", DIVERGED)


def label_score(margins, batch):
    """Weighted sum of the labels' node scores in ``margins (n, K)``, without row-sized temporaries."""
    return float(weighted_total(batch.seq_weight,
                                label_node_scores(margins, batch.offsets, batch.labels)))


class HostArrays:
    """The round's arrays in host memory: numpy and the numba kernels of :mod:`._kernels`.

    The device's twin is :class:`structboost.objectives.gpu.DeviceArrays`;
    ``u`` is the round's margins as :meth:`margins` returns them, ``rows`` and
    ``seqs`` a block's.
    """

    secant = SecantScale
    clock = staticmethod(time.process_time)  # CPU seconds of this process, all threads

    def __init__(self):
        self._buffers = None  # float32 G and H handed to an engine (see outputs)

    margins = staticmethod(checked_rows)

    def outputs(self, shape, dtype, order):
        """The ``(grad, hess)`` arrays a round writes (see :meth:`NodeObjective.grad_hess`)."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float64, np.float32) or order not in ("C", "F"):
            raise ValueError(
                f'dtype must be float64 or float32, and order "C" or "F"; got {dtype}, '
                f"{order!r}."
            )
        if dtype == np.float64:
            return np.empty(shape, order=order), np.empty(shape, order=order)
        kept = self._buffers
        if kept is None or kept[0].shape != shape or not kept[0].flags[f"{order}_CONTIGUOUS"]:
            kept = self._buffers = tuple(
                np.empty(shape, dtype=np.float32, order=order) for _ in range(2)
            )
        return kept

    label_score = staticmethod(label_score)

    @staticmethod
    def independent_blocks(u, batch):
        """``(rows, seqs, None, softmax)`` of each block of independent rows."""
        for rows, seqs in row_blocks(batch.offsets, u.shape):
            yield rows, seqs, None, node_softmax(u[rows])

    marginals = staticmethod(lambda post: post.marginals())
    full = staticmethod(lambda n, value: np.full(n, float(value)))
    empty = staticmethod(np.empty)

    @staticmethod
    def put(dst, rows, src):
        dst[rows] = src

    @staticmethod
    def grad_hess(p, batch, rows, seqs, gamma, scale, hessian, floor, out, last):
        """Write G and H of one block into ``out = (grad, hess)``
        (:func:`~._kernels.node_grad_hess`).

        ``gamma (r,)`` is the block's node bound (None: LogitBoost or TreeCRF);
        ``scale`` None writes ``p (1 - p)`` in place of H. With ``last``
        ``(margins, old_margins, old_g, old_h)`` returns the block's
        ``[slope, model, new_slope]`` and checksum, else None.
        """
        s0, s1, _ = seqs.indices(batch.seq_weight.shape[0])
        lengths = np.diff(batch.offsets[s0 : s1 + 1])
        sums = node_grad_hess(
            p, batch.labels[rows], np.repeat(batch.seq_weight[seqs], lengths),
            np.zeros(0) if gamma is None else gamma, 1.0 if scale is None else scale,
            unit=hessian is Hessian.UNIT, floor=floor, finish=scale is not None,
            out=(out[0][rows], out[1][rows]), parallel=_config.parallel(out[0].shape[0]),
            rows=GH_ROWS, last=None if last is None else tuple(a[rows] for a in last),
        )  # fmt: skip
        if sums is None:
            return None
        return np.add.reduce(sums[0], axis=0), int(np.add.reduce(sums[1]))

    @staticmethod
    def finish_hess(hess, gamma, scale, floor, batch):
        """Finish in place a GBCRF ``hess (n, K)`` written as ``p (1 - p)``
        (:func:`~._kernels.finish_bound_hess`).
        """
        finish_bound_hess(hess, gamma, scale, floor, batch.offsets, batch.seq_weight, hess,
                          _config.parallel(hess.shape[0]))  # fmt: skip


def _timed(items, clock, spent):
    """Yield from ``items``, adding the ``clock`` seconds spent producing them to ``spent[0]``."""
    it = iter(items)
    while True:
        t = clock()
        item = next(it, None)
        spent[0] += clock() - t
        if item is None:
            return
        yield item


class NodeObjective:
    """A CRF boosting objective for any structure: the round, its modes and its metric.

    Subclasses supply ``_zero_params()``, ``_problem(u, batch)`` (a
    :class:`~structboost.transitions.base.PenalisedProblem`), ``sequence_nll``
    and ``decode``; ``batch`` has ``labels``, ``offsets`` and ``seq_weight``.

    Parameters
    ----------
    num_labels : int
        Number of labels K (the engine's outputs per row).
    spec : ObjectiveSpec, optional
    **params
        Fields of :class:`~structboost.objectives.params.ObjectiveSpec`
        changed from ``spec`` (or the defaults).

    Attributes
    ----------
    spec : ObjectiveSpec
    hessian : Hessian
    params
        The current transition parameters (zero in ``"logitboost"`` mode).
    timings : dict
        Seconds in ``"transitions"``, ``"inference"`` and ``"gamma"`` (process
        CPU time on the host, wall time on a GPU).
    step_scale : SecantScale or None
        The adaptive step's controller; ``history`` holds each round's scale.
    allreduce : callable
        Sums a float64 array over the workers (default
        :func:`~structboost.transitions.base.identity`; Dask sets XGBoost's
        collective).
    """

    #: The transition solvers this structure supports.
    solvers: tuple[str, ...] = SOLVERS
    #: The backend of the round's arrays.
    arrays: type[Any] = HostArrays
    # Each structure's subclass defines these (``evaluate`` calls them).
    sequence_nll: Callable[[Any, Any], Floats]
    decode: Callable[[Any, Any], Any]
    allreduce = staticmethod(identity)

    def __init__(self, num_labels, spec=None, **params):
        if not is_integer(num_labels) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer; got {num_labels!r}.")
        self.spec = spec = ObjectiveSpec.build(spec, **params)
        spec.check_solver(self.solvers, type(self).__name__)
        self.num_labels = int(num_labels)
        self.hessian = Hessian(spec.mode)
        self._arrays = self.arrays()
        self.step_scale = (
            self._arrays.secant()
            if self.hessian is Hessian.BOUND and spec.step == "adaptive"
            else None
        )
        self.params = self._zero_params()
        # the L-BFGS refit's curvature pairs, carried from round to round
        # (a copied or pickled objective starts with none)
        self._lbfgs_memory = LBFGSMemory()
        self._one_step = None  # the one-pass rounds' transition step (made on first use)
        self.timings = {"transitions": 0.0, "inference": 0.0, "gamma": 0.0}

    @property
    def mode(self):
        return self.spec.mode

    def threads(self) -> contextlib.AbstractContextManager[None]:
        """Context: numba on ``spec.nthread`` threads (the round calls no threaded BLAS)."""
        return _config.threads(self.spec.nthread)

    @property
    def uses_transitions(self):
        return self.hessian is not Hessian.SOFTMAX

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_arrays"]  # buffers, rebuilt on unpickling
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._arrays = self.arrays()

    def margin_rows(self, margins: Any) -> np.ndarray:
        """``(n, K)`` float32 or float64 margins as given, or a clear error (:func:`checked_rows`)."""
        return checked_rows(margins, self.num_labels)[0]

    def check_margins(self, margins: Any) -> Floats:
        """``(n, K)`` C-contiguous float64 margins, or a clear error."""
        return np.ascontiguousarray(self.margin_rows(margins), dtype=np.float64)

    def grad_hess(
        self, margins: Any, batch: Any, dtype: Any = np.float64, order: str = "C"
    ) -> tuple[Any, Any]:
        """Step or refit the transitions (see the module notes), then return G and H.

        Parameters
        ----------
        margins : (n, K) array-like
            The engine's raw scores, read block by block (never copied whole).
        batch
            The labels and structure (:class:`SequenceBatch` for chains).
        dtype : {numpy.float64, numpy.float32}
            float64: fresh arrays. float32: the objective's own buffers, in the
            engine's storage, rewritten by the next call; the adaptive step keeps
            float32 C-contiguous ``margins`` themselves until then. Use the results
            before the next call and hand fresh margins each round.
        order : {"C", "F"}
            Memory order of the results (``"F"``: LightGBM's class-major).

        Returns
        -------
        grad, hess : (n, K) of ``dtype``
        """
        arrays = self._arrays
        with self.threads():
            u, stamp = arrays.margins(margins, self.num_labels)
            out = arrays.outputs(u.shape, dtype, order)
            self._grad_hess(u, batch, out, stamp)
            return out

    def _node_blocks(self, u, batch, problem, need=VALUE):
        """``(rows, sequences, posterior, marginals)`` of each block of one pass at ``self.params``
        (no posterior: None).
        """
        if problem is None:
            yield from self._arrays.independent_blocks(u, batch)
            return
        for rows, seqs, post in problem.blocks(self.params, self._rates(need), need):
            yield rows, seqs, post, self._arrays.marginals(post)

    def _rates(self, need=VALUE):
        """Whether a pass that sums up to ``need`` computes the mixing rates in its sweep."""
        mixing = self.hessian is Hessian.BOUND and self.spec.hessian_bound == "mixing"
        return mixing or need >= CURVATURE

    def _write_blocks(self, blocks, batch, out, scale, log_z, gamma_rows=None, last=None):
        """Write G and H of every block of ``blocks`` into ``out``; returns the secant's sums with
        ``last``.

        ``scale`` None writes ``p (1 - p)`` in place of H and the node bound into
        ``gamma_rows (n,)``; ``log_z (m,)``, if given, receives the blocks'
        ``log Z``. ``last``: ``(margins, old_margins, old_g, old_h)`` ``(n, K)``
        each (:meth:`~.step.SecantScale.kept`): then returns ``[slope, model,
        new_slope]`` and the kept margins' checksum, else None.
        """
        arrays = self._arrays
        summed, checksum = np.zeros(3), 0
        bound = self.spec.hessian_bound
        for rows, seqs, post, p in blocks:
            if log_z is not None:
                log_z[seqs] = post.log_z
            gamma = None
            if self.hessian is Hessian.BOUND:
                gamma = (
                    post.node_gamma(bound, marginals=p)
                    if isinstance(bound, str)
                    else arrays.full(p.shape[0], bound)
                )
                if scale is None:
                    arrays.put(gamma_rows, rows, gamma)
            sums = arrays.grad_hess(p, batch, rows, seqs, gamma, scale, self.hessian,
                                    self.spec.hess_floor, out, last)  # fmt: skip
            if sums is not None:
                summed += sums[0]
                checksum = (checksum + sums[1]) % 2**64
        return None if last is None else ([float(x) for x in summed], checksum)

    def _steps(self):
        """The :class:`~structboost.transitions.onestep.OneStep` of one-pass rounds, or None."""
        if not self.spec.one_pass:
            return None
        if self._one_step is None:
            self._one_step = OneStep(
                self.spec.transition_solver, DEFAULT_ITER[self.spec.transition_solver],
                self._lbfgs_memory,
            )
        return self._one_step

    def _grad_hess(self, u, batch, out, stamp):
        """The round: one pass where the transition step allows (:meth:`_one_pass`), else a refit
        first.
        """
        t0 = self._arrays.clock()
        steps = self._steps() if self.uses_transitions else None
        # the labels' node score, once a round: the pass's NLL check and the secant's
        node = None
        if steps is not None or self.step_scale is not None:
            node = self._arrays.label_score(u, batch)
        problem = self._problem(u, batch) if self.uses_transitions else None
        params = None if steps is None else steps.params(problem, self.params)
        if params is None:
            return self._refit_round(u, batch, out, stamp, problem, steps, node, None, t0)
        self.params = params
        if not self._one_pass(u, batch, out, problem, steps, node, stamp, t0):
            self._refit_round(u, batch, out, stamp, problem, steps, node, params,
                              self._arrays.clock())  # fmt: skip

    def _refit_round(self, u, batch, out, stamp, problem, steps, node, lagging, t0):
        """The round that refits the transitions (no ``problem``: none), then writes G and H there.

        ``lagging``: the parameters of the round's own pass when :meth:`_one_pass`
        gave up (the secant's scale fitted), else None.
        """
        clock = self._arrays.clock
        secant = self.step_scale
        scale = None if lagging is None or secant is None else secant.scale
        need = VALUE if steps is None else steps.need
        log_z = np.empty(batch.offsets.shape[0] - 1) if secant is not None else None
        if problem is not None:  # the refit: its passes, then one for G and H
            solver = self.spec.transition_solver
            # equal rows (the first round's margins): the refit passes over one sequence a length
            solve, index = problem.by_length() or (problem, slice(None))
            if secant is not None and scale is None:  # the NLL at the last round's
                # transitions (the solver's first evaluation reuses this pass)
                before = solve.evaluate(
                    self.params, FIRST_NEED[solver], rates=solver == "newton"
                ).log_z[index]
                sums = secant.local_sums(u, secant.nll(before, node, batch))
                scale = secant.fit(None if sums is None else self.allreduce(sums))
            bound_scale = 1.0 if secant is None else scale
            tap = None
            if solve is problem:  # G and H from the last iteration's passes (a batch in blocks)
                tap = lambda rows, seqs, post: self._write_blocks(  # noqa: E731
                    [(rows, seqs, post, self._arrays.marginals(post))], batch, out,
                    bound_scale, log_z,
                )  # fmt: skip
            iters = self.spec.iterations if steps is None else steps.refit_iterations(lagging)
            self.params = refit(solve, self.params, solver, iters, self._lbfgs_memory,
                                solve is problem and self._rates(need), tap)  # fmt: skip
        t1 = clock()
        inference = [0.0]
        if problem is None or not problem.tapped(self.params):
            blocks = _timed(self._node_blocks(u, batch, problem, need), clock, inference)
            self._write_blocks(blocks, batch, out, 1.0 if secant is None else scale, log_z)
        if steps is not None:  # the next round steps from its own pass, checked against this one
            steps.start(problem, self.params, self.allreduce(
                steps.local_sums(problem, self.params, node)
            ))  # fmt: skip
        if secant is not None:
            secant.remember(u, secant.nll(log_z, node, batch), *out,
                            borrow=out[0].dtype == np.float32, stamp=stamp)  # fmt: skip
        t2 = clock()
        self.timings["transitions"] += t1 - t0
        self.timings["inference"] += inference[0]
        self.timings["gamma"] += t2 - t1 - inference[0]

    def _one_pass(self, u, batch, out, problem, steps, node, stamp, t0):
        """The round of one pass at ``self.params`` (the module's phases).

        Returns False, with the secant's scale fitted and nothing else kept,
        when the round must refit from its pass instead.
        """
        arrays = self._arrays
        secant = self.step_scale
        inference = [0.0]
        log_z = gamma_rows = None
        if secant is not None:  # H waits for the scale: p (1 - p) and gamma meanwhile
            log_z = np.empty(batch.offsets.shape[0] - 1)
            gamma_rows = arrays.empty(u.shape[0])  # (freed before the engine's tree: its peak)
        # 1. the pass; the secant's sums along the old and the new G and H, taken as
        # they are rewritten
        kept = None if secant is None else secant.kept(u)
        blocks = _timed(self._node_blocks(u, batch, problem, steps.need), arrays.clock, inference)
        measured = self._write_blocks(blocks, batch, out, None if secant else 1.0, log_z,
                                      gamma_rows, None if kept is None else (u, *kept))  # fmt: skip
        if measured is not None:
            secant.check(measured[1])
            measured = measured[0]  # (fit reads new_slope only when the transitions moved)
        # 2. the round sums, in one allreduce
        local = steps.local_sums(problem, self.params, node)
        moved = steps.moved
        own = nll = None
        if secant is not None:
            nll = secant.nll(log_z, node, batch)
        if measured is not None:
            own = secant.local_sums(u, nll, measured=measured)
            own[0] -= steps.path_change(problem)  # the weighted NLL's change
        sums = RoundSums(own, local).summed(self.allreduce)
        # 3. the secant's scale and the next transition step
        if secant is not None:
            scale = secant.fit(sums.secant, moved, steps.explained(sums.steps))
        t2 = arrays.clock()
        refit_now = steps.finish(problem, self.params, sums.steps)
        t3 = arrays.clock()
        self.timings["transitions"] += t3 - t2
        self.timings["inference"] += inference[0]
        self.timings["gamma"] += t2 - t0 - inference[0]
        if refit_now:
            return False
        # 4. H at the scale
        if secant is not None:
            arrays.finish_hess(out[1], gamma_rows, scale, self.spec.hess_floor, batch)
            secant.remember(u, nll, *out, borrow=out[0].dtype == np.float32, stamp=stamp)
            self.timings["gamma"] += arrays.clock() - t3  # (on a GPU: the results are ready)
        return True

    def evaluate(
        self, margins: Any, batch: Any, metric: str | None = None
    ) -> tuple[str, float]:
        """Weighted metric of one dataset under the current transitions.

        Parameters
        ----------
        margins : (n, K) array-like
        batch
            As for :meth:`grad_hess`.
        metric : {"crf-nll", "crf-error"} or callable, optional
            None: ``spec.metric``. A callable gets ``(y_true (n,), y_proba (n, K))``
            (and ``sample_weight=`` when the weights are not all one).

        Returns
        -------
        (str, float)
            ``("crf-nll", weighted mean NLL per sequence)``, ``("crf-error",
            weighted token error of the MAP labelling)`` or the callable's name
            and value.
        """
        metric = self.spec.metric if metric is None else metric
        w = batch.seq_weight
        with self.threads():
            if callable(metric):
                return metric_name(metric), self._callable_metric(metric, margins, batch)
            if metric == "crf-nll":
                ratio = (weighted_total(w, self.sequence_nll(margins, batch)), w.sum())
            elif metric == "crf-error":
                wrong = (self.decode(margins, batch) != batch.labels).astype(np.float64)
                per_seq = np.add.reduceat(wrong, batch.offsets[:-1]) if len(w) else w
                ratio = (weighted_total(w, per_seq), weighted_total(w, batch.lengths))
            else:
                ObjectiveSpec(metric=metric)  # raises, naming the choices
        numerator, denominator = self.allreduce(np.array(ratio, dtype=np.float64))
        return metric, float(numerator / denominator)

    def _callable_metric(self, metric, margins, batch):
        """``metric(y_true, y_proba[, sample_weight=])`` with the node marginals ``(n, K)``."""
        marginals = self.marginals(margins, batch)
        weight = np.repeat(batch.seq_weight, batch.lengths)
        if (weight == 1).all():
            return float(metric(batch.labels, marginals))
        return float(metric(batch.labels, marginals, sample_weight=weight))
