"""The chain-CRF round on a CUDA GPU (``crf_objective(K, device="cuda")``): the device backend.

:class:`DeviceCRFObjective` runs the round of :class:`~.round.NodeObjective`
on :class:`DeviceArrays`, whose :class:`~structboost.inference.gpu.Workspace`
keeps every buffer across rounds: a steady round allocates nothing and
waits for the device three times (the labels' score, the pass's small sums,
the secant's sums); ``counters`` says so (see
:mod:`structboost.inference.gpu`).
"""

import time
import weakref

import numpy as np

from ..inference.chain import path_scores
from ..inference.gpu import (
    DevicePosterior,
    DeviceStructure,
    Workspace,
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
    copies in the margins' workspace.
    """

    def _along(self, margins, grad, hess):
        return list(step_sums(margins.workspace, margins.unary, self._last[0], grad, hess,
                              grad)[:2])  # fmt: skip

    def remember(self, margins, nll, grad, hess, borrow=False, stamp=None):
        """Keep float32 device copies of ``margins``, ``grad`` and ``hess`` ``(n, K)``."""
        ws = margins.workspace
        arrays = (margins.unary, grad, hess)
        copies = [ws.array(f"secant_{i}", margins.shape, np.float32) for i in range(3)]
        for new, copy in zip(arrays, copies):
            copy_into(new, copy)
        self._last = (*copies, nll)


class DeviceArrays:
    """The round's arrays on a CUDA GPU: :class:`~.round.HostArrays`' operations on device arrays.

    ``u`` is a :class:`~structboost.inference.gpu.DeviceUnary`; a batch is one
    block, copied to the device once (:meth:`structure`). G and H are device
    buffers of the asked ``dtype`` kept across rounds, C order whatever ``order``.

    Attributes
    ----------
    workspace : Workspace
        The rounds' buffers; its ``counters`` restart with every round.
    scratch : Workspace
        Evaluation's and decoding's buffers.
    """

    secant = DeviceSecant
    #: Host wall seconds (the device's work is counted where the host waits for it).
    clock = staticmethod(time.perf_counter)

    def __init__(self):
        self.workspace = Workspace()
        self.scratch = Workspace()
        self._structures = {}
        self._full = (None, None)
        self._none = self.workspace.array("none", 0)

    def margins(self, margins, num_labels):
        """The round's :class:`~structboost.inference.gpu.DeviceUnary` (checked by the round's first
        synchronisation); restarts the counters.
        """
        self.workspace.counters.reset()
        return device_unary(margins, num_labels, self.workspace, check=False), None

    def outputs(self, shape, dtype, order):
        """G and H device buffers of ``dtype`` (float32 or float64), C order whatever ``order``."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float64 or float32; got {dtype}.")
        ws = self.workspace
        ws.array("gamma_rows", shape[0])  # (:meth:`empty`'s, made with the others)
        return ws.array("grad", shape, dtype), ws.array("hess", shape, dtype)

    def structure(self, batch):
        """The :class:`~structboost.inference.gpu.DeviceStructure` of a batch, built once per batch
        object.
        """
        key = id(batch)
        cached = self._structures.get(key)
        if cached is not None and cached[0]() is batch:
            return cached[1]
        structure = DeviceStructure(batch.offsets, batch.seq_weight, batch.labels,
                                    self.workspace.counters)  # fmt: skip
        self._structures[key] = (weakref.ref(batch), structure)
        return structure

    def label_score(self, u, batch):
        return label_score(u, self.structure(batch))

    @staticmethod
    def independent_blocks(u, batch):
        u.check()
        return [(slice(None), slice(None), None, softmax(u))]

    marginals = staticmethod(lambda post: post.marginals_device())

    def full(self, n, value):
        """A device ``(n,)`` of ``value``, kept (a fixed bound's, every round)."""
        key = (n, float(value))
        if self._full[0] != key:
            self._full = (key, self.workspace.put("full", np.full(n, float(value))))
        return self._full[1]

    def empty(self, n):
        return self.workspace.array("gamma_rows", n)

    put = staticmethod(lambda dst, rows, src: dst.copy_to_device(src))  # (rows cover dst)

    def grad_hess(self, p, batch, rows, seqs, gamma, scale, hessian, floor, out, last):
        """As :meth:`~.round.HostArrays.grad_hess`; the secant's sums taken as G is written."""
        st = self.structure(batch)
        if last is not None:
            last = (last[0].unary, *last[1:])
        sums = grad_hess(self.workspace, p, st.d_labels, st.d_row_weight,
                         self._none if gamma is None else gamma, 1.0 if scale is None else scale,
                         hessian is Hessian.UNIT, floor, scale is not None, out, last)  # fmt: skip
        return None if sums is None else (sums, 0)

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

    def _posterior(self, params, rates, edges):
        """The pass, its expected counts (with curvature after ``rates``) taken in its
        synchronisation when asked for.
        """
        sums = bool(rates) if rates or edges else None
        return DevicePosterior(self.unary, self.structure, params.transitions, params.start,
                               params.end, sums)  # fmt: skip

    def expected_counts(self, post, with_curvature=False):
        """As :meth:`TransitionProblem.expected_counts
        <structboost.transitions.chain.TransitionProblem.expected_counts>`.
        """
        st = self.structure
        trans, trans_curv, ends = post.weighted_sums(with_curvature)
        part = post.log_space
        if part is not None:
            pair_w = np.repeat(self.seq_weight, np.diff(st.offsets))[part.rows]
            trans += np.einsum("e,eab->ab", pair_w, part.pairwise)
            if with_curvature:
                pair_w = pair_w * post.edge_gamma().copy_to_host()[part.rows]
                trans_curv += np.einsum("e,eab->ab", pair_w, part.pairwise * (1.0 - part.pairwise))
        expected = np.concatenate((trans.ravel(), ends[0][0], ends[1][0]))
        if not with_curvature:
            return expected, None
        curvature = np.concatenate((np.maximum(trans_curv, 0.0).ravel(), ends[0][1], ends[1][1]))
        return expected, curvature


class DeviceCRFObjective(CRFObjective):
    """:class:`~structboost.objectives.chain.CRFObjective` whose round runs on a CUDA GPU, same
    results to float tolerance.

    :meth:`grad_hess` returns its own device buffers of ``dtype`` (C order
    whatever ``order``), which XGBoost with ``device="cuda"`` reads in place.
    ``nthread`` is ignored; ``transition_solver="majorize"`` is CPU-only;
    ``timings`` are host wall seconds.

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

    @property
    def counters(self):
        """The last round's :class:`~structboost.inference.gpu.DeviceCounters`."""
        return self._arrays.workspace.counters

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
        post = DevicePosterior(device_unary(u, workspace=self._arrays.scratch),
                               self._arrays.structure(batch), p.transitions, p.start,
                               p.end)  # fmt: skip
        return post.log_z - path_scores(u, batch.offsets, batch.labels, p.transitions, p.start,
                                        p.end)  # fmt: skip

    def decode(self, margins, batch):
        """Viterbi labels ``(n,)`` of the sequences of ``batch``, on the device."""
        p = self.params
        du = device_unary(margins, self.num_labels, self._arrays.scratch)
        return viterbi_labels(du, self._arrays.structure(batch).d_offsets, p.transitions,
                              p.start, p.end)  # fmt: skip
