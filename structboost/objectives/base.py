"""The mode, Hessian and weighting of a CRF boosting objective, for any structure.

:class:`NodeObjective` turns node marginals into the engine's ``G`` and ``H``;
the chain (:mod:`.chain`) and tree (:mod:`.tree`) objectives subclass it and
supply only the structure: the transition problem, the NLL and decoding.

=================  ==========================================  ==========================
mode               Hessian per row and label                    transitions
=================  ==========================================  ==========================
``"gbcrf"``        ``gamma_t * p * (1 - p)`` (Theorem 4.1)      a step every round
``"treecrf"``      ``1`` (first order, Dietterich et al.)       a step every round
``"logitboost"``   ``2 * p * (1 - p)``                          none (independent rows)
=================  ==========================================  ==========================

A step is taken from the round's own forward-backward pass
(:mod:`structboost.transitions.onestep`, the default with ``"lbfgs"`` and
``"newton"``) or by a refit before the pass (``"majorize"``, another
``transition_iter``, and the rounds :mod:`~structboost.transitions.onestep`
names).

The gradient is always ``G = p - onehot(y)`` with ``p`` the CRF node
marginals. Sequence weights multiply both ``G`` and ``H``; the Hessian is
floored at ``hess_floor`` before weighting (as XGBoost floors its softmax
Hessian), so no row loses all weight.
"""

import contextlib
import numbers
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _config
from .._typing import Floats
from ..inference.chain import label_node_scores, node_softmax
from ..sequences import sequence_blocks, weighted_total
from ..transitions.base import CURVATURE, VALUE, identity
from ..transitions.chain import FIRST_NEED, refit
from ..transitions.lbfgs import LBFGSMemory
from ..transitions.onestep import OneStep
from ._kernels import finish_bound_hess, node_grad_hess, scan_values
from .params import DEFAULT_ITER, SOLVERS, ObjectiveSpec, metric_name
from .step import RoundSums, SecantScale

#: Rows per task of the G and H kernel's parallel loop
#: (:func:`~._kernels.node_grad_hess`).
GH_ROWS = 1024

# Node scores beyond this size mean a diverged model: a probability of
# exp(-1e12) is not a prediction, and from about 1e16 float64 can no longer
# resolve score differences of order 1 (marginals become NaN).
MARGIN_LIMIT = 1e12
DIVERGED = (
    "training has diverged: lower the learning rate (eta), raise min_child_weight or "
    "reg_lambda, or use hessian_bound='mixing' instead of a fixed bound below the true one"
)


