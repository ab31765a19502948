"""Linear-chain CRF inference on a CUDA GPU: device posteriors and numpy-facing functions.

The optional GPU path (``pip install structboost-crf[gpu]``): the kernels of
:mod:`structboost.inference._cuda_chain` behind functions with the
signatures and outputs of :mod:`structboost.inference.chain`
(:func:`forward_backward`, :func:`viterbi`, :func:`gamma`), and
:class:`DevicePosterior`, on which the device round
(:mod:`structboost.objectives.gpu`) builds. Nothing imports this module (nor
``numba.cuda``) unless a GPU path is asked for.

Inputs may be numpy or device arrays (``__cuda_array_interface__``: CuPy,
numba, PyTorch); the inference functions return numpy. A round moves the
margins in (unless already on the device), per transition evaluation one
count, ``m`` log partitions and ``K^2 + 2K`` counts, and nothing large out:
XGBoost reads G and H on the device. Sequences the scaled messages cannot
hold are recomputed on the host in log space and patched in, as on the CPU.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import cuda

from ..sequences import check_lengths, offsets_from_lengths
from . import _chain
from . import _cuda_chain as kern
from .chain import (
    GAMMA_METHODS,
    ChainPosterior,
    _log_space_part,
    as_tables,
    check_chain_params,
    log_space_fill,
)


def is_device_array(x):
    """Whether ``x`` lives on the device (CUDA array interface, or a numba/simulator array)."""
    return hasattr(x, "__cuda_array_interface__") or hasattr(x, "copy_to_host")


def as_device(x):
    """A numba device view of a device array (no copy)."""
    return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)


def launch(kernel, count, *args):
    kernel[kern.blocks(count), kern.THREADS](*args)


def zeros(shape, dtype=np.float64):
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
        A host array of another dtype is converted to float64; a flat host
        array is reshaped to ``(n, num_labels)``.
    num_labels : int, optional
        Required number of columns.

    Returns
    -------
    DeviceUnary
    """
    if is_device_array(margins):
        src = as_device(margins)
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
    bad = zeros(1, np.int64)
    launch(kern.prepare_rows, n, src, unary, w, row_max, bad)
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
        Training labels (the objective round only).

    Attributes
    ----------
    offsets : (m + 1,) int64 host array
    seq_weight : (m,) float64 host array
    d_offsets, d_row_weight, d_last, d_first_rows, d_last_rows, d_seq_weight, d_labels
        Device copies: offsets, every row's weight ``(n,)``, the last-row mask
        ``(n,)``, each sequence's first and last row ``(m,)``, the sequence
        weights and the labels (or None).
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


def set_rows(dst, rows, value):
    """``dst[rows] = value`` on a device array; ``value`` a scalar or one entry per row."""
    count = rows.shape[0]
    src = cuda.to_device(np.ascontiguousarray(np.broadcast_to(value, (count,) + dst.shape[1:])))
    launch(kern.scatter_rows if len(dst.shape) == 2 else kern.scatter, count, dst,
           cuda.to_device(rows), src)


