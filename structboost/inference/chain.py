"""Exact inference for linear-chain CRFs: numpy in, numpy out.

A batch of ``m`` sequences is flat rows ``unary (n, K)`` with ``lengths (m,)``.
``transitions`` is one ``(K, K)`` table (``[a, b]`` scores ``a`` followed by
``b``) or per-position scores ``(n, K, K)`` (row ``t``: the move into ``t``;
a sequence's first row is unused); ``start`` and ``end (K,)`` score the first
and last label. A labelling ``y`` scores::

    start[y_0] + sum_t unary[t, y_t] + sum_t T_t[y_t, y_{t+1}] + end[y_last]

``-inf`` entries forbid a move. Sequences the scaled messages cannot hold are
recomputed in log space, so any finite scores work; only a sequence with no
allowed labelling raises ``ValueError``.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .._typing import ArrayLike, Floats, Ints

from .. import _config
from .._compile_log import reports
from ..sequences import check_labels, check_lengths, check_unary, offsets_from_lengths
from . import _chain, _chain_viterbi

GAMMA_METHODS = ("mixing", "length", "exact")


def _as_float_array(x, name, shape):
    arr = np.ascontiguousarray(x, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {arr.shape}.")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(f"{name} contains NaN or +inf; only finite values or -inf are allowed.")
    return arr


def as_tables(transitions):
    """``(P, K, K)`` view of a ``(K, K)`` table (``P = 1``) or per-position ``(n, K, K)`` scores."""
    return transitions[None] if transitions.ndim == 2 else transitions


def check_chain(unary: ArrayLike, lengths: ArrayLike, transitions: ArrayLike, start: ArrayLike,
                end: ArrayLike) -> tuple[Floats, Ints, Floats, Floats, Floats]:
    """Validate and convert the inputs shared by every chain function.

    Returns
    -------
    unary : (n, K) float64, C-contiguous
    offsets : (m + 1,) int64
    transitions : (K, K) or (n, K, K) float64
    start, end : (K,) float64
    """
    u = check_unary(unary)
    n, k = u.shape
    offsets = offsets_from_lengths(check_lengths(lengths, n))
    return (u, offsets, *check_chain_params(k, transitions, start, end, rows=n))


def check_chain_params(num_labels, transitions, start, end, rows=None):
    """Validate and convert the transition, start and end scores of ``num_labels`` labels.

    Parameters
    ----------
    num_labels : int
    transitions : (K, K) or (rows, K, K) array-like
        One shared table, or per-position scores when ``rows`` is given.
    start, end : (K,) array-like
    rows : int, optional
        Rows of the batch; None accepts only a shared table.

    Returns
    -------
    transitions : (K, K) or (rows, K, K) float64
    start, end : (K,) float64
    """
    k = num_labels
    per_position = rows is not None and np.ndim(transitions) == 3
    trans = _as_float_array(transitions, "transitions", (rows, k, k) if per_position else (k, k))
    if trans.ndim == 2 and not np.isfinite(trans).any():
        raise ValueError("transitions forbid every move (all -inf); allow at least one.")
    return trans, _as_float_array(start, "start", (k,)), _as_float_array(end, "end", (k,))


class Workspace:
    """Reusable buffers of the message passes over a batch of up to ``n`` rows, ``m`` sequences.

    :meth:`load` binds ``w``, ``alpha``, ... ``lost`` to views of the loaded
    batch; a :class:`ChainPosterior` built on it is valid until the next pass.

    Parameters
    ----------
    n, k, m : int
        Rows, labels and sequences it has room for.
    """

    def __init__(self, n, k, m):
        self.shape = (n, k, m)
        self._rows = np.empty((6, n, k))
        self._vectors = np.empty((5, n))
        self._log_z = np.empty(m)
        self._lost = np.empty(m, dtype=bool)
        self.offsets = None
        self._bind(n, m)

    def fits(self, n, k, m):
        """Whether a batch of ``n`` rows, ``k`` labels and ``m`` sequences fits."""
        rows, labels, seqs = self.shape
        return n <= rows and k == labels and m <= seqs

    def _bind(self, n, m):
        self.w, self.alpha, self.beta, self.r, self.into, self.marg = self._rows[:, :n]
        self.row_max, self.beta_scale, self.overlap, self.right, self.left = self._vectors[:, :n]
        self.log_z = self._log_z[:m]
        self.lost = self._lost[:m]

    def load(self, unary, offsets):
        """Exponentiate the node scores ``unary (n, K)`` (float32 or float64, any layout) of the
        batch ``offsets (m + 1,)`` once.
        """
        n, k = unary.shape
        m = offsets.shape[0] - 1
        if not self.fits(n, k, m):
            raise ValueError(
                f"a batch of {n} rows, {k} labels and {m} sequences does not fit a workspace "
                f"of shape {self.shape}: make a Workspace at least that large."
            )
        self._bind(n, m)
        self.offsets = offsets
        _chain.exp_rows(unary, self.w, self.row_max, _config.parallel(n))
        return self


@dataclass
class LogSpacePart:
    """Posterior of the sequences recomputed in log space.

    Attributes
    ----------
    sequences : (s,) int64
        Their indices, increasing.
    rows : (r,) int64
        Their rows, in order.
    offsets : (s + 1,) int64
        Boundaries of each sequence within ``rows``.
    marginals : (r, K) float64
    pairwise : (r, K, K) float64
        ``P(y_t = a, y_{t+1} = b)``; zero on each sequence's last row.
    """

    sequences: np.ndarray
    rows: np.ndarray
    offsets: np.ndarray
    marginals: np.ndarray
    pairwise: np.ndarray


def _edge_products(a, r, coef):
    """``(len(coef), K, K)``: ``A' diag(coef[0]) R``, with three rows of ``coef`` also
    ``A' diag(coef[1]) R`` and ``(A^2)' diag(coef[2]) R^2``, from ``a, r (e, K)``
    (``alpha`` rows and ``r`` one row ahead). ``einsum`` keeps them on the calling thread:
    threaded BLAS would add its own threads, spinning, to the ``n_jobs`` the user chose.
    """
    out = [np.einsum("ta,tb->ab", a, r * coef[0, :, None])]
    if coef.shape[0] == 3:
        out += [np.einsum("ta,tb->ab", a, r * coef[1, :, None]),
                np.einsum("ta,tb->ab", a * a, r * r * coef[2, :, None])]
    return np.stack(out)


@dataclass
class ChainPosterior:
    """Scaled forward-backward messages of a batch and what derives from them (:func:`posterior`).

    ``transitions`` and ``emat`` are ``(P, K, K)``; ``marg`` holds the node
    marginals, ``right``/``left`` the mixing rates once ``has_rates``. ``beta``
    is stored on each sequence's last row only, ``into`` only by the GPU
    posterior. On ``log_space`` rows ``alpha`` and ``marg`` hold the marginals,
    the other buffers placeholders. ``edge_total``: ``sum_t seq_weight[i(t)]
    P_t`` when :func:`posterior` got ``seq_weight``. Without ``has_messages``
    the methods reading ``alpha`` and ``r`` raise ``ValueError``.
    """

    offsets: np.ndarray
    transitions: np.ndarray
    emat: np.ndarray
    log_z: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    r: np.ndarray
    into: np.ndarray
    beta_scale: np.ndarray
    marg: np.ndarray
    overlap: np.ndarray
    right: np.ndarray
    left: np.ndarray
    has_rates: bool
    log_space: LogSpacePart | None = None
    edge_total: np.ndarray | None = None
    has_messages: bool = True

    @property
    def parallel(self):
        return _config.parallel(self.alpha.shape[0])

    def _messages(self, what):
        """``(alpha, r)``; a ``ValueError`` naming ``what`` needs them where they were not kept."""
        if not self.has_messages:
            raise ValueError(
                f"{what} reads the stored messages, which this posterior did not keep: compute "
                "it with posterior(..., keep_messages=True)."
            )
        return self.alpha, self.r

    def marginals(self, rows=None):
        """Node marginals ``(n, K)`` (the posterior's own buffer), or those of ``rows``."""
        return self.marg if rows is None else self.marg[rows]

    def edge_marginals(self):
        """Pairwise marginals ``(n, K, K)``; row ``t`` joins ``t`` and ``t + 1``."""
        alpha, r = self._messages("edge_marginals")
        out = _chain.edge_marginals(alpha, r, self.offsets, self.emat, self.parallel)
        if self.log_space is not None:
            out[self.log_space.rows] = self.log_space.pairwise
        return out

    def edge_sums(self, edges, weights, curvature_weights=None):
        """Weighted sums of the pairwise marginals over some edges.

        With one shared table ``P_t = alpha_t E r_{t+1}' / z_t`` (``z_t =
        beta_scale[t] overlap[t]``), so ``sum_t c_t P_t = E * (A' diag(c / z) R)``.

        Parameters
        ----------
        edges : (e,) int64
            Rows ``t`` (none last in its sequence) of the edges ``(t, t + 1)``.
        weights : (e,) float64
        curvature_weights : (e,) float64, optional

        Returns
        -------
        total : (K, K) float64
            ``sum_t weights_t P_t``.
        curvature : (K, K) float64 or None
            ``sum_t curvature_weights_t P_t (1 - P_t)``, when asked for.
        """
        alpha, r = self._messages("edge_sums")
        if self.emat.shape[0] > 1:
            return _pair_sums(self.edge_marginals()[edges], weights, curvature_weights)
        part = self.log_space
        if part is not None:  # edges of log-space sequences: from their pairwise marginals
            local = np.full(self.alpha.shape[0], -1, dtype=np.int64)
            local[part.rows] = np.arange(part.rows.size)
            mine = local[edges] >= 0
            curv = None if curvature_weights is None else curvature_weights[mine]
            total, fallback_curv = _pair_sums(part.pairwise[local[edges[mine]]], weights[mine], curv)
            if curvature_weights is not None:
                curvature_weights = curvature_weights[~mine]
            edges, weights = edges[~mine], weights[~mine]
        # Every row but the last, weight zero off the chosen edges: views, no gathers.
        n = max(self.alpha.shape[0] - 1, 0)
        z = self.beta_scale[edges] * self.overlap[edges]
        coef = np.zeros((1 if curvature_weights is None else 3, n))
        coef[0, edges] = weights / z
        if curvature_weights is not None:
            coef[1, edges] = curvature_weights / z
            coef[2, edges] = coef[1, edges] / z
        sums = _edge_products(alpha[:-1], r[1:], coef)
        emat = self.emat[0]
        scaled = emat * sums[0]
        total = scaled if part is None else total + scaled
        if curvature_weights is None:
            return total, None
        curvature = emat * sums[1] - emat**2 * sums[2]
        if part is not None:
            curvature += fallback_curv
        return total, curvature

    @cached_property
    def _path_sums(self):
        """Eq. 17 message sums ``(to_right, to_left)``, shared by node and edge bounds."""
        if not self.has_rates:
            self._messages("the mixing rates of a pass swept without them")
            part = self.log_space
            _chain.late_rates(_chain.Messages.of(self), self.emat, self.parallel)
            if part is not None:
                self.right[part.rows], self.left[part.rows] = _chain.pairwise_rates(
                    part.pairwise, part.offsets
                )
            self.has_rates = True
        return _chain.path_sums(self.right, self.left, self.offsets)

    def node_gamma(self, method="mixing", marginals=None):
        """Per-position node bound ``(n,)`` (Theorem 4.1, Corollary 4.1 or exact)."""
        if method == "mixing":
            to_right, to_left = self._path_sums
            return 2.0 * (1.0 + to_right + to_left)
        if method == "length":
            lengths = np.diff(self.offsets)
            return np.repeat(2.0 * lengths, lengths).astype(np.float64)
        if method == "exact":
            p = self.marginals() if marginals is None else marginals
            alpha, r = self._messages('node_gamma("exact")')
            out = _chain.exact_gamma(alpha, r, p, self.offsets, self.emat)
            part = self.log_space
            if part is not None:
                out[part.rows] = _chain.exact_gamma_pairwise(part.pairwise, part.marginals, part.offsets)
            return out
        raise ValueError(f"gamma method must be one of {GAMMA_METHODS}; got {method!r}.")

    def edge_gamma(self):
        """Per-edge bound ``(n,)`` of Theorem 4.2; zero on each sequence's last row."""
        to_right, to_left = self._path_sums
        out = np.zeros_like(to_right)
        out[:-1] = 2.0 * (3.0 + to_left[:-1] + to_right[1:])
        out[self.offsets[1:] - 1] = 0.0
        return out


def _pair_sums(pair, weights, curvature_weights):
    """``sum_e weights_e P_e`` and (with ``curvature_weights``) ``sum_e c_e P_e (1 - P_e)`` of
    pairwise marginals ``pair (e, K, K)``.
    """
    total = np.einsum("e,eab->ab", weights, pair)
    if curvature_weights is None:
        return total, None
    return total, np.einsum("e,eab->ab", curvature_weights, pair * (1.0 - pair))


def _no_labelling(offsets, seq):
    """The error for sequence ``seq``, which no label path is allowed to take."""
    return ValueError(
        f"sequence {seq} (length {int(offsets[seq + 1] - offsets[seq])}) has no allowed "
        "labelling: the -inf transition/start/end scores (allowed_transitions) forbid "
        "every label path of that length. Allow more moves."
    )


def _log_space_part(unary, offsets, sequences, trans, start, end):
    """Log-space posterior ``(log_z (s,), LogSpacePart)`` of ``sequences``; raises where nothing is allowed."""
    log_z, marginals, pairwise = _chain.log_space_posterior(unary, offsets, sequences, trans, start, end)
    if not np.isfinite(log_z).all():
        raise _no_labelling(offsets, int(sequences[np.flatnonzero(~np.isfinite(log_z))[0]]))
    lengths = offsets[sequences + 1] - offsets[sequences]
    rows = np.repeat(offsets[sequences] - np.cumsum(lengths) + lengths, lengths) + np.arange(
        lengths.sum()
    )
    part_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return log_z, LogSpacePart(sequences, rows, part_offsets, marginals, pairwise)


def log_space_fill(part, num_labels):
    """Buffer name -> value of the log-space rows of ``part`` (marginals or placeholders)."""
    return {
        "alpha": part.marginals, "marg": part.marginals, "beta": 1.0, "into": 1.0,
        "r": 1.0 / num_labels, "beta_scale": 1.0, "overlap": 1.0,
    }


def posterior(unary, offsets, transitions, start, end, workspace=None, rates=False, seq_weight=None,
              keep_messages=True):
    """One forward and one backward sweep over validated arrays (see :func:`check_chain`).

    Parameters
    ----------
    unary : (n, K) float64, or float32 in any layout
    offsets : (m + 1,) int64
    transitions : (K, K) or (n, K, K) float64
    start, end : (K,) float64
    workspace : Workspace, optional
        Already :meth:`loaded <Workspace.load>` with ``unary`` and ``offsets``.
    rates : bool
        Compute the mixing rates within the backward sweep.
    seq_weight : (m,) float64, optional
        With one shared table, fill ``ChainPosterior.edge_total`` within the sweep.
    keep_messages : bool
        Store ``alpha`` and ``r`` for the methods that read them.

    Returns
    -------
    ChainPosterior
    """
    n, k = unary.shape
    ws = Workspace(n, k, offsets.shape[0] - 1).load(unary, offsets) if workspace is None else workspace
    parallel = _config.parallel(n)
    trans = as_tables(transitions)
    emat, emax = _chain.exp_tables(trans, parallel and trans.shape[0] > 1)
    weight = seq_weight if trans.shape[0] == 1 else None
    products = _chain.messages(ws, emat, emax, start, end, rates, parallel, weight,
                                      keep_messages)  # fmt: skip
    total = None if products is None else emat[0] * products
    lost = np.flatnonzero(ws.lost)
    part = None
    if lost.size:
        # (rare: the block's float64 rows for the log-space kernel)
        wide = np.ascontiguousarray(unary, dtype=np.float64)
        ws.log_z[lost], part = _log_space_part(wide, offsets, lost, trans, start, end)
        rows = part.rows
        for name, value in log_space_fill(part, k).items():
            getattr(ws, name)[rows] = value
        if rates:
            ws.right[rows], ws.left[rows] = _chain.pairwise_rates(part.pairwise, part.offsets)
        if total is not None:  # the sweep left out the lost sequences' edges
            total += np.einsum(
                "r,rab->ab", np.repeat(weight[part.sequences], np.diff(part.offsets)), part.pairwise
            )
    return ChainPosterior(
        offsets=offsets, transitions=trans, emat=emat, log_z=ws.log_z, alpha=ws.alpha,
        beta=ws.beta, r=ws.r, into=ws.into, beta_scale=ws.beta_scale, marg=ws.marg,
        overlap=ws.overlap, right=ws.right, left=ws.left, has_rates=rates, log_space=part,
        edge_total=total, has_messages=keep_messages,
    )


def path_scores(unary, offsets, labels, transitions, start, end):
    """Score ``(m,)`` of the labelling ``labels (n,)`` of every sequence."""
    out = np.empty(offsets.shape[0] - 1)
    _chain_viterbi.label_scores(unary, offsets, labels, as_tables(transitions), start, end, True, out)
    return out


def label_node_scores(unary, offsets, labels):
    """Sum ``(m,)`` of the labels' node scores ``unary[t, labels[t]]`` of every sequence."""
    out = np.empty(offsets.shape[0] - 1)
    empty = np.zeros(0)
    _chain_viterbi.label_scores(unary, offsets, labels, np.zeros((1, 0, 0)), empty, empty, False, out)
    return out


def node_softmax(unary):
    """Row-wise softmax ``(n, K)`` of finite node scores: the marginals of rows without edges."""
    n, k = unary.shape
    out = np.empty((n, k))
    _chain.exp_rows(unary, out, np.empty(n), _config.parallel(n), normalise=True)
    return out


def map_labels(unary, offsets, transitions, start, end):
    """Viterbi labels ``(n,)`` of validated arrays; ``ValueError`` naming a sequence with no allowed
    labelling.
    """
    labels = _chain_viterbi.viterbi(
        unary, offsets, as_tables(transitions), start, end, _config.parallel(unary.shape[0])
    )
    if unary.shape[0]:
        scores = path_scores(unary, offsets, labels, transitions, start, end)
        if np.isneginf(scores).any():
            raise _no_labelling(offsets, int(np.flatnonzero(np.isneginf(scores))[0]))
    return labels


@reports("forward_backward")
def forward_backward(unary: ArrayLike, lengths: ArrayLike, transitions: ArrayLike, start: ArrayLike,
                     end: ArrayLike) -> tuple[Floats, Floats]:
    """Log partition function and node marginals of every sequence.

    Parameters
    ----------
    unary : (n, K) array-like
    lengths : (m,) array-like of int
    transitions : (K, K) or (n, K, K) array-like
        One shared table, or per-position scores (row ``t``: the move into
        position ``t``; a sequence's first row is not used).
    start, end : (K,) array-like

    Returns
    -------
    log_z : (m,) float64
    marginals : (n, K) float64
        ``P(y_t = k | x)``; rows sum to one.
    """
    post = posterior(*check_chain(unary, lengths, transitions, start, end), keep_messages=False)
    return post.log_z, post.marginals()


def edge_marginals(unary: ArrayLike, lengths: ArrayLike, transitions: ArrayLike, start: ArrayLike,
                   end: ArrayLike) -> Floats:
    """Pairwise marginals ``P(y_t = a, y_{t+1} = b | x)``.

    Returns
    -------
    (n, K, K) float64
        Row ``t`` joins positions ``t`` and ``t + 1``; the last row of every
        sequence is zero.
    """
    return posterior(*check_chain(unary, lengths, transitions, start, end)).edge_marginals()


@reports("viterbi")
def viterbi(unary: ArrayLike, lengths: ArrayLike, transitions: ArrayLike, start: ArrayLike,
            end: ArrayLike) -> Ints:
    """Most probable labelling of every sequence.

    Returns
    -------
    (n,) int64
        The flat best label path (ties go to the lowest label index).
    """
    return map_labels(*check_chain(unary, lengths, transitions, start, end))


def gamma(unary: ArrayLike, lengths: ArrayLike, transitions: ArrayLike, start: ArrayLike,
          end: ArrayLike, method: str = "mixing") -> Floats:
    """Per-position node bound gamma of Chen et al. (2015).

    Parameters
    ----------
    unary, lengths, transitions, start, end
        As in :func:`forward_backward`.
    method : {"mixing", "length", "exact"}
        ``"mixing"``: Theorem 4.1 through the Eq. 17 chain recursions,
        O(n K^2). ``"length"``: twice the sequence length (Corollary 4.1).
        ``"exact"``: the smallest valid value, ``max_k sum_j |H_ij| / H_ii``
        from all-pairs conditionals, O(L^2 K^3) per sequence.

    Returns
    -------
    (n,) float64
        Always ``length >= mixing >= exact >= 2``.
    """
    return posterior(*check_chain(unary, lengths, transitions, start, end), rates=True).node_gamma(method)


def edge_gamma(unary: ArrayLike, lengths: ArrayLike, transitions: ArrayLike, start: ArrayLike,
               end: ArrayLike) -> Floats:
    """Per-edge bound gamma^(e) of Theorem 4.2 (Chen et al. 2015).

    Returns
    -------
    (n,) float64
        Row ``t`` bounds the edge ``(t, t + 1)``; zero on the last row of
        every sequence.
    """
    return posterior(*check_chain(unary, lengths, transitions, start, end), rates=True).edge_gamma()


def sequence_nll(unary: ArrayLike, lengths: ArrayLike, labels: ArrayLike, transitions: ArrayLike,
                 start: ArrayLike, end: ArrayLike) -> Floats:
    """Negative log-likelihood ``log Z - score(labels)`` of every sequence.

    Returns
    -------
    (m,) float64
    """
    u, offsets, trans, s, e = check_chain(unary, lengths, transitions, start, end)
    y = check_labels(labels, u.shape[1], u.shape[0])
    post = posterior(u, offsets, trans, s, e, keep_messages=False)
    return post.log_z - path_scores(u, offsets, y, trans, s, e)
