"""The L-BFGS transition refit: its direction, its optimum, monotone steps and its memory."""

import copy
import pickle

import numpy as np
import pytest
from scipy.optimize import minimize as scipy_minimize

from structboost.inference import _chain as chain_sweeps
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.objectives.constraints import resolve
from structboost.transitions.chain import TransitionParams, TransitionProblem, refit
from structboost.transitions.lbfgs import LBFGSMemory, minimize

K = 3


def _problem(seed, free=None, reg=1.0, scale=1.5, m=8):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, m)
    n = int(lengths.sum())
    labels = rng.integers(0, K, n)
    margins = scale * rng.normal(size=(n, K))
    weights = rng.uniform(0.5, 2.0, m)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg, free)
    return problem, margins, batch


def _constraints():
    """Labels 1 and 2 may not be followed by label 0."""
    allowed = np.ones((K, K), dtype=bool)
    allowed[1, 0] = allowed[2, 0] = False
    return resolve(allowed, K)


def test_two_loop_direction_is_the_bfgs_inverse_hessian_product():
    """Oracle: the inverse-Hessian BFGS updates, written out as d x d matrices."""
    rng = np.random.default_rng(0)
    d = 6
    a = rng.normal(size=(d, d))
    hess = a @ a.T + np.eye(d)
    memory = LBFGSMemory(size=4)
    pairs = [(s, hess @ s) for s in rng.normal(size=(5, d))]
    for s, y in pairs:
        memory.push(s, y)
    assert len(memory.pairs) == 4  # the oldest pair is dropped
    s_new, y_new = pairs[-1]
    inv = (s_new @ y_new) / (y_new @ y_new) * np.eye(d)
    for s, y in pairs[1:]:
        rho = 1.0 / (s @ y)
        left = np.eye(d) - rho * np.outer(s, y)
        inv = left @ inv @ left.T + rho * np.outer(s, s)
    grad = rng.normal(size=d)
    np.testing.assert_allclose(memory.direction(grad), -inv @ grad, rtol=1e-10)


def test_pairs_without_positive_curvature_are_not_kept():
    memory = LBFGSMemory()
    memory.push(np.array([1.0, 0.0]), np.array([-1.0, 0.5]))
    memory.push(np.array([1.0, 0.0]), np.array([0.0, 0.0]))
    assert memory.pairs == []
    grad = np.array([3.0, 4.0])
    np.testing.assert_allclose(memory.direction(grad), -grad / 5.0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("allowed", [None, "forbid"])
@pytest.mark.parametrize("reg", [1.0, 0.01])
def test_refit_from_scratch_reaches_scipys_optimum(seed, allowed, reg):
    free = None if allowed is None else _constraints().free_vector()
    problem, _, _ = _problem(seed, free, reg)
    zero = TransitionParams.zeros(K)
    start = zero if free is None else _constraints().apply(zero)
    x0 = problem._free_part(start.to_vector())
    best = scipy_minimize(problem.value_and_grad, x0, jac=True, method="L-BFGS-B",
                          options={"maxiter": 1000, "gtol": 1e-12, "ftol": 0.0})
    fitted = refit(problem, start, "lbfgs", 200)
    vec = fitted.to_vector()
    if free is not None:  # the forbidden entries stay at -inf
        assert np.isneginf(vec[~free]).all() and np.isfinite(vec[free]).all()
    value = problem.value(problem._free_part(vec))
    # both stop on a relative decrease of ~2e-9 (ours: the decrease its model predicts)
    assert value <= best.fun + 1e-7 * abs(best.fun)


@pytest.mark.parametrize("seed", range(3))
def test_every_iterate_and_every_warm_refit_lowers_the_penalised_nll(seed):
    problem, margins, batch = _problem(seed, scale=3.0)
    x0 = np.zeros(K * K + 2 * K)
    # the k-th iterate is what max_iter = k returns (the path does not depend on it)
    values = []
    for k in range(8):
        x, _ = minimize(problem.value_and_grad, x0, k, LBFGSMemory(), ftol=0.0)
        values.append(problem.value(x))
    assert all(b <= a for a, b in zip(values, values[1:]))
    assert values[-1] < values[0]
    # warm refits over moving node scores: a stale memory never makes a round worse
    rng = np.random.default_rng(seed)
    memory, params = LBFGSMemory(), TransitionParams.zeros(K)
    for _ in range(6):
        margins = margins + rng.normal(scale=1.0, size=margins.shape)
        moved = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 1.0)
        before = moved.value(params.to_vector())
        params = refit(moved, params, "lbfgs", 3, memory)
        assert moved.value(params.to_vector()) <= before
        assert memory.pairs  # the pairs carry over


