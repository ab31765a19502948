"""The GPU path (``structboost.inference.gpu``) against the brute-force oracle and the CPU kernels.

Without a GPU the kernels run under numba's CUDA simulator on tiny inputs:
this module switches the simulator on (numba's config flag and the
environment variable that numba-cuda reads) only while it imports
``numba.cuda`` and the kernels of ``structboost.inference._cuda_chain``,
then puts both back, so no other test's numba sees it (CPU ``njit`` kernels never read the flag). On a
machine with a GPU, ``STRUCTBOOST_GPU_TESTS=device python -m pytest
tests/inference/test_gpu.py`` runs the same checks on the device, plus an
``xgboost.train`` run that hands XGBoost device gradients (the simulator's
arrays have no ``__cuda_array_interface__`` for XGBoost to read).
"""

import os
import pickle
import sys

import numpy as np
import pytest

import naive
from structboost import inference
from structboost.inference import chain as chain_inference
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.objectives.params import ObjectiveSpec
from structboost.transitions import onestep
from structboost.transitions.chain import TransitionParams, TransitionProblem
from chains import forbidding_extreme, make_crf, make_forbidding_crf

ON_DEVICE = os.environ.get("STRUCTBOOST_GPU_TESTS") == "device"


def _import_cuda():
    """``numba.cuda``, under the simulator unless ``ON_DEVICE`` (or already imported).

    Skips the module only when ``numba.cuda`` itself cannot be imported.
    """
    if ON_DEVICE or "numba.cuda" in sys.modules:
        from numba import cuda

        return cuda
    from numba.core import config

    before_flag, before_env = config.ENABLE_CUDASIM, os.environ.get("NUMBA_ENABLE_CUDASIM")
    config.ENABLE_CUDASIM = 1
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    try:
        try:
            from numba import cuda
        except ImportError as exc:  # numba without its CUDA target (numba-cuda without bindings)
            pytest.skip(f"numba.cuda cannot be imported: {exc}", allow_module_level=True)
        from structboost.inference import _cuda_chain  # noqa: F401  (its kernels: simulated)
    finally:
        config.ENABLE_CUDASIM = before_flag
        if before_env is None:
            del os.environ["NUMBA_ENABLE_CUDASIM"]
        else:
            os.environ["NUMBA_ENABLE_CUDASIM"] = before_env
    return cuda


cuda = _import_cuda()
from structboost.inference import gpu  # noqa: E402
from structboost.objectives import gpu as objectives_gpu  # noqa: E402

SIMULATOR = gpu.kern.SIMULATOR
if not SIMULATOR and not cuda.is_available():
    raise RuntimeError(
        "numba.cuda was imported for a real GPU before this module, but none is available: "
        "something imported numba.cuda without the simulator (nothing in structboost should); "
        "run this module in its own process, or unset STRUCTBOOST_GPU_TESTS"
    )

#: Random tiny batches ``(seed, lengths, K)``: K = 1 and length-one sequences included.
CASES = [(0, [3, 1, 4], 3), (1, [2, 2], 1), (2, [1], 2), (3, [4, 1, 2, 3], 2)]


@pytest.mark.parametrize("forbid", [False, True], ids=["free", "forbidden"])
@pytest.mark.parametrize("seed, lengths, k", CASES)
def test_inference_matches_the_oracle_and_the_cpu(seed, lengths, k, forbid):
    crf = (make_forbidding_crf if forbid else make_crf)(seed, lengths, k, 1.5)
    expected = naive.batch(*crf)
    log_z, marginals = gpu.forward_backward(*crf)
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-12)
    scores = naive.batch_scores(crf[0], crf[1], gpu.viterbi(*crf), *crf[2:])
    np.testing.assert_allclose(scores, expected["map_score"], rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(gpu.viterbi(*crf), inference.viterbi(*crf))
    np.testing.assert_allclose(gpu.gamma(*crf, "mixing"), expected["gamma_mixing"], rtol=1e-9)
    np.testing.assert_array_equal(gpu.gamma(*crf, "length"), expected["gamma_length"])
    np.testing.assert_allclose(gpu.gamma(*crf, "exact"), inference.gamma(*crf, "exact"),
                               rtol=1e-12)


@pytest.mark.skipif(not SIMULATOR, reason="on a GPU every test runs a warp per sequence")
@pytest.mark.parametrize("lanes", [2, 4])
def test_lanes_sharing_a_sequence_match_the_oracle(lanes, monkeypatch):
    """The recursions with several lanes per sequence (fewer and more lanes than labels), as on
    a GPU; the simulator's other tests run one lane, its barriers being slow."""
    monkeypatch.setattr(gpu.kern, "LANES", lanes)
    for crf in (make_forbidding_crf(0, [3, 1, 4], 3, 1.5), _position_crf(3, [4, 1, 2], 2)):
        expected = naive.batch(*crf)
        log_z, marginals = gpu.forward_backward(*crf)
        np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-12)
        np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-12)
        np.testing.assert_allclose(gpu.gamma(*crf, "mixing"), inference.gamma(*crf, "mixing"),
                                   rtol=1e-12)


