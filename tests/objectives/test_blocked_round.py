"""The row-blocked chain round equals the one-block round.

A batch above ``_config.WHOLE_BATCH_ENTRIES`` rows x labels is cut into
blocks of about ``_config.BLOCK_ENTRIES``; with both lowered here
(:func:`small_blocks`), a batch of a few dozen rows spans many blocks, with
sequences straddling the would-be boundaries and some longer than a block
(a block by themselves).
"""

import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost import _config
from structboost.objectives import round as objectives_base
from structboost.objectives.base import check_margin_values
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.sequences import offsets_from_lengths, sequence_blocks
from structboost.transitions import chain as chain_transitions
from structboost.transitions import onestep
from structboost.transitions.base import CURVATURE, GRADIENT, PenalisedProblem
from structboost.transitions.chain import TransitionParams, TransitionProblem

K = 3
#: Rows per block at K = 3 when lowered: sequences of up to 9 rows straddle them.
SMALL = 5 * K


def small_blocks(monkeypatch, entries=SMALL):
    """Cut every batch into blocks of ``entries`` rows x labels, G and H into chunks of 2 rows."""
    monkeypatch.setattr(_config, "WHOLE_BATCH_ENTRIES", 0)
    monkeypatch.setattr(_config, "BLOCK_ENTRIES", entries)
    monkeypatch.setattr(objectives_base, "GH_ROWS", 2)