class DevicePosterior:
    """Scaled forward-backward messages on the device:
    :class:`~structboost.inference.chain.ChainPosterior`'s twin.

    Parameters
    ----------
    unary : DeviceUnary
    structure : DeviceStructure
    transitions : (K, K) or (n, K, K) float64
        Validated (:func:`structboost.inference.chain.check_chain_params`).
    start, end : (K,) float64

    Attributes
    ----------
    log_z : (m,) float64 host array
    transitions, emat : (P, K, K) float64 host arrays
        The tables and ``exp(transitions - emax)``.
    d_emat : (P, K, K) float64 device array
    alpha, beta, r, into, marg : (n, K) float64 device arrays
    beta_scale, overlap : (n,) float64 device arrays
    log_space : LogSpacePart or None
        Sequences recomputed on the host in log space.
    """

    def __init__(self, unary, structure, transitions, start, end):
        n, k = unary.shape
        m = structure.num_sequences
        self.structure = structure
        self.transitions = trans = as_tables(transitions)
        self.emat, emax = _chain.exp_tables(trans)
        self.d_emat = cuda.to_device(self.emat)
        start_e, start_max = _chain.shifted_exp(start)
        end_e, end_max = _chain.shifted_exp(end)
        d_log_z = cuda.device_array(m)
        self.alpha, self.beta, self.r, self.into, self.marg = (
            cuda.device_array((n, k)) for _ in range(5)
        )
        self.beta_scale, self.overlap = cuda.device_array(n), cuda.device_array(n)
        lost = cuda.device_array(m, dtype=np.int8)
        n_lost = zeros(1, np.int64)
        launch(
            kern.messages, m, unary.w, unary.row_max, structure.d_offsets, self.d_emat,
            cuda.to_device(emax), cuda.to_device(start_e), float(start_max),
            cuda.to_device(end_e), float(end_max), d_log_z, self.alpha, self.beta, self.r,
            self.into, self.beta_scale, self.marg, self.overlap, lost, n_lost,
        )
        self.log_z = d_log_z.copy_to_host()
        self.log_space = None
        if _count(n_lost):
            sequences = np.flatnonzero(lost.copy_to_host()).astype(np.int64)
            self.log_z[sequences], part = _log_space_part(
                unary.host, structure.offsets, sequences, trans, start, end
            )
            for name, value in log_space_fill(part, k).items():
                set_rows(getattr(self, name), part.rows, value)
            self.log_space = part

    @property
    def offsets(self):
        return self.structure.offsets

    def marginals_device(self):
        """Node marginals ``(n, K)`` as a device array (the posterior's own buffer)."""
        return self.marg

    def marginals(self):
        """Node marginals ``(n, K)`` on the host."""
        return self.marg.copy_to_host()

    @cached_property
    def _gammas(self):
        """Node and edge bounds of the mixing rates ``(n,), (n,)`` on the device."""
        n = self.alpha.shape[0]
        right, left = cuda.device_array(n), cuda.device_array(n)
        launch(
            kern.mixing_rates, self.structure.num_sequences, self.alpha, self.beta, self.r,
            self.into, self.beta_scale, self.structure.d_offsets, self.d_emat, right, left,
        )
        part = self.log_space
        if part is not None:
            for dst, src in zip((right, left), _chain.pairwise_rates(part.pairwise, part.offsets)):
                set_rows(dst, part.rows, src)
        node, edge = cuda.device_array(n), cuda.device_array(n)
        launch(kern.path_gamma, self.structure.num_sequences, right, left,
               self.structure.d_offsets, node, edge)
        return node, edge

    def node_gamma(self, method="mixing", marginals=None):
        """Per-row node bound ``(n,)`` as a device array (``"exact"`` runs on the host;
        ``marginals`` unused).
        """
        if method == "mixing":
            return self._gammas[0]
        if method == "length":
            out = cuda.device_array(self.alpha.shape[0])
            launch(kern.length_gamma, self.structure.num_sequences, self.structure.d_offsets, out)
            return out
        if method == "exact":
            return cuda.to_device(self.to_host().node_gamma("exact"))
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` of Theorem 4.2 as a device array; zero on last rows."""
        return self._gammas[1]

    def weighted_sums(self, edge_weight, node_weight, with_curvature):
        """Expected transition, start and end counts, summed on the device (log-space rows
        excluded).

        Parameters
        ----------
        edge_weight : (n,) float64 device array
            Weight of the pair joining each row to the next.
        node_weight : (n,) float64 device array
            Weight of each first and last row in the curvature sums.
        with_curvature : bool
            Also sum the diagonal curvatures ``w p (1 - p)``.

        Returns
        -------
        trans, trans_curv : (K, K) float64
            Expected pair counts and their curvature (zeros without it).
        ends : list of two (total (K,), curvature (K,)) pairs
            Start-label and end-label counts.
        """
        st = self.structure
        n, k = self.alpha.shape
        coef = cuda.device_array((n, 3))
        launch(kern.edge_weights, n, self.beta_scale, self.overlap, st.d_row_weight, edge_weight,
               st.d_last, coef)
        part = self.log_space
        if part is not None:
            set_rows(coef, part.rows, 0.0)
        trans, trans_curv = zeros((k, k)), zeros((k, k))
        kern.outer_sums[kern.outer_grid(n, k), (kern.TILE, kern.TILE)](
            self.alpha, self.r, coef, self.d_emat, with_curvature, trans, trans_curv
        )
        ends = []
        for d_rows in (st.d_first_rows, st.d_last_rows):
            total, curv = zeros(k), zeros(k)
            launch(kern.node_sums, k * -(-st.num_sequences // kern.CHUNK), self.marg, d_rows,
                   st.d_seq_weight, node_weight, with_curvature, total, curv)
            ends.append((total.copy_to_host(), curv.copy_to_host()))
        return trans.copy_to_host(), trans_curv.copy_to_host(), ends

    def to_host(self):
        """The same posterior as a host :class:`~structboost.inference.chain.ChainPosterior`,
        without the rates.
        """
        return ChainPosterior(
            offsets=self.offsets, transitions=self.transitions, emat=self.emat, log_z=self.log_z,
            alpha=self.alpha.copy_to_host(), beta=self.beta.copy_to_host(),
            r=self.r.copy_to_host(), into=self.into.copy_to_host(),
            beta_scale=self.beta_scale.copy_to_host(), marg=self.marg.copy_to_host(),
            overlap=self.overlap.copy_to_host(), right=None, left=None, has_rates=False,
            log_space=self.log_space,
        )


def _host_chain(unary, lengths, transitions, start, end):
    """Validated inputs of the inference functions: device potentials, structure, parameters."""
    du = device_unary(unary)
    n, k = du.shape
    offsets = offsets_from_lengths(check_lengths(lengths, n))
    return (du, offsets, *check_chain_params(k, transitions, start, end, rows=n))


def _posterior(unary, lengths, transitions, start, end):
    """The :class:`DevicePosterior` of unvalidated inputs."""
    du, offsets, trans, s, e = _host_chain(unary, lengths, transitions, start, end)
    return DevicePosterior(du, DeviceStructure(offsets), trans, s, e)


def forward_backward(unary, lengths, transitions, start, end):
    """Log partition function ``(m,)`` and node marginals ``(n, K)``, on the GPU (as
    :func:`structboost.inference.forward_backward`).
    """
    post = _posterior(unary, lengths, transitions, start, end)
    return post.log_z, post.marginals()


def gamma(unary, lengths, transitions, start, end, method="mixing"):
    """Per-position node bound ``(n,)`` of Chen et al. (2015), on the GPU (as
    :func:`structboost.inference.gamma`).
    """
    if method not in GAMMA_METHODS:
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")
    return _posterior(unary, lengths, transitions, start, end).node_gamma(method).copy_to_host()


def softmax(w):
    """Row-wise softmax ``(n, K)`` device array of :class:`DeviceUnary`'s shifted exponentials
    ``w``.
    """
    n, k = w.shape
    p = cuda.device_array((n, k))
    launch(kern.softmax_rows, n, w, p)
    return p


def grad_hess(p, labels, row_weight, gamma, scale, unit, floor, finish, out):
    """Write the weighted G and H into device ``out = (grad, hess)``:
    :func:`structboost.objectives._kernels.node_grad_hess`'s twin.
    """
    launch(kern.grad_hess, p.shape[0], p, labels, row_weight, gamma, scale, unit, floor, finish,
           *out)  # fmt: skip


def finish_hess(hess, gamma, scale, floor, row_weight):
    """Finish in place a ``hess (n, K)`` written as ``p (1 - p)`` (:func:`grad_hess` without
    ``finish``).
    """
    launch(kern.finish_hess, hess.shape[0], hess, gamma, scale, floor, row_weight, hess)


def step_sums(new, old, a, b):
    """``[sum a (new - old), sum b (new - old)^2]`` over ``(n, K)`` device arrays: the secant's
    sums.
    """
    out = zeros(2)
    kern.step_sums[kern.reduction_blocks(new.shape[0]), kern.THREADS](new, old, a, b, out)
    return out.copy_to_host()


def copy_into(src, dst):
    """Copy the ``(n, K)`` device array ``src`` into ``dst``, converting to ``dst``'s dtype."""
    launch(kern.copy_rows, src.shape[0], src, dst)


def label_score(unary, structure):
    """Weighted sum ``sum_t w_t unary[t, y_t]`` of device ``unary (n, K)`` over a labelled
    :class:`DeviceStructure`.
    """
    out = zeros(2)
    kern.label_scores[kern.reduction_blocks(unary.shape[0]), kern.THREADS](
        unary, structure.d_labels, structure.d_row_weight, out
    )
    return float(out.copy_to_host()[0])


def viterbi_labels(unary, d_offsets, transitions, start, end):
    """Device Viterbi path ``(n,)`` int64 of :class:`DeviceUnary` potentials."""
    n, k = unary.shape
    path = cuda.device_array(n, dtype=np.int64)
    launch(
        kern.viterbi, d_offsets.shape[0] - 1, unary.unary, d_offsets,
        cuda.to_device(as_tables(transitions)),
        cuda.to_device(start), cuda.to_device(end), cuda.device_array((n, k)),
        cuda.device_array((n, k), dtype=np.int32), path,
    )
    return path.copy_to_host()


def viterbi(unary, lengths, transitions, start, end):
    """Most probable labelling ``(n,)`` int64 of every sequence, on the GPU (as
    :func:`structboost.inference.viterbi`).
    """
    du, offsets, trans, s, e = _host_chain(unary, lengths, transitions, start, end)
    return viterbi_labels(du, cuda.to_device(offsets), trans, s, e)


__all__ = [
    "DevicePosterior",
    "DeviceStructure",
    "DeviceUnary",
    "device_unary",
    "forward_backward",
    "gamma",
    "viterbi",
]
