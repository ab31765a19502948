"""Numba kernels for tree-structured CRFs with typed edges over ragged batches.

Instance ``i`` owns rows ``offsets[i]:offsets[i + 1]``; row ``v`` has a
global parent ``gparent[v]`` (``-1`` for a root; forests allowed) and an
edge type selecting ``transitions[etype[v]]``, whose ``[a, b]`` scores
parent label ``a`` with child label ``b``. Nothing here validates input
(:mod:`structboost.inference.tree` does, and builds the order with
:func:`structure`); the kernels take a
:class:`structboost.inference.tree.TreeBatch` and
:class:`~structboost.inference.tree.TreeMessages`.

Messages are kept in log space, but the inner products run in scaled
probability space (``E = exp(T - max(T))`` per type, ``w = exp(x - max(x))``);
a row whose scaled sum underflows is redone in log space. Per non-root row
``v`` with parent ``p``:

* ``inside[v]``: ``unary[v]`` plus the messages from ``v``'s children;
* ``up[v, a] = log sum_b exp(T[a, b] + inside[v, b])``, the message ``v -> p``;
* ``outside[v]``: ``p``'s log belief without ``up[v]`` (the cavity);
* ``down[v, b] = log sum_a exp(outside[v, a] + T[a, b])``, the message ``p -> v``;
* ``belief[v] = inside[v] + down[v]``, the unnormalised log marginal.

Roots have ``up = outside = down = 0``.
"""

import numpy as np

from .._config import CACHE, KERNEL, njit
from ._logspace import logsumexp

_TINY = 1e-200
_LOG_TINY = np.log(_TINY)


@njit(cache=CACHE)
def structure(offsets, parents):
    """Global parents, children lists and a parents-first order per instance.

    Parameters
    ----------
    offsets : (m + 1,) int64
    parents : (n,) int64
        Parent index within the instance, ``-1`` for a root (in range, not
        self-referencing).

    Returns
    -------
    order : (n,) int64
        Each instance's rows breadth-first from its roots.
    gparent : (n,) int64
        Global row of the parent, ``-1`` for roots.
    child_ptr : (n + 1,) int64
    child_idx : (n,) int64
        Children of row ``v`` are ``child_idx[child_ptr[v]:child_ptr[v + 1]]``.
    reached : (m,) int64
        Rows of each instance reachable from its roots; fewer than its size
        exactly when its parents contain a cycle.
    """
    n = parents.shape[0]
    n_inst = offsets.shape[0] - 1
    gparent = np.empty(n, dtype=np.int64)
    n_child = np.zeros(n, dtype=np.int64)
    for i in range(n_inst):
        lo = offsets[i]
        for v in range(lo, offsets[i + 1]):
            if parents[v] < 0:
                gparent[v] = -1
            else:
                gparent[v] = lo + parents[v]
                n_child[lo + parents[v]] += 1
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        child_ptr[v + 1] = child_ptr[v] + n_child[v]
    fill = child_ptr[:n].copy()
    child_idx = np.zeros(n, dtype=np.int64)
    for v in range(n):
        p = gparent[v]
        if p >= 0:
            child_idx[fill[p]] = v
            fill[p] += 1
    order = np.zeros(n, dtype=np.int64)
    reached = np.zeros(n_inst, dtype=np.int64)
    for i in range(n_inst):
        lo = offsets[i]
        tail = lo
        for v in range(lo, offsets[i + 1]):
            if gparent[v] < 0:
                order[tail] = v
                tail += 1
        head = lo
        while head < tail:
            v = order[head]
            head += 1
            for c in range(child_ptr[v], child_ptr[v + 1]):
                order[tail] = child_idx[c]
                tail += 1
        reached[i] = tail - lo
    return order, gparent, child_ptr, child_idx, reached


@njit(cache=CACHE)
def _edge_tables(transitions):
    """``(backward, emat, emat_back, t_max)``: the transposed transitions, ``exp(T - max(T))`` per
    type in both orientations, and ``max(T) (n_types,)``.
    """
    n_types, k, _ = transitions.shape
    backward = np.empty((n_types, k, k))
    emat = np.empty((n_types, k, k))
    emat_back = np.empty((n_types, k, k))
    t_max = np.full(n_types, -np.inf)
    for e in range(n_types):
        for a in range(k):
            for b in range(k):
                t_max[e] = max(t_max[e], transitions[e, a, b])
        for a in range(k):
            for b in range(k):
                backward[e, b, a] = transitions[e, a, b]
                emat[e, a, b] = np.exp(transitions[e, a, b] - t_max[e])
                emat_back[e, b, a] = emat[e, a, b]
    return backward, emat, emat_back, t_max


