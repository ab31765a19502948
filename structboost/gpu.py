"""Linear-chain CRF inference and the CRF objective round on a CUDA GPU.

The optional GPU path (``pip install structboost[gpu]``): the kernels of
:mod:`structboost._cuda_chain` (numba.cuda) behind numpy-facing functions
with the signatures and outputs of :mod:`structboost.inference`
(:func:`forward_backward`, :func:`viterbi`, :func:`gamma`), and
:class:`DeviceCRFObjective`, the CRF objective whose round (transition
refit, forward-backward, gamma, G and H) runs on the device. Build it with
``structboost.crf_objective(K, device="cuda")``. Nothing imports this module
(nor ``numba.cuda``) unless a GPU path is asked for.

Inputs may be numpy arrays or device arrays (anything with
``__cuda_array_interface__``: CuPy, numba, PyTorch); outputs of the
inference functions are numpy, like their CPU twins.

What crosses the bus in one objective round (``n`` rows, ``m`` sequences,
``K`` labels):

* in: the margins, ``n K`` floats (XGBoost hands a custom objective host
  margins, so this copy is unavoidable on the ``xgboost.train(obj=...)``
  path; device margins are used in place);
* per evaluation of the transition objective (about ``transition_iter + 2``
  per round with L-BFGS): one count, the ``m`` log partition values and
  the ``K^2 + 2K`` expected counts;
* out: nothing large: G and H stay on the device and XGBoost reads them
  through ``__cuda_array_interface__``.

Sequences whose scaled messages underflow (forbidden moves together with
extreme margins, see :mod:`structboost.inference`) are recomputed on the
host in log space and patched into the device messages, as on the CPU.
"""

import time
import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import cuda

from . import _chain
from . import _cuda_chain as kern
from .inference import (
    _OVERLAP_FLOOR,
    GAMMA_METHODS,
    ChainPosterior,
    _log_space_part,
    check_chain_params,
    path_scores,
)
from .objective import _BLAS, CRFObjective
from .sequences import check_lengths, offsets_from_lengths
from .transitions import PenalisedProblem, TransitionParams, TransitionProblem, refit


def _is_device_array(x):
    """Whether ``x`` lives on the device (CUDA array interface, or a numba/simulator array)."""
    return hasattr(x, "__cuda_array_interface__") or hasattr(x, "copy_to_host")


def _as_device(x):
    """A numba device view of a device array (no copy)."""
    return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)


def _launch(kernel, count, *args):
    kernel[kern.blocks(count), kern.THREADS](*args)


def _zeros(shape, dtype=np.float64):
    return cuda.to_device(np.zeros(shape, dtype=dtype))


def _count(counter):
    """The value of a ``(1,)`` device counter (one small copy to the host)."""
    return int(counter.copy_to_host()[0])


@dataclass
class DeviceUnary:
    """Node potentials on the device.

    Attributes
    ----------
    unary, w : (n, K) float64 device arrays
        The potentials and ``exp(unary - row_max)``.
    row_max : (n,) float64 device array
    """

    unary: object
    w: object
    row_max: object

    @property
    def shape(self):
        return self.unary.shape

    @cached_property
    def host(self):
        """The potentials as a host ``(n, K)`` float64 array (for the log-space fallback)."""
        return self.unary.copy_to_host()