@pytest.mark.parametrize("case", ["tie", "end", "dead end"])
def test_log_space_fallback_matches_the_oracle(case):
    """Margins 1e4 apart with forbidden moves: recomputed in log space and patched in."""
    crf = forbidding_extreme(case, 1e4)
    expected = naive.batch(*crf)
    log_z, marginals = gpu.forward_backward(*crf)
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-9)
    np.testing.assert_allclose(gpu.gamma(*crf), inference.gamma(*crf), rtol=1e-12)
    np.testing.assert_array_equal(gpu.viterbi(*crf), inference.viterbi(*crf))


@pytest.mark.parametrize("seed", range(3))
def test_exact_bound_takes_log_space_rows_from_their_pairwise_marginals(seed):
    """A lost sequence with an uncertain posterior: the host copy behind the exact bound keeps
    the log-space part, as the CPU posterior does."""
    rng = np.random.default_rng(seed)
    unary = rng.normal(size=(4, 3))
    unary[1, 2] = -800.0  # the only label position 1 allows: below the scaled messages' range
    transitions = rng.normal(size=(4, 3, 3))
    transitions[1, :, :2] = -np.inf
    crf = (unary, np.array([4]), transitions, rng.normal(size=3), rng.normal(size=3))
    device, cpu = _device_posterior(*crf)
    np.testing.assert_array_equal(device.log_space.sequences, [0])
    np.testing.assert_allclose(device.node_gamma("exact").copy_to_host(), cpu.node_gamma("exact"),
                               rtol=1e-12)


def _device_posterior(unary, lengths, transitions, start, end):
    """:class:`gpu.DevicePosterior` and the CPU's ``ChainPosterior`` of one batch."""
    u, offsets, trans, s, e = chain_inference.check_chain(unary, lengths, transitions, start, end)
    device = gpu.DevicePosterior(gpu.device_unary(u), gpu.DeviceStructure(offsets), trans, s, e)
    return device, chain_inference.posterior(u, offsets, trans, s, e)


def test_fallback_catches_lost_best_paths():
    """Issue 15's example: a surviving path 4670 units below the best one is not enough."""
    crf = (np.array([[-4073.2, 2495.6], [-6347.4, 9323.2], [-2071.1, 2362.3]]), np.array([3]),
           np.array([[2.51, -3.12], [-0.11, -np.inf]]), np.array([-2.07, 0.09]),
           np.array([3.57, -0.34]))
    expected = naive.batch(*crf)
    log_z, marginals = gpu.forward_backward(*crf)
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-12)
    device, _ = _device_posterior(*crf)
    np.testing.assert_array_equal(device.log_space.sequences, [0])


def _adversarial(seed, lengths=(3, 2, 4, 1), k=3):
    """Node scores up to 1e3, transitions up to 1e2, random forbidden moves (0 -> 0 allowed)."""
    rng = np.random.default_rng(seed)
    unary = np.round(1e3 * rng.uniform(-1, 1, size=(sum(lengths), k)), 1)
    transitions = np.round(1e2 * rng.uniform(-1, 1, size=(k, k)), 2)
    transitions[rng.random((k, k)) < 0.4] = -np.inf
    transitions[0, 0] = 0.0
    start, end = np.round(rng.uniform(-1e2, 1e2, size=(2, k)), 2)
    return unary, np.asarray(lengths), transitions, start, end


