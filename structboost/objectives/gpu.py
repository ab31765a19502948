"""The chain-CRF objective round on a CUDA GPU (``crf_objective(K, device="cuda")``).

See :mod:`structboost.inference.gpu` for what crosses the bus each round.
"""

import time
import weakref

import numpy as np

from numba import cuda

from ..inference.chain import path_scores
from ..inference.gpu import (
    DevicePosterior,
    DeviceStructure,
    as_device,
    copy_into,
    device_unary,
    grad_hess,
    is_device_array,
    label_score,
    softmax,
    step_sums,
    viterbi_labels,
)
from ..transitions.chain import refit
from ..transitions.gpu import DeviceTransitionProblem
from .chain import CRFObjective
from .step import RoundSums, SecantScale


class DeviceSecant(SecantScale):
    """:class:`~structboost.objectives.step.SecantScale` whose sums run on the device.

    It keeps float32 device copies of the last round's node potentials, G
    and H (as the host secant keeps host ones) and reduces them on the
    device: two floats cross the bus per sum, where the host secant copied
    ``3 n K`` floats each round. ``structure`` is the
    :class:`~structboost.inference.gpu.DeviceStructure` of the training
    batch, set by the objective before each round's first call.
    """

    structure = None

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("structure", None)  # device arrays, set again by the next round
        return state

    def _along(self, margins, grad, hess=None):
        slope, model = step_sums(margins, self._last[0], grad, grad if hess is None else hess)
        return [slope, 0.0 if hess is None else model]

    def remember(self, margins, nll, grad, hess, borrow=False, stamp=None):
        """Keep float32 device copies of ``margins``, ``grad`` and ``hess`` ``(n, K)``."""
        arrays = (margins, grad, hess)
        if self._copies is None or self._copies[0].shape != margins.shape:
            self._copies = tuple(cuda.device_array(margins.shape, np.float32) for _ in arrays)
        for new, copy in zip(arrays, self._copies):
            copy_into(new, copy)
        self._stamp = None
        self._last = (*self._copies, nll)