def device_unary(margins, num_labels=None):
    """Copy (if needed) and check node potentials; their row exponentials.

    Parameters
    ----------
    margins : (n, K) array or device array, float32 or float64
        A host array of another dtype is converted to float64 first; a flat
        host array is reshaped to ``(n, num_labels)`` when ``num_labels`` is
        given.
    num_labels : int, optional
        Required number of columns.

    Returns
    -------
    DeviceUnary
    """
    if _is_device_array(margins):
        src = _as_device(margins)
    else:
        host = np.asarray(margins)
        if host.dtype not in (np.float32, np.float64):
            host = host.astype(np.float64)
        if num_labels is not None and host.ndim == 1 and host.size % num_labels == 0:
            host = host.reshape(-1, num_labels)
        src = cuda.to_device(np.ascontiguousarray(host))
    if len(src.shape) != 2 or src.shape[1] < 1 or (num_labels and src.shape[1] != num_labels):
        want = f"(rows, {num_labels})" if num_labels else "(rows, labels)"
        raise ValueError(
            f"margins must have shape {want}; got {tuple(src.shape)}. The booster needs one "
            "output per label (num_target = num_labels)."
        )
    n, k = src.shape
    unary = cuda.device_array((n, k))
    w = cuda.device_array((n, k))
    row_max = cuda.device_array(n)
    bad = _zeros(1, np.int64)
    _launch(kern.prepare_rows, n, src, unary, w, row_max, bad)
    if _count(bad):
        raise ValueError(
            "margins contain NaN or inf; node potentials must be finite (training has "
            "diverged, or check the margins)."
        )
    return DeviceUnary(unary, w, row_max)


class DeviceStructure:
    """Sequence boundaries and weights of a batch, on the device.

    Parameters
    ----------
    offsets : (m + 1,) int64
    seq_weight : (m,) float64, optional
        Ones by default.
    labels : (n,) int64, optional
        Training labels (needed by the objective round only).

    Attributes
    ----------
    offsets : (m + 1,) int64 host array
    seq_weight : (m,) float64 host array
    d_offsets, d_row_weight, d_last, d_first_rows, d_last_rows, d_seq_weight, d_labels
        Device copies: offsets, the weight of every row ``(n,)``, a bool mask
        of the last rows ``(n,)``, the first and last row of every sequence
        ``(m,)``, the sequence weights and the labels (or None).
    """

    def __init__(self, offsets, seq_weight=None, labels=None):
        m = offsets.shape[0] - 1
        lengths = np.diff(offsets)
        self.offsets = offsets
        self.seq_weight = np.ones(m) if seq_weight is None else seq_weight
        last = np.zeros(offsets[-1], dtype=np.bool_)
        last[offsets[1:] - 1] = True
        self.d_offsets = cuda.to_device(offsets)
        self.d_row_weight = cuda.to_device(np.repeat(self.seq_weight, lengths))
        self.d_last = cuda.to_device(last)
        self.d_first_rows = cuda.to_device(offsets[:-1].copy())
        self.d_last_rows = cuda.to_device(offsets[1:] - 1)
        self.d_seq_weight = cuda.to_device(self.seq_weight)
        self.d_labels = None if labels is None else cuda.to_device(labels)

    @property
    def num_sequences(self):
        return self.offsets.shape[0] - 1


def _shifted_exp(x):
    """``(exp(x - max(x)), max(x))`` as the CPU kernels compute them."""
    top = float(x.max())
    with np.errstate(invalid="ignore"):
        return np.exp(x - top), top