def test_fallback_sends_the_cpus_sequences_to_log_space():
    """The device applies the CPU's criterion: same lost sequences, same results as the oracle."""
    flagged = []
    for seed in range(6):
        crf = _adversarial(seed)
        device, cpu = _device_posterior(*crf)
        want = np.zeros(0) if cpu.log_space is None else cpu.log_space.sequences
        got = np.zeros(0) if device.log_space is None else device.log_space.sequences
        np.testing.assert_array_equal(got, want)
        flagged.append(want.size)
        expected = naive.batch(*crf)
        np.testing.assert_allclose(device.log_z, expected["log_z"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(device.marginals(), expected["marginals"], atol=1e-8)
        np.testing.assert_allclose(device.node_gamma().copy_to_host(), cpu.node_gamma(),
                                   rtol=1e-12)
        np.testing.assert_allclose(device.edge_gamma().copy_to_host(), cpu.edge_gamma(),
                                   rtol=1e-12)
    assert 0 in flagged and max(flagged) > 1  # some batches fully scaled, some with several lost


def _position_crf(seed, lengths, k):
    """Per-position transitions ``(n, K, K)``, some moves forbidden (never the diagonal)."""
    unary, lengths, _, start, end = make_crf(seed, lengths, k, 1.5)
    rng = np.random.default_rng(seed + 7)
    transitions = 1.5 * rng.normal(size=(unary.shape[0], k, k))
    forbid = rng.random(transitions.shape) < 0.3
    forbid[:, np.arange(k), np.arange(k)] = False
    transitions[forbid] = -np.inf
    return unary, lengths, transitions, start, end


@pytest.mark.parametrize("seed, lengths, k", CASES)
def test_position_transitions_match_the_oracle_and_the_cpu(seed, lengths, k):
    crf = _position_crf(seed, lengths, k)
    expected = naive.batch(*crf)
    log_z, marginals = gpu.forward_backward(*crf)
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-12)
    np.testing.assert_array_equal(gpu.viterbi(*crf), inference.viterbi(*crf))
    np.testing.assert_allclose(gpu.gamma(*crf, "mixing"), expected["gamma_mixing"], rtol=1e-9)
    np.testing.assert_allclose(gpu.gamma(*crf, "exact"), inference.gamma(*crf, "exact"),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="transitions must have shape"):
        gpu.forward_backward(crf[0], crf[1], crf[2][1:], *crf[3:])


def test_device_and_float32_inputs_give_the_same_results(monkeypatch):
    unary, lengths, transitions, start, end = make_crf(5, [3, 2], 3)
    monkeypatch.setattr(gpu, "STAGE_ROWS", 2)  # host margins staged in chunks of two rows
    staged = gpu.device_unary(np.asfortranarray(unary)).unary.copy_to_host()
    np.testing.assert_array_equal(staged, unary)
    host = gpu.forward_backward(unary, lengths, transitions, start, end)
    on_device = gpu.forward_backward(cuda.to_device(unary), lengths, transitions, start, end)
    np.testing.assert_array_equal(host[0], on_device[0])
    single = gpu.forward_backward(unary.astype(np.float32), lengths, transitions, start, end)
    cpu = inference.forward_backward(unary.astype(np.float32), lengths, transitions, start, end)
    np.testing.assert_allclose(single[0], cpu[0], rtol=1e-12)


def _problem(seed, k=3, lengths=(3, 1, 4, 2)):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    n = int(lengths.sum())
    margins = rng.normal(scale=1.5, size=(n, k))
    labels = rng.integers(0, k, size=n)
    return margins, SequenceBatch.build(labels, lengths, k, rng.uniform(0.5, 2.0, len(lengths)))


@pytest.mark.parametrize("case", ["free", "forbidden", "log space", "wide"])
def test_expected_counts_and_curvature_match_the_cpu(case):
    """"wide": more labels than one tile of the transition-count product."""
    k = 2 * gpu.kern.TILE + 1 if case == "wide" else 3
    margins, batch = _problem(0, k)
    crf = (make_forbidding_crf if case in ("forbidden", "log space") else make_crf)(1, [1], k)
    if case == "log space":  # a tie sequence (see test_inference) among ordinary ones
        tie = forbidding_extreme("tie", 1e4)
        margins = np.vstack((margins, np.c_[tie[0], np.zeros(2)]))
        batch = SequenceBatch.build(np.r_[batch.labels, 0, 1], np.r_[batch.lengths, 2], 3,
                                    np.r_[batch.seq_weight, 1.5])
        crf[2][:2, :2] = tie[2]
    params = TransitionParams(*crf[2:])
    cpu = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, 1.0)
    structure = gpu.DeviceStructure(batch.offsets, batch.seq_weight)
    dev = objectives_gpu.DeviceTransitionProblem(gpu.device_unary(margins), structure, batch.counts, 1.0)
    for curvature in (False, True):
        want = cpu.expected_counts(cpu.posterior(params), curvature)
        got = dev.expected_counts(dev.posterior(params), curvature)
        for w, g in zip(want, got):
            if w is None:
                assert g is None
            else:
                np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dev.posterior(params).log_z, cpu.posterior(params).log_z,
                               rtol=1e-12)
    assert (dev.posterior(params).log_space is not None) == (case == "log space")


