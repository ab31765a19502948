"""The "majorize" transition solver: monotone, matches TransitionProblem, works in boosting."""

import numpy as np
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost import majorize
from structboost.majorize import ChainCRFTerm, fit_majorize
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.transitions.chain import SOLVERS, TransitionParams, TransitionProblem, refit


def random_problem(seed, n_seq=5, max_len=6, k=3, scale=1.5):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=n_seq)
    n = int(lengths.sum())
    margins = rng.normal(scale=scale, size=(n, k))
    labels = rng.integers(0, k, size=n)
    weights = rng.uniform(0.5, 2.0, size=n_seq)
    return margins, labels, lengths, weights


def test_majorize_is_a_solver():
    assert "majorize" in SOLVERS
    assert CRFObjective(3, transition_solver="majorize").spec.iterations == 1


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k=st.integers(2, 4),
    scale=st.floats(0.1, 4.0),
    reg=st.sampled_from([0.0, 0.1, 2.0]),
)
def test_majorize_steps_never_increase_the_penalised_nll(seed, k, scale, reg):
    margins, labels, lengths, weights = random_problem(seed, k=k, scale=scale)
    batch = SequenceBatch.build(labels, lengths, k, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg)
    rng = np.random.default_rng(seed)
    params = TransitionParams.from_vector(rng.normal(scale=scale, size=k * k + 2 * k), k)
    values = [problem.value(params.to_vector())]
    for _ in range(5):
        params = refit(problem, params, "majorize", 1)
        values.append(problem.value(params.to_vector()))
    values = np.array(values)
    assert np.all(np.diff(values) <= 1e-9 * np.maximum(1.0, np.abs(values[1:])))


@pytest.mark.parametrize("constrained", [False, True])
def test_low_rank_majorize_steps_above_the_threshold_never_increase_the_nll(monkeypatch, constrained):
    """With LOW_RANK_DIM lowered the refit streams a rank-2 curvature (Algorithm 4), free entries only."""
    monkeypatch.setattr(majorize.curvature, "LOW_RANK_DIM", 0)
    monkeypatch.setattr(majorize.curvature, "DEFAULT_RANK", 2)
    k = 3
    margins, labels, lengths, weights = random_problem(11, k=k)
    batch = SequenceBatch.build(labels, lengths, k, weights)
    free = np.ones(k * k + 2 * k, dtype=bool)
    if constrained:  # forbid 0 -> 2 and starting in 2; keep the data feasible
        free[[2, k * k + 2]] = False
        labels = np.zeros_like(labels)
        batch = SequenceBatch.build(labels, lengths, k, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, 0.5, free)
    params = TransitionParams.from_vector(problem._full(np.zeros(free.sum())), k)
    values = [problem.value(problem._free_part(params.to_vector()))]
    for _ in range(6):
        params = refit(problem, params, "majorize", 1)
        values.append(problem.value(problem._free_part(params.to_vector())))
    values = np.array(values)
    assert np.all(np.diff(values) <= 1e-9 * np.maximum(1.0, np.abs(values[1:])))
    assert values[-1] < values[0] - 1e-3
    if constrained:
        assert np.all(params.to_vector()[~free] == -np.inf)


def test_majorize_objective_is_the_transition_problem_value():
    """The bound's objective at every iterate is TransitionProblem.value less the node scores."""
    margins, labels, lengths, weights = random_problem(3, n_seq=6, k=3)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    reg = 0.5
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg)
    term = ChainCRFTerm(margins, lengths, labels, weights)
    iterates = []
    _, history = fit_majorize(
        [term],
        np.zeros(term.dim),
        reg,
        max_iter=6,
        tol=0.0,
        callback=lambda i, theta, j: iterates.append(theta),
    )
    values = [problem.value(theta) for theta in iterates]
    np.testing.assert_allclose(history + term.observed_score, values, rtol=1e-12, atol=1e-10)
    # refit walks the same path
    params = TransitionParams.zeros(3)
    for theta in iterates[1:]:
        params = refit(problem, params, "majorize", 1)
        np.testing.assert_allclose(params.to_vector(), theta, rtol=1e-10, atol=1e-12)


def test_majorize_reaches_the_lbfgs_optimum():
    margins, labels, lengths, weights = random_problem(5, n_seq=8)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg=1.0)
    zero = TransitionParams.zeros(3)
    f_lb = problem.value(refit(problem, zero, "lbfgs", 200).to_vector())
    f_mm = problem.value(refit(problem, zero, "majorize", 150).to_vector())
    assert f_mm == pytest.approx(f_lb, rel=1e-6)


def test_objective_refits_by_majorization_each_round():
    margins, labels, lengths, weights = random_problem(7, n_seq=6)
    batch = SequenceBatch.build(labels, lengths, 3, weights)
    obj = CRFObjective(3, transition_solver="majorize", reg_transitions=0.3, transition_iter=2)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, 0.3)
    want = refit(problem, TransitionParams.zeros(3), "majorize", 2)
    obj.grad_hess(margins, batch)
    np.testing.assert_allclose(obj.params.to_vector(), want.to_vector(), rtol=1e-12)


def test_boosting_with_majorized_transitions_lowers_the_nll():
    X, y, lengths = make_hmm_sequences(n_sequences=30, length=(5, 12), stay=0.9, random_state=1)
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    obj = sb.crf_objective(3, transition_solver="majorize")
    log = {}
    xgb.train(
        sb.xgb_params(3, max_depth=2, eta=0.5),
        dtrain,
        num_boost_round=4,
        obj=obj,
        custom_metric=obj.metric,
        evals=[(dtrain, "train")],
        evals_result=log,
        verbose_eval=False,
        callbacks=[obj.callback()],
    )
    nll = log["train"]["crf-nll"]
    assert nll[-1] < nll[0]
    assert np.abs(obj.params.transitions).max() > 0


def test_majorize_refuses_problems_other_than_chains():
    with pytest.raises(ValueError, match="chain CRFs only"):
        refit(object(), TransitionParams.zeros(2), "majorize", 1)