def check_margin_values(margins, what, cause):
    """Raise naming the first row whose margin is NaN, infinite or beyond :data:`MARGIN_LIMIT`.

    Checked in one read without temporaries (C- or F-contiguous margins;
    others in row blocks), the message's row found in row blocks.

    Parameters
    ----------
    margins : (n, K) float32 or float64
    what : str
        What the margins are, for the message (``"the margin"``).
    cause : str
        Where such margins come from and what to do.

    Returns
    -------
    int or None
        The checksum of C- or F-contiguous float32 margins, taken in the
        same read (:func:`~._kernels.scan_values`: the adaptive step's stamp
        of margins it keeps); None for others.
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


def _timed(items, clock):
    """Yield from ``items``, adding the CPU seconds spent producing them to ``clock[0]``."""
    it = iter(items)
    while True:
        t = time.process_time()
        item = next(it, None)
        clock[0] += time.process_time() - t
        if item is None:
            return
        yield item


def label_score(margins, batch):
    """Weighted sum of the labels' node scores in ``margins (n, K)`` (float).

    One sweep over the rows, no row-sized temporaries
    (:func:`~structboost.inference.chain.label_node_scores`); a round sums
    it once for its NLL check and the adaptive step's secant.
    """
    return float(weighted_total(batch.seq_weight,
                                label_node_scores(margins, batch.offsets, batch.labels)))


def row_blocks(offsets, shape):
    """The ``(rows, sequences)`` slices of the blocks a round over ``shape = (n, K)`` takes.

    Blocks of whole sequences, one for a batch up to
    ``_config.WHOLE_BATCH_ENTRIES`` rows x labels (see
    :func:`~structboost.sequences.sequence_blocks` and ``_config.block_rows``).
    """
    bounds = sequence_blocks(offsets, _config.block_rows(*shape))
    for s0, s1 in zip(bounds[:-1], bounds[1:]):
        yield slice(offsets[s0], offsets[s1]), slice(s0, s1)


def _is_count(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def softmax(margins):
    """Row-wise softmax of ``(n, K)`` margins, NumPy or CuPy (the GPU objective's).

    The CPU round takes :func:`~structboost.inference.chain.node_softmax`.
    """
    z = margins - margins.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


class NodeObjective:
    """Mode, Hessian and weighting of a CRF boosting objective, for any structure.

    Subclasses supply the structure: ``_zero_params()`` (independent rows),
    ``_problem(unary, batch)`` (a
    :class:`~structboost.transitions.base.PenalisedProblem` whose posterior has
    ``marginals()`` and ``node_gamma(method, marginals=)``), and
    ``sequence_nll``/``decode``. ``batch`` has ``labels``, ``offsets`` and
    ``seq_weight``. A round writes G and H block by block as the problem's
    :meth:`~structboost.transitions.base.PenalisedProblem.blocks` yields
    them (a chain batch above ``_config.WHOLE_BATCH_ENTRIES`` in blocks of
    whole sequences, any other as one block), in chunks of
    :data:`GH_ROWS` rows.

    Parameters
    ----------
    num_labels : int
        Number of labels K (the engine's number of outputs per row).
    spec : ObjectiveSpec, optional
        The objective's settings (:class:`~structboost.objectives.params.ObjectiveSpec`).
    **params
        Fields of :class:`~structboost.objectives.params.ObjectiveSpec`
        changed from ``spec`` (or from the defaults); the spec is built once.

    Attributes
    ----------
    spec : ObjectiveSpec
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
    solvers: tuple[str, ...] = SOLVERS
    # Each structure's subclass defines these (``evaluate`` calls them).
    sequence_nll: Callable[[Any, Any], Floats]
    decode: Callable[[Any, Any], Any]
    allreduce = staticmethod(identity)
    _buffers = None  # float32 G and H handed to an engine (see grad_hess)

    def __init__(self, num_labels, spec=None, **params):
        if not _is_count(num_labels):
            raise ValueError(f"num_labels must be a positive integer; got {num_labels!r}.")
        self.spec = spec = ObjectiveSpec.build(spec, **params)
        spec.check_solver(self.solvers, type(self).__name__)
        self.num_labels = int(num_labels)
        self.step_scale = (
            SecantScale() if spec.mode == "gbcrf" and spec.step == "adaptive" else None
        )
        # rounds of one pass where the solver allows (transitions.onestep)
        self.one_pass = spec.one_pass
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
        """Context: numba on ``spec.nthread`` threads and BLAS on one (see :class:`ObjectiveSpec`)."""
        return _config.threads(self.spec.nthread)

    @property
    def uses_transitions(self):
        return self.mode != "logitboost"

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_buffers"] = None  # buffers, rebuilt on the next round
        return state

    def margin_rows(self, margins: Any) -> np.ndarray:
        """``(n, K)`` float32 or float64 margins as given (no copy), or a clear error.

        The engines' own layouts pass unchanged (XGBoost's float32 rows,
        LightGBM's column-major float64); other dtypes are converted to
        float64. The values are checked in row blocks (:func:`check_margin_values`).
        """
        return self._checked_rows(margins)[0]

    def _checked_rows(self, margins):
        """:meth:`margin_rows` and the checksum of :func:`check_margin_values`."""
        m = np.asarray(margins)
        if m.ndim == 1 and m.size % self.num_labels == 0:
            m = m.reshape(-1, self.num_labels)
        if m.ndim != 2 or m.shape[1] != self.num_labels:
            raise ValueError(
                f"margins have shape {m.shape} but the objective has num_labels="
                f"{self.num_labels}: the booster must have one output per label "
                "(num_target / num_class = num_labels)."
            )
        if m.dtype not in (np.float32, np.float64):
            m = m.astype(np.float64)
        return m, check_margin_values(m, "the margin", DIVERGED)

    def check_margins(self, margins: Any) -> Floats:
        """``(n, K)`` C-contiguous float64 margins, or a clear error."""
        return np.ascontiguousarray(self.margin_rows(margins), dtype=np.float64)

    def grad_hess(
        self, margins: Any, batch: Any, dtype: Any = np.float64, order: str = "C"
    ) -> tuple[Any, Any]:
        """Refit the transitions (or, in a one-pass round, step them), then return G and H.

        Parameters
        ----------
        margins : (n, K) array-like
            Current node potentials (the engine's raw scores), read block by
            block: float32 and column-major margins are never copied whole.
        batch
            The labels and structure (:class:`SequenceBatch` for chains).
        dtype : {numpy.float64, numpy.float32}
            float64: fresh arrays. float32: what XGBoost and LightGBM store
            gradients as (the float64 values rounded, as the engine would
            round them), so that the engine copies nothing. These are the
            objective's own buffers, rewritten by its next call, and the
            adaptive step keeps float32 C-contiguous ``margins`` themselves
            until then, not a copy (it compares consecutive rounds; a
            ``ValueError`` says if they changed): use the results before the
            next call, change neither, and hand a fresh margin array each
            round, as ``xgboost.train`` does.
        order : {"C", "F"}
            Memory order of the results (``"F"``: class-major, LightGBM's).

        Returns
        -------
        grad, hess : (n, K) of ``dtype``
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.float64, np.float32) or order not in ("C", "F"):
            raise ValueError(
                f'dtype must be float64 or float32, and order "C" or "F"; got {dtype}, '
                f"{order!r}."
            )
        with self.threads():
            u, stamp = self._checked_rows(margins)
            return self._grad_hess(u, batch, self._outputs(u.shape, dtype, order), stamp)

    def _outputs(self, shape, dtype, order):
        """The ``(grad, hess)`` arrays a round writes (see :meth:`grad_hess`)."""
        if dtype == np.float64:
            return np.empty(shape, order=order), np.empty(shape, order=order)
        kept = self._buffers
        if kept is None or kept[0].shape != shape or not kept[0].flags[f"{order}_CONTIGUOUS"]:
            kept = self._buffers = tuple(
                np.empty(shape, dtype=np.float32, order=order) for _ in range(2)
            )
        return kept

    def _node_blocks(self, u, batch, problem, need=VALUE):
        """``(rows, sequences, posterior, marginals)`` of each block (no posterior: None).

        One pass at ``self.params``; ``need`` as for the problem's
        :meth:`~structboost.transitions.base.PenalisedProblem.blocks`.
        """
        if problem is not None:
            for rows, seqs, post in problem.blocks(self.params, self._rates(need), need):
                yield rows, seqs, post, post.marginals()
            return
        for rows, seqs in row_blocks(batch.offsets, u.shape):
            yield rows, seqs, None, node_softmax(u[rows])

    def _rates(self, need=VALUE):
        """Whether a pass that sums up to ``need`` computes the mixing rates in its sweep."""
        return (self.mode == "gbcrf" and self.spec.hessian_bound == "mixing") or need >= CURVATURE

    def _scale_hess(self, gamma, scale, batch, hess):
        """Finish in place a GBCRF Hessian ``hess (n, K)`` written as ``p (1 - p)``.

        As :meth:`_write_blocks` writes it with no scale (in the engine's
        dtype: float32 rounds ``p (1 - p)`` once more, so the result is
        within one float32 ulp of the float64 one rounded), ``gamma (n,)``
        the node bound; weighted by ``batch.seq_weight`` per sequence
        (:func:`~._kernels.finish_bound_hess`).
        """
        finish_bound_hess(hess, gamma, scale, self.spec.hess_floor, batch.offsets,
                          batch.seq_weight, hess, _config.parallel(hess.shape[0]))  # fmt: skip

    def _write_blocks(self, blocks, batch, out, scale, log_z, gamma_rows=None, last=None):
        """Write G and H of every block of ``blocks`` (see :meth:`_node_blocks`) into ``out``.

        G is ``p - onehot(y)`` and H the mode's (see the module notes), both
        weighted, written straight into the outputs by one kernel a block
        (:func:`~._kernels.node_grad_hess`, on threads in tasks of
        :data:`GH_ROWS` rows where the batch is large). ``scale`` None
        writes ``p (1 - p)`` in place of H, and the node bound into
        ``gamma_rows (n,)`` (see :meth:`_scale_hess`); ``log_z (m,)``, if
        given, receives the blocks' ``log Z``.

        ``last``: ``(margins, old_g, old_h)``, the adaptive step's kept
        arrays (:meth:`~.step.SecantScale.kept`), with ``margins`` those of
        this round ``(n, K)``: the kernel then takes the secant's sums in the
        same read, returned as ``[slope, model, new_slope]`` (summed task by
        task in order) and the kept margins' checksum
        (:func:`~._kernels.node_grad_hess`); None otherwise.
        """
        grad, hess = out
        summed, checksum = np.zeros(3), 0
        lengths = np.diff(batch.offsets)
        floor = self.spec.hess_floor
        parallel = _config.parallel(grad.shape[0])
        no_gamma = np.zeros(0)  # LogitBoost's and TreeCRF's rows: factor 2 (or unit)
        for rows, seqs, post, p in blocks:
            if log_z is not None:
                log_z[seqs] = post.log_z
            gamma = no_gamma
            bound = self.spec.hessian_bound
            if self.mode == "gbcrf":
                gamma = (
                    post.node_gamma(bound, marginals=p)
                    if isinstance(bound, str)
                    else np.full(p.shape[0], float(bound))
                )
                if scale is None:
                    gamma_rows[rows] = gamma
            row_w = np.repeat(batch.seq_weight[seqs], lengths[seqs])
            sums = node_grad_hess(
                p, batch.labels[rows], row_w, gamma, 1.0 if scale is None else scale,
                self.mode == "treecrf", floor, scale is not None, (grad[rows], hess[rows]),
                parallel, GH_ROWS, None if last is None else tuple(a[rows] for a in last),
            )  # fmt: skip
            if sums is not None:
                summed += np.add.reduce(sums[0], axis=0)
                checksum = (checksum + int(np.add.reduce(sums[1]))) % 2**64
        return None if last is None else ([float(x) for x in summed], checksum)

    def _steps(self):
        """The :class:`~structboost.transitions.onestep.OneStep` of one-pass rounds, or None."""
        if not self.one_pass:
            return None
        if self._one_step is None:
            self._one_step = OneStep(
                self.spec.transition_solver, DEFAULT_ITER[self.spec.transition_solver],
                self._lbfgs_memory,
            )
        return self._one_step

    def _grad_hess(self, u, batch, out, stamp):
        t0 = time.process_time()
        problem = params = scale = None
        steps = self._steps() if self.uses_transitions else None
        # the labels' node score, once a round: the pass's NLL check and the secant's
        node = None
        if steps is not None or self.step_scale is not None:
            node = label_score(u, batch)
        if self.uses_transitions:
            problem = self._problem(u, batch)
            params = None if steps is None else steps.params(problem, self.params)
        if params is not None:
            self.params = params
            if self._one_pass(u, batch, out, problem, steps, node, stamp, t0):
                return out
            # the transitions lag: this round refits from its pass (the solver's
            # first evaluation), at the scale that pass fitted
            scale = 1.0 if self.step_scale is None else self.step_scale.scale
            t0 = time.process_time()
        need = VALUE if steps is None else steps.need
        log_z = np.empty(batch.offsets.shape[0] - 1) if self.step_scale is not None else None
        if problem is not None:  # the refit round: its passes, then one for G and H
            solver = self.spec.transition_solver
            # equal rows (the first round's margins): the refit passes over one sequence a length
            solve, index = problem.by_length() or (problem, slice(None))
            if self.step_scale is not None and scale is None:  # the NLL at the last
                # round's transitions (the solver's first evaluation reuses this pass)
                before = solve.evaluate(
                    self.params, FIRST_NEED[solver], rates=solver == "newton"
                ).log_z[index]
                scale = self.step_scale.update(
                    u, self.step_scale.nll(before, node, batch), self.allreduce
                )
        bound_scale = scale if self.step_scale is not None else 1.0
        if problem is not None:
            tap = None
            if solve is problem:  # G and H from the last iteration's passes (a batch in blocks)
                tap = lambda rows, seqs, post: self._write_blocks(  # noqa: E731
                    [(rows, seqs, post, post.marginals())], batch, out, bound_scale, log_z
                )
            iters = self.spec.iterations if steps is None else steps.refit_iterations(params)
            self.params = refit(solve, self.params, solver, iters, self._lbfgs_memory,
                                solve is problem and self._rates(need), tap)  # fmt: skip
        t1 = time.process_time()
        inference = [0.0]
        if problem is None or not problem.tapped(self.params):
            blocks = _timed(self._node_blocks(u, batch, problem, need), inference)
            self._write_blocks(blocks, batch, out, bound_scale, log_z)
        if steps is not None:  # the next round steps from its own pass, checked against this one
            steps.start(problem, self.params, self.allreduce(
                steps.local_sums(problem, self.params, node)
            ))  # fmt: skip
        if self.step_scale is not None:
            self.step_scale.remember(u, self.step_scale.nll(log_z, node, batch), *out,
                                     borrow=out[0].dtype == np.float32, stamp=stamp)  # fmt: skip
        t2 = time.process_time()
        self.timings["transitions"] += t1 - t0
        self.timings["inference"] += inference[0]
        self.timings["gamma"] += t2 - t1 - inference[0]
        return out

    def _one_pass(self, u, batch, out, problem, steps, node, stamp, t0):
        """The round of one pass at ``self.params`` (see :mod:`structboost.transitions.onestep`).

        The pass writes G and, with the adaptive step, ``p (1 - p)`` in
        place of H (H waits for the scale); its sums and the secant's cross
        the workers in one allreduce; the scale finishes H in place and the
        sums give the next round's transition step. ``node``: the labels'
        node score (:func:`label_score`); ``stamp``: the margins' checksum
        (:func:`check_margin_values`). Returns False, with the secant's
        scale fitted and nothing else kept, when the round must refit from
        its pass instead (:meth:`~structboost.transitions.onestep.OneStep.finish`).
        """
        secant = self.step_scale
        inference = [0.0]
        log_z = gamma_rows = None
        if secant is not None:  # H waits for the scale: p (1 - p) and gamma meanwhile
            log_z = np.empty(batch.offsets.shape[0] - 1)
            gamma_rows = np.empty(u.shape[0])  # (freed before the engine's tree: its peak)
        # the secant's sums along the old and the new G and H, taken as they are rewritten
        kept = None if secant is None else secant.kept(u)
        blocks = _timed(self._node_blocks(u, batch, problem, steps.need), inference)
        measured = self._write_blocks(blocks, batch, out, None if secant else 1.0, log_z,
                                      gamma_rows, None if kept is None else (u, *kept))  # fmt: skip
        if measured is not None:
            secant.check(measured[1])
            measured = measured[0]  # (fit reads new_slope only when the transitions moved)
        local = steps.local_sums(problem, self.params, node)
        moved = steps.moved
        own = nll = None
        if secant is not None:
            nll = secant.nll(log_z, node, batch)
        if measured is not None:
            own = secant.local_sums(u, nll, measured=measured)
            own[0] -= steps.path_change(problem)  # the weighted NLL's change
        sums = RoundSums(own, local).summed(self.allreduce)
        if secant is not None:
            scale = secant.fit(sums.secant, moved, steps.explained(sums.steps))
        t2 = time.process_time()
        refit_now = steps.finish(problem, self.params, sums.steps)
        t3 = time.process_time()
        self.timings["transitions"] += t3 - t2
        self.timings["inference"] += inference[0]
        self.timings["gamma"] += t2 - t0 - inference[0]
        if refit_now:
            return False
        if secant is not None:
            self._scale_hess(gamma_rows, scale, batch, out[1])
            secant.remember(u, nll, *out, borrow=out[0].dtype == np.float32, stamp=stamp)
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
            None: ``spec.metric``. A callable gets ``(y_true (n,), y_proba
            (n, K))`` (and ``sample_weight=`` ``(n,)`` when the weights are
            not all one) and is evaluated on this process's rows.

        Returns
        -------
        (str, float)
            ``("crf-nll", weighted mean NLL per sequence)``,
            ``("crf-error", weighted token error of the MAP labelling)`` or
            the callable's ``__name__`` and value.
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