def chain_data(seed, n_seq=14, k=K, forbid_21=False):
    """Margins ``(n, k)``, labels, lengths (1 to 9 rows) and sequence weights."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 10, size=n_seq)
    n = int(lengths.sum())
    labels = rng.integers(0, k, size=n)
    if forbid_21:  # every move 2 -> 1 becomes 2 -> 2
        starts = set(offsets_from_lengths(lengths)[:-1].tolist())
        for t in range(1, n):
            if t not in starts and labels[t - 1] == 2 and labels[t] == 1:
                labels[t] = 2
    return rng.normal(scale=1.5, size=(n, k)), labels, lengths, rng.uniform(0.3, 2.0, n_seq)


def allowed_without_21():
    allowed = np.ones((K, K), dtype=bool)
    allowed[2, 1] = False
    return allowed


def rounds(obj, margins, batch, n_rounds=3, **kwargs):
    """G, H and transitions of ``n_rounds`` calls, the margins moving at random each round."""
    out = []
    rng = np.random.default_rng(7)
    u = margins.copy()
    for _ in range(n_rounds):
        grad, hess = obj.grad_hess(u, batch, **kwargs)
        out.append((np.array(grad), np.array(hess), obj.params.to_vector()))
        u = u + 0.3 * rng.normal(size=u.shape)
    return out


@pytest.mark.parametrize("solver", ["lbfgs", "newton", "majorize"])
@pytest.mark.parametrize("step", ["adaptive", "bound"])
@pytest.mark.parametrize("constrained", [False, True])
def test_blocked_round_equals_one_block(monkeypatch, solver, step, constrained):
    margins, labels, lengths, weights = chain_data(1, forbid_21=constrained)
    allowed = allowed_without_21() if constrained else None
    batch = SequenceBatch.build(labels, lengths, K, weights)
    make = lambda: CRFObjective(  # noqa: E731
        K, transition_solver=solver, step=step, allowed_transitions=allowed
    )
    one = rounds(make(), margins, batch)
    small_blocks(monkeypatch)
    bounds = sequence_blocks(batch.offsets, SMALL // K)
    block_rows = np.diff(batch.offsets[bounds])
    assert len(bounds) > 5 and (block_rows > SMALL // K).any()  # long sequences alone
    blocked = rounds(make(), margins, batch)
    for (g1, h1, p1), (g2, h2, p2) in zip(one, blocked):
        np.testing.assert_allclose(g2, g1, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(h2, h1, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(p2, p1, rtol=1e-12, atol=1e-12)
        assert np.array_equal(np.isinf(p1), np.isinf(p2))


@pytest.mark.parametrize("mode", ["treecrf", "logitboost"])
@pytest.mark.parametrize("gamma", ["mixing", "length", "exact", 4.0])
def test_blocked_modes_and_gammas(monkeypatch, mode, gamma):
    margins, labels, lengths, weights = chain_data(2)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    modes = [mode, "gbcrf"] if gamma == "mixing" else ["gbcrf"]
    for m in modes:
        one = rounds(CRFObjective(K, mode=m, hessian_bound=gamma), margins, batch, 2)
        small_blocks(monkeypatch)
        blocked = rounds(CRFObjective(K, mode=m, hessian_bound=gamma), margins, batch, 2)
        monkeypatch.undo()
        for a, b in zip(one, blocked):
            for x, y in zip(a, b):
                np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("step", ["adaptive", "bound"])
def test_blocked_refit_rounds_write_g_and_h_in_their_last_pass(monkeypatch, step):
    """L-BFGS refits of a batch in blocks: G and H come from the last iteration's passes."""
    margins, labels, lengths, weights = chain_data(6, n_seq=20)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    small_blocks(monkeypatch)
    passes = []
    real = TransitionProblem._pass

    def counted(self, b, *args):
        passes.append(b)
        return real(self, b, *args)

    monkeypatch.setattr(TransitionProblem, "_pass", counted)
    tapped = rounds(CRFObjective(K, step=step), margins, batch)  # three refit rounds
    with_tap = len(passes)
    passes.clear()
    monkeypatch.setattr(PenalisedProblem, "tapped", lambda self, params: False)
    untapped = rounds(CRFObjective(K, step=step), margins, batch)
    blocks = len(sequence_blocks(batch.offsets, SMALL // K)) - 1
    saved = len(passes) - with_tap
    assert blocks > 5 and saved == 3 * blocks  # one pass a round
    for a, b in zip(tapped, untapped):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_blocked_sums_equal_one_block(monkeypatch):
    margins, labels, lengths, weights = chain_data(3, n_seq=20)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    rng = np.random.default_rng(4)
    params = TransitionParams(rng.normal(size=(K, K)), rng.normal(size=K), rng.normal(size=K))

    def sums():
        problem = TransitionProblem(margins, batch.offsets, weights, batch.counts, 0.5)
        ev = problem.evaluate(params, CURVATURE)
        x = params.to_vector()
        return problem, ev.log_z, ev.expected, ev.curvature, problem.value_and_grad(x)

    one = sums()
    small_blocks(monkeypatch)
    blocked = sums()
    assert one[0].num_blocks == 1 and blocked[0].num_blocks > 5
    for x, y in zip(one[1:4], blocked[1:4]):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blocked[4][0], one[4][0], rtol=1e-12)
    np.testing.assert_allclose(blocked[4][1], one[4][1], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="several blocks"):
        blocked[0].posterior(params)
    # the last evaluation's sums are reused; a higher level takes a new pass
    problem = blocked[0]
    assert problem.evaluate(params, GRADIENT) is problem.evaluate(params)


def test_blocked_round_reads_engine_layouts_without_copies(monkeypatch):
    margins, labels, lengths, weights = chain_data(5)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    f32 = margins.astype(np.float32)
    col = np.asfortranarray(margins)
    obj = CRFObjective(K)
    assert obj.margin_rows(f32) is f32 and obj.margin_rows(col) is col
    small_blocks(monkeypatch)
    for u in (f32, col):
        exact = CRFObjective(K).grad_hess(np.ascontiguousarray(u, dtype=np.float64), batch)
        given = CRFObjective(K).grad_hess(u, batch)
        for x, y in zip(exact, given):
            np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("order", ["C", "F"])
def test_float32_outputs_are_the_float64_ones_rounded(monkeypatch, order):
    margins, labels, lengths, weights = chain_data(6)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    small_blocks(monkeypatch)
    wide = rounds(CRFObjective(K), margins, batch)
    obj = CRFObjective(K)
    narrow = rounds(obj, margins, batch, dtype=np.float32, order=order)
    grad, hess = obj.grad_hess(margins, batch, dtype=np.float32, order=order)
    assert grad.dtype == np.float32 and grad.flags[f"{order}_CONTIGUOUS"]
    assert grad is obj.grad_hess(margins, batch, dtype=np.float32, order=order)[0]
    for (g1, h1, p1), (g2, h2, p2) in zip(wide, narrow):
        np.testing.assert_array_equal(g2, g1.astype(np.float32))
        np.testing.assert_array_equal(h2, h1.astype(np.float32))
        np.testing.assert_array_equal(p2, p1)  # the adaptive step's scale is unchanged
    with pytest.raises(ValueError, match="dtype must be"):
        obj.grad_hess(margins, batch, dtype=np.int64)


def test_one_pass_float32_hessian_is_the_float64_one_within_an_ulp(monkeypatch):
    """A one-pass round with the adaptive step finishes H in the engine's float32 buffer.

    ``p (1 - p)`` waits there for the scale, rounded once more: H is within
    one float32 ulp of the float64 round's H rounded, G is exact. (Newton:
    its rounds never refit from their pass, whose H would be exact.)
    """
    solver = "newton"
    monkeypatch.setattr(onestep, "WARMUP", 2)
    margins, labels, lengths, weights = chain_data(6)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    small_blocks(monkeypatch)
    wide = CRFObjective(K, transition_solver=solver)
    narrow = CRFObjective(K, transition_solver=solver)
    wide_rounds = rounds(wide, margins, batch, n_rounds=3)
    narrow_rounds = rounds(narrow, margins, batch, n_rounds=3, dtype=np.float32)
    assert narrow._one_step.refits == 2 and narrow._one_step.rounds == 3  # one pass last
    (g1, h1, p1), (g2, h2, p2) = wide_rounds[-1], narrow_rounds[-1]
    np.testing.assert_array_equal(p2, p1)
    np.testing.assert_array_equal(g2, g1.astype(np.float32))
    np.testing.assert_array_max_ulp(h2, h1.astype(np.float32), maxulp=1)
    assert narrow.step_scale.history == wide.step_scale.history


def test_a_batch_up_to_the_whole_batch_size_is_one_block():
    n = _config.WHOLE_BATCH_ENTRIES // 10
    assert _config.block_rows(n, 10) == n
    assert _config.block_rows(n + 1, 10) == _config.BLOCK_ENTRIES // 10 < n
    offsets = offsets_from_lengths(np.full(n // 20, 20))
    assert sequence_blocks(offsets, _config.block_rows(offsets[-1], 10)).tolist() == [0, n // 20]


def test_margin_check_names_the_row_in_a_later_block(monkeypatch):
    small_blocks(monkeypatch)
    margins = np.zeros((40, K), dtype=np.float32)
    margins[23, 2] = np.nan
    margins[31, 0] = np.inf
    margins[38, 1] = 2e12
    with pytest.raises(ValueError, match=r"row 23, label 2 is nan \(not finite; 3 value"):
        check_margin_values(margins, "the margin", "cause")
    check_margin_values(margins[:20], "the margin", "cause")


@pytest.mark.parametrize("layout", ["F", "strided"])
def test_margin_check_reads_every_layout(layout):
    """Column-major margins (LightGBM's) and non-contiguous ones are checked too."""
    margins = np.zeros((30, 2 * K))
    margins[17, 4] = -np.inf
    given = np.asfortranarray(margins) if layout == "F" else margins[:, ::2]
    label = 4 if layout == "F" else 2
    with pytest.raises(ValueError, match=rf"row 17, label {label} is -inf \(not finite; 1 value"):
        check_margin_values(given, "the margin", "cause")
    check_margin_values(np.asfortranarray(margins[:17]), "the margin", "cause")


@pytest.mark.parametrize("block", [None, SMALL])
@pytest.mark.parametrize("step", ["adaptive", "bound"])
def test_xgboost_float32_gradients_train_the_same_model(monkeypatch, block, step):
    if block is not None:
        small_blocks(monkeypatch, block)
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 10, size=40)
    n = int(lengths.sum())
    y = rng.integers(0, K, size=n)
    X = rng.normal(size=(n, 4)) + 0.5 * y[:, None]
    w = rng.uniform(0.5, 2.0, size=40)
    models = []
    for dtype in (np.float32, np.float64):
        obj = sb.crf_objective(K, step=step, nthread=1)
        obj.grad_layout = {"dtype": dtype}
        booster = xgb.train(
            sb.xgb_params(K, max_depth=3, eta=0.5, nthread=1),
            xgb.DMatrix(X, label=y, group=lengths, weight=w), 4, obj=obj,
            callbacks=[obj.callback()],
        )  # fmt: skip
        marginals = sb.predict_marginals(booster, X, lengths=lengths)
        models.append((bytes(booster.save_raw("json")), marginals))
    assert models[0][0] == models[1][0]
    np.testing.assert_array_equal(models[0][1], models[1][1])


def test_lightgbm_column_major_gradients_train_the_same_model():
    lgb = pytest.importorskip("lightgbm")
    import structboost.lightgbm as sbl

    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 10, size=40)
    n = int(lengths.sum())
    y = rng.integers(0, K, size=n)
    X = rng.normal(size=(n, 4)) + 0.5 * y[:, None]
    models = []
    for order in ("F", "C"):
        obj = sbl.lgb_crf_objective(K, nthread=1)
        obj.grad_layout = {"order": order}
        booster = lgb.train(
            sbl.lgb_params(K, objective=obj, num_leaves=7, num_threads=1, verbose=-1),
            lgb.Dataset(X, label=y, group=lengths), 4, callbacks=[obj.callback()],
        )  # fmt: skip
        models.append(booster.model_to_string())
    assert models[0] == models[1]


def test_float32_margins_are_kept_not_copied_and_checked():
    margins, labels, lengths, weights = chain_data(10)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    u = margins.astype(np.float32)
    obj = CRFObjective(K)
    grad, hess = obj.grad_hess(u, batch, dtype=np.float32)
    kept = obj.step_scale._last
    assert kept[0] is u and kept[1] is grad and kept[2] is hess
    obj.grad_hess(u + 0.5, batch, dtype=np.float32)  # a fresh array: fine
    u = obj.step_scale._last[0]
    u[3, 1] += 1.0
    with pytest.raises(ValueError, match="changed after it returned"):
        obj.grad_hess(u.copy(), batch, dtype=np.float32)
    copied = CRFObjective(K)
    copied.grad_hess(u, batch)  # float64 results: the margins are copied
    assert copied.step_scale._last[0] is not u


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_blocked_metrics_equal_one_block(monkeypatch, constrained, dtype):
    margins, labels, lengths, weights = chain_data(3, forbid_21=constrained)
    margins = margins.astype(dtype)
    allowed = allowed_without_21() if constrained else None
    batch = SequenceBatch.build(labels, lengths, K, weights)
    obj = CRFObjective(K, allowed_transitions=allowed)
    rounds(obj, margins.astype(np.float64), batch)  # transitions away from zero
    nll, path = obj.sequence_nll(margins, batch), obj.decode(margins, batch)
    metrics = [obj.evaluate(margins, batch, m) for m in ("crf-nll", "crf-error")]
    small_blocks(monkeypatch)
    assert len(sequence_blocks(batch.offsets, SMALL // K)) > 4
    np.testing.assert_allclose(obj.sequence_nll(margins, batch), nll, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(obj.decode(margins, batch), path)
    for metric, (name, value) in zip(("crf-nll", "crf-error"), metrics):
        blocked_name, blocked = obj.evaluate(margins, batch, metric)
        assert blocked_name == name
        assert blocked == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
@pytest.mark.parametrize("gamma", ["mixing", "exact"])
@pytest.mark.parametrize("blocked", [False, True])
def test_rounds_of_passes_without_messages_equal_rounds_with_them(
    monkeypatch, chain_passes, solver, gamma, blocked
):
    """The objective's passes keep no ``alpha`` and ``r`` where nothing reads them.

    Over the warm-up's refit rounds and the one-pass rounds after it, G, H
    and the transitions are bit for bit those of passes that keep them.
    L-BFGS with the mixing bound leaves them out of its passes with the
    rates and the counts; Newton's curvature and the exact bound read them.
    """
    margins, labels, lengths, weights = chain_data(8, n_seq=20)
    batch = SequenceBatch.build(labels, lengths, K, weights)
    if blocked:
        small_blocks(monkeypatch)
    make = lambda: CRFObjective(K, transition_solver=solver, hessian_bound=gamma)  # noqa: E731
    lean = rounds(make(), margins, batch, onestep.WARMUP + 4)
    lean_passes = chain_passes.count(False)
    real = chain_transitions.posterior
    monkeypatch.setattr(chain_transitions, "posterior",
                        lambda *args, keep_messages=True, **kwargs: real(*args, **kwargs, keep_messages=True))  # fmt: skip
    full = rounds(make(), margins, batch, onestep.WARMUP + 4)
    if solver == "lbfgs" and gamma == "mixing":
        assert lean_passes >= onestep.WARMUP + 4  # at least the pass of every round
    else:
        assert lean_passes == 0
    for a, b in zip(lean, full):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
