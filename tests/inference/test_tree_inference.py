"""Tree-CRF inference against brute-force enumeration (tests/naive_tree.py)."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from naive_tree import NaiveTree

from structboost import inference
from structboost.inference.tree import (
    tree_edge_gamma,
    tree_edge_marginals,
    tree_forward_backward,
    tree_gamma,
    tree_nll,
    tree_viterbi,
)

PROPERTY = settings(max_examples=40, deadline=None)
close = np.testing.assert_allclose


def random_parents(rng, n, root_prob=0.2):
    """Random forest on ``n`` nodes in random row order (parents local)."""
    perm = rng.permutation(n)
    parents = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        if rng.random() >= root_prob:
            parents[perm[i]] = perm[rng.integers(i)]
    return parents


def random_batch(rng, k, n_types, sizes, scale=1.0, root_prob=0.2):
    """A batch of random forests: ``(unary, lengths, parents, transitions, edge_types)``."""
    lengths = np.asarray(sizes, dtype=np.int64)
    n = int(lengths.sum())
    parents = np.concatenate([random_parents(rng, size, root_prob) for size in lengths])
    unary = scale * rng.normal(size=(n, k))
    transitions = scale * rng.normal(size=(n_types, k, k))
    edge_types = rng.integers(0, n_types, size=n)
    return unary, lengths, parents, transitions, edge_types


def split(batch):
    """Per-instance arguments of a batch."""
    unary, lengths, parents, transitions, edge_types = batch
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return [
        (unary[lo:hi], parents[lo:hi], transitions, edge_types[lo:hi])
        for lo, hi in zip(offsets[:-1], offsets[1:])
    ]


def oracles(batch):
    return [NaiveTree(*args) for args in split(batch)]


def stacked(naives, attr):
    return np.concatenate([getattr(nv, attr)() for nv in naives])


batch_params = st.tuples(
    st.integers(1, 3),  # K
    st.integers(1, 3),  # edge types
    st.lists(st.integers(1, 6), min_size=1, max_size=3),  # instance sizes
    st.integers(0, 2**32 - 1),  # seed
)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_against_brute_force(k):
    rng = np.random.default_rng(k)
    sizes = rng.integers(1, 7, size=25)
    batch = random_batch(rng, k, 3, sizes)
    naives = oracles(batch)
    log_z, marg = tree_forward_backward(*batch)
    close(log_z, [nv.log_z for nv in naives], rtol=1e-12, atol=1e-12)
    close(marg, stacked(naives, "marginals"), atol=1e-12)
    close(tree_edge_marginals(*batch), stacked(naives, "edge_marginals"), atol=1e-12)
    labels = tree_viterbi(*batch)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    for nv, lo, hi in zip(naives, offsets[:-1], offsets[1:]):
        assert nv.score(labels[lo:hi]) == pytest.approx(nv.map_score(), abs=1e-12)
    truth = rng.integers(0, k, size=len(labels))
    expected = [nv.nll(truth[lo:hi]) for nv, lo, hi in zip(naives, offsets[:-1], offsets[1:])]
    u, lengths, parents, transitions, edge_types = batch
    nll = tree_nll(u, lengths, parents, truth, transitions, edge_types)
    close(nll, expected, rtol=1e-12, atol=1e-12)
    exact = tree_gamma(*batch, method="exact")
    close(exact, stacked(naives, "exact_gamma"), rtol=1e-7)


@pytest.mark.parametrize("unary_scale, trans_scale", [(1.0, 1.0), (1e4, 1.0), (3.0, 1e3)])
def test_mixing_bounds_match_explicit_paths(unary_scale, trans_scale):
    rng = np.random.default_rng(17)
    unary, lengths, parents, transitions, types = random_batch(rng, 3, 2, [6, 5, 6, 4])
    batch = (unary * unary_scale, lengths, parents, transitions * trans_scale, types)
    naives = oracles(batch)
    close(tree_gamma(*batch), stacked(naives, "mixing_gamma"), rtol=1e-9)
    close(tree_edge_gamma(*batch), stacked(naives, "mixing_edge_gamma"), rtol=1e-9)


def test_forbidden_pairs_against_brute_force():
    rng = np.random.default_rng(7)
    batch = list(random_batch(rng, 3, 2, [5, 6, 4, 6]))
    batch[3][0, 0, 1] = batch[3][0, 2, :2] = batch[3][1, 1, 1] = -np.inf
    naives = oracles(batch)
    log_z, marg = tree_forward_backward(*batch)
    close(log_z, [nv.log_z for nv in naives], rtol=1e-12)
    close(marg, stacked(naives, "marginals"), atol=1e-12)
    close(tree_edge_marginals(*batch), stacked(naives, "edge_marginals"), atol=1e-12)
    close(tree_gamma(*batch, method="exact"), stacked(naives, "exact_gamma"), rtol=1e-7)
    assert np.all(tree_gamma(*batch) >= stacked(naives, "mixing_gamma") - 1e-9)
    assert np.all(tree_gamma(*batch, method="exact") >= 2.0)
    assert np.all(tree_edge_gamma(*batch) >= stacked(naives, "mixing_edge_gamma") - 1e-9)
    assert np.all(tree_gamma(*batch) >= stacked(naives, "exact_gamma") - 1e-9)
    assert np.all(tree_edge_gamma(*batch) >= stacked(naives, "exact_edge_gamma") - 1e-9)


@PROPERTY
@given(batch_params)
@example((2, 1, [5, 5, 5], 4294967294))  # peaked marginals: the oracle's H_ii near 1e-11
def test_gamma_ordering(params):
    k, n_types, sizes, seed = params
    batch = random_batch(np.random.default_rng(seed), k, n_types, sizes, scale=2.0)
    naives = oracles(batch)
    exact = tree_gamma(*batch, method="exact")
    mixing = tree_gamma(*batch)
    length = tree_gamma(*batch, method="length")
    assert np.all(exact >= 2.0 - 1e-12)
    assert np.all(mixing >= exact * (1 - 1e-9))
    assert np.all(length >= mixing * (1 - 1e-12))
    assert np.all(mixing >= stacked(naives, "exact_gamma") - 1e-6)
    assert np.all(tree_edge_gamma(*batch) >= stacked(naives, "exact_edge_gamma") - 1e-6)


@PROPERTY
@given(batch_params)
def test_marginals_consistent(params):
    k, n_types, sizes, seed = params
    batch = random_batch(np.random.default_rng(seed), k, n_types, sizes, scale=3.0)
    _, marg = tree_forward_backward(*batch)
    pair = tree_edge_marginals(*batch)
    parents = batch[2]
    offsets = np.repeat(np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    child = np.flatnonzero(parents >= 0)
    close(marg.sum(axis=1), 1.0, atol=1e-12)
    close(pair[child].sum(axis=1), marg[child], atol=1e-12)
    close(pair[child].sum(axis=2), marg[offsets[child] + parents[child]], atol=1e-12)
    assert np.all(pair[parents < 0] == 0.0)


@PROPERTY
@given(batch_params)
def test_batch_equals_loop(params):
    k, n_types, sizes, seed = params
    batch = random_batch(np.random.default_rng(seed), k, n_types, sizes)
    parts = split(batch)
    log_z, marg = tree_forward_backward(*batch)
    one = [tree_forward_backward(u, [len(u)], p, t, e) for u, p, t, e in parts]
    np.testing.assert_array_equal(log_z, [lz[0] for lz, _ in one])
    np.testing.assert_array_equal(marg, np.concatenate([m for _, m in one]))
    for fn in (tree_viterbi, tree_gamma, tree_edge_gamma, tree_edge_marginals):
        looped = np.concatenate([fn(u, [len(u)], p, t, e) for u, p, t, e in parts])
        np.testing.assert_array_equal(fn(*batch), looped)


def test_log_z_gradients_by_finite_differences():
    rng = np.random.default_rng(3)
    unary, lengths, parents, transitions, types = random_batch(rng, 3, 2, [6, 5])
    _, marg = tree_forward_backward(unary, lengths, parents, transitions, types)
    pair = tree_edge_marginals(unary, lengths, parents, transitions, types)
    h = 1e-6

    def total(u, t):
        return tree_forward_backward(u, lengths, parents, t, types)[0].sum()

    for v, a in [(0, 0), (4, 2), (7, 1), (10, 0)]:
        up, dn = unary.copy(), unary.copy()
        up[v, a] += h
        dn[v, a] -= h
        fd = (total(up, transitions) - total(dn, transitions)) / (2 * h)
        assert fd == pytest.approx(marg[v, a], abs=1e-8)
    child = parents >= 0
    for e, a, b in [(0, 0, 0), (0, 1, 2), (1, 2, 1), (1, 0, 2)]:
        up, dn = transitions.copy(), transitions.copy()
        up[e, a, b] += h
        dn[e, a, b] -= h
        fd = (total(unary, up) - total(unary, dn)) / (2 * h)
        expected = pair[child & (types == e), a, b].sum()
        assert fd == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize("unary_scale, trans_scale", [(1e4, 1.0), (1e4, 1e3), (1.0, 1e3)])
def test_extreme_potentials(unary_scale, trans_scale):
    rng = np.random.default_rng(11)
    unary, lengths, parents, transitions, types = random_batch(rng, 3, 2, [6, 6, 5])
    unary *= unary_scale
    transitions *= trans_scale
    batch = (unary, lengths, parents, transitions, types)
    naives = oracles(batch)
    log_z, marg = tree_forward_backward(*batch)
    close(log_z, [nv.log_z for nv in naives], rtol=1e-12)
    close(marg, stacked(naives, "marginals"), atol=1e-9)
    close(tree_edge_marginals(*batch), stacked(naives, "edge_marginals"), atol=1e-9)
    for method in ("mixing", "exact"):
        gamma = tree_gamma(*batch, method=method)
        assert np.all(np.isfinite(gamma)) and np.all(gamma >= 2.0)
    assert np.all(tree_gamma(*batch) >= tree_gamma(*batch, method="exact") - 1e-9)
    assert np.all(np.isfinite(tree_edge_gamma(*batch)))
    labels = tree_viterbi(*batch)
    assert np.all(np.isfinite(tree_nll(unary, lengths, parents, labels, transitions, types)))


def test_float32_input_matches_float64():
    rng = np.random.default_rng(5)
    unary, lengths, parents, transitions, types = random_batch(rng, 3, 2, [6, 4])
    u32, t32 = (1e4 * unary).astype(np.float32), transitions.astype(np.float32)
    log_z, marg = tree_forward_backward(u32, lengths, parents, t32, types)
    u64, t64 = u32.astype(np.float64), t32.astype(np.float64)
    ref_z, ref_m = tree_forward_backward(u64, lengths, parents, t64, types)
    assert np.all(np.isfinite(log_z)) and np.all(np.isfinite(marg))
    np.testing.assert_array_equal(log_z, ref_z)
    np.testing.assert_array_equal(marg, ref_m)
    assert np.all(np.isfinite(tree_gamma(u32, lengths, parents, t32, types)))


def test_single_type_matrix_default_and_root_edge_types():
    rng = np.random.default_rng(2)
    unary, lengths, parents, transitions, _ = random_batch(rng, 3, 1, [5, 3])
    types = np.where(parents < 0, 99, 0)  # a root's edge type is ignored
    np.testing.assert_array_equal(
        tree_forward_backward(unary, lengths, parents, transitions[0])[1],
        tree_forward_backward(unary, lengths, parents, transitions, types)[1],
    )


def chain_forward_log_z(unary, transitions):
    """log Z of one chain by the plain forward recursion in log space."""
    alpha = unary[0].copy()
    for t in range(1, len(unary)):
        alpha = np.logaddexp.reduce(alpha[:, None] + transitions, axis=0) + unary[t]
    return np.logaddexp.reduce(alpha)


def chain_mixing_gamma(pair, marg):
    """Theorem 4.1 on a chain via the paper's forward/backward recursions, from marginals."""
    length = len(marg)
    right = np.zeros(length)  # alpha_{t, t+1}
    left = np.zeros(length)  # alpha_{t, t-1}
    for t in range(length - 1):
        joint = pair[t + 1]  # rows: y_t, cols: y_{t+1}
        right[t] = 1 - (joint / marg[t][:, None]).min(axis=0).sum()
        left[t + 1] = 1 - (joint.T / marg[t + 1][:, None]).min(axis=0).sum()
    from_right = np.zeros(length)  # beta_{t+1 -> t}
    from_left = np.zeros(length)  # beta_{t-1 -> t}
    for t in range(length - 2, -1, -1):
        from_right[t] = right[t] * (1 + from_right[t + 1])
    for t in range(1, length):
        from_left[t] = left[t] * (1 + from_left[t - 1])
    return 2 * (1 + from_right + from_left), from_right, from_left


