"""The first round's refit over one sequence of each length.

With the same node potentials at every row (the engine's base score before
the first tree), a sequence's ``log Z`` and expected counts depend on its
length only, so :meth:`TransitionProblem.by_length` answers for the whole
batch from one sequence of each length.
"""

import numpy as np
import pytest

from structboost import _config
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.transitions import chain as chain_transitions
from structboost.transitions.base import CURVATURE
from structboost.transitions.chain import TransitionParams, TransitionProblem

K = 3


def constant_batch(seed, n_seq=30, dtype=np.float64, order="C"):
    """Equal margin rows ``(n, K)`` and a batch of 1- to 7-row sequences, lengths repeating."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 8, size=n_seq)
    n = int(lengths.sum())
    labels = rng.integers(0, K, size=n)
    margins = np.asarray(np.tile(rng.normal(size=K), (n, 1)), dtype=dtype, order=order)
    batch = SequenceBatch.build(labels, lengths, K, rng.uniform(0.3, 2.0, n_seq))
    return margins, batch


def random_params(seed):
    rng = np.random.default_rng(seed)
    return TransitionParams(rng.normal(size=(K, K)), rng.normal(size=K), rng.normal(size=K))


def free_without_21():
    """Free entries of the parameter vector with the move 2 -> 1 forbidden."""
    free = np.ones(K * K + 2 * K, dtype=bool)
    free[2 * K + 1] = False
    return free


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("layout", [(np.float64, "C"), (np.float32, "F")])
def test_by_length_problem_has_the_whole_problems_sums(monkeypatch, blocked, constrained, layout):
    margins, batch = constant_batch(1, dtype=layout[0], order=layout[1])
    if blocked:  # the whole problem in blocks of a few sequences
        monkeypatch.setattr(_config, "WHOLE_BATCH_ENTRIES", 0)
        monkeypatch.setattr(_config, "BLOCK_ENTRIES", 5 * K)
    free = free_without_21() if constrained else None
    params = random_params(2)
    if constrained:
        params.transitions[2, 1] = -np.inf
    whole = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 0.5, free)
    small, index = whole.by_length()
    lengths = np.diff(batch.offsets)
    assert small.unary.shape[0] == np.unique(lengths).sum() < margins.shape[0]
    assert np.array_equal(np.diff(small.offsets)[index], lengths)
    assert (whole.num_blocks > 5) == blocked
    a, b = whole.evaluate(params, CURVATURE), small.evaluate(params, CURVATURE)
    np.testing.assert_allclose(b.log_z[index], a.log_z, rtol=1e-12)
    for x, y in ((a.expected, b.expected), (a.curvature, b.curvature)):
        np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-12)
    x = whole._free_part(params.to_vector())
    (fa, ga), (fb, gb) = whole.value_and_grad(x), small.value_and_grad(x)
    np.testing.assert_allclose(fb, fa, rtol=1e-12)
    np.testing.assert_allclose(gb, ga, rtol=1e-10, atol=1e-10)
    for step in ("newton_step", "majorize_step"):
        np.testing.assert_allclose(getattr(small, step)(params).to_vector(),
                                   getattr(whole, step)(params).to_vector(), rtol=1e-8, atol=1e-10)  # fmt: skip


def test_by_length_problem_keeps_the_allreduce():
    margins, batch = constant_batch(3)
    whole = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 0.5)
    whole.allreduce = lambda values: 2.0 * values  # two equal workers
    small, _ = whole.by_length()
    x = np.zeros(K * K + 2 * K)
    np.testing.assert_allclose(small.value_and_grad(x)[1], whole.value_and_grad(x)[1], rtol=1e-10)
    assert small.allreduce is whole.allreduce


@pytest.mark.parametrize("row", [1, "middle", -1])
def test_by_length_is_none_when_any_row_differs(row):
    margins, batch = constant_batch(4)
    n = margins.shape[0]
    margins[{"middle": n // 2}.get(row, row), 2] += 1e-12
    whole = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 0.5)
    assert whole.by_length() is None


def test_by_length_of_an_empty_batch_is_none():
    empty = np.zeros(0, dtype=np.int64)
    batch = SequenceBatch.build(empty, empty, K)
    problem = TransitionProblem(np.zeros((0, K)), batch.offsets, batch.seq_weight, batch.counts, 1.0)
    assert problem.by_length() is None


def round_one(monkeypatch, solver, step, iters, shortcut):
    """G, H, the transitions and the passes over all rows of a first round on equal margins.

    With the shortcut, the pass for G and H is the only one over all rows.
    """
    margins, batch = constant_batch(5, n_seq=40)
    if not shortcut:
        monkeypatch.setattr(TransitionProblem, "by_length", lambda self: None)
    rows = []

    def recorded(real):
        def call(unary, *args, **kwargs):
            rows.append(unary.shape[0])
            return real(unary, *args, **kwargs)

        return call

    # every pass of a chain refit: messages, or the majorization bound's
    monkeypatch.setattr(chain_transitions, "posterior", recorded(chain_transitions.posterior))
    monkeypatch.setattr(chain_transitions.majorize, "chain_bound",
                        recorded(chain_transitions.majorize.chain_bound))  # fmt: skip
    obj = CRFObjective(K, transition_solver=solver, step=step, transition_iter=iters)
    grad, hess = obj.grad_hess(margins, batch)
    monkeypatch.undo()
    return grad, hess, obj.params.to_vector(), rows.count(margins.shape[0])


@pytest.mark.parametrize("solver", ["lbfgs", "newton", "majorize"])
@pytest.mark.parametrize("step", ["adaptive", "bound"])
@pytest.mark.parametrize("iters", [None, 5])
def test_first_round_passes_all_rows_once(monkeypatch, solver, step, iters):
    """Whether one-pass rounds follow (None) or every round refits (5)."""
    grad, hess, params, passes = round_one(monkeypatch, solver, step, iters, shortcut=True)
    g0, h0, p0, passes0 = round_one(monkeypatch, solver, step, iters, shortcut=False)
    assert passes == 1 < passes0  # (majorize: its bound's pass is saved)
    np.testing.assert_allclose(params, p0, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grad, g0, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hess, h0, rtol=1e-6, atol=1e-8)

