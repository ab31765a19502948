"""The chain-CRF round on a CUDA GPU (``crf_objective(K, device="cuda")``): the device backend.

:class:`DeviceCRFObjective` runs the round of :class:`~.round.NodeObjective`
on :class:`DeviceArrays`; see :mod:`structboost.inference.gpu` for what
crosses the bus each round.
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
    finish_hess,
    grad_hess,
    is_device_array,
    label_score,
    softmax,
    step_sums,
    viterbi_labels,
)
from ..transitions.base import PenalisedProblem, identity
from ..transitions.chain import TransitionParams, TransitionProblem
from .chain import CRFObjective
from .round import Hessian
from .step import SecantScale


class DeviceSecant(SecantScale):
    """:class:`~structboost.objectives.step.SecantScale` whose sums run on the device over float32
    device copies.
    """

    def _along(self, margins, grad, hess):
        return list(step_sums(margins.unary, self._last[0], grad, hess))

    def remember(self, margins, nll, grad, hess, borrow=False, stamp=None):
        """Keep float32 device copies of ``margins``, ``grad`` and ``hess`` ``(n, K)``."""
        arrays = (margins.unary, grad, hess)
        if self._copies is None or self._copies[0].shape != margins.shape:
            self._copies = tuple(cuda.device_array(margins.shape, np.float32) for _ in arrays)
        for new, copy in zip(arrays, self._copies):
            copy_into(new, copy)
        self._last = (*self._copies, nll)


class DeviceArrays:
    """The round's arrays on a CUDA GPU: :class:`~.round.HostArrays`' operations on device arrays.

    ``u`` is a :class:`~structboost.inference.gpu.DeviceUnary`; a batch is one
    block, copied to the device once (:meth:`structure`). G and H are float64
    device buffers kept across rounds, whatever ``dtype`` and ``order``.
    """

    secant = DeviceSecant

    def __init__(self):
        self._structures = {}
        self._buffers = None
        self._full = {}
        self._none = cuda.device_array(0)

    @staticmethod
    def clock():
        """Wall seconds, once the device has done what was asked of it."""
        cuda.synchronize()
        return time.perf_counter()

    margins = staticmethod(lambda margins, num_labels: (device_unary(margins, num_labels), None))

    def outputs(self, shape, dtype, order):
        if self._buffers is None or self._buffers[0].shape != shape:
            self._buffers = (cuda.device_array(shape), cuda.device_array(shape))
        return self._buffers

    def structure(self, batch):
        """The :class:`~structboost.inference.gpu.DeviceStructure` of a batch, built once per batch
        object.
        """
        key = id(batch)
        cached = self._structures.get(key)
        if cached is not None and cached[0]() is batch:
            return cached[1]
        structure = DeviceStructure(batch.offsets, batch.seq_weight, batch.labels)
        self._structures[key] = (weakref.ref(batch), structure)
        return structure

    def label_score(self, u, batch):
        return label_score(u.unary, self.structure(batch))

    independent_blocks = staticmethod(lambda u, batch: [(slice(None), slice(None), None,
                                                         softmax(u.w))])  # fmt: skip
    marginals = staticmethod(lambda post: post.marginals_device())

    def full(self, n, value):
        """A device ``(n,)`` of ``value``, kept (a fixed bound's, every round)."""
        key = (n, float(value))
        if key not in self._full:
            self._full = {key: cuda.to_device(np.full(n, float(value)))}
        return self._full[key]

    empty = staticmethod(cuda.device_array)
    put = staticmethod(lambda dst, rows, src: dst.copy_to_device(src))  # (rows cover dst)

    def grad_hess(self, p, batch, rows, seqs, gamma, scale, hessian, floor, out, last):
        """As :meth:`~.round.HostArrays.grad_hess`; the secant's sums in reductions of their own."""
        st = self.structure(batch)
        if last is not None:
            new, old, old_g, old_h = last
            slope, model = step_sums(new.unary, old, old_g, old_h)
        grad_hess(p, st.d_labels, st.d_row_weight, self._none if gamma is None else gamma,
                  1.0 if scale is None else scale, hessian is Hessian.UNIT, floor,
                  scale is not None, out)  # fmt: skip
        if last is None:
            return None
        return np.array([slope, model, step_sums(new.unary, old, out[0], out[0])[0]]), 0

    def finish_hess(self, hess, gamma, scale, floor, batch):
        finish_hess(hess, gamma, scale, floor, self.structure(batch).d_row_weight)


class DeviceTransitionProblem(PenalisedProblem):
    """:class:`~structboost.transitions.chain.TransitionProblem` with device messages; the solvers
    run on the host.

    Parameters
    ----------
    unary : DeviceUnary
    structure : DeviceStructure
    counts : (K*K + 2K,) float64
    reg : float
    free : (K*K + 2K,) bool ndarray, optional
    allreduce : callable, optional
    """

    param_type = TransitionParams
    newton_scale = TransitionProblem.newton_scale

    def __init__(self, unary, structure, counts, reg, free=None, allreduce=identity):
        self.allreduce = allreduce
        self.free = None if free is None or free.all() else free
        self.unary = unary
        self.structure = structure
        self.seq_weight = structure.seq_weight
        self.counts = counts
        self.reg = float(reg)
        self.num_labels = unary.shape[1]

    def _posterior(self, params, rates, edges):  # the device computes both on demand
        return DevicePosterior(self.unary, self.structure, params.transitions, params.start,
                               params.end)

    def expected_counts(self, post, with_curvature=False):
        """As :meth:`TransitionProblem.expected_counts
        <structboost.transitions.chain.TransitionProblem.expected_counts>`.
        """
        st = self.structure
        edge_gamma = post.edge_gamma() if with_curvature else st.d_row_weight
        node_gamma = post.node_gamma("mixing") if with_curvature else st.d_row_weight
        trans, trans_curv, ends = post.weighted_sums(edge_gamma, node_gamma, with_curvature)
        part = post.log_space
        if part is not None:
            pair_w = np.repeat(self.seq_weight, np.diff(st.offsets))[part.rows]
            trans += np.einsum("e,eab->ab", pair_w, part.pairwise)
            if with_curvature:
                pair_w = pair_w * edge_gamma.copy_to_host()[part.rows]
                trans_curv += np.einsum("e,eab->ab", pair_w, part.pairwise * (1.0 - part.pairwise))
        expected = np.concatenate((trans.ravel(), ends[0][0], ends[1][0]))
        if not with_curvature:
            return expected, None
        curvature = np.concatenate((np.maximum(trans_curv, 0.0).ravel(), ends[0][1], ends[1][1]))
        return expected, curvature


class DeviceCRFObjective(CRFObjective):
    """:class:`~structboost.objectives.chain.CRFObjective` whose round runs on a CUDA GPU, same
    results to float tolerance.

    :meth:`grad_hess` returns its own float64 device buffers (``dtype`` and
    ``order`` ignored), which XGBoost with ``device="cuda"`` reads in place.
    ``nthread`` is ignored; ``transition_solver="majorize"`` is CPU-only;
    ``timings`` are wall seconds.

    Parameters
    ----------
    num_labels : int
    spec : ObjectiveSpec, optional
    **params
        As for :class:`~structboost.objectives.chain.CRFObjective`.
    """

    arrays = DeviceArrays

    def __init__(self, num_labels, spec=None, **params):
        super().__init__(num_labels, spec, **params)
        if self.spec.transition_solver == "majorize":
            raise ValueError(
                'transition_solver="majorize" runs on the CPU only; use "lbfgs" or "newton" '
                'with device="cuda", or device="cpu".'
            )

    def _problem(self, u, batch):
        free = None if self.constraints is None else self.constraints.free_vector()
        return DeviceTransitionProblem(u, self._arrays.structure(batch), batch.counts,
                                       self.spec.reg_transitions, free, self.allreduce)  # fmt: skip

    def sequence_nll(self, margins, batch):
        """Per-sequence negative log-likelihood ``(m,)``; ``log Z`` on the device."""
        self._check_allowed(batch)
        if is_device_array(margins):
            margins = as_device(margins).copy_to_host()
        u = self.check_margins(margins)
        p = self.params
        post = DevicePosterior(device_unary(u), self._arrays.structure(batch), p.transitions,
                               p.start, p.end)  # fmt: skip
        return post.log_z - path_scores(u, batch.offsets, batch.labels, p.transitions, p.start,
                                        p.end)  # fmt: skip

    def decode(self, margins, batch):
        """Viterbi labels ``(n,)`` of the sequences of ``batch``, on the device."""
        p = self.params
        du = device_unary(margins, self.num_labels)
        return viterbi_labels(du, self._arrays.structure(batch).d_offsets, p.transitions,
                              p.start, p.end)  # fmt: skip