def _forbid_2_to_1(batch):
    """Constraints forbidding the move 2 -> 1, and ``batch`` with labels made to obey them."""
    allowed = np.ones((3, 3), dtype=bool)
    allowed[2, 1] = False
    labels = batch.labels.copy()
    for t in range(1, labels.size):
        if labels[t - 1] == 2 and labels[t] == 1 and t not in batch.offsets:
            labels[t] = 2
    return allowed, SequenceBatch.build(labels, batch.lengths, 3, batch.seq_weight)


@pytest.mark.parametrize(
    "mode, gamma, solver",
    [
        ("gbcrf", "mixing", "lbfgs"),
        ("gbcrf", "length", "newton"),
        ("gbcrf", 3.0, "lbfgs"),
        ("treecrf", "mixing", "newton"),
        ("logitboost", "mixing", "lbfgs"),
        ("gbcrf", "mixing", "constrained"),
        ("gbcrf", "mixing", "adaptive"),
        ("gbcrf", 3.0, "adaptive"),
    ],
)
def test_objective_round_matches_the_cpu(mode, gamma, solver):
    margins, batch = _problem(2)
    kwargs = dict(mode=mode, hessian_bound=gamma, transition_solver=solver, transition_iter=2)
    if solver == "constrained":
        allowed, batch = _forbid_2_to_1(batch)
        kwargs.update(transition_solver="newton", allowed_transitions=allowed)
    if solver == "adaptive":
        kwargs.update(transition_solver="newton", step="adaptive")
    cpu, dev = CRFObjective(3, **kwargs), objectives_gpu.DeviceCRFObjective(3, **kwargs)
    moves = np.random.default_rng(2).normal(scale=0.3, size=(3,) + margins.shape)
    for step in range(3):  # an adaptive step measures its scale from the second round on
        want = cpu.grad_hess(margins + moves[step], batch)
        got = dev.grad_hess(margins + moves[step], batch)
        np.testing.assert_allclose(dev.params.to_vector(), cpu.params.to_vector(), rtol=1e-6,
                                   atol=1e-8)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.copy_to_host(), w, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(dev.sequence_nll(margins, batch), cpu.sequence_nll(margins, batch),
                               rtol=1e-10)
    np.testing.assert_array_equal(dev.decode(margins, batch), cpu.decode(margins, batch))
    if solver == "adaptive":
        np.testing.assert_allclose(dev.step_scale.history, cpu.step_scale.history, rtol=1e-6)
        assert cpu.step_scale.history[-1] < 1.0  # the scaled Hessian was compared


@pytest.mark.parametrize("solver, step, k, lengths", [
    ("lbfgs", "adaptive", 3, (3, 1, 4, 2)), ("newton", "adaptive", 3, (3, 1, 4, 2)),
    ("newton", "bound", 3, (3, 1, 4, 2)), ("lbfgs", "adaptive", 4, (6, 5, 7, 4, 8, 6, 5, 9)),
])  # fmt: skip
def test_one_pass_rounds_match_the_cpu(solver, step, k, lengths):
    """Past the refit warm-up, rounds of one pass (the secant's sums on the device) match, allocate
    nothing and wait for the device at most three times (:class:`gpu.DeviceCounters`).

    The last batch's L-BFGS warm-up refits need more than ``WARMUP_ITER``
    iterations (the small one's converge in fewer), so that the device must
    take the CPU's count (``OneStep.refit_iterations``) to keep its transitions.
    """
    margins, batch = _problem(3, k, lengths)
    kwargs = dict(transition_solver=solver, step=step, transition_iter=1)
    cpu, dev = CRFObjective(k, **kwargs), objectives_gpu.DeviceCRFObjective(k, **kwargs)
    rng = np.random.default_rng(3)
    one_pass = 0
    for step_no in range(onestep.WARMUP + 3):
        margins = margins + rng.normal(scale=0.2, size=margins.shape)
        want = cpu.grad_hess(margins, batch)
        refits = dev._one_step.refits if dev._one_step else 0
        got = dev.grad_hess(margins, batch)
        counters = dev.counters  # this round's: buffers kept, the host waits three times
        assert step_no < 2 or counters.allocations == 0
        if dev._one_step.refits == refits:
            one_pass += 1
            small = len(lengths) + 2 * k * k + 4 * k + 8  # log Z, counts and a few sums
            assert counters.syncs <= 3 and counters.to_host <= 8 * small
        np.testing.assert_allclose(dev.params.to_vector(), cpu.params.to_vector(), rtol=1e-6,
                                   atol=1e-8)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.copy_to_host(), w, rtol=1e-6, atol=1e-9)
    assert dev._one_step.refits == cpu._one_step.refits < onestep.WARMUP + 3  # one-pass rounds ran
    assert one_pass > 0
    if step == "adaptive":
        np.testing.assert_allclose(dev.step_scale.history, cpu.step_scale.history, rtol=1e-6)


