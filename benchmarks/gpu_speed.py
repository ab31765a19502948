"""Per-round cost of the CRF objective on a GPU beside XGBoost's native multi:softprob.

Generates ``--rows`` rows (default 1M) of sequences of ``--length`` rows
(default 10) with ``--features`` dense float32 features and sticky labels,
for each ``K`` in ``--labels`` (default 26 and 100), and prints, after
``--warm`` untimed rounds (by default past the one-pass rounds' warm-up
refits, :data:`structboost.transitions.onestep.WARMUP`):

1. wall seconds per round, and the objective's milliseconds (from receiving
   the margins to handing back G and H, the device synchronised), of native
   ``multi:softprob``; GBCRF through ``xgboost.train(obj=crf_objective(K,
   device=...))`` (XGBoost copies the margins to the host; the objective
   stages them through page-locked memory to the device); GBCRF through
   ``Booster.boost`` with the margins kept on the device (each round adds
   the new trees' ``inplace_predict`` on CuPy features); and the CPU
   objective for the K in ``--cpu-labels``;
2. a whole fit of ``--fit-rounds`` rounds (default 100):
   ``XGBCRFClassifier(device=...)`` against ``XGBClassifier(objective=
   "multi:softprob")``, same trees;
3. the forward-backward pass alone (device and CPU) and the margins' copies;
4. the device objective's :class:`~structboost.inference.gpu.DeviceCounters`
   in its last (steady) round on each path.

Needs a CUDA GPU, ``structboost-crf[gpu]`` and CuPy for ``--device cuda``
(one call at the defaults takes a few minutes on an H200); ``--device cpu``
runs the native, CPU-objective and whole-fit rows and the CPU kernel (a
smoke test on machines without a GPU; use small ``--rows``). Prints
Markdown tables for benchmarks/README.md.

Usage::

    python benchmarks/gpu_speed.py --device cuda
    python benchmarks/gpu_speed.py --device cpu --rows 2000 --labels 5 --rounds 2 --fit-rounds 5
"""

import argparse
import os
import platform
import time

import numba
import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.inference.chain import posterior
from structboost.objectives.chain import SequenceBatch
from structboost.transitions.onestep import WARMUP


def make_data(rows, length, k, d, seed):
    """Sticky label chains of fixed length and noisy class-mean features."""
    rng = np.random.default_rng(seed)
    m = rows // length
    lengths = np.full(m, length, dtype=np.int64)
    stay = rng.random((m, length)) < 0.7
    y = rng.integers(0, k, size=(m, length))
    for t in range(1, length):
        y[:, t] = np.where(stay[:, t], y[:, t - 1], y[:, t])
    y = y.ravel()
    means = rng.normal(size=(k, d)).astype(np.float32)
    X = means[y] + rng.normal(scale=2.0, size=(y.size, d)).astype(np.float32)
    return X, y, lengths


def synced(device):
    """A clock that waits for the GPU first when ``device == "cuda"``."""
    if device != "cuda":
        return time.perf_counter
    from numba import cuda

    def clock():
        cuda.synchronize()
        return time.perf_counter()

    return clock