@njit(cache=CACHE)
def _exp_shifted(x, out):
    """``out = exp(x - max(x))``; returns ``max(x)`` (``-inf`` leaves ``out`` zero)."""
    top = -np.inf
    for j in range(x.shape[0]):
        if x[j] > top:
            top = x[j]
    if top == -np.inf:
        out[:] = 0.0
        return top
    for j in range(x.shape[0]):
        out[j] = np.exp(x[j] - top)
    return top


@njit(**KERNEL)
def _dot(x, y):
    """``sum_j x[j] * y[j]`` (reassociated, so the loop vectorises; inputs are finite)."""
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j] * y[j]
    return s


@njit(cache=CACHE)
def _log_matvec(trans, emat, t_max, x, w, out):
    """``out[a] = log sum_b exp(trans[a, b] + x[b])`` with ``emat = exp(trans - t_max)`` and scratch
    ``w (K,)``.
    """
    k = x.shape[0]
    top = _exp_shifted(x, w)
    if top == -np.inf:
        out[:] = -np.inf
        return
    for a in range(k):
        s = _dot(emat[a], w)
        if s > _TINY:
            out[a] = np.log(s) + top + t_max
            continue
        best = -np.inf
        for b in range(k):
            best = max(best, trans[a, b] + x[b])
        if best == -np.inf:
            out[a] = -np.inf
            continue
        s = 0.0
        for b in range(k):
            s += np.exp(trans[a, b] + x[b] - best)
        out[a] = best + np.log(s)


@njit(cache=CACHE)
def messages(tree):
    """Sum-product messages of every instance of a ``TreeBatch`` (see the module docstring).

    Returns
    -------
    log_z : (m,) float64
    inside, up, outside, down, belief : (n, K) float64
    """
    unary, offsets, order, gparent = tree.unary, tree.offsets, tree.order, tree.gparent
    child_ptr, child_idx, etype, transitions = (
        tree.child_ptr, tree.child_idx, tree.edge_types, tree.transitions
    )
    n, k = unary.shape
    n_inst = offsets.shape[0] - 1
    backward, emat, emat_back, t_max = _edge_tables(transitions)
    inside = unary.copy()
    up = np.zeros((n, k))
    outside = np.zeros((n, k))
    down = np.zeros((n, k))
    belief = np.empty((n, k))
    log_z = np.zeros(n_inst)
    w = np.empty(k)
    acc = np.empty(k)
    for i in range(n_inst):
        lo, hi = offsets[i], offsets[i + 1]
        for idx in range(hi - 1, lo - 1, -1):
            v = order[idx]
            p = gparent[v]
            if p < 0:
                log_z[i] += logsumexp(inside[v])
                continue
            e = etype[v]
            _log_matvec(transitions[e], emat[e], t_max[e], inside[v], w, up[v])
            for a in range(k):
                inside[p, a] += up[v, a]
        for idx in range(lo, hi):
            p = order[idx]
            for a in range(k):
                belief[p, a] = inside[p, a] + down[p, a]
            c_lo, c_hi = child_ptr[p], child_ptr[p + 1]
            acc[:] = 0.0
            for c in range(c_hi - 1, c_lo - 1, -1):
                v = child_idx[c]
                for a in range(k):
                    outside[v, a] = acc[a]
                    acc[a] += up[v, a]
            for a in range(k):
                acc[a] = unary[p, a] + down[p, a]
            for c in range(c_lo, c_hi):
                v = child_idx[c]
                for a in range(k):
                    outside[v, a] += acc[a]
                    acc[a] += up[v, a]
                e = etype[v]
                _log_matvec(backward[e], emat_back[e], t_max[e], outside[v], w, down[v])
    return log_z, inside, up, outside, down, belief


@njit(cache=CACHE)
def softmax_rows(belief):
    """Node marginals ``(n, K)`` from unnormalised log beliefs."""
    out = np.empty_like(belief)
    for v in range(belief.shape[0]):
        if _exp_shifted(belief[v], out[v]) > -np.inf:
            s = 0.0
            for a in range(belief.shape[1]):
                s += out[v, a]
            for a in range(belief.shape[1]):
                out[v, a] /= s
    return out


@njit(cache=CACHE)
def _row_scale(lnorm_a, top, t_max):
    """Factor turning ``emat[a] * w`` into a conditional row, or 0 when row ``a`` must be formed in
    log space.
    """
    gap = lnorm_a - top - t_max
    return np.exp(-gap) if gap > _LOG_TINY else 0.0