def test_objective_takes_the_cpu_parameters_starts_from_given_transitions_and_pickles():
    """``nthread`` (ignored on the device), ``start_from`` with constraints, a pickled copy."""
    margins, batch = _problem(5)
    allowed, batch = _forbid_2_to_1(batch)
    # one spec for both; the bound step, as a copy starts a new secant (test_step.py)
    spec = ObjectiveSpec(transition_iter=2, allowed_transitions=allowed, nthread=1, step="bound")
    cpu, dev = CRFObjective(3, spec), objectives_gpu.DeviceCRFObjective(3, spec)
    assert (dev.spec.nthread, dev.spec.iterations) == (1, 2)
    rng = np.random.default_rng(5)
    start = TransitionParams(rng.normal(size=(3, 3)), rng.normal(size=3), rng.normal(size=3))
    for obj in (cpu, dev):
        obj.start_from(start)
    assert dev.params.transitions[2, 1] == -np.inf and np.isfinite(start.transitions[2, 1])
    for w, g in zip(cpu.grad_hess(margins, batch), dev.grad_hess(margins, batch)):
        np.testing.assert_allclose(g.copy_to_host(), w, rtol=1e-6, atol=1e-9)
    clone = pickle.loads(pickle.dumps(dev))
    np.testing.assert_array_equal(clone.params.to_vector(), dev.params.to_vector())
    assert not clone._lbfgs_memory.pairs  # a copy starts with an empty L-BFGS memory
    dev._lbfgs_memory.clear()
    for w, g in zip(dev.grad_hess(margins + 1, batch), clone.grad_hess(margins + 1, batch)):
        np.testing.assert_array_equal(g.copy_to_host(), w.copy_to_host())


def test_objective_errors():
    import structboost as sb

    with pytest.raises(ValueError, match='device must be "cpu" or "cuda"'):
        sb.crf_objective(3, device="tpu")
    obj = sb.crf_objective(3, device="cuda:0", nthread=2, hess_floor=1e-12)
    assert isinstance(obj.crf, objectives_gpu.DeviceCRFObjective) and obj.crf.spec.nthread == 2
    with pytest.raises(ValueError, match="CPU only"):
        objectives_gpu.DeviceCRFObjective(3, transition_solver="majorize")
    margins, batch = _problem(3)
    single, double = (objectives_gpu.DeviceCRFObjective(3, transition_iter=1) for _ in range(2))
    halves = zip(single.grad_hess(margins, batch, np.float32), double.grad_hess(margins, batch))
    for g32, g64 in halves:
        assert g32.dtype == np.float32  # (what XGBoost asks for: half the bytes)
        np.testing.assert_allclose(g32.copy_to_host(), g64.copy_to_host(), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="dtype must be"):
        single.grad_hess(margins, batch, np.int32)
    dev = objectives_gpu.DeviceCRFObjective(3)
    margins[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        dev.grad_hess(margins, batch)
    with pytest.raises(ValueError, match=r"shape \(rows, 3\)"):
        dev.grad_hess(np.zeros((batch.offsets[-1], 2)), batch)


@pytest.mark.skipif(SIMULATOR, reason="XGBoost reads device gradients through "
                    "__cuda_array_interface__, which simulator arrays lack: needs a GPU")
def test_xgboost_and_the_estimator_train_with_device_gradients():
    import xgboost as xgb

    import structboost as sb

    margins, batch = _problem(4, lengths=[5] * 40)
    X = margins + np.random.default_rng(0).normal(size=margins.shape)
    dtrain = xgb.DMatrix(X, label=batch.labels, group=batch.lengths)
    results = {}
    for device in ("cpu", "cuda"):
        obj = sb.crf_objective(3, device=device)
        booster = xgb.train(sb.xgb_params(3, device="cuda", max_depth=3), dtrain, 5, obj=obj,
                            callbacks=[obj.callback()])
        results[device] = sb.predict_marginals(booster, dtrain)
    np.testing.assert_allclose(results["cuda"], results["cpu"], atol=1e-4)
    clf = sb.XGBCRFClassifier(n_estimators=5, max_depth=3, device="cuda")
    clf.fit(X, batch.labels, lengths=batch.lengths)
    np.testing.assert_allclose(clf.predict_marginals(X, lengths=batch.lengths), results["cuda"],
                               atol=1e-4)
