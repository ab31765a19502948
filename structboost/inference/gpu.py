"""Linear-chain CRF inference on a CUDA GPU: device posteriors and numpy-facing functions.

The optional GPU path (``pip install structboost-crf[gpu]``): the kernels of
:mod:`structboost.inference._cuda_chain` behind functions with the
signatures and outputs of :mod:`structboost.inference.chain`
(:func:`forward_backward`, :func:`viterbi`, :func:`gamma`), and
:class:`DevicePosterior`, on which the device round
(:mod:`structboost.objectives.gpu`) builds. Nothing imports this module (nor
``numba.cuda``) unless a GPU path is asked for.

Inputs may be numpy or device arrays (``__cuda_array_interface__``: CuPy,
numba, PyTorch); the inference functions return numpy. Every buffer lives in
a :class:`Workspace`, allocated on first use and kept while its shape holds;
a pass's small results (``m`` log partitions, its lost count and the
``2 K^2 + 4 K`` count sums) share one buffer, copied to page-locked host
memory in one synchronisation. :class:`DeviceCounters` counts what crosses
the bus. Sequences the scaled messages cannot hold are recomputed on the
host in log space and patched in, as on the CPU.
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

#: Rows per host-to-device copy of staged margins (the next chunk is staged meanwhile).
STAGE_ROWS = 1 << 16


def is_device_array(x):
    """Whether ``x`` lives on the device (CUDA array interface, or a numba/simulator array)."""
    return hasattr(x, "__cuda_array_interface__") or hasattr(x, "copy_to_host")


def as_device(x):
    """A numba device view of a device array (no copy)."""
    return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)


def launch(kernel, count, *args):
    kernel[kern.blocks(count), kern.THREADS](*args)


@dataclass
class DeviceCounters:
    """What a :class:`Workspace`'s users asked of the device driver since the last :meth:`reset`.

    Attributes
    ----------
    allocations : int
        Device (and page-locked host) buffers allocated.
    syncs : int
        Times the host waited for the device (each copy to the host).
    to_device, to_host : int
        Bytes copied host-to-device and device-to-host.
    """

    allocations: int = 0
    syncs: int = 0
    to_device: int = 0
    to_host: int = 0

    def reset(self):
        self.allocations = self.syncs = self.to_device = self.to_host = 0


class Workspace:
    """Named device buffers kept across calls, page-locked host twins, and their
    :class:`DeviceCounters`.

    A buffer is allocated when its name is new or its shape or dtype changed,
    else handed back as it is (its contents those of the last user: a pass's
    buffers are valid until the next pass). Copies run on one stream, after
    the kernels launched before them.
    """

    def __init__(self, counters=None):
        self.counters = DeviceCounters() if counters is None else counters
        self._device = {}
        self._host = {}
        self.stream = cuda.stream()

    def _kept(self, kept, make, name, shape, dtype):
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        a = kept.get(name)
        if a is None or tuple(a.shape) != shape or a.dtype != np.dtype(dtype):
            a = kept[name] = make(shape, dtype)
            self.counters.allocations += 1
        return a

    def array(self, name, shape, dtype=np.float64):
        """The device buffer ``name`` of ``shape`` and ``dtype`` (contents undefined)."""
        return self._kept(self._device, cuda.device_array, name, shape, dtype)

    def pinned(self, name, shape, dtype=np.float64):
        """The page-locked host buffer ``name`` (contents undefined)."""
        return self._kept(self._host, cuda.pinned_array, name, shape, dtype)

    def zeros(self, name, shape):
        """The float64 device buffer ``name``, zeroed on the device."""
        a = self.array(name, shape)
        launch(kern.fill, a.size, a.reshape(a.size), 0.0)
        return a

    def put(self, name, host, dtype=None):
        """A device copy of the host array ``host`` in buffer ``name`` (staged through page-locked
        memory, so that the copy does not wait for the device).
        """
        host = np.atleast_1d(np.asarray(host, dtype=dtype))
        staged = self.pinned(name, host.shape, host.dtype)
        dev = self.array(name, host.shape, host.dtype)
        rows = STAGE_ROWS if host.ndim > 1 else max(1, host.shape[0])
        for lo in range(0, host.shape[0], rows):
            part = slice(lo, lo + rows)
            staged[part] = host[part]
            dev[part].copy_to_device(staged[part], stream=self.stream)
        self.counters.to_device += host.nbytes
        return dev

    def fetch(self, dev, name):
        """``dev`` copied to the page-locked host buffer ``name``, once the device is done (one
        synchronisation).
        """
        host = self.pinned(name, dev.shape, dev.dtype)
        dev.copy_to_host(host, stream=self.stream)
        self.wait()
        self.counters.to_host += host.nbytes
        return host

    def wait(self):
        """Wait for the device (and the staged copies) to finish."""
        self.stream.synchronize()
        self.counters.syncs += 1


@dataclass
class DeviceUnary:
    """Node potentials on the device.

    Attributes
    ----------
    unary, w : (n, K) float64 device arrays
        The potentials and ``exp(unary - row_max)``.
    row_max : (n,) float64 device array
    checks : (2,) float64 device array
        Rows holding NaN or inf, and a slot for :func:`label_score`.
    workspace : Workspace
    """

    unary: object
    w: object
    row_max: object
    checks: object
    workspace: object

    @property
    def shape(self):
        return self.unary.shape

    @cached_property
    def host(self):
        """The potentials as a host ``(n, K)`` float64 array (for the log-space fallback)."""
        return self.unary.copy_to_host()

    def check(self, fetched=None):
        """Raise if a row is not finite (``fetched``: :attr:`checks` on the host, else fetched)."""
        if fetched is None:
            fetched = self.workspace.fetch(self.checks, "checks")
        if fetched[0]:
            raise ValueError(
                "margins contain NaN or inf; node potentials must be finite (training has "
                "diverged, or check the margins)."
            )


def device_unary(margins, num_labels=None, workspace=None, check=True):
    """Copy (if needed) node potentials to the device; their row exponentials.

    Parameters
    ----------
    margins : (n, K) array or device array, float32 or float64
        A host array of another dtype is converted to float64; a flat host
        array is reshaped to ``(n, num_labels)``.
    num_labels : int, optional
        Required number of columns.
    workspace : Workspace, optional
        Where the buffers live (default: a new one).
    check : bool
        Raise at once on NaN or inf; False leaves that to
        :meth:`DeviceUnary.check` (or the first pass that meets them).

    Returns
    -------
    DeviceUnary
    """
    ws = Workspace() if workspace is None else workspace
    if is_device_array(margins):
        src = as_device(margins)
    else:
        host = np.asarray(margins)
        if host.dtype not in (np.float32, np.float64):
            host = host.astype(np.float64)
        if num_labels is not None and host.ndim == 1 and host.size % num_labels == 0:
            host = host.reshape(-1, num_labels)
        src = ws.put("margins", host)
    if len(src.shape) != 2 or src.shape[1] < 1 or (num_labels and src.shape[1] != num_labels):
        want = f"(rows, {num_labels})" if num_labels else "(rows, labels)"
        raise ValueError(
            f"margins must have shape {want}; got {tuple(src.shape)}. The booster needs one "
            "output per label (num_target = num_labels)."
        )
    n, k = src.shape
    du = DeviceUnary(ws.array("unary", (n, k)), ws.array("w", (n, k)), ws.array("row_max", n),
                     ws.zeros("checks", 2), ws)  # fmt: skip
    launch(kern.prepare_rows, n, src, du.unary, du.w, du.row_max, du.checks)
    if check:
        du.check()
    return du


class DeviceStructure:
    """Sequence boundaries and weights of a batch, on the device.

    Parameters
    ----------
    offsets : (m + 1,) int64
    seq_weight : (m,) float64, optional
        Ones by default.
    labels : (n,) int64, optional
        Training labels (the objective round only).
    counters : DeviceCounters, optional
        Where the copies are counted.

    Attributes
    ----------
    offsets : (m + 1,) int64 host array
    seq_weight : (m,) float64 host array
    d_offsets, d_row_weight, d_last, d_first_rows, d_last_rows, d_seq_weight, d_labels
        Device copies: offsets, every row's weight ``(n,)``, the last-row mask
        ``(n,)``, each sequence's first and last row ``(m,)``, the sequence
        weights and the labels (or None).
    """

    def __init__(self, offsets, seq_weight=None, labels=None, counters=None):
        m = offsets.shape[0] - 1
        lengths = np.diff(offsets)
        self.offsets = offsets
        self.seq_weight = np.ones(m) if seq_weight is None else seq_weight
        last = np.zeros(offsets[-1], dtype=np.bool_)
        last[offsets[1:] - 1] = True
        ws = Workspace(counters)  # (its own buffers: one structure per batch)
        put = ws.put
        self.d_offsets = put("offsets", offsets)
        self.d_row_weight = put("row_weight", np.repeat(self.seq_weight, lengths))
        self.d_last = put("last", last)
        self.d_first_rows = put("first_rows", offsets[:-1])
        self.d_last_rows = put("last_rows", offsets[1:] - 1)
        self.d_seq_weight = put("seq_weight", self.seq_weight)
        self.d_labels = None if labels is None else put("labels", labels)
        ws.wait()  # (before the staging buffers go)

    @property
    def num_sequences(self):
        return self.offsets.shape[0] - 1


def set_rows(ws, dst, rows, value):
    """``dst[rows] = value`` on a device array; ``value`` a scalar or one entry per row."""
    count = rows.shape[0]
    src = ws.put("set_values", np.broadcast_to(value, (count,) + dst.shape[1:]), np.float64)
    launch(kern.scatter_rows if len(dst.shape) == 2 else kern.scatter, count, dst,
           ws.put("set_rows", rows, np.int64), src)


class DevicePosterior:
    """Scaled forward-backward messages on the device:
    :class:`~structboost.inference.chain.ChainPosterior`'s twin.

    Its buffers are the workspace's: valid until the next pass there.

    Parameters
    ----------
    unary : DeviceUnary
    structure : DeviceStructure
    transitions : (K, K) or (n, K, K) float64
        Validated (:func:`structboost.inference.chain.check_chain_params`).
    start, end : (K,) float64
    sums : {None, False, True}
        Take the expected counts in the pass's one synchronisation: without
        (False) or with (True) their curvature (see :meth:`weighted_sums`);
        None: none.

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

    def __init__(self, unary, structure, transitions, start, end, sums=None):
        n, k = unary.shape
        m = structure.num_sequences
        self.ws = ws = unary.workspace
        self.unary = unary
        self.structure = structure
        self.transitions = trans = as_tables(transitions)
        self.emat, emax = _chain.exp_tables(trans)
        self.d_emat = ws.put("emat", self.emat)
        start_e, start_max = _chain.shifted_exp(start)
        end_e, end_max = _chain.shifted_exp(end)
        # one buffer of small results: log Z (m), the lost count, the count sums
        self._small = ws.zeros("small", m + 1 + 2 * k * k + 4 * k)
        self.alpha, self.beta, self.r, self.into, self.marg = (
            ws.array(name, (n, k)) for name in ("alpha", "beta", "r", "into", "marg")
        )
        self.beta_scale, self.overlap = ws.array("beta_scale", n), ws.array("overlap", n)
        lost = ws.array("lost", m, np.int8)
        kern.messages[max(1, m), kern.LANES](
            unary.w, unary.row_max, structure.d_offsets, self.d_emat, ws.put("emax", emax),
            ws.put("start_e", start_e), float(start_max), ws.put("end_e", end_e),
            float(end_max), self._small[:m], self.alpha, self.beta, self.r, self.into,
            self.beta_scale, self.marg, self.overlap, lost, self._small[m : m + 1],
        )  # fmt: skip
        self._sums = sums
        self.log_space = None
        if sums is not None:
            self._launch_sums(self._edge_weight(sums), self._node_weight(sums), sums)
        small = ws.fetch(self._small, "small")
        self.log_z = small[:m].copy()
        if small[m]:
            unary.check()
            sequences = np.flatnonzero(lost.copy_to_host()).astype(np.int64)
            self.log_z[sequences], part = _log_space_part(
                unary.host, structure.offsets, sequences, trans, start, end
            )
            for name, value in log_space_fill(part, k).items():
                set_rows(ws, getattr(self, name), part.rows, value)
            self.log_space = part
            if sums is not None:  # again without the lost sequences' rows
                self.__dict__.pop("_gammas", None)
                self._launch_sums(self._edge_weight(sums), self._node_weight(sums), sums)
                small = ws.fetch(self._small, "small")
        self._fetched = small[m + 1 :].copy()

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
        ws, st = self.ws, self.structure
        n = self.alpha.shape[0]
        right, left = ws.array("right", n), ws.array("left", n)
        kern.mixing_rates[max(1, st.num_sequences), kern.LANES](
            self.alpha, self.beta, self.r, self.into, self.beta_scale, st.d_offsets,
            self.d_emat, right, left,
        )
        part = self.log_space
        if part is not None:
            rates = _chain.pairwise_rates(part.pairwise, part.offsets)
            for dst, src in zip((right, left), rates):
                set_rows(ws, dst, part.rows, src)
        node, edge = ws.array("node_gamma", n), ws.array("edge_gamma", n)
        launch(kern.path_gamma, st.num_sequences, right, left, st.d_offsets, node, edge)
        return node, edge

    def node_gamma(self, method="mixing", marginals=None):
        """Per-row node bound ``(n,)`` as a device array (``"exact"`` runs on the host;
        ``marginals`` unused).
        """
        if method == "mixing":
            return self._gammas[0]
        if method == "length":
            out = self.ws.array("length_gamma", self.alpha.shape[0])
            launch(kern.length_gamma, self.structure.num_sequences, self.structure.d_offsets, out)
            return out
        if method == "exact":
            return self.ws.put("exact_gamma", self.to_host().node_gamma("exact"))
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` of Theorem 4.2 as a device array; zero on last rows."""
        return self._gammas[1]

    def _edge_weight(self, with_curvature):
        return self.edge_gamma() if with_curvature else self.structure.d_row_weight

    def _node_weight(self, with_curvature):
        return self.node_gamma("mixing") if with_curvature else self.structure.d_row_weight

    def _launch_sums(self, edge_weight, node_weight, with_curvature):
        """Launch the sums of :meth:`weighted_sums` into the small buffer's zeroed tail."""
        st = self.structure
        n, k = self.alpha.shape
        m = st.num_sequences
        tail = self._small[m + 1 :]
        launch(kern.fill, tail.size, tail, 0.0)
        coef = self.ws.array("coef", (n, 3))
        launch(kern.edge_weights, n, self.beta_scale, self.overlap, st.d_row_weight,
               edge_weight, st.d_last, coef)  # fmt: skip
        part = self.log_space
        if part is not None:
            set_rows(self.ws, coef, part.rows, 0.0)
        kern.outer_sums[kern.outer_grid(n, k), (kern.TILE, kern.TILE)](
            self.alpha, self.r, coef, self.d_emat, with_curvature,
            tail[: k * k].reshape(k, k), tail[k * k : 2 * k * k].reshape(k, k),
        )  # fmt: skip
        for i, d_rows in enumerate((st.d_first_rows, st.d_last_rows)):
            at = 2 * k * k + 2 * i * k
            launch(kern.node_sums, k * -(-m // kern.CHUNK), self.marg, d_rows, st.d_seq_weight,
                   node_weight, with_curvature, tail[at : at + k], tail[at + k : at + 2 * k])

    def weighted_sums(self, with_curvature):
        """Expected transition, start and end counts, summed on the device (log-space rows
        excluded); without a second synchronisation when the pass took them.

        Parameters
        ----------
        with_curvature : bool
            Also sum the diagonal curvatures ``g p (1 - p)``, ``g`` the edge
            bound on pairs and the node bound on first and last rows (else
            both are the row weights).

        Returns
        -------
        trans, trans_curv : (K, K) float64
            Expected pair counts and their curvature (zeros without it).
        ends : list of two (total (K,), curvature (K,)) pairs
            Start-label and end-label counts.
        """
        k = self.alpha.shape[1]
        if self._sums is None or (with_curvature and not self._sums):
            self._sums = with_curvature
            self._launch_sums(self._edge_weight(with_curvature),
                              self._node_weight(with_curvature), with_curvature)  # fmt: skip
            m = self.structure.num_sequences
            self._fetched = self.ws.fetch(self._small, "small")[m + 1 :].copy()
        f = self._fetched.copy()
        ends = [(f[2 * k * k + 2 * i * k :][:k], f[2 * k * k + 2 * i * k + k :][:k])
                for i in (0, 1)]  # fmt: skip
        return f[: k * k].reshape(k, k), f[k * k : 2 * k * k].reshape(k, k), ends

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


def softmax(u):
    """Row-wise softmax ``(n, K)`` device array of a :class:`DeviceUnary` (its ``w``)."""
    p = u.workspace.array("softmax", u.shape)
    launch(kern.softmax_rows, u.shape[0], u.w, p)
    return p


def grad_hess(ws, p, labels, row_weight, gamma, scale, unit, floor, finish, out, last=None):
    """Write the weighted G and H into device ``out = (grad, hess)``:
    :func:`structboost.objectives._kernels.node_grad_hess`'s twin.

    With ``last = (new, old, old_g, old_h)`` ``(n, K)`` returns the secant's
    ``[sum old_g d, sum old_h d^2, sum grad d]``, ``d = new - old``, taken in
    the same read (one synchronisation); else None.
    """
    sums = ws.zeros("step_sums", 3) if last is not None else ws.array("step_sums", 3)
    if last is None:
        none = ws.array("no_rows", (0, 0))
        last = (none,) * 4
    kern.grad_hess[kern.reduction_blocks(p.shape[0]), kern.THREADS](
        p, labels, row_weight, gamma, scale, unit, floor, finish, *out, *last, sums
    )
    return None if last[0].shape[0] == 0 else ws.fetch(sums, "step_sums").copy()


def finish_hess(hess, gamma, scale, floor, row_weight):
    """Finish in place a ``hess (n, K)`` written as ``p (1 - p)`` (:func:`grad_hess` without
    ``finish``).
    """
    launch(kern.finish_hess, hess.shape[0], hess, gamma, scale, floor, row_weight, hess)


def step_sums(ws, new, old, a, b, c):
    """``[sum a d, sum b d^2, sum c d]`` with ``d = new - old``, over ``(n, K)`` device arrays: the
    secant's sums (one synchronisation).
    """
    out = ws.zeros("step_sums", 3)
    kern.step_sums[kern.reduction_blocks(new.shape[0]), kern.THREADS](new, old, a, b, c, out)
    return ws.fetch(out, "step_sums")


def copy_into(src, dst):
    """Copy the ``(n, K)`` device array ``src`` into ``dst``, converting to ``dst``'s dtype."""
    launch(kern.copy_rows, src.shape[0], src, dst)


def label_score(u, structure):
    """Weighted sum ``sum_t w_t u[t, y_t]`` of a :class:`DeviceUnary` over a labelled
    :class:`DeviceStructure`; raises on NaN or inf in ``u`` (one synchronisation).
    """
    kern.label_scores[kern.reduction_blocks(u.shape[0]), kern.THREADS](
        u.unary, structure.d_labels, structure.d_row_weight, u.checks
    )
    fetched = u.workspace.fetch(u.checks, "checks")
    u.check(fetched)
    return float(fetched[1])


def viterbi_labels(unary, d_offsets, transitions, start, end):
    """Device Viterbi path ``(n,)`` int64 of :class:`DeviceUnary` potentials."""
    n, k = unary.shape
    ws = unary.workspace
    path = ws.array("path", n, np.int64)
    launch(
        kern.viterbi, d_offsets.shape[0] - 1, unary.unary, d_offsets,
        ws.put("tables", as_tables(transitions)), ws.put("start", start), ws.put("end", end),
        ws.array("score", (n, k)), ws.array("back", (n, k), np.int32), path,
    )  # fmt: skip
    return path.copy_to_host()


def viterbi(unary, lengths, transitions, start, end):
    """Most probable labelling ``(n,)`` int64 of every sequence, on the GPU (as
    :func:`structboost.inference.viterbi`).
    """
    du, offsets, trans, s, e = _host_chain(unary, lengths, transitions, start, end)
    return viterbi_labels(du, cuda.to_device(offsets), trans, s, e)


__all__ = [
    "DeviceCounters",
    "DevicePosterior",
    "DeviceStructure",
    "DeviceUnary",
    "Workspace",
    "device_unary",
    "forward_backward",
    "gamma",
    "viterbi",
]