@njit(cache=CACHE)
def _conditional(trans, emat, t_max, x, lnorm, w, out):
    """``out[a, b] = exp(trans[a, b] + x[b] - lnorm[a])`` (``lnorm`` from :func:`_log_matvec`); rows
    with ``lnorm[a] = -inf`` zero.
    """
    k = x.shape[0]
    top = _exp_shifted(x, w)
    for a in range(k):
        scale = _row_scale(lnorm[a], top, t_max)
        for b in range(k):
            if scale > 0.0:
                out[a, b] = emat[a, b] * w[b] * scale
            elif lnorm[a] > -np.inf:
                out[a, b] = np.exp(trans[a, b] + x[b] - lnorm[a])
            else:
                out[a, b] = 0.0


@njit(cache=CACHE)
def edge_marginals(marginals, tree, msgs):
    """Joint marginals of every edge, from node ``marginals (n, K)`` and the messages.

    Returns
    -------
    (n, K, K) float64
        Row ``v`` holds ``P(y_parent(v) = a, y_v = b)``; zero for roots.
    """
    gparent, etype, transitions = tree.gparent, tree.edge_types, tree.transitions
    inside, up = msgs.inside, msgs.up
    n, k = marginals.shape
    _, emat, _, t_max = _edge_tables(transitions)
    out = np.zeros((n, k, k))
    w = np.empty(k)
    for v in range(n):
        p = gparent[v]
        if p < 0:
            continue
        e = etype[v]
        _conditional(transitions[e], emat[e], t_max[e], inside[v], up[v], w, out[v])
        for a in range(k):
            for b in range(k):
                out[v, a, b] *= marginals[p, a]
    return out


@njit(cache=CACHE)
def _contraction(trans, emat_t, t_max, x, lnorm, w, rows, scale):
    """``1 - sum_j min_i M[i, j]`` over the possible rows of the conditional ``M`` of
    :func:`_conditional`, never stored.

    ``emat_t`` is ``exp(trans - t_max)`` transposed; ``rows`` (int64) and
    ``scale`` are ``(K,)`` scratch.
    """
    k = x.shape[0]
    top = _exp_shifted(x, w)
    n_fast = 0
    n_slow = 0
    for a in range(k):
        factor = _row_scale(lnorm[a], top, t_max)
        if factor > 0.0:
            rows[n_fast] = a
            scale[n_fast] = factor
            n_fast += 1
        elif lnorm[a] > -np.inf:
            n_slow += 1
    total = 0.0
    for b in range(k):
        low = np.inf
        for r in range(n_fast):
            val = emat_t[b, rows[r]] * scale[r]
            low = val if val < low else low
        if low < np.inf:
            low *= w[b]
        if n_slow > 0:
            for a in range(k):
                if lnorm[a] > -np.inf and _row_scale(lnorm[a], top, t_max) == 0.0:
                    low = min(low, np.exp(trans[a, b] + x[b] - lnorm[a]))
        if low < np.inf:
            total += low
    return min(1.0, max(0.0, 1.0 - total))


@njit(cache=CACHE)
def mixing_rates(tree, msgs):
    """Contraction coefficients of Theorem 3.1 along both directions of every edge.

    Returns
    -------
    rate_down : (n,) float64
        ``alpha_{p, v} = 1 - sum_j min_i P(y_v = j | y_p = i)`` for row ``v``
        with parent ``p``; zero for roots.
    rate_up : (n,) float64
        ``alpha_{v, p} = 1 - sum_j min_i P(y_p = j | y_v = i)``; zero for roots.
    """
    gparent, etype, transitions = tree.gparent, tree.edge_types, tree.transitions
    inside, up, outside, down = msgs.inside, msgs.up, msgs.outside, msgs.down
    n, k = inside.shape
    backward, emat, emat_back, t_max = _edge_tables(transitions)
    rate_down = np.zeros(n)
    rate_up = np.zeros(n)
    w = np.empty(k)
    rows = np.empty(k, dtype=np.int64)
    scale = np.empty(k)
    for v in range(n):
        if gparent[v] < 0:
            continue
        e = etype[v]
        rate_down[v] = _contraction(
            transitions[e], emat_back[e], t_max[e], inside[v], up[v], w, rows, scale
        )
        rate_up[v] = _contraction(
            backward[e], emat[e], t_max[e], outside[v], down[v], w, rows, scale
        )
    return rate_down, rate_up