def test_chain_as_tree():
    rng = np.random.default_rng(13)
    length, k = 6, 3
    unary = rng.normal(size=(length, k))
    transitions = rng.normal(size=(k, k))
    parents = np.arange(length) - 1
    log_z, marg = tree_forward_backward(unary, [length], parents, transitions)
    assert log_z[0] == pytest.approx(chain_forward_log_z(unary, transitions), abs=1e-12)
    pair = tree_edge_marginals(unary, [length], parents, transitions)
    expected, from_right, from_left = chain_mixing_gamma(pair, marg)
    close(tree_gamma(unary, [length], parents, transitions), expected, rtol=1e-12)
    theorem_42 = 2 * (3 + from_left[:-1] + from_right[1:])  # edge (t, t + 1) as printed
    edge = tree_edge_gamma(unary, [length], parents, transitions)
    assert edge[0] == 0.0
    assert np.all(edge[1:] <= theorem_42 + 1e-12)
    nv = NaiveTree(unary, parents, transitions[None], np.zeros(length, dtype=np.int64))
    assert np.all(edge >= nv.exact_edge_gamma() - 1e-9)


def test_chain_as_tree_matches_chain_kernels():
    rng = np.random.default_rng(19)
    lengths = np.array([1, 4, 7, 2, 6])
    k = 4
    unary = 2.0 * rng.normal(size=(lengths.sum(), k))
    transitions = rng.normal(size=(k, k))
    zeros = np.zeros(k)
    chain = (unary, lengths, transitions, zeros, zeros)
    parents = np.concatenate([np.arange(n) - 1 for n in lengths])
    tree = (unary, lengths, parents, transitions)
    log_z, marg = tree_forward_backward(*tree)
    chain_z, chain_marg = inference.forward_backward(*chain)
    close(log_z, chain_z, rtol=1e-12)
    close(marg, chain_marg, atol=1e-12)
    np.testing.assert_array_equal(tree_viterbi(*tree), inference.viterbi(*chain))
    close(tree_gamma(*tree), inference.gamma(*chain, method="mixing"), rtol=1e-10)
    close(tree_gamma(*tree, method="exact"), inference.gamma(*chain, method="exact"), rtol=1e-10)
    inner = parents >= 0  # tree row v joins (v - 1, v); chain row t joins (t, t + 1)
    pair = tree_edge_marginals(*tree)
    close(pair[inner], inference.edge_marginals(*chain)[np.flatnonzero(inner) - 1], atol=1e-12)
    edge = tree_edge_gamma(*tree)[inner]
    assert np.all(edge <= inference.edge_gamma(*chain)[np.flatnonzero(inner) - 1] + 1e-12)


