"""CRFObjective and the transition solvers, checked by finite differences and bounds."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from structboost import inference
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.transitions.chain import (
    TransitionParams,
    TransitionProblem,
    observed_counts,
    refit,
)


def random_problem(seed, n_seq=4, max_len=5, k=3, scale=1.5):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=n_seq)
    n = int(lengths.sum())
    margins = rng.normal(scale=scale, size=(n, k))
    labels = rng.integers(0, k, size=n)
    weights = rng.uniform(0.5, 2.0, size=n_seq)
    return margins, labels, lengths, weights


def total_nll(margins, batch, params):
    nll = inference.sequence_nll(
        margins, batch.lengths, batch.labels, params.transitions, params.start, params.end
    )
    return batch.seq_weight @ nll


@pytest.mark.parametrize("mode", ["gbcrf", "treecrf", "logitboost"])
def test_gradient_matches_finite_differences(mode):
    margins, labels, lengths, weights = random_problem(0)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    obj = CRFObjective(3, mode=mode)
    grad, _ = obj.grad_hess(margins, batch)
    eps = 1e-6
    fd = np.zeros_like(margins)
    for idx in np.ndindex(*margins.shape):
        up, down = margins.copy(), margins.copy()
        up[idx] += eps
        down[idx] -= eps
        fd[idx] = (total_nll(up, batch, obj.params) - total_nll(down, batch, obj.params)) / (2 * eps)
    np.testing.assert_allclose(grad, fd, atol=1e-6)


def test_hessian_of_each_mode():
    margins, labels, lengths, weights = random_problem(1)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    row_w = np.repeat(weights, lengths)[:, None]

    gb = CRFObjective(3, mode="gbcrf")
    _, h = gb.grad_hess(margins, batch)
    p_args = (margins, lengths, gb.params.transitions, gb.params.start, gb.params.end)
    _, p = inference.forward_backward(*p_args)
    gamma = inference.gamma(*p_args, method="mixing")
    np.testing.assert_allclose(h, row_w * gamma[:, None] * p * (1 - p), rtol=1e-12)

    fixed = CRFObjective(3, mode="gbcrf", hessian_bound=3.5)
    _, h = fixed.grad_hess(margins, batch)
    _, p = inference.forward_backward(
        margins, lengths, fixed.params.transitions, fixed.params.start, fixed.params.end
    )
    np.testing.assert_allclose(h, row_w * 3.5 * p * (1 - p), rtol=1e-12)

    _, h = CRFObjective(3, mode="treecrf").grad_hess(margins, batch)
    np.testing.assert_allclose(h, np.broadcast_to(row_w, h.shape))

    lb = CRFObjective(3, mode="logitboost")
    g, h = lb.grad_hess(margins, batch)
    p = softmax(margins, axis=1)
    np.testing.assert_allclose(h, row_w * 2 * p * (1 - p), rtol=1e-12)
    assert np.all(lb.params.transitions == 0)


@pytest.mark.parametrize("mode", ["gbcrf", "treecrf", "logitboost"])
def test_sequence_weights_scale_grad_and_hess_exactly(mode):
    margins, labels, lengths, weights = random_problem(2)
    unit = SequenceBatch.build(labels, lengths, 3)
    weighted = SequenceBatch.build(labels, lengths, 3, weights)
    # Weighted transition fits differ; compare with the transitions held fixed.
    a = CRFObjective(3, mode=mode, transition_iter=0, transition_solver="newton")
    b = CRFObjective(3, mode=mode, transition_iter=0, transition_solver="newton")
    g1, h1 = a.grad_hess(margins, unit)
    g2, h2 = b.grad_hess(margins, weighted)
    row_w = np.repeat(weights, lengths)[:, None]
    np.testing.assert_array_equal(g2, g1 * row_w)
    np.testing.assert_array_equal(h2, h1 * row_w)


def test_transition_gradient_matches_finite_differences():
    margins, labels, lengths, weights = random_problem(3)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg=0.7)
    rng = np.random.default_rng(0)
    vec = rng.normal(size=3 * 3 + 6)
    _, grad = problem.value_and_grad(vec)
    eps = 1e-6
    fd = np.array(
        [
            (problem.value_and_grad(vec + eps * e)[0] - problem.value_and_grad(vec - eps * e)[0])
            / (2 * eps)
            for e in np.eye(vec.size)
        ]
    )
    np.testing.assert_allclose(grad, fd, atol=1e-6)
    # The value is the penalised NLL up to the node-score constant.
    params = TransitionParams.from_vector(vec, 3)
    node = weights @ np.add.reduceat(margins[np.arange(len(labels)), labels], batch.offsets[:-1])
    expected = total_nll(margins, batch, params) + 0.35 * vec @ vec + node
    assert problem.value_and_grad(vec)[0] == pytest.approx(expected, rel=1e-10)


def test_observed_counts_by_loop():
    _, labels, lengths, weights = random_problem(4)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    counts = np.zeros(15)
    for i, (lo, hi) in enumerate(zip(batch.offsets[:-1], batch.offsets[1:])):
        y = labels[lo:hi]
        for a, b in zip(y[:-1], y[1:]):
            counts[a * 3 + b] += weights[i]
        counts[9 + y[0]] += weights[i]
        counts[12 + y[-1]] += weights[i]
    np.testing.assert_allclose(observed_counts(labels, batch.offsets, weights, 3), counts)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k=st.integers(2, 4),
    scale=st.floats(0.1, 4.0),
    reg=st.floats(0.0, 2.0),
)
@example(seed=4, k=4, scale=3.52, reg=0.0)  # a candidate step beyond float range: rejected, no crash
def test_newton_step_never_increases_penalised_nll(seed, k, scale, reg):
    margins, labels, lengths, weights = random_problem(seed, n_seq=5, max_len=6, k=k, scale=scale)
    batch = SequenceBatch.build(labels, lengths, k, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg)
    rng = np.random.default_rng(seed)
    params = TransitionParams.from_vector(rng.normal(scale=scale, size=k * k + 2 * k), k)
    before = problem.value_and_grad(params.to_vector())[0]
    after_params = problem.newton_step(params)
    after = problem.value_and_grad(after_params.to_vector())[0]
    assert after <= before + 1e-9 * max(1.0, abs(before))


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_edge_bound_dominates_the_transition_hessian(seed):
    """diag(2 * sum gamma^(e) p (1 - p)) - Hessian is PSD (Lemma 2.1, Theorem 4.2)."""
    margins, labels, lengths, weights = random_problem(seed, n_seq=5, max_len=6, k=3, scale=2.0)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, 0.0)
    vec = np.random.default_rng(seed).normal(scale=2.0, size=15)
    eps = 1e-5
    hess = np.array(
        [
            (problem.value_and_grad(vec + eps * e)[1] - problem.value_and_grad(vec - eps * e)[1])
            / (2 * eps)
            for e in np.eye(vec.size)
        ]
    )
    post = problem.posterior(TransitionParams.from_vector(vec, 3))
    _, curvature = problem.expected_counts(post, with_curvature=True)
    assert np.linalg.eigvalsh(np.diag(2 * curvature) - (hess + hess.T) / 2).min() > -1e-6


def test_newton_step_sweeps_the_rates_of_the_accepted_point():
    """The step's passes compute the mixing rates: the caller's node bound needs no extra sweep."""
    margins, labels, lengths, weights = random_problem(3, n_seq=6, max_len=6)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg=1.0)
    params = problem.newton_step(TransitionParams.zeros(3))
    post = problem.posterior(params)
    assert post.has_rates
    want = inference.gamma(margins, lengths, params.transitions, params.start, params.end)
    np.testing.assert_allclose(post.node_gamma("mixing"), want, rtol=1e-12)


def test_lbfgs_and_newton_decrease_and_converge_to_the_same_optimum():
    margins, labels, lengths, weights = random_problem(5, n_seq=8, max_len=6)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg=1.0)
    zero = TransitionParams.zeros(3)
    f0 = problem.value_and_grad(zero.to_vector())[0]
    lb = refit(problem, zero, "lbfgs", 200)
    nt = refit(problem, zero, "newton", 80)
    f_lb = problem.value_and_grad(lb.to_vector())[0]
    f_nt = problem.value_and_grad(nt.to_vector())[0]
    assert f_lb < f0 and f_nt < f0
    assert f_nt == pytest.approx(f_lb, rel=1e-5)


def test_extreme_and_float32_margins_stay_finite():
    margins, labels, lengths, _ = random_problem(6)
    batch = SequenceBatch.build(labels, lengths, 3)
    for m in (np.sign(margins) * 1e4, margins.astype(np.float32)):
        g, h = CRFObjective(3).grad_hess(m, batch)
        assert np.isfinite(g).all() and np.isfinite(h).all()
        assert (h > 0).all()


def test_length_one_sequences_reduce_to_softmax_per_row():
    rng = np.random.default_rng(7)
    margins = rng.normal(size=(6, 4))
    labels = rng.integers(0, 4, size=6)
    batch = SequenceBatch.build(labels, np.ones(6, dtype=int), 4)
    obj = CRFObjective(4, transition_iter=0, transition_solver="newton")
    g, h = obj.grad_hess(margins, batch)
    p = softmax(margins, axis=1)
    np.testing.assert_allclose(g + np.eye(4)[labels], p, atol=1e-12)
    np.testing.assert_allclose(h, 2 * p * (1 - p), atol=1e-12)


@pytest.mark.parametrize(
    ("labels", "lengths", "match"),
    [
        ([0, 1, 3], [3], "outside 0..2"),
        ([0, np.nan, 1], [3], "NaN"),
        ([0, -1, 1], [3], "outside"),
        ([0, 1.5, 1], [3], "whole numbers"),
        ([0, 1, 1], [2, 0, 1], "at least one row"),
        ([0, 1, 1], [2, 2], "sum to 4"),
    ],
)
def test_bad_batches_raise_clear_errors(labels, lengths, match):
    with pytest.raises(ValueError, match=match):
        SequenceBatch.build(np.asarray(labels, dtype=float), lengths, 3)


def test_bad_settings_and_margins_raise():
    with pytest.raises(ValueError, match="mode"):
        CRFObjective(3, mode="crf")
    with pytest.raises(ValueError, match="hessian_bound"):
        CRFObjective(3, hessian_bound="tight")
    with pytest.raises(ValueError, match="transition_solver"):
        CRFObjective(3, transition_solver="adam")
    batch = SequenceBatch.build([0, 1, 2], [3], 3)
    with pytest.raises(ValueError, match="num_labels=3"):
        CRFObjective(3).grad_hess(np.zeros((3, 4)), batch)
    with pytest.raises(ValueError, match=r"row 0, label 0 is nan \(not finite"):
        CRFObjective(3).grad_hess(np.full((3, 3), np.nan), batch)


def test_nthread_is_checked_and_changes_nothing():
    rng = np.random.default_rng(0)
    lengths = np.array([3, 5, 2])
    y = rng.integers(0, 3, size=10)
    margins = rng.normal(size=(10, 3))
    batch = SequenceBatch.build(y, lengths, 3)
    with pytest.raises(ValueError, match="nthread"):
        CRFObjective(3, nthread=0)
    g1, h1 = CRFObjective(3, transition_solver="newton").grad_hess(margins, batch)
    g2, h2 = CRFObjective(3, transition_solver="newton", nthread=1).grad_hess(margins, batch)
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(h1, h2)
