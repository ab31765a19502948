"""Boosted transitions (objectives.edge) against brute-force enumeration of tiny chains."""

import numpy as np
import pytest

from structboost.objectives.chain import SequenceBatch
from structboost.objectives.constraints import from_masks
from structboost.objectives.edge import EdgeCRFObjective, edge_positions, edge_row_counts

import naive


def random_problem(seed, n_seq=3, max_len=4, k=3, scale=1.5):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=n_seq)
    lengths[0] = max_len
    scores = rng.normal(scale=scale, size=(int(edge_row_counts(lengths, k).sum()), k))
    labels = rng.integers(0, k, size=int(lengths.sum()))
    weights = rng.uniform(0.5, 2.0, size=n_seq)
    return scores, SequenceBatch.build(labels, lengths, k, weights)


def split(values, batch, k):
    """Per-sequence pieces of edge-row arrays."""
    ends = np.cumsum(edge_row_counts(batch.lengths, k))
    return np.split(values, ends[:-1])


def observed(labels, k):
    """Brute-force feature vector of one labelling (see naive.edge_moments)."""
    length = len(labels)
    index = {row: i for i, row in enumerate(naive.edge_rows(length, k))}
    out = np.zeros((len(index), k))
    prev = (k,) + tuple(labels[:-1])
    for t in range(length):
        out[index[(t, prev[t])], labels[t]] = 1.0
    return out


def test_layout_matches_the_oracle_rows():
    lengths = np.array([3, 1, 2])
    position, previous = edge_positions(lengths, 2)
    expected = [(t + o, u) for o, L in zip([0, 3, 4], lengths) for t, u in naive.edge_rows(L, 2)]
    assert list(zip(position.tolist(), previous.tolist())) == expected


@pytest.mark.parametrize("mode", ["gbcrf", "treecrf"])
def test_gradient_nll_and_decoding_match_brute_force(mode):
    k = 3
    scores, batch = random_problem(0, k=k)
    obj = EdgeCRFObjective(k, mode=mode)
    grad, hess = obj.grad_hess(scores, batch)
    nll = obj.sequence_nll(scores, batch)
    decoded = obj.decode(scores, batch)
    pieces = zip(split(scores, batch, k), split(grad, batch, k), np.split(batch.labels, batch.offsets[1:-1]))
    for i, (s, g, y) in enumerate(pieces):
        log_z, mean, _, labellings, feats = naive.edge_moments(s, k)
        obs = observed(y, k)
        w = batch.seq_weight[i]
        np.testing.assert_allclose(g, w * (mean.reshape(-1, k) - obs), atol=1e-10)
        np.testing.assert_allclose(nll[i], log_z - (obs * s).sum(), atol=1e-10)
        best = labellings[int(np.argmax(feats @ s.ravel()))]
        assert tuple(decoded[batch.offsets[i] : batch.offsets[i + 1]]) == best
    if mode == "treecrf":
        np.testing.assert_allclose(hess, np.repeat(batch.seq_weight, edge_row_counts(batch.lengths, k))[:, None] * np.ones((1, k)))


def test_gradient_matches_finite_differences_of_the_nll():
    k = 2
    scores, batch = random_problem(1, k=k)
    obj = EdgeCRFObjective(k)
    grad, _ = obj.grad_hess(scores, batch)
    eps = 1e-6
    numeric = np.zeros_like(scores)
    for idx in np.ndindex(scores.shape):
        up, down = scores.copy(), scores.copy()
        up[idx] += eps
        down[idx] -= eps
        total = lambda s: batch.seq_weight @ obj.sequence_nll(s, batch)  # noqa: E731
        numeric[idx] = (total(up) - total(down)) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


@pytest.mark.parametrize("gamma", ["mixing", "length"])
@pytest.mark.parametrize("seed", range(6))
def test_gbcrf_hessian_bounds_the_exact_one(gamma, seed):
    """diag(hess) - H is positive semi-definite: the quadratic model majorises the NLL."""
    k = 3 if seed % 2 else 2
    scores, batch = random_problem(seed, k=k, max_len=4, scale=[0.5, 2.0, 5.0][seed % 3])
    obj = EdgeCRFObjective(k, hessian_bound=gamma, hess_floor=0.0)
    _, hess = obj.grad_hess(scores, batch)
    for i, (s, h) in enumerate(zip(split(scores, batch, k), split(hess, batch, k))):
        _, _, cov, _, _ = naive.edge_moments(s, k)
        gap = np.diag(h.ravel() / batch.seq_weight[i]) - cov
        assert np.linalg.eigvalsh(gap).min() > -1e-10


@pytest.mark.parametrize("seed", range(4))
def test_gbcrf_steps_never_raise_the_nll(seed):
    """Tree-like steps (leaves = random groups of features) at learning rate <= 1 descend."""
    k = 2 + seed % 2
    scores, batch = random_problem(10 + seed, k=k, scale=1.0)
    obj = EdgeCRFObjective(k)
    rng = np.random.default_rng(seed)
    for _ in range(15):
        before = batch.seq_weight @ obj.sequence_nll(scores, batch)
        grad, hess = obj.grad_hess(scores, batch)
        leaves = rng.integers(0, 4, size=scores.shape)
        step = np.zeros_like(scores)
        for leaf in range(4):
            mine = leaves == leaf
            step[mine] = -grad[mine].sum() / hess[mine].sum()
        for rate in (1.0, 0.5):
            after = batch.seq_weight @ obj.sequence_nll(scores + rate * step, batch)
            assert after <= before + 1e-10
        scores = scores + step


def test_forbidden_moves_stay_forbidden_whatever_the_scores():
    k = 3
    scores, batch = random_problem(3, k=k, scale=20.0)
    allowed = np.ones((k, k), dtype=bool)
    allowed[0, 1] = allowed[2, 2] = False
    start = np.array([True, True, False])
    labels = np.zeros_like(batch.labels)  # all 0: a path the constraints allow
    batch = SequenceBatch.build(labels, batch.lengths, k, batch.seq_weight)
    obj = EdgeCRFObjective(k, allowed_transitions=from_masks(allowed, start=start))
    unary, trans = obj.potentials(scores, batch)
    inner = np.ones(len(labels), dtype=bool)
    inner[batch.offsets[:-1]] = False
    assert np.isneginf(trans[inner][:, ~allowed]).all()
    decoded = obj.decode(scores, batch)
    for a, b in zip(batch.offsets[:-1], batch.offsets[1:]):
        assert start[decoded[a]]
        assert all(allowed[decoded[t - 1], decoded[t]] for t in range(a + 1, b))
    # A forbidden move has probability 0 and is never observed: zero gradient.
    grad, _ = obj.grad_hess(scores, batch)
    position, previous = edge_positions(batch.lengths, k)
    first = np.isin(position, batch.offsets[:-1])
    assert (grad[first][:, ~start] == 0).all()
    for u in range(k):
        assert (grad[~first & (previous == u)][:, ~allowed[u]] == 0).all()


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="logitboost"):
        EdgeCRFObjective(3, mode="logitboost")
    with pytest.raises(ValueError, match="hessian_bound"):
        EdgeCRFObjective(3, hessian_bound="exact")
    scores, batch = random_problem(0)
    with pytest.raises(ValueError, match="edge rows"):
        EdgeCRFObjective(3).grad_hess(scores[:-1], batch)