def test_star_needs_the_tree_edge_bound():
    """Theorem 4.2 as printed (2 (3 + ...)) is too small around a high-degree node."""
    rng = np.random.default_rng(1)
    parents = np.array([-1, 0, 0, 0, 0, 0])
    unary = rng.normal(size=(6, 2))
    unary[1:, 0] += 3.0
    transitions = np.zeros((2, 2))
    nv = NaiveTree(unary, parents, transitions[None], np.zeros(6, dtype=np.int64))
    exact = nv.exact_edge_gamma()
    assert exact[1:].min() > 6.0  # all mixing rates are zero, so Theorem 4.2 gives 6
    edge = tree_edge_gamma(unary, [6], parents, transitions)
    close(edge[1:], 10.0)
    assert np.all(edge >= exact)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(parents=[1, 2, 0, -1]), "cycle"),
        (dict(parents=[-1, 0, 5, 1]), "outside -1..3"),
        (dict(parents=[-1, 1, 0, 1]), "its own parent"),
        (dict(parents=[-1, 0, -2, 1]), "outside -1..3"),
        (dict(lengths=[3]), "sum to 3"),
        (dict(lengths=[4, 0]), "at least one row"),
        (dict(edge_types=[0, 0, 2, 1]), "edge_types"),
        (dict(edge_types=[0, -1, 0, 1]), "edge_types"),
        (dict(unary=np.full((4, 2), np.nan)), "NaN"),
        (dict(transitions=np.zeros((2, 3, 3))), "shape"),
        (dict(transitions=np.full((2, 2, 2), -np.inf)), "all -inf"),
        (dict(parents=[-1, 0, 1]), "one entry per row"),
        (dict(parents=[-1.0, 0.5, 0.0, 1.0]), "whole numbers"),
    ],
)
def test_bad_input(change, message):
    args = dict(
        unary=np.zeros((4, 2)),
        lengths=[4],
        parents=[-1, 0, 0, 1],
        transitions=np.zeros((2, 2, 2)),
        edge_types=[0, 0, 1, 1],
    )
    tree_forward_backward(**args)
    args.update(change)
    with pytest.raises(ValueError, match=message):
        tree_forward_backward(**args)


def test_bad_method_labels_and_infeasible():
    unary, parents = np.zeros((3, 2)), [-1, 0, 1]
    with pytest.raises(ValueError, match="gamma method"):
        tree_gamma(unary, [3], parents, np.zeros((2, 2)), method="bogus")
    with pytest.raises(ValueError, match="outside 0..1"):
        tree_nll(unary, [3], parents, [0, 2, 1], np.zeros((2, 2)))
    only_0_to_1 = np.array([[-np.inf, 0.0], [-np.inf, -np.inf]])
    for fn in (tree_forward_backward, tree_viterbi, tree_gamma):
        with pytest.raises(ValueError, match="no labelling"):
            fn(unary, [3], parents, only_0_to_1)
    assert tree_nll(unary[:2], [2], [-1, 0], [1, 1], only_0_to_1)[0] == np.inf
