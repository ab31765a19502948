"""The objective's ``allreduce`` hook: workers that sum their statistics act as one process.

Threads stand in for workers: each holds some of the sequences and sums
arrays with the others through a barrier, as XGBoost's collective does.
"""

import threading

import numpy as np
import pytest

from structboost.objectives.chain import CRFObjective, SequenceBatch

K = 3


class ThreadSum:
    """Element-wise sum over ``n`` threads, each calling with an array of one shape."""

    def __init__(self, n):
        self.barrier = threading.Barrier(n)
        self.slots = [None] * n
        self.calls = [0] * n

    def for_worker(self, rank):
        def allreduce(values):
            self.calls[rank] += 1
            self.slots[rank] = np.array(values, dtype=np.float64)
            self.barrier.wait()
            total = np.sum(self.slots, axis=0)
            self.barrier.wait()
            return total

        return allreduce


def _run_workers(work, total):
    """Run ``work(rank)`` on two threads; both must have summed equally often."""
    threads = [threading.Thread(target=work, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert total.calls[0] == total.calls[1] > 0


def _sequences(seed=0, m=12):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, m)
    n = int(lengths.sum())
    return rng.normal(size=(n, K)), rng.integers(0, K, n), lengths


def _batch(labels, lengths):
    return SequenceBatch.build(labels, lengths, K)


@pytest.mark.parametrize("solver", ["lbfgs", "newton", "majorize"])
@pytest.mark.parametrize("cut", [5, 0])  # cut 0: the first worker holds no rows
def test_workers_summing_statistics_match_one_process(solver, cut):
    margins, labels, lengths = _sequences()
    single = CRFObjective(K, transition_solver=solver)
    grad, hess = single.grad_hess(margins, _batch(labels, lengths))
    metric = single.evaluate(margins, _batch(labels, lengths))
    rows = int(lengths[:cut].sum())
    shards = [(slice(0, rows), lengths[:cut]), (slice(rows, None), lengths[cut:])]
    total = ThreadSum(2)
    results = [None, None]

    def work(rank):
        rows_of, lengths_of = shards[rank]
        obj = CRFObjective(K, transition_solver=solver)
        obj.allreduce = total.for_worker(rank)
        local = margins[rows_of].reshape(-1) if rank == 0 and cut == 0 else margins[rows_of]
        batch = _batch(labels[rows_of], lengths_of)
        g, h = obj.grad_hess(local, batch)
        results[rank] = (obj.params, g, h, obj.evaluate(local, batch))

    _run_workers(work, total)
    for params, _, _, value in results:
        np.testing.assert_allclose(params.to_vector(), single.params.to_vector(), atol=1e-8)
        assert value[0] == metric[0]
        assert value[1] == pytest.approx(metric[1], rel=1e-12)
    np.testing.assert_allclose(np.vstack([results[0][1], results[1][1]]), grad, atol=1e-8)
    np.testing.assert_allclose(np.vstack([results[0][2], results[1][2]]), hess, atol=1e-8)


def test_default_allreduce_leaves_values_alone():
    margins, labels, lengths = _sequences(seed=1)
    obj = CRFObjective(K)
    assert obj.allreduce(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
    name, value = obj.evaluate(margins, _batch(labels, lengths))
    assert name == "crf-nll"
    assert value == pytest.approx(obj.sequence_nll(margins, _batch(labels, lengths)).mean())


def test_lbfgs_memory_takes_the_same_steps_on_every_worker():
    """Over rounds the L-BFGS pairs carry over: workers stay identical to each other and to one process."""
    start, labels, lengths = _sequences(seed=2, m=14)
    rng = np.random.default_rng(3)
    moves = rng.normal(scale=0.7, size=(4,) + start.shape)
    single = CRFObjective(K)
    want = []
    for round_margins in start + np.cumsum(moves, axis=0):
        single.grad_hess(round_margins, _batch(labels, lengths))
        want.append(single.params.to_vector())
    assert single._lbfgs_memory.pairs
    rows = int(lengths[:6].sum())
    shards = [(slice(0, rows), lengths[:6]), (slice(rows, None), lengths[6:])]
    total = ThreadSum(2)
    results = [[], []]

    def work(rank):
        rows_of, lengths_of = shards[rank]
        obj = CRFObjective(K)
        obj.allreduce = total.for_worker(rank)
        batch = _batch(labels[rows_of], lengths_of)
        for round_margins in start + np.cumsum(moves, axis=0):
            obj.grad_hess(round_margins[rows_of], batch)
            results[rank].append(obj.params.to_vector())

    _run_workers(work, total)
    assert len(results[0]) == len(results[1]) == len(moves)
    for a, b, single_params in zip(results[0], results[1], want):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, single_params, atol=1e-8)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_one_pass_rounds_sum_once_and_match_one_process(monkeypatch, solver):
    """By default a round that does not refit calls the allreduce once, its metric once more."""
    from structboost.transitions import onestep

    monkeypatch.setattr(onestep, "WARMUP", 2)
    start, labels, lengths = _sequences(seed=4, m=14)
    moves = np.random.default_rng(5).normal(scale=0.2, size=(6,) + start.shape)
    rounds = start + np.cumsum(moves, axis=0)
    single = CRFObjective(K, transition_solver=solver)  # the default: one pass a round
    want = []
    for round_margins in rounds:
        single.grad_hess(round_margins, _batch(labels, lengths))
        want.append(single.params.to_vector())
    rows = int(lengths[:6].sum())
    shards = [(slice(0, rows), lengths[:6]), (slice(rows, None), lengths[6:])]
    total = ThreadSum(2)
    results, calls = [[], []], [[], []]

    def work(rank):
        rows_of, lengths_of = shards[rank]
        obj = CRFObjective(K, transition_solver=solver)
        obj.allreduce = total.for_worker(rank)
        batch = _batch(labels[rows_of], lengths_of)
        for round_margins in rounds:
            before, refits = total.calls[rank], obj._steps().refits
            obj.grad_hess(round_margins[rows_of], batch)
            obj.evaluate(round_margins[rows_of], batch)
            if obj._steps().refits == refits:  # a round of one pass
                calls[rank].append(total.calls[rank] - before)
            results[rank].append(obj.params.to_vector())

    _run_workers(work, total)
    assert calls[0] == calls[1] and calls[0] and set(calls[0]) == {2}
    for a, b, single_params in zip(results[0], results[1], want):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, single_params, atol=1e-8)