@njit(cache=CACHE)
def mixing_bounds(tree, rate_down, rate_up):
    """Node and edge bounds from the Eq. 17 messages of Chen et al. (2015).

    Node bound (Theorem 4.1): ``beta_{s->t} = alpha_{t,s} (1 + sum_{h in N(s),
    h != t} beta_{h->s})`` and ``gamma_t = 2 (1 + sum_{s in N(t)} beta_{s->t})``.

    Edge bound for ``(t, t')``: a node ``s`` counts ``deg(s) - 1`` times, so
    ``B_{s->t} = alpha_{t,s} (deg(s) - 1 + sum_{h in N(s), h != t} B_{h->s})``
    and ``gamma^(e) = 2 (1 + deg(t) - 1 + deg(t') - 1 + sum_{s in N(t), s != t'}
    B_{s->t} + sum_{s in N(t'), s != t} B_{s->t'})`` (Theorem 4.2 made valid
    for degrees above two).

    Returns
    -------
    node_gamma : (n,) float64
    edge_gamma : (n,) float64
        Row ``v`` bounds the edge ``(parent(v), v)``; zero for roots.
    """
    offsets, order, gparent, child_ptr = tree.offsets, tree.order, tree.gparent, tree.child_ptr
    n = gparent.shape[0]
    n_inst = offsets.shape[0] - 1
    beta_up = np.zeros(n)
    beta_in = np.zeros(n)
    beta_down = np.zeros(n)
    wide_up = np.zeros(n)
    wide_in = np.zeros(n)
    wide_down = np.zeros(n)
    node_gamma = np.empty(n)
    edge_gamma = np.zeros(n)
    for i in range(n_inst):
        lo, hi = offsets[i], offsets[i + 1]
        for idx in range(hi - 1, lo - 1, -1):
            v = order[idx]
            p = gparent[v]
            if p < 0:
                continue
            n_child = child_ptr[v + 1] - child_ptr[v]
            beta_up[v] = rate_down[v] * (1.0 + beta_in[v])
            beta_in[p] += beta_up[v]
            wide_up[v] = rate_down[v] * (n_child + wide_in[v])
            wide_in[p] += wide_up[v]
        for idx in range(lo, hi):
            v = order[idx]
            p = gparent[v]
            if p >= 0:
                others_p = child_ptr[p + 1] - child_ptr[p] - 1 + (1 if gparent[p] >= 0 else 0)
                beta_down[v] = rate_up[v] * (
                    1.0 + beta_down[p] + max(0.0, beta_in[p] - beta_up[v])
                )
                wide_p = wide_down[p] + max(0.0, wide_in[p] - wide_up[v])
                wide_down[v] = rate_up[v] * (others_p + wide_p)
                n_child = child_ptr[v + 1] - child_ptr[v]
                edge_gamma[v] = 2.0 * (1.0 + others_p + n_child + wide_p + wide_in[v])
            node_gamma[v] = 2.0 * (1.0 + beta_in[v] + beta_down[v])
    return node_gamma, edge_gamma


@njit(cache=CACHE)
def _visit(s, u, lo, step, given, p_t, rest, spread, came_from, stack, depth):
    """Extend the conditionals ``given`` from ``u`` to its neighbour ``s`` by ``step``, add
    ``TV(P(y_s | y_t = a), P(y_s)) / (1 - p_t[a])`` to ``spread[a]`` (formed without cancellation),
    push ``s``; the new stack depth.
    """
    k = spread.shape[0]
    g = given[s - lo]
    h = given[u - lo]
    for a in range(k):
        for b in range(k):
            acc = 0.0
            for c in range(k):
                acc += h[a, c] * step[c, b]
            g[a, b] = acc
    for a in range(k):
        if rest[a] == 0.0:
            continue
        dist = 0.0
        for b in range(k):
            diff = 0.0
            for c in range(k):
                if c != a:
                    diff += p_t[c] * (g[a, b] - g[c, b])
            dist += abs(diff)
        spread[a] += 0.5 * dist / rest[a]
    came_from[s - lo] = u
    stack[depth] = s
    return depth + 1


