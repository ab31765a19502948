"""The adaptive GBCRF step (objectives/step.py), checked against brute-force NLLs."""

import pickle

import numpy as np
import pytest

import naive
from structboost import XGBCRFClassifier, inference
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.objectives.step import MAX_SHRINK


def coupled_problem(seed, n_seq=5, max_len=5, k=3):
    """Margins exact in float32 (as the engines give them), labels and weights."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, max_len + 1, size=n_seq)
    n = int(lengths.sum())
    margins = rng.normal(scale=1.5, size=(n, k)).astype(np.float32).astype(np.float64)
    labels = rng.integers(0, k, size=n)
    weights = rng.uniform(0.5, 2.0, size=n_seq)
    return margins, SequenceBatch.build(labels, lengths, k, weights)


def brute_nll(margins, batch, params):
    """Weighted NLL by enumerating every labelling."""
    args = (batch.lengths, batch.labels, params.transitions, params.start, params.end)
    return batch.seq_weight @ naive.batch_nll(margins, *args)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("size", [0.3, 1.0])
@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_scale_is_the_curvature_ratio_along_the_step(seed, size, shift):
    """A row-constant shift has no curvature, so ``shift`` brings tau below 1 (seeds 0, 2)."""
    margins, batch = coupled_problem(seed)
    obj = CRFObjective(3, step="adaptive", transition_solver="newton")
    g, h = obj.grad_hess(margins, batch)
    params = obj.params.copy()
    rows = np.random.default_rng(seed).normal(scale=shift, size=(g.shape[0], 1))
    step = (-size * g / h + rows).astype(np.float32).astype(np.float64)
    moved = margins + step
    curvature = 2.0 * (
        brute_nll(moved, batch, params) - brute_nll(margins, batch, params) - np.vdot(g, step)
    )
    tau = curvature / np.vdot(h, step * step)
    assert tau > 0.0
    obj.grad_hess(moved, batch)
    expected = float(np.clip(tau, 1.0 / MAX_SHRINK, 1.0))
    assert obj.step_scale.history == [1.0, pytest.approx(expected, rel=1e-4)]


def test_hessian_lies_between_logitboosts_and_the_bound():
    margins, batch = coupled_problem(3, n_seq=8)
    obj = CRFObjective(3, step="adaptive", transition_solver="newton")
    rng = np.random.default_rng(0)
    for _ in range(4):  # small steps: the bound overestimates their curvature
        g, h = obj.grad_hess(margins, batch)
        margins = margins - 0.05 * g / h + rng.normal(scale=1e-3, size=g.shape)
    scale = obj.step_scale.scale
    assert scale < 1.0
    g, h = obj.grad_hess(margins, batch)
    p_args = (margins, batch.lengths, obj.params.transitions, obj.params.start, obj.params.end)
    _, p = inference.forward_backward(*p_args)
    row_w = np.repeat(batch.seq_weight, batch.lengths)[:, None]
    diagonal = row_w * p * (1 - p)
    bound = diagonal * inference.gamma(*p_args, method="mixing")[:, None]
    scale = obj.step_scale.history[-1]
    np.testing.assert_allclose(h, np.maximum(2 * diagonal, scale * bound), rtol=1e-12)
    assert (h >= 2 * diagonal * (1 - 1e-12)).all() and (h <= bound * (1 + 1e-12)).all()


def test_other_modes_and_step_bound_keep_the_bound():
    margins, batch = coupled_problem(4)
    for mode in ("treecrf", "logitboost"):
        assert CRFObjective(3, mode=mode, step="adaptive").step_scale is None
    assert CRFObjective(3).step_scale is not None  # the default
    bound = CRFObjective(3, step="bound")
    assert bound.step_scale is None
    _, h_bound = bound.grad_hess(margins, batch)
    _, h_first = CRFObjective(3, step="adaptive").grad_hess(margins, batch)
    np.testing.assert_allclose(h_first, h_bound, rtol=1e-12)  # the first round starts at 1


def test_bad_step_is_named():
    with pytest.raises(ValueError, match="step must be one of"):
        CRFObjective(3, step="line-search")
    with pytest.raises(ValueError, match="step must be one of"):
        XGBCRFClassifier(step="big", n_estimators=1).fit(
            np.zeros((4, 1)), [0, 1, 0, 1], lengths=[2, 2]
        )


def test_a_copied_objective_starts_a_new_secant():
    margins, batch = coupled_problem(5)
    obj = CRFObjective(3, step="adaptive")
    obj.grad_hess(margins, batch)
    copy = pickle.loads(pickle.dumps(obj))
    assert copy.step_scale._last is None and copy.step_scale.history == [1.0]
    copy.grad_hess(margins + 0.1, batch)  # no secant yet: the scale stays
    assert copy.step_scale.history == [1.0, 1.0]


def sticky_chains(seed, n_seq=40, length=15, k=3, stay=0.9):
    """Labels from a sticky Markov chain; features: a noisy one-hot of the label."""
    rng = np.random.default_rng(seed)
    labels = []
    for _ in range(n_seq):
        y = [rng.integers(k)]
        for _ in range(length - 1):
            y.append(y[-1] if rng.random() < stay else rng.integers(k))
        labels.extend(y)
    y = np.array(labels)
    X = np.eye(k)[y] + rng.normal(scale=1.2, size=(y.size, k))
    return X, y, np.full(n_seq, length)


def test_adaptive_steps_lower_the_training_nll_faster_on_coupled_chains():
    X, y, lengths = sticky_chains(0)
    nll = {}
    for step in ("bound", "adaptive"):
        est = XGBCRFClassifier(step=step, transition_solver="newton", n_estimators=15, max_depth=3)
        est.fit(X, y, lengths=lengths)
        nll[step] = -est.predict_log_likelihood(X, y, lengths=lengths).mean()
        assert np.isfinite(nll[step])
    assert nll["adaptive"] < nll["bound"]
