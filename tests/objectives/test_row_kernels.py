"""The objective's row loops: parallel and serial drivers agree, and the checksums fold into reads.

The kernels of :mod:`structboost.objectives._kernels` run on threads above
``_config.SERIAL_ROWS`` rows; these tests call both drivers on the same
arrays (several tasks of ``TASK_ENTRIES`` entries) and require equal bits,
and check what the folded checksums still catch.
"""

import numpy as np
import pytest

from structboost import _config
from structboost.inference import _chain
from structboost.objectives import _kernels
from structboost.objectives.base import MARGIN_LIMIT, check_margin_values
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.transitions import onestep

#: Rows of the kernel tests at K = 7: several tasks of TASK_ENTRIES, the last one partial.
ROWS = 3 * _kernels.TASK_ENTRIES // 7 + 5
K = 7


def grad_hess_case(seed, dtype, order):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(K), size=ROWS)
    labels = rng.integers(0, K, size=ROWS)
    row_w = rng.uniform(0.2, 2.0, size=ROWS)
    gamma = rng.uniform(2.0, 30.0, size=ROWS)
    out = tuple(np.full((ROWS, K), np.nan, dtype=dtype, order=order) for _ in range(2))
    return p, labels, row_w, gamma, out


@pytest.mark.parametrize("dtype,order", [(np.float32, "C"), (np.float64, "F")])
@pytest.mark.parametrize("scale", [1.0, 0.05])
@pytest.mark.parametrize("kind", ["bound", "logitboost", "treecrf", "unfinished"])
def test_grad_hess_parallel_equals_serial_and_numpy(dtype, order, scale, kind):
    p, labels, row_w, gamma, _ = grad_hess_case(0, dtype, order)
    if kind in ("logitboost", "treecrf"):
        gamma = np.zeros(0)
    unit, finish, floor = kind == "treecrf", kind != "unfinished", 1e-6
    results = []
    for parallel, rows in ((False, 100), (True, 100), (True, 1), (False, 1)):
        _, _, _, _, out = grad_hess_case(0, dtype, order)
        _kernels.node_grad_hess(p, labels, row_w, gamma, scale, unit, floor, finish, out,
                                parallel, rows)  # fmt: skip
        results.append(out)
    for got in results[1:]:
        np.testing.assert_array_equal(got[0], results[0][0])
        np.testing.assert_array_equal(got[1], results[0][1])
    onehot = np.eye(K)[labels]
    np.testing.assert_array_equal(results[0][0], ((p - onehot) * row_w[:, None]).astype(dtype))
    var = p * (1.0 - p)
    if kind == "unfinished":
        want = var
    else:
        factor = np.maximum(scale * gamma, 2.0) if scale < 1 else gamma
        factor = 2.0 if kind == "logitboost" else factor
        q = np.ones_like(p) if unit else var * np.reshape(factor, (-1, 1))
        want = np.maximum(q, floor) * row_w[:, None]
    np.testing.assert_allclose(results[0][1], want, rtol=1e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_finish_bound_hess_parallel_equals_serial(scale):
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 12, size=ROWS // 6)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    n = int(offsets[-1])
    raw = rng.uniform(0.0, 0.25, size=(n, K)).astype(np.float32)
    gamma, weights = rng.uniform(2.0, 30.0, size=n), rng.uniform(0.5, 2.0, size=lengths.size)
    results = []
    for parallel in (False, True):
        h = raw.copy()  # in place, as the round finishes it
        _kernels.finish_bound_hess(h, gamma, scale, 1e-6, offsets, weights, h, parallel)
        results.append(h)
    np.testing.assert_array_equal(results[0], results[1])
    factor = gamma if scale >= 1 else np.maximum(scale * gamma, 2.0)
    want = np.maximum(raw * factor[:, None], 1e-6) * np.repeat(weights, lengths)[:, None]
    np.testing.assert_allclose(results[0], want, rtol=1e-6)


def bit_sum(a):
    return int(np.add.reduce(np.ravel(a).view(np.uint32), dtype=np.uint64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scan_values_parallel_equals_serial(dtype):
    flat = np.random.default_rng(2).normal(scale=1e3, size=ROWS * K).astype(dtype)
    for parallel in (False, True):
        within, checksum = _kernels.scan_values(flat, MARGIN_LIMIT, parallel)
        assert within
        assert checksum == (bit_sum(flat) if dtype == np.float32 else None)
        for bad in (np.nan, np.inf, 2 * MARGIN_LIMIT):
            broken = flat.copy()
            broken[-1 - _kernels.TASK_ENTRIES] = bad
            assert not _kernels.scan_values(broken, MARGIN_LIMIT, parallel)[0]


def test_margin_check_returns_the_checksum_of_float32_margins():
    margins = np.random.default_rng(3).normal(size=(50, K))
    assert check_margin_values(margins, "the margin", "cause") is None
    single = margins.astype(np.float32)
    assert check_margin_values(single, "the margin", "cause") == bit_sum(single)
    assert check_margin_values(single[:, ::2], "the margin", "cause") is None  # (row blocks)


@pytest.mark.parametrize("with_hess", [False, True])
@pytest.mark.parametrize("order", ["C", "F"])
def test_step_sums_parallel_equals_serial(with_hess, order):
    rng = np.random.default_rng(4)
    new = np.asarray(rng.normal(size=(ROWS, K)), order=order)
    old = np.asarray((new + rng.normal(scale=0.1, size=new.shape)).astype(np.float32), order=order)
    grad = rng.normal(size=new.shape).astype(np.float32)
    hess = rng.uniform(size=new.shape).astype(np.float32) if with_hess else None
    serial = _kernels.step_sums(new, old, grad, hess, parallel=False)
    assert _kernels.step_sums(new, old, grad, hess, parallel=True) == serial
    (slope, model), checksum = serial
    d = new - old.astype(np.float64)
    assert slope == pytest.approx(float(np.sum(grad * d)), rel=1e-12)
    assert model == (pytest.approx(float(np.sum(hess * d * d)), rel=1e-12) if with_hess else 0.0)
    assert checksum == bit_sum(np.ascontiguousarray(old))
    assert _kernels.step_sums(new, old.astype(np.float64), grad, hess)[1] is None


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("parallel", [False, True])
def test_exp_rows_reads_float32_in_place_as_float64(order, parallel):
    rng = np.random.default_rng(5)
    src = rng.normal(scale=30.0, size=(2000, K)).astype(np.float32)
    src[3, 2] = -np.inf
    src[4, :3] = -1e30
    src = np.asarray(src, order=order)
    wide = np.ascontiguousarray(src, dtype=np.float64)
    w, row_max = np.empty((2000, K)), np.empty(2000)
    w64, row_max64 = np.empty((2000, K)), np.empty(2000)
    _chain.exp_rows(src, w, row_max, parallel)
    _chain.exp_rows(wide, w64, row_max64, parallel)
    np.testing.assert_array_equal(w, w64)
    np.testing.assert_array_equal(row_max, row_max64)
    np.testing.assert_allclose(w, np.exp(wide - wide.max(axis=1, keepdims=True)), rtol=1e-15)


def sticky_batch(seed, n_seq=60, k=4):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 15, size=n_seq)
    n = int(lengths.sum())
    labels = rng.integers(0, k, size=n)
    margins = (rng.normal(size=(n, k)) + 2.0 * np.eye(k)[labels]).astype(np.float32)
    return margins, SequenceBatch.build(labels, lengths, k, rng.uniform(0.5, 2.0, n_seq))


def rounds(margins, batch, n_rounds, dtype=np.float32):
    """G and H of ``n_rounds`` calls of one objective, the margins moving each round."""
    obj = CRFObjective(margins.shape[1], nthread=2)
    rng = np.random.default_rng(9)
    out = []
    for _ in range(n_rounds):
        g, h = obj.grad_hess(margins, batch, dtype=dtype)
        out.append((g.copy(), h.copy()))
        step = 0.3 * g / np.maximum(h, 1e-3) + rng.normal(scale=0.01, size=g.shape)
        margins = (margins - step).astype(np.float32)
    return obj, margins, out


def test_parallel_round_equals_serial_round(monkeypatch):
    """Every row kernel on threads (SERIAL_ROWS 0) gives the serial round's G and H, bit for bit."""
    monkeypatch.setattr(onestep, "WARMUP", 2)  # one-pass rounds too
    margins, batch = sticky_batch(6)
    monkeypatch.setattr(_config, "SERIAL_ROWS", 1 << 30)
    serial = rounds(margins, batch, 5)[2]
    monkeypatch.setattr(_config, "SERIAL_ROWS", 0)
    parallel = rounds(margins, batch, 5)[2]
    for (g0, h0), (g1, h1) in zip(serial, parallel):
        np.testing.assert_array_equal(g0, g1)
        np.testing.assert_array_equal(h0, h1)


@pytest.mark.parametrize("warmup", [0, 10])
def test_changed_margins_are_caught_in_one_pass_and_refit_rounds(monkeypatch, warmup):
    """The margin check's stamp and the step sums' check catch a change of kept margins."""
    monkeypatch.setattr(onestep, "WARMUP", warmup)
    one_pass = []
    original = CRFObjective._one_pass
    monkeypatch.setattr(
        CRFObjective, "_one_pass", lambda self, *args: one_pass.append(1) or original(self, *args)
    )
    margins, batch = sticky_batch(7)
    obj, margins, _ = rounds(margins, batch, 3)
    obj.grad_hess(margins, batch, dtype=np.float32)  # unchanged: fine
    assert obj.step_scale._last[0] is margins
    margins[5, 1] = np.nextafter(margins[5, 1], np.float32(np.inf))
    calls = len(one_pass)
    with pytest.raises(ValueError, match="changed after it returned"):
        obj.grad_hess(margins + np.float32(0.5), batch, dtype=np.float32)
    assert len(one_pass) == calls + (warmup == 0)  # the round that caught it: one pass or a refit


@pytest.mark.parametrize("aliased", [False, True])
def test_grad_hess_takes_the_secant_sums_in_its_write(aliased):
    """``last``: the old G and H are read before the write (the same buffers when ``aliased``)."""
    p, labels, row_w, gamma, _ = grad_hess_case(0, np.float32, "C")
    rng = np.random.default_rng(8)
    new = rng.normal(size=(ROWS, K)).astype(np.float32)
    old = (new + rng.normal(scale=0.1, size=new.shape)).astype(np.float32)
    old_g = rng.normal(size=new.shape).astype(np.float32)
    old_h = rng.uniform(size=new.shape).astype(np.float32)
    d = new.astype(np.float64) - old
    results = []
    for parallel, rows in ((False, 100), (True, 100), (True, 7)):
        out = (old_g.copy(), old_h.copy()) if aliased else grad_hess_case(0, np.float32, "C")[4]
        last = (new, old, *out) if aliased else (new, old, old_g, old_h)
        sums, checksums = _kernels.node_grad_hess(p, labels, row_w, gamma, 0.5, False, 1e-6, False,
                                                  out, parallel, rows, last)  # fmt: skip
        assert sums.shape == (-(-ROWS // rows), 3) and checksums.shape == (sums.shape[0],)
        results.append((np.add.reduce(sums, axis=0), int(np.add.reduce(checksums)), out))
        if rows == 100:
            np.testing.assert_array_equal(results[-1][0], results[0][0])
    for total, checksum, out in results:
        np.testing.assert_array_equal(out[0], results[0][2][0])
        np.testing.assert_array_equal(out[1], results[0][2][1])
        want = [np.sum(old_g * d), np.sum(old_h * d * d), np.sum(out[0] * d)]
        np.testing.assert_allclose(total, want, rtol=1e-12)
        assert checksum == bit_sum(old)


def test_one_pass_round_takes_the_secant_sums_as_measure_does(monkeypatch):
    """The sums taken in the G and H write equal :meth:`measure` before it and the new slope after."""
    monkeypatch.setattr(onestep, "WARMUP", 0)
    margins, batch = sticky_batch(8)
    obj, margins, _ = rounds(margins, batch, 3)
    secant = obj.step_scale
    expected = secant.measure(margins)  # before the round overwrites the kept G and H
    old = secant._last[0]
    seen = []
    original = secant.local_sums
    monkeypatch.setattr(secant, "local_sums", lambda *a, **kw: seen.append(kw) or original(*a, **kw))
    assert obj._one_step.moved  # this round's pass is at stepped transitions: G_new . d counts
    grad, _ = obj.grad_hess(margins, batch, dtype=np.float32)
    measured = seen[-1]["measured"]
    np.testing.assert_allclose(measured[:2], expected[:2], rtol=1e-10)
    np.testing.assert_allclose(
        measured[2], np.sum(grad * (margins.astype(np.float64) - old)), rtol=1e-10
    )