def test_converged_refit_costs_one_evaluation_and_leaves_messages_cached():
    problem, _, _ = _problem(1)
    memory = LBFGSMemory()
    params = refit(problem, TransitionParams.zeros(K), "lbfgs", 200, memory)
    calls = []

    def counted(x):
        calls.append(x)
        return problem.value_and_grad(x)

    x0 = params.to_vector()
    memory.begin(x0, None)
    x, evaluations = minimize(counted, x0, 5, memory)
    assert evaluations == len(calls) == 1 and np.array_equal(x, x0)
    # after any refit the returned point's messages are the cached ones (no extra pass for G, H)
    fitted = refit(problem, TransitionParams.zeros(K), "lbfgs", 3)
    assert np.array_equal(problem._last[0], fitted.to_vector())


def test_the_last_iterations_passes_take_the_rates_asked_for_the_result(monkeypatch):
    """``rates``: the last iteration's line search runs ``last``, whose pass computes the rates.

    The refit's path and result are those of a refit without it, and the
    returned point's cached posterior holds the rates: asking for the node
    bound runs no pass of its own (``late_rates``), and gives the bound of a
    fresh pass with the rates.
    """
    problem, margins, batch = _problem(5, scale=3.0, m=30)
    x0 = np.zeros(K * K + 2 * K)
    seen = []

    def fun(x):
        seen.append("fun")
        return problem.value_and_grad(x)

    def last(x):
        seen.append("last")
        return problem.value_and_grad(x, rates=True)

    plain, _ = minimize(problem.value_and_grad, x0, 3, LBFGSMemory(), ftol=0.0)
    x, _ = minimize(fun, x0, 3, LBFGSMemory(), ftol=0.0, last=last)
    np.testing.assert_allclose(x, plain, rtol=1e-12, atol=1e-14)
    assert "last" in seen and seen.index("last") > 0 and set(seen[seen.index("last"):]) == {"last"}
    fresh = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 1.0)
    params = refit(fresh, TransitionParams.zeros(K), "lbfgs", 3, LBFGSMemory(), rates=True)
    late = []
    monkeypatch.setattr(chain_sweeps, "late_rates", lambda *a: late.append(1))
    gamma = fresh.posterior(params, rates=True).node_gamma()
    assert not late
    want = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 1.0)
    np.testing.assert_allclose(gamma, want.posterior(params, rates=True).node_gamma(), rtol=1e-12)


def test_memory_continues_only_where_the_last_refit_ended():
    problem, _, _ = _problem(2)
    free = _constraints().free_vector()
    memory = LBFGSMemory()
    params = refit(problem, TransitionParams.zeros(K), "lbfgs", 4, memory)
    end = params.to_vector()
    assert memory.pairs
    memory.begin(end, None)
    assert memory.pairs  # same point, same (absent) mask: kept
    memory.begin(end + 1.0, None)
    assert memory.pairs == []  # another warm start
    refit(problem, TransitionParams.zeros(K), "lbfgs", 4, memory)
    memory.begin(memory._end[free], free)
    assert memory.pairs == []  # the free entries changed
    refit(problem, TransitionParams.zeros(K), "lbfgs", 4, memory)
    for fresh in (copy.deepcopy(memory), pickle.loads(pickle.dumps(memory))):
        assert fresh.pairs == [] and fresh.size == memory.size
        fresh.begin(memory._end, None)
        assert fresh.pairs == []


def test_objective_keeps_its_memory_and_a_copy_starts_fresh():
    _, margins, batch = _problem(3)
    obj = CRFObjective(K)
    obj.grad_hess(margins, batch)
    obj.grad_hess(margins + 0.3, batch)
    assert obj._lbfgs_memory.pairs
    for fresh in (copy.deepcopy(obj), pickle.loads(pickle.dumps(obj))):
        assert fresh._lbfgs_memory.pairs == []
        np.testing.assert_array_equal(fresh.params.to_vector(), obj.params.to_vector())
        fresh.grad_hess(margins, batch)  # and trains on


def test_bad_memory_size_raises():
    with pytest.raises(ValueError, match="positive integer"):
        LBFGSMemory(size=0)
