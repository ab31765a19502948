"""One-pass rounds (``transition_iter=1``): one forward-backward pass, steps from its sums."""

import pickle

import numpy as np
import pytest
import xgboost as xgb

import naive
import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.objectives import round as objectives_base
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.objectives.params import DEFAULT_ITER
from structboost.transitions import chain as transitions_chain
from structboost.transitions import onestep
from structboost.transitions.chain import TransitionParams, TransitionProblem
from structboost.transitions.lbfgs import LBFGSMemory

K = 3


def _hmm(seed=0, n=30):
    X, y, lengths = make_hmm_sequences(
        n_sequences=n, length=(4, 9), stay=0.8, emission=0.7, random_state=seed
    )
    return X, y, lengths


def _count_passes(monkeypatch):
    """A list whose length is the number of forward-backward passes run since."""
    calls = []
    real = transitions_chain.posterior

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(transitions_chain, "posterior", counting)
    return calls


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_a_round_after_the_warm_up_runs_one_pass(monkeypatch, solver):
    """Small steps of the margins: no rise, no lagging transitions, no refit after the warm-up."""
    monkeypatch.setattr(onestep, "LAG", np.inf)
    rng = np.random.default_rng(1)
    _, y, lengths = _hmm()
    batch = SequenceBatch.build(y, lengths, K)
    margins = rng.normal(size=(len(y), K))
    obj = CRFObjective(K, transition_solver=solver, transition_iter=1, step="bound")
    calls = _count_passes(monkeypatch)
    passes = []
    for _ in range(onestep.WARMUP + 6):
        before = len(calls)
        g, h = obj.grad_hess(margins, batch)
        passes.append(len(calls) - before)
        margins = margins - 0.3 * g / h
    assert all(p > 1 for p in passes[: onestep.WARMUP])  # the warm-up refits
    assert passes[onestep.WARMUP :] == [1] * 6
    assert obj._one_step.moved  # the transitions still step


@pytest.mark.parametrize("eta", [1.0, 0.5])
def test_newton_bound_one_pass_rounds_never_raise_the_nll(monkeypatch, eta):
    """The bound step and the Newton step from one pass: by joint convexity the NLL falls.

    ``f(u + d, t + S) <= (f(u + 2d, t) + f(u, t + 2S)) / 2``, and twice either
    bound step still does not raise ``f``.
    """
    monkeypatch.setattr(onestep, "WARMUP", 0)
    X, y, lengths = _hmm(2, n=40)
    obj = sb.crf_objective(K, transition_solver="newton", transition_iter=1, step="bound")
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    log = {}
    xgb.train(
        sb.xgb_params(K, eta=eta, max_depth=3, nthread=1), dtrain, 15, obj=obj,
        custom_metric=obj.metric, evals=[(dtrain, "train")], evals_result=log,
        verbose_eval=False, callbacks=[obj.callback()],
    )  # fmt: skip
    nll = np.array(log["train"]["crf-nll"])
    assert np.all(np.diff(nll) <= 1e-9 * nll[:-1])
    assert nll[-1] < 0.8 * nll[0]
    assert obj.crf._one_step.refits == 1  # the first round only


@pytest.mark.parametrize("solver", ["newton", "lbfgs"])
def test_sums_of_the_pass_are_the_nll_and_its_transition_gradient(solver):
    """Finite differences of the brute-force NLL in the transitions, against one pass's sums.

    L-BFGS's pass sums its expected transition counts within the sweep;
    Newton's also needs their curvature bound, summed after it.
    """
    rng = np.random.default_rng(3)
    lengths = np.array([3, 1, 4, 2])
    n = int(lengths.sum())
    margins = rng.normal(size=(n, K))
    labels = rng.integers(0, K, size=n)
    weights = rng.uniform(0.5, 2.0, size=len(lengths))
    batch = SequenceBatch.build(labels, lengths, K, weights)
    vec = rng.normal(size=K * K + 2 * K)

    def nll(v):
        p = TransitionParams.from_vector(v, K)
        return weights @ naive.batch_nll(
            margins, lengths, labels, p.transitions, p.start, p.end
        )

    problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, reg=0.0)
    steps = onestep.OneStep(solver, 1, LBFGSMemory())
    node = float(np.repeat(weights, lengths) @ margins[np.arange(n), labels])
    sums = steps.local_sums(problem, TransitionParams.from_vector(vec, K), node)
    d = vec.size
    assert sums.shape == (1 + (2 if solver == "newton" else 1) * d,)
    assert sums[0] == pytest.approx(nll(vec), rel=1e-10)
    eps = 1e-6
    fd = np.array([(nll(vec + eps * e) - nll(vec - eps * e)) / (2 * eps) for e in np.eye(d)])
    np.testing.assert_allclose(sums[1 : 1 + d], fd, atol=1e-6)
    assert (sums[1 + d :] >= 0).all()  # the curvature bound


def test_the_step_waits_for_the_next_round_and_a_copy_refits_first():
    """G and H are at ``params`` after the call; the pending step moves the next round's pass."""
    rng = np.random.default_rng(4)
    _, y, lengths = _hmm(4)
    batch = SequenceBatch.build(y, lengths, K)
    margins = rng.normal(size=(len(y), K))
    obj = CRFObjective(K, transition_solver="newton", transition_iter=1)
    obj._steps()  # made on first use
    obj._one_step.rounds = onestep.WARMUP  # past the warm-up
    obj.grad_hess(margins, batch)  # a refit round: no state yet
    first = obj.params.to_vector()
    g, _ = obj.grad_hess(margins, batch)
    assert np.array_equal(obj.params.to_vector(), first)  # no step was pending
    p = obj.params
    _, marg = sb.inference.forward_backward(margins, lengths, p.transitions, p.start, p.end)
    np.testing.assert_allclose(g + np.eye(K)[y], marg, atol=1e-12)
    obj.grad_hess(margins, batch)
    assert not np.array_equal(obj.params.to_vector(), first)  # the step of the last pass
    clone = pickle.loads(pickle.dumps(obj))
    assert clone._one_step.params(clone._problem(margins, batch), clone.params) is None