class DevicePosterior:
    """Scaled forward-backward messages on the device, with what derives from them.

    The device counterpart of :class:`structboost.inference.ChainPosterior`
    (same messages, same log-space fallback); built by
    :func:`device_posterior`.

    Attributes
    ----------
    log_z : (m,) float64 host array
    alpha, beta, r, into : (n, K) float64 device arrays
    beta_scale : (n,) float64 device array
    log_space : LogSpacePart or None
        Sequences recomputed on the host in log space.
    """

    def __init__(self, unary, structure, transitions, start, end):
        n, k = unary.shape
        m = structure.num_sequences
        self.unary = unary
        self.structure = structure
        self.transitions = transitions
        t_max = float(transitions.max())
        self.d_emat = cuda.to_device(np.exp(transitions - t_max))
        start_w, start_top = _shifted_exp(start)
        end_w, end_top = _shifted_exp(end)
        d_log_z = cuda.device_array(m)
        self.alpha, self.beta, self.r, self.into = (cuda.device_array((n, k)) for _ in range(4))
        self.beta_scale = cuda.device_array(n)
        weak = cuda.device_array(m, dtype=np.int8)
        n_weak = _zeros(1, np.int64)
        _launch(
            kern.messages, m, unary.unary, unary.w, unary.row_max, structure.d_offsets,
            self.d_emat, t_max, cuda.to_device(start_w), start_top, cuda.to_device(end_w),
            end_top, d_log_z, self.alpha, self.beta, self.r, self.into, self.beta_scale,
            weak, n_weak, _OVERLAP_FLOOR,
        )
        self.log_z = d_log_z.copy_to_host()
        self.log_space = None
        if _count(n_weak):
            sequences = np.flatnonzero(weak.copy_to_host()).astype(np.int64)
            self.log_z[sequences], part = _log_space_part(
                unary.host, structure.offsets, sequences, transitions, start, end
            )
            rows = cuda.to_device(part.rows)
            count = part.rows.size
            _launch(kern.scatter_rows, count, self.alpha, rows, cuda.to_device(part.marginals))
            for arr, value in ((self.beta, 1.0), (self.r, 1.0 / k), (self.into, 1.0)):
                fill = cuda.to_device(np.full((count, k), value))
                _launch(kern.scatter_rows, count, arr, rows, fill)
            _launch(kern.scatter, count, self.beta_scale, rows, cuda.to_device(np.ones(count)))
            self.log_space = part

    @property
    def offsets(self):
        return self.structure.offsets

    def marginals_device(self):
        """Node marginals ``(n, K)`` as a device array."""
        out = cuda.device_array(self.alpha.shape)
        _launch(kern.marginals, out.shape[0], self.alpha, self.beta, out)
        return out

    def marginals(self):
        """Node marginals ``(n, K)`` on the host."""
        return self.marginals_device().copy_to_host()

    @cached_property
    def _gammas(self):
        """Node and edge bounds of the mixing rates ``(n,), (n,)`` on the device."""
        n = self.alpha.shape[0]
        right, left = cuda.device_array(n), cuda.device_array(n)
        _launch(
            kern.mixing_rates, self.structure.num_sequences, self.alpha, self.beta, self.r,
            self.into, self.beta_scale, self.structure.d_offsets, self.d_emat, right, left,
        )
        part = self.log_space
        if part is not None:
            rates = _chain.pairwise_rates(part.pairwise, part.offsets)
            rows = cuda.to_device(part.rows)
            for dst, src in zip((right, left), rates):
                _launch(kern.scatter, part.rows.size, dst, rows, cuda.to_device(src))
        node, edge = cuda.device_array(n), cuda.device_array(n)
        _launch(kern.path_gamma, self.structure.num_sequences, right, left,
                self.structure.d_offsets, node, edge)
        return node, edge

    def node_gamma(self, method="mixing"):
        """Per-row node bound ``(n,)`` as a device array.

        ``"mixing"`` and ``"length"`` run on the device; ``"exact"`` (an
        analysis tool, ``O(L^2 K^3)`` per sequence) runs the CPU kernel on
        copies of the messages.
        """
        if method == "mixing":
            return self._gammas[0]
        if method == "length":
            out = cuda.device_array(self.alpha.shape[0])
            _launch(kern.length_gamma, self.structure.num_sequences, self.structure.d_offsets, out)
            return out
        if method == "exact":
            return cuda.to_device(self.to_host().node_gamma("exact"))
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` of Theorem 4.2 as a device array; zero on last rows."""
        return self._gammas[1]

    def to_host(self):
        """The same posterior as a host :class:`~structboost.inference.ChainPosterior`."""
        return ChainPosterior(
            self.offsets, self.transitions, self.log_z, self.alpha.copy_to_host(),
            self.beta.copy_to_host(), self.r.copy_to_host(), self.into.copy_to_host(),
            self.beta_scale.copy_to_host(), self.log_space,
        )


def _host_chain(unary, lengths, transitions, start, end):
    """Validated inputs of the inference functions: device potentials, structure, parameters."""
    du = device_unary(unary)
    n, k = du.shape
    offsets = offsets_from_lengths(check_lengths(lengths, n))
    return (du, offsets, *check_chain_params(k, transitions, start, end))


def forward_backward(unary, lengths, transitions, start, end):
    """Log partition function and node marginals, on the GPU.

    As :func:`structboost.inference.forward_backward`; ``unary`` may be a
    device array.

    Returns
    -------
    log_z : (m,) float64
    marginals : (n, K) float64
    """
    du, offsets, trans, s, e = _host_chain(unary, lengths, transitions, start, end)
    post = DevicePosterior(du, DeviceStructure(offsets), trans, s, e)
    return post.log_z, post.marginals()


def gamma(unary, lengths, transitions, start, end, method="mixing"):
    """Per-position node bound of Chen et al. (2015), on the GPU.

    As :func:`structboost.inference.gamma` (``"exact"`` runs on the host).

    Returns
    -------
    (n,) float64
    """
    if method not in GAMMA_METHODS:
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")
    du, offsets, trans, s, e = _host_chain(unary, lengths, transitions, start, end)
    post = DevicePosterior(du, DeviceStructure(offsets), trans, s, e)
    return post.node_gamma(method).copy_to_host()


def _viterbi(unary, d_offsets, transitions, start, end):
    """Device Viterbi path ``(n,)`` int64 of :class:`DeviceUnary` potentials."""
    n, k = unary.shape
    path = cuda.device_array(n, dtype=np.int64)
    _launch(
        kern.viterbi, d_offsets.shape[0] - 1, unary.unary, d_offsets, cuda.to_device(transitions),
        cuda.to_device(start), cuda.to_device(end), cuda.device_array((n, k)),
        cuda.device_array((n, k), dtype=np.int32), path,
    )
    return path.copy_to_host()


def viterbi(unary, lengths, transitions, start, end):
    """Most probable labelling of every sequence, on the GPU.

    As :func:`structboost.inference.viterbi`.

    Returns
    -------
    (n,) int64
    """
    du, offsets, trans, s, e = _host_chain(unary, lengths, transitions, start, end)
    return _viterbi(du, cuda.to_device(offsets), trans, s, e)


class DeviceTransitionProblem(PenalisedProblem):
    """:class:`~structboost.transitions.TransitionProblem` with device messages.

    The solvers (L-BFGS and the diagonal Newton step) run on the host over
    ``K^2 + 2K`` parameters; each evaluation runs the message pass and the
    parameter-sized sums on the device and copies back only ``log_z`` and
    those sums.

    Parameters
    ----------
    unary : DeviceUnary
    structure : DeviceStructure
    counts : (K*K + 2K,) float64
    reg : float
    free : (K*K + 2K,) bool ndarray, optional
    """

    param_type = TransitionParams
    newton_scale = TransitionProblem.newton_scale

    def __init__(self, unary, structure, counts, reg, free=None):
        self.free = None if free is None or free.all() else free
        self.unary = unary
        self.structure = structure
        self.seq_weight = structure.seq_weight
        self.counts = counts
        self.reg = float(reg)
        self.num_labels = unary.shape[1]

    def _posterior(self, params):
        return DevicePosterior(self.unary, self.structure, params.transitions, params.start,
                               params.end)

    def expected_counts(self, post, with_curvature=False):
        """As :meth:`TransitionProblem.expected_counts
        <structboost.transitions.TransitionProblem.expected_counts>`.

        Returns
        -------
        expected : (K*K + 2K,) float64
        curvature : (K*K + 2K,) float64 or None
        """
        st = self.structure
        n, k = post.alpha.shape
        edge_gamma = post.edge_gamma() if with_curvature else st.d_row_weight
        node_gamma = post.node_gamma("mixing") if with_curvature else st.d_row_weight
        coef = cuda.device_array((n, 3))
        _launch(kern.edge_weights, n, post.into, post.r, st.d_row_weight, edge_gamma, st.d_last,
                coef)
        part = post.log_space
        if part is not None:
            _launch(kern.scatter_rows, part.rows.size, coef, cuda.to_device(part.rows),
                    _zeros((part.rows.size, 3)))
        trans, trans_curv = _zeros((k, k)), _zeros((k, k))
        kern.outer_sums[kern.outer_grid(n, k), (kern.TILE, kern.TILE)](
            post.alpha, post.r, coef, post.d_emat, with_curvature, trans, trans_curv
        )
        ends = []
        for d_rows in (st.d_first_rows, st.d_last_rows):
            total, curv = _zeros(k), _zeros(k)
            _launch(kern.node_sums, k * -(-st.num_sequences // kern.CHUNK), post.alpha,
                    post.beta, d_rows, st.d_seq_weight, node_gamma, with_curvature, total, curv)
            ends.append((total.copy_to_host(), curv.copy_to_host()))
        trans, trans_curv = trans.copy_to_host(), trans_curv.copy_to_host()
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
    """:class:`~structboost.objective.CRFObjective` whose round runs on a CUDA GPU.

    Same parameters and results (to float tolerance) as the CPU objective;
    :meth:`grad_hess` returns numba device arrays, which
    ``xgboost.train(obj=...)`` on a booster with ``device="cuda"`` reads in
    place. ``transitions="majorize"`` is CPU-only (its ``O(K^4)`` bound is
    built on the host). ``timings`` are wall seconds here (the device works
    asynchronously, so CPU time would miss it).
    """

    def __init__(self, num_labels, mode="gbcrf", gamma="mixing", transitions="lbfgs",
                 reg_transitions=1.0, transition_iter=None, hess_floor=1e-16,
                 allowed_transitions=None):
        if transitions == "majorize":
            raise ValueError(
                'transitions="majorize" runs on the CPU only; use "lbfgs" or "newton" with '
                'device="cuda", or device="cpu".'
            )
        super().__init__(num_labels, mode, gamma, transitions, reg_transitions, transition_iter,
                         hess_floor, allowed_transitions)
        self._structures = {}

    def structure(self, batch):
        """The :class:`DeviceStructure` of a batch, built once per batch object."""
        key = id(batch)
        cached = self._structures.get(key)
        if cached is not None and cached[0]() is batch:
            return cached[1]
        structure = DeviceStructure(batch.offsets, batch.seq_weight, batch.labels)
        self._structures[key] = (weakref.ref(batch), structure)
        return structure

    def grad_hess(self, margins, batch):
        """Refit the transitions and return the node gradient and Hessian, on the device.

        Parameters
        ----------
        margins : (n, K) array or device array
        batch : SequenceBatch

        Returns
        -------
        grad, hess : (n, K) float64 device arrays
        """
        self._check_allowed(batch)
        t0 = time.perf_counter()
        du = device_unary(margins, self.num_labels)
        st = self.structure(batch)
        n, k = du.shape
        gamma = st.d_row_weight
        mode, scale = 0, 2.0
        if self.uses_transitions:
            free = None if self.constraints is None else self.constraints.free_vector()
            problem = DeviceTransitionProblem(du, st, batch.counts, self.reg_transitions, free)
            with _BLAS.limit(limits=1, user_api="blas"):
                self.params = refit(problem, self.params, self.transitions, self.transition_iter)
            t1 = time.perf_counter()
            post = problem.posterior(self.params)
            p = post.marginals_device()
            if self.mode == "treecrf":
                mode = 1
            elif isinstance(self.gamma, str):
                mode = 2
                gamma = post.node_gamma(self.gamma)
            else:
                scale = float(self.gamma)
        else:
            t1 = t0
            p = cuda.device_array((n, k))
            _launch(kern.softmax_rows, n, du.w, p)
        grad, hess = cuda.device_array((n, k)), cuda.device_array((n, k))
        _launch(kern.grad_hess, n, p, st.d_labels, st.d_row_weight, gamma, scale, mode,
                self.hess_floor, grad, hess)
        cuda.synchronize()
        t2 = time.perf_counter()
        self.timings["transitions"] += t1 - t0
        self.timings["inference"] += t2 - t1
        return grad, hess

    def _host_margins(self, margins):
        if _is_device_array(margins):
            margins = _as_device(margins).copy_to_host()
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
        return _viterbi(du, self.structure(batch).d_offsets, p.transitions, p.start, p.end)


__all__ = [
    "DeviceCRFObjective",
    "DevicePosterior",
    "DeviceStructure",
    "DeviceTransitionProblem",
    "DeviceUnary",
    "device_unary",
    "forward_backward",
    "gamma",
    "viterbi",
]