class _RoundClock(xgb.callback.TrainingCallback):
    """Records the clock at the end of every round."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.times = [clock()]

    def after_iteration(self, model, epoch, evals_log):
        self.times.append(self.clock())
        return False


def steady(times, rounds):
    """Mean seconds of the last ``rounds`` rounds of the clock readings ``times``."""
    return (times[-1] - times[-1 - rounds]) / rounds


class Timed:
    """A callable (an objective, a round's ``grad_hess``) that records the ``clock`` seconds of
    each call.
    """

    def __init__(self, fn, clock):
        self.fn, self.clock, self.times = fn, clock, []

    def __call__(self, *args):
        t0 = self.clock()
        out = self.fn(*args)
        self.times.append(self.clock() - t0)
        return out

    def steady(self, rounds):
        return float(np.mean(self.times[-rounds:]))


def per_round(params, dtrain, rounds, warm, clock, obj=None):
    """Wall seconds per round of the ``rounds`` rounds after ``warm`` warm-up rounds."""
    timer = _RoundClock(clock)
    xgb.train(params, dtrain, warm + rounds, obj=obj, callbacks=[timer])
    return steady(timer.times, rounds)


def boost_on_device(params, dtrain, X_dev, batch, k, rounds, warm, clock, obj_params):
    """Seconds per round of a ``Booster.boost`` loop with device margins, and the timed
    objective.
    """
    import cupy

    obj = sb.crf_objective(k, device="cuda", **obj_params)
    timed = Timed(obj.crf.grad_hess, clock)
    booster = xgb.Booster(params, [dtrain])
    margins = cupy.zeros((batch.labels.size, k), dtype=cupy.float32)
    times = [clock()]
    for i in range(warm + rounds):
        grad, hess = timed(margins, batch)
        booster.boost(dtrain, i, grad=grad, hess=hess)
        margins += booster.inplace_predict(
            X_dev, iteration_range=(i, i + 1), predict_type="margin"
        )
        times.append(clock())
    return steady(times, rounds), timed, obj.crf.counters


def tree_threads(args):
    """The CPU threads of every run: ``--threads``, -1 meaning every core."""
    return args.threads if args.threads > 0 else os.cpu_count()


def whole_fit(X, y, lengths, args):
    """Wall seconds of ``--fit-rounds`` rounds: the CRF estimator, then XGBoost's multiclass."""
    common = dict(n_estimators=args.fit_rounds, max_depth=args.max_depth, learning_rate=0.3,
                  device=args.device, n_jobs=args.threads)  # fmt: skip
    t0 = time.perf_counter()
    sb.XGBCRFClassifier(early_stopping=False, **common).fit(X, y, lengths=lengths)
    t1 = time.perf_counter()
    xgb.XGBClassifier(objective="multi:softprob", tree_method="hist", **common).fit(X, y)
    return t1 - t0, time.perf_counter() - t1


def kernel_and_transfer(X, y, lengths, k, device, clock, repeats=3):
    """Forward-backward times (device, CPU) and the margins' copies, in seconds."""
    rng = np.random.default_rng(1)
    u = rng.normal(size=(y.size, k)).astype(np.float32)
    trans = rng.normal(size=(k, k))
    z = np.zeros(k)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    cpu_u = np.ascontiguousarray(u, dtype=np.float64)
    posterior(cpu_u, offsets, trans, z, z)
    t0 = time.perf_counter()
    for _ in range(repeats):
        posterior(cpu_u, offsets, trans, z, z)
    out = {"cpu forward-backward": (time.perf_counter() - t0) / repeats}
    if device != "cuda":
        return out
    from numba import cuda

    from structboost.inference import gpu

    structure = gpu.DeviceStructure(offsets)
    du = gpu.device_unary(u)
    gpu.DevicePosterior(du, structure, trans, z, z)
    t0 = clock()
    for _ in range(repeats):
        gpu.DevicePosterior(du, structure, trans, z, z)
    out["gpu forward-backward (incl. its one synchronisation)"] = (clock() - t0) / repeats
    for name, copy in [("pageable", cuda.to_device),
                       ("staged through pinned memory", lambda a: du.workspace.put("m", a))]:
        copy(u)
        t0 = clock()
        for _ in range(repeats):
            copy(u)
        out[f"host-to-device margins, {name}"] = (clock() - t0) / repeats
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    booster = xgb.train(sb.xgb_params(k, device="cuda", max_depth=6), dtrain, 2,
                        obj=sb.crf_objective(k, device="cuda"))
    booster.predict(dtrain, output_margin=True, training=True)
    t0 = clock()
    for _ in range(repeats):
        booster.predict(dtrain, output_margin=True, training=True)
    out["XGBoost predict(output_margin) incl. device-to-host"] = (clock() - t0) / repeats
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--length", type=int, default=10)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--labels", type=int, nargs="+", default=[26, 100])
    ap.add_argument("--rounds", type=int, default=5, help="rounds timed, after --warm")
    ap.add_argument("--warm", type=int, default=WARMUP + 1,
                    help="untimed rounds first (default: past the one-pass warm-up refits)")
    ap.add_argument("--fit-rounds", type=int, default=100, help="rounds of the whole fits")
    ap.add_argument("--transition-iter", type=int, default=None,
                    help="the objective's transition_iter (default: the library's)")
    ap.add_argument("--cpu-labels", type=int, nargs="*", default=None,
                    help="the K that also time the CPU objective (default: all with --device "
                         "cpu, none with cuda)")
    ap.add_argument("--max-depth", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=-1,
                    help="CPU threads of both whole fits (n_jobs; -1: every core)")
    args = ap.parse_args()
    cuda_run = args.device == "cuda"
    cpu_labels = args.cpu_labels if args.cpu_labels is not None else (
        [] if cuda_run else args.labels)
    clock = synced(args.device)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"device={args.device}; python {platform.python_version()}, xgboost {xgb.__version__}, "
        f"numba {numba.__version__}, structboost {sb.__version__}; {args.rows} rows, sequences "
        f"of {args.length}, d={args.features}, depth {args.max_depth}, {args.rounds} rounds "
        f"timed after {args.warm}; transition_iter={args.transition_iter}; wall seconds"
    )
    if cuda_run:
        import cupy
        from numba import cuda

        from numba.cuda.cudadrv.driver import driver

        print(f"GPU: {cuda.get_current_device().name}, CUDA driver {driver.get_version()}, "
              f"cupy {cupy.__version__}")
    obj_params = {"nthread": tree_threads(args)}
    if args.transition_iter is not None:
        obj_params["transition_iter"] = args.transition_iter
    tree = {"max_depth": args.max_depth, "eta": 0.3, "device": args.device, "tree_method": "hist",
            "nthread": tree_threads(args)}
    for k in args.labels:
        X, y, lengths = make_data(args.rows, args.length, k, args.features, args.seed)
        X_in = cupy.asarray(X) if cuda_run else X
        rows, counters = [], []
        dnative = xgb.QuantileDMatrix(X_in, label=y)
        native = per_round({**tree, "objective": "multi:softprob", "num_class": k}, dnative,
                           args.rounds, args.warm, clock)
        rows.append(("native multi:softprob", native, None))
        dtrain = xgb.QuantileDMatrix(X_in, label=y, group=lengths)
        params = sb.xgb_params(k, **tree)
        for device in ("cuda",) * cuda_run + ("cpu",) * (k in cpu_labels):
            obj = sb.crf_objective(k, device=device, **obj_params)
            timed = Timed(obj, clock)
            sec = per_round(params, dtrain, args.rounds, args.warm, clock, timed)
            name = f"GBCRF, {device.upper()} objective, xgboost.train(obj=...)"
            rows.append((name, sec, timed.steady(args.rounds)))
            if device == "cuda":
                counters.append((name, obj.crf.counters))
        if cuda_run:
            batch = SequenceBatch.build(y, lengths, k)
            sec, timed, counted = boost_on_device(params, dtrain, X_in, batch, k, args.rounds,
                                                  args.warm, clock, obj_params)
            name = "GBCRF, GPU objective, Booster.boost + device margins"
            rows.append((name, sec, timed.steady(args.rounds)))
            counters.append((name, counted))
        print(f"\nK = {k}, {y.size} rows, {lengths.size} sequences\n")
        print("| run | s / round | ratio to native | objective ms | objective / native round |")
        print("|---|---|---|---|---|")
        for name, sec, obj_sec in rows:
            share = "" if obj_sec is None else f"{obj_sec * 1e3:.2f} | {obj_sec / native:.1%}"
            print(f"| {name} | {sec:.4f} | {sec / native:.2f} | {share or ' | '} |")
        crf_fit, native_fit = whole_fit(X, y, lengths, args)
        print(f"\n| whole fit, {args.fit_rounds} rounds | s | ratio |\n|---|---|---|")
        print(f"| XGBClassifier(multi:softprob) | {native_fit:.2f} | 1.00 |")
        print(f"| XGBCRFClassifier | {crf_fit:.2f} | {crf_fit / native_fit:.2f} |")
        print("\n| part | ms |\n|---|---|")
        for name, sec in kernel_and_transfer(X, y, lengths, k, args.device, clock).items():
            print(f"| {name} | {sec * 1e3:.2f} |")
        if counters:
            print("\n| last round's counters | allocations | synchronisations | bytes to device "
                  "| bytes to host |\n|---|---|---|---|---|")
            for name, c in counters:
                print(f"| {name} | {c.allocations} | {c.syncs} | {c.to_device} | {c.to_host} |")


if __name__ == "__main__":
    main()