@njit(cache=CACHE)
def exact_gamma(tree, msgs, marginals):
    """Smallest valid node bound ``(n,)``, ``max_k sum_j |H_ij| / H_ii`` over node indicators.

    For ``i = (t, k)``: ``2 (1 + sum_{s != t} TV_s / (1 - p_i))`` with ``TV_s``
    the total variation between ``P(y_s | y_t = k)`` and ``P(y_s)`` (Lemmas 3.1
    and 3.3 of Chen et al.), conditionals chained along tree paths. Labels with
    ``H_ii < 1e-12`` are skipped (a node with none left gets 2). ``O(L^2 K^3)``
    per instance of ``L`` rows.
    """
    offsets, gparent, child_ptr, child_idx = (
        tree.offsets, tree.gparent, tree.child_ptr, tree.child_idx
    )
    etype, transitions = tree.edge_types, tree.transitions
    inside, up, outside, down = msgs.inside, msgs.up, msgs.outside, msgs.down
    n, k = marginals.shape
    n_inst = offsets.shape[0] - 1
    backward, emat, emat_back, t_max = _edge_tables(transitions)
    out = np.empty(n)
    w = np.empty(k)
    max_len = 0
    for i in range(n_inst):
        max_len = max(max_len, offsets[i + 1] - offsets[i])
    to_child = np.empty((max_len, k, k))
    to_parent = np.empty((max_len, k, k))
    given = np.empty((max_len, k, k))
    stack = np.empty(max_len, dtype=np.int64)
    came_from = np.empty(max_len, dtype=np.int64)
    spread = np.empty(k)
    rest = np.empty(k)
    for i in range(n_inst):
        lo, hi = offsets[i], offsets[i + 1]
        for v in range(lo, hi):
            if gparent[v] >= 0:
                e = etype[v]
                c = v - lo
                _conditional(transitions[e], emat[e], t_max[e], inside[v], up[v], w, to_child[c])
                _conditional(
                    backward[e], emat_back[e], t_max[e], outside[v], down[v], w, to_parent[c]
                )
        for t in range(lo, hi):
            p_t = marginals[t]
            for a in range(k):
                rest[a] = 0.0
                for c in range(k):
                    if c != a:
                        rest[a] += p_t[c]
                if p_t[a] * rest[a] < 1e-12:
                    rest[a] = 0.0
            spread[:] = 0.0
            given[t - lo] = 0.0
            for a in range(k):
                given[t - lo, a, a] = 1.0
            stack[0] = t
            came_from[t - lo] = -1
            depth = 1
            while depth > 0:
                depth -= 1
                u = stack[depth]
                p = gparent[u]
                if p >= 0 and p != came_from[u - lo]:
                    depth = _visit(
                        p, u, lo, to_parent[u - lo], given, p_t, rest, spread,
                        came_from, stack, depth,
                    )  # fmt: skip
                for c in range(child_ptr[u], child_ptr[u + 1]):
                    s = child_idx[c]
                    if s != came_from[u - lo]:
                        depth = _visit(
                            s, u, lo, to_child[s - lo], given, p_t, rest, spread,
                            came_from, stack, depth,
                        )  # fmt: skip
            best = 2.0
            for a in range(k):
                if rest[a] > 0.0:
                    best = max(best, 2.0 * (1.0 + spread[a]))
            out[t] = best
    return out


@njit(cache=CACHE)
def viterbi(tree):
    """Max-product labelling of every instance (ties go to the lowest label).

    Returns
    -------
    labels : (n,) int64
    best : (m,) float64
        Score of the returned labelling of each instance (``-inf`` when the
        transitions forbid every labelling).
    """
    unary, offsets, order, gparent = tree.unary, tree.offsets, tree.order, tree.gparent
    etype, transitions = tree.edge_types, tree.transitions
    n, k = unary.shape
    n_inst = offsets.shape[0] - 1
    score = unary.copy()
    back = np.zeros((n, k), dtype=np.int64)
    labels = np.zeros(n, dtype=np.int64)
    best = np.zeros(n_inst)
    for i in range(n_inst):
        lo, hi = offsets[i], offsets[i + 1]
        for idx in range(hi - 1, lo - 1, -1):
            v = order[idx]
            p = gparent[v]
            if p < 0:
                continue
            trans = transitions[etype[v]]
            for a in range(k):
                top = -np.inf
                arg = 0
                for b in range(k):
                    val = trans[a, b] + score[v, b]
                    if val > top:
                        top = val
                        arg = b
                score[p, a] += top
                back[v, a] = arg
        for idx in range(lo, hi):
            v = order[idx]
            p = gparent[v]
            if p < 0:
                labels[v] = np.argmax(score[v])
                best[i] += score[v, labels[v]]
            else:
                labels[v] = back[v, labels[p]]
    return labels, best


@njit(cache=CACHE)
def label_scores(tree, labels):
    """Score ``(m,)`` ``sum_v unary[v, y_v] + sum_{v non-root} T[type_v, y_p, y_v]`` per instance."""
    unary, offsets, gparent = tree.unary, tree.offsets, tree.gparent
    etype, transitions = tree.edge_types, tree.transitions
    n_inst = offsets.shape[0] - 1
    out = np.zeros(n_inst)
    for i in range(n_inst):
        for v in range(offsets[i], offsets[i + 1]):
            out[i] += unary[v, labels[v]]
            p = gparent[v]
            if p >= 0:
                out[i] += transitions[etype[v], labels[p], labels[v]]
    return out