def test_a_lagging_round_refits_from_its_pass_before_its_g_and_h(monkeypatch):
    """``LAG`` 0: every L-BFGS round after the first of one pass refits from its own pass.

    Its G is then at the refit transitions (a second pass), not at those of
    the lagging pass, and the next round is checked against that pass.
    """
    monkeypatch.setattr(onestep, "LAG", 0.0)
    monkeypatch.setattr(onestep, "WARMUP", 2)
    rng = np.random.default_rng(6)
    _, y, lengths = _hmm(6)
    batch = SequenceBatch.build(y, lengths, K)
    margins = rng.normal(size=(len(y), K))
    obj = CRFObjective(K, step="bound")  # the default: one pass a round
    calls = _count_passes(monkeypatch)
    for _ in range(onestep.WARMUP + 1):  # the warm-up, then a round of one pass
        g, h = obj.grad_hess(margins, batch)
        margins = margins - 0.5 * g / h
    refits, before = obj._one_step.refits, len(calls)
    lagging = obj._one_step.params(obj._problem(margins, batch), obj.params)
    g, _ = obj.grad_hess(margins, batch)
    assert obj._one_step.refits == refits + 1 and len(calls) - before > 2
    assert not np.array_equal(obj.params.to_vector(), lagging.to_vector())
    p = obj.params
    _, marg = sb.inference.forward_backward(margins, lengths, p.transitions, p.start, p.end)
    np.testing.assert_allclose(g + np.eye(K)[y], marg, atol=1e-12)
    assert obj._one_step._nll is not None and not obj._one_step.moved


def test_warm_up_refits_after_the_first_continue_for_warmup_iter_iterations(monkeypatch):
    """Iterations the objective asks of the refit: in the warm-up, then in a lagging round.

    The first refit runs in full, the warm-up's others ``WARMUP_ITER``
    iterations, a lagging round's refit in full.
    """
    monkeypatch.setattr(onestep, "LAG", 0.0)  # rounds of one pass lag (see the test above)
    asked = []
    real = objectives_base.refit

    def recording(problem, params, solver, max_iter, memory=None, rates=False, tap=None):
        asked.append(max_iter)
        return real(problem, params, solver, max_iter, memory, rates, tap)

    monkeypatch.setattr(objectives_base, "refit", recording)
    rng = np.random.default_rng(7)
    _, y, lengths = _hmm(7)
    batch = SequenceBatch.build(y, lengths, K)
    margins = rng.normal(size=(len(y), K))
    obj = CRFObjective(K, step="bound")  # the default: "lbfgs", one pass a round
    for _ in range(onestep.WARMUP + 3):
        g, h = obj.grad_hess(margins, batch)
        margins = margins - 0.5 * g / h
    full = DEFAULT_ITER["lbfgs"]
    assert onestep.WARMUP_ITER < full
    assert asked[: onestep.WARMUP] == [full] + [onestep.WARMUP_ITER] * (onestep.WARMUP - 1)
    assert len(asked) > onestep.WARMUP and set(asked[onestep.WARMUP :]) == {full}


@pytest.mark.parametrize("gain, cleared", [(1.0, False), (0.1, True)])
def test_a_rise_along_the_transition_step_counts_past_lag_of_the_round_gain(gain, cleared):
    """The trapezoid rule's change along the last step ``S``, against ``LAG`` of the round's gain.

    Here the data gradients before and after ``S`` give ``(g_old + g) . S / 2
    = 0.01 > 0``. The NLL fell by ``gain``: a change of at most ``LAG * gain``
    is the rule's own error (the cross term of the node and the transition
    steps), and the pairs go on; a larger one is the transitions' rise,
    which clears the pairs and refits from the pass.
    """
    rng = np.random.default_rng(8)
    _, y, lengths = _hmm(8)
    batch = SequenceBatch.build(y, lengths, K)
    margins = rng.normal(size=(len(y), K))
    problem = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, reg=0.0)
    d = K * K + 2 * K
    x = 0.1 * rng.normal(size=d)
    step = np.zeros(d)
    step[0] = 0.1
    g_old, g_new = np.zeros(d), np.zeros(d)
    g_old[0], g_new[0] = -1.0, 1.2  # (g_old + g_new) . S / 2 = 0.01
    memory = LBFGSMemory()
    memory.push(np.eye(d)[1], np.eye(d)[1])
    steps = onestep.OneStep("lbfgs", DEFAULT_ITER["lbfgs"], memory)
    steps.record(TransitionParams.from_vector(x - step, K), None, step, g_old)
    steps._nll = 10.0
    summed = np.concatenate(([10.0 - gain], g_new))
    assert 0.01 > onestep.LAG * 0.1 and 0.01 < onestep.LAG * 1.0
    refit = steps.finish(problem, TransitionParams.from_vector(x, K), summed)
    assert (memory.pairs == []) == cleared
    if cleared:  # held a round, refit from the pass
        assert refit and steps.damping == 0.5 and not steps.moved