class DeviceCRFObjective(CRFObjective):
    """:class:`~structboost.objectives.chain.CRFObjective` whose round runs on a CUDA GPU.

    Takes the parameters of :class:`~structboost.objectives.chain.CRFObjective`
    and gives its results (to float tolerance); :meth:`grad_hess` returns
    numba device arrays, which ``xgboost.train(obj=...)`` on a booster with
    ``device="cuda"`` reads in place. ``nthread`` is accepted and ignored:
    the round's kernels run on the device, and its host parts (the solver
    over ``K^2 + 2K`` parameters, the log-space fallback) are serial.
    ``transition_solver="majorize"`` is CPU-only (its ``O(K^4)`` bound is built on
    the host). ``timings`` are wall seconds here (the device works
    asynchronously, so CPU time would miss it).

    Parameters
    ----------
    num_labels : int
    spec : ObjectiveSpec, optional
    **params
        As for :class:`~structboost.objectives.chain.CRFObjective`.
    """

    def __init__(self, num_labels, spec=None, **params):
        super().__init__(num_labels, spec, **params)
        if self.step_scale is not None:
            self.step_scale = DeviceSecant()
        if self.spec.transition_solver == "majorize":
            raise ValueError(
                'transition_solver="majorize" runs on the CPU only; use "lbfgs" or "newton" '
                'with device="cuda", or device="cpu".'
            )
        self._structures = {}

    def __getstate__(self):
        state = super().__getstate__()
        state["_structures"] = {}  # device copies of the batches, rebuilt on the next round
        return state

    def structure(self, batch):
        """The :class:`DeviceStructure` of a batch, built once per batch object."""
        key = id(batch)
        cached = self._structures.get(key)
        if cached is not None and cached[0]() is batch:
            return cached[1]
        structure = DeviceStructure(batch.offsets, batch.seq_weight, batch.labels)
        self._structures[key] = (weakref.ref(batch), structure)
        return structure

    def grad_hess(self, margins, batch, dtype=None, order=None):
        """Refit the transitions and return the node gradient and Hessian, on the device.

        Parameters
        ----------
        margins : (n, K) array or device array
        batch : SequenceBatch
        dtype, order
            Ignored: the results stay float64 on the device, where XGBoost
            reads them in place.

        Returns
        -------
        grad, hess : (n, K) float64 device arrays
        """
        self._check_allowed(batch)
        t0 = time.perf_counter()
        du = device_unary(margins, self.num_labels)
        st = self.structure(batch)
        gamma = st.d_row_weight
        spec = self.spec
        mode, scale, step = 0, 2.0, 1.0
        secant, steps, node = self.step_scale, None, None
        if secant is not None:
            secant.structure = st
        if self.uses_transitions:
            free = None if self.constraints is None else self.constraints.free_vector()
            problem = DeviceTransitionProblem(du, st, batch.counts, spec.reg_transitions, free,
                                              self.allreduce)  # fmt: skip
            steps = self._steps()
            params = None if steps is None else steps.params(problem, self.params)
            if params is None:  # the refit round (see NodeObjective._grad_hess)
                if secant is not None:
                    before = problem.posterior(self.params).log_z
                    node = label_score(du.unary, st)
                    step = secant.update(du.unary, secant.nll(before, node, batch),
                                         self.allreduce)
                self._refit(problem, steps, None)
            else:
                self.params = params
            t1 = time.perf_counter()
            post, p, gamma, mode, scale = self._node_inputs(problem, st)
        else:
            t1 = t0
            p = softmax(du.w)
        args = (p, st.d_labels, st.d_row_weight, gamma, scale, mode)
        if node is None and (steps is not None or secant is not None):  # the labels' node
            node = label_score(du.unary, st)  # score: the NLL check's and the secant's
        if steps is not None and params is not None:  # one pass: its sums and the secant's
            local = steps.local_sums(problem, self.params, node)
            own = None
            if secant is not None and secant.kept(du.unary) is not None:  # in one allreduce
                grad = None  # G at scale 1 for the gradient secant (H waits for the scale)
                if steps.moved:
                    grad, _ = grad_hess(*args, step, spec.hess_floor)
                own = secant.local_sums(du.unary, secant.nll(post.log_z, node, batch),
                                        secant.measure(du.unary, grad))
                own[0] -= steps.path_change(problem)
            sums = RoundSums(own, local).summed(self.allreduce)
            if secant is not None:
                step = secant.fit(sums.secant, steps.moved, steps.explained(sums.steps))
            if steps.finish(problem, self.params, sums.steps):  # refit from this pass
                self._refit(problem, steps, params)
                post, p, gamma, mode, scale = self._node_inputs(problem, st)
                args = (p, st.d_labels, st.d_row_weight, gamma, scale, mode)
                params = None
        if steps is not None and params is None:  # the next round checks against this pass
            local = steps.local_sums(problem, self.params, node)
            steps.start(problem, self.params, self.allreduce(local))
        grad, hess = grad_hess(*args, step, spec.hess_floor)
        if secant is not None:
            secant.remember(du.unary, secant.nll(post.log_z, node, batch), grad, hess)
        cuda.synchronize()
        t2 = time.perf_counter()
        self.timings["transitions"] += t1 - t0
        self.timings["inference"] += t2 - t1
        return grad, hess

    def _refit(self, problem, steps, lagging):
        """Refit the transitions before the round's G and H.

        One-pass rounds take :meth:`~structboost.transitions.onestep.OneStep.refit_iterations`
        (``lagging``: the parameters of the round's own pass when it refits
        from that pass, else None), as on the CPU.
        """
        spec = self.spec
        iters = spec.iterations if steps is None else steps.refit_iterations(lagging)
        self.params = refit(problem, self.params, spec.transition_solver, iters,
                            self._lbfgs_memory)

    def _node_inputs(self, problem, st):
        """``(posterior, marginals, gamma, mode, scale)`` of the pass at ``self.params``."""
        post = problem.posterior(self.params)
        gamma, mode, scale = st.d_row_weight, 0, 2.0
        if self.mode == "treecrf":
            mode = 1
        elif isinstance(self.spec.hessian_bound, str):
            mode = 2
            gamma = post.node_gamma(self.spec.hessian_bound)
        else:
            scale = self.spec.hessian_bound
        return post, post.marginals_device(), gamma, mode, scale

    def _host_margins(self, margins):
        if is_device_array(margins):
            margins = as_device(margins).copy_to_host()
        return self.check_margins(margins)

    def sequence_nll(self, margins, batch):
        """Per-sequence negative log-likelihood ``(m,)``; ``log Z`` on the device."""
        self._check_allowed(batch)
        u = self._host_margins(margins)
        p = self.params
        post = DevicePosterior(device_unary(u), self.structure(batch), p.transitions, p.start,
                               p.end)
        return post.log_z - path_scores(u, batch.offsets, batch.labels, p.transitions, p.start,
                                        p.end)

    def decode(self, margins, batch):
        """Viterbi labels ``(n,)`` of the sequences of ``batch``, on the device."""
        p = self.params
        du = device_unary(margins, self.num_labels)
        return viterbi_labels(du, self.structure(batch).d_offsets, p.transitions, p.start, p.end)
