"""How the cost of a boosting round grows: Dietterich et al. (2008) Figure 3.

Synthetic data from their HMM (3 labels, 24 symbols, stay 0.6, emission
0.6; ``structboost.datasets.make_hmm_sequences``), 100 sequences, symbols
one-hot and windowed with ``structboost.features.SlidingWindow`` (zeros
outside a sequence):

(a) sequence length 10, 20, ..., 320 with a window of 3: seconds per round
    spent in the CRF objective (``obj.crf.timings``: transition refit,
    forward-backward, gamma and G/H), beside the whole round;
(b) window size 3, 5, ..., 11 with sequences of length 100: seconds of a
    whole round (tree building dominates; 24 features per position).

Trees follow the paper's setting loosely: best-first (``lossguide``) with at
most 100 leaves and shrinkage ``reg_lambda=40``. Each point times
``--rounds`` rounds after one warm-up round (numba compilation, quantile
sketch), in CPU seconds of the process (``time.process_time``, as the
objective's own timers), so other load on the machine changes them little.

Large scale (``--large``): sticky-chain data (sequences of 20, 20 dense
features, the first K of them a noisy one-hot of the label; generated in
chunks of ``CHUNK_ROWS`` rows into preallocated arrays, so the generator
never holds more than the data) with every configuration in a subprocess
of its own, so that its peak RSS (``ru_maxrss``) is that configuration's:

(c) native ``multi:softprob`` against GBCRF with the library's defaults
    (``sb.crf_objective(K)``), depth-6 trees, eta 0.3, at ``--max-rows``
    rows (10M by default) and K = 10 and 26, on 1 and 2 threads: wall and
    CPU seconds per round, the objective's CPU share, peak RSS, and peak
    RSS with the CRF metric on the training set in ``evals`` (GBCRF) or
    XGBoost's ``mlogloss`` (native);
(d) the cost curve on one thread: rows 10k .. 10M (log steps, up to
    ``--max-rows``) at K = 10, and K = 3 .. 100 at ``--k-rows`` rows:
    objective CPU seconds per round beside the native round, log-log plots
    with the fitted slopes.

Usage::

    python benchmarks/scaling.py [--rounds 20] [--threads 2]
    python benchmarks/scaling.py --large [--max-rows 1000000] [--k-rows 100000] [--quick]
    python benchmarks/scaling.py --large --parts large memory --large-k 10 --large-threads 1 --warm 11

Writes ``benchmarks/results/scaling.csv`` and ``scaling.png`` (``--large``:
``scaling_large.csv``, ``scaling_large.png``) and prints Markdown tables.
"""

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.features import SlidingWindow
from structboost.transitions import onestep

from protein_qs import machine_line

RESULTS = Path(__file__).resolve().parent / "results"
LENGTHS = (10, 20, 40, 80, 160, 320)
WINDOWS = (3, 5, 7, 9, 11)
MODES = ("treecrf", "gbcrf")
TREE = {"grow_policy": "lossguide", "max_depth": 0, "max_leaves": 100, "reg_lambda": 40.0,
        "eta": 0.3}


def hmm_data(length, window, seed):
    """100 HMM sequences of one length, symbols windowed over ``window`` positions."""
    X, y, lengths = make_hmm_sequences(n_sequences=100, length=length, random_state=seed)
    W = SlidingWindow(half_width=window // 2, fill=0).fit_transform(X, lengths=lengths)
    return xgb.DMatrix(W, label=y, group=lengths)


def time_round(mode, dtrain, rounds, threads):
    """Seconds per round: the whole round and the objective's share.

    Returns
    -------
    dict with ``round`` and each key of ``obj.crf.timings``, in seconds per
    round.
    """
    params = sb.xgb_params(3, nthread=threads, **TREE)
    obj = sb.crf_objective(3, mode=mode)
    xgb.train(params, dtrain, 1, obj=obj)  # warm-up
    obj = sb.crf_objective(3, mode=mode)
    t0 = time.process_time()
    xgb.train(params, dtrain, rounds, obj=obj)
    out = {"round": (time.process_time() - t0) / rounds}
    out.update({k: v / rounds for k, v in obj.crf.timings.items()})
    out["objective"] = sum(obj.crf.timings.values()) / rounds
    return out


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_len, ax_win) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in MODES:
        part = [r for r in rows if r["experiment"] == "length" and r["mode"] == mode]
        x = [r["length"] for r in part]
        ax_len.plot(x, [r["objective_s"] for r in part], "o-", label=f"{mode}: objective")
        ax_len.plot(x, [r["round_s"] for r in part], "s--", label=f"{mode}: whole round")
        part = [r for r in rows if r["experiment"] == "window" and r["mode"] == mode]
        ax_win.plot([r["window"] for r in part], [r["round_s"] for r in part], "s--",
                    label=f"{mode}: whole round")
        ax_win.plot([r["window"] for r in part], [r["objective_s"] for r in part], "o-",
                    label=f"{mode}: objective")
    ax_len.set(xscale="log", yscale="log", xlabel="sequence length (100 sequences, window 3)",
               ylabel="seconds per round", title="(a) cost vs sequence length")
    ax_win.set(xlabel="window size (100 sequences of length 100)", ylabel="seconds per round",
               title="(b) cost vs window size")
    for ax in (ax_len, ax_win):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# -- large scale ---------------------------------------------------------------------------

CHUNK_ROWS = 1_000_000
SEQ_LENGTH = 20
FEATURES = 20
STAY = 0.8
CURVE_ROWS = (10_000, 31_623, 100_000, 316_228, 1_000_000, 3_162_278, 10_000_000)
CURVE_LABELS = (3, 5, 10, 20, 50, 100)
LARGE_TREE = {"max_depth": 6, "eta": 0.3}


def sticky_chains(rows, num_labels, seed=0):
    """``X (n, FEATURES)`` float32, ``y (n,)`` and lengths of sticky label chains.

    Each sequence of ``SEQ_LENGTH`` rows starts with a random label and keeps
    it with probability ``STAY`` per step; the first ``min(K, FEATURES)``
    features are a one-hot of the label plus N(0, 1) noise, the rest noise.
    Generated ``CHUNK_ROWS`` rows at a time into the output arrays.
    """
    n_seq = max(1, rows // SEQ_LENGTH)
    n = n_seq * SEQ_LENGTH
    X = np.empty((n, FEATURES), dtype=np.float32)
    y = np.empty(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    chunk = CHUNK_ROWS - CHUNK_ROWS % SEQ_LENGTH
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        c = hi - lo
        switch = rng.random(c) >= STAY
        switch[::SEQ_LENGTH] = True  # every sequence starts with a fresh label
        fresh = rng.integers(0, num_labels, c)
        last = np.maximum.accumulate(np.where(switch, np.arange(c), 0))
        y[lo:hi] = fresh[last]
        X[lo:hi] = rng.standard_normal((c, FEATURES), dtype=np.float32)
        hot = y[lo:hi] < FEATURES
        X[lo:hi][hot, y[lo:hi][hot]] += 1.0
    return X, y, np.full(n_seq, SEQ_LENGTH, dtype=np.int64)


def softmax_objective(dtrain, num_labels, block_rows=65536):
    """The cheapest custom objective: XGBoost's own softmax G and H, from Python.

    ``obj(predt, dtrain) -> (grad, hess)`` writes float32 ``p - onehot(y)``
    and ``max(2 p (1 - p), 1e-16)`` into two ``(n, K)`` buffers it reuses,
    in blocks of ``block_rows`` rows. Its peak RSS is the floor of any
    objective handed through ``xgboost.train(obj=...)``: XGBoost's
    prediction output, Python's copy of it, and the handed G and H.
    """
    labels = dtrain.get_label().astype(np.int64)
    kept = []

    def obj(predt, _):
        if not kept:
            kept.extend(np.empty_like(predt) for _ in range(2))
        grad, hess = kept
        for a in range(0, predt.shape[0], block_rows):
            p = predt[a : a + block_rows] - predt[a : a + block_rows].max(axis=1, keepdims=True)
            np.exp(p, out=p)
            p /= p.sum(axis=1, keepdims=True)
            hess[a : a + block_rows] = np.maximum(2.0 * p * (1.0 - p), 1e-16)
            p[np.arange(p.shape[0]), labels[a : a + block_rows]] -= 1.0
            grad[a : a + block_rows] = p
        return grad, hess

    return obj


def softmax_logloss(predt, dtrain, block_rows=65536):
    """``("mlogloss", mean)`` of ``predt (n, K)`` margins, in blocks (a Python metric's floor)."""
    labels = dtrain.get_label().astype(np.int64)
    total = 0.0
    for a in range(0, predt.shape[0], block_rows):
        z = predt[a : a + block_rows].astype(np.float64)
        top = z.max(axis=1)
        lse = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
        total += float((lse - z[np.arange(z.shape[0]), labels[a : a + block_rows]]).sum())
    return "mlogloss", total / predt.shape[0]


def measure(config):
    """Train one configuration in this process; per-round seconds and peak RSS.

    ``config``: ``rows``, ``K``, ``model`` ("native", "softmax-obj": XGBoost's
    softmax as a Python objective, see :func:`softmax_objective`, or "gbcrf"),
    ``threads``, ``rounds`` (timed), ``warm`` (untimed rounds first),
    ``train_metric`` (bool), ``seed``; optional ``warmup_refits`` (the
    one-pass rounds' warm-up refit rounds, the library's when absent).
    """
    k, threads = config["K"], config["threads"]
    if config.get("warmup_refits") is not None:
        onestep.WARMUP = config["warmup_refits"]  # see --warmup-refits
    X, y, lengths = sticky_chains(config["rows"], k, config["seed"])
    t0 = time.perf_counter()
    dtrain = xgb.DMatrix(X, label=y, group=lengths, nthread=threads)
    dmatrix_s = time.perf_counter() - t0
    del X
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    evals = [(dtrain, "train")] if config["train_metric"] else []
    if config["model"] == "native":
        params = {"objective": "multi:softprob", "num_class": k, "tree_method": "hist",
                  "nthread": threads, "eval_metric": "mlogloss", **LARGE_TREE}
        train = lambda rounds, model=None: xgb.train(  # noqa: E731
            params, dtrain, rounds, evals=evals, xgb_model=model, verbose_eval=False)
        obj = None
    elif config["model"] == "softmax-obj":
        params = sb.xgb_params(k, nthread=threads, **LARGE_TREE)
        fobj = softmax_objective(dtrain, k)
        train = lambda rounds, model=None: xgb.train(  # noqa: E731
            params, dtrain, rounds, obj=fobj, evals=evals, xgb_model=model,
            custom_metric=softmax_logloss if evals else None, verbose_eval=False)
        obj = None
    else:
        params = sb.xgb_params(k, nthread=threads, **LARGE_TREE)
        obj = sb.crf_objective(k, nthread=threads)
        train = lambda rounds, model=None: xgb.train(  # noqa: E731
            params, dtrain, rounds, obj=obj, evals=evals, xgb_model=model,
            custom_metric=obj.metric if evals else None, callbacks=[obj.callback()],
            verbose_eval=False)
    booster = train(config["warm"])  # numba compilation, quantile sketch, one-pass warm-up
    before = dict(obj.crf.timings) if obj is not None else {}
    rounds = config["rounds"]
    w0, c0 = time.perf_counter(), time.process_time()
    train(rounds, booster)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    objective = (sum(obj.crf.timings.values()) - sum(before.values())) if obj else 0.0
    return {
        **config, "dmatrix_s": round(dmatrix_s, 2),
        "wall_s_per_round": round(wall / rounds, 4), "cpu_s_per_round": round(cpu / rounds, 4),
        "objective_cpu_s_per_round": round(objective / rounds, 4),
        "objective_share": round(objective / cpu, 3) if cpu else 0.0,
        "rss_data_mib": round(rss_data), "peak_rss_mib":
            round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0),
    }


def in_subprocess(config):
    """:func:`measure` in a fresh interpreter (its own peak RSS); None if it failed."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(config)], capture_output=True, text=True,
    )
    if done.returncode != 0:
        print(f"  failed {config}: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def slope(xs, ys):
    """Least-squares slope of ``log y`` on ``log x``."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def large_configs(args):
    """(experiment, config) of every large-scale run asked for, the cheap curves first."""
    base = {"rounds": args.rounds, "warm": args.warm, "seed": args.seed, "train_metric": False}
    if args.warmup_refits is not None:
        base["warmup_refits"] = args.warmup_refits
    out = []
    parts = set(args.parts)
    for n in CURVE_ROWS if "rows" in parts else ():
        if n <= args.max_rows:
            for model in ("native", "gbcrf"):
                out.append(("rows", {**base, "rows": n, "K": 10, "model": model, "threads": 1}))
    for k in () if "labels" not in parts else CURVE_LABELS[::2] if args.quick else CURVE_LABELS:
        for model in ("native", "gbcrf"):
            out.append(("labels", {**base, "rows": args.k_rows, "K": k, "model": model,
                                   "threads": 1}))
    rows = min(args.max_rows, 10_000_000)
    for k in (10,) if args.quick else args.large_k:
        for model in ("native", "gbcrf"):
            for threads in args.large_threads if "large" in parts else ():
                out.append(("large", {**base, "rows": rows, "K": k, "model": model,
                                      "threads": threads}))
            if "memory" in parts:
                out.append(("memory", {**base, "rows": rows, "K": k, "model": model,
                                       "threads": max(args.large_threads),
                                       "train_metric": True}))
    return out


def plot_curves(rows, path):
    """Log-log cost curves (objective vs native round) against rows and against K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, experiment, x_key, label in ((axes[0], "rows", "rows", "rows (K = 10)"),
                                         (axes[1], "labels", "K", "K (labels)")):
        part = [r for r in rows if r["experiment"] == experiment]
        for model, key, style, name in (("native", "cpu_s_per_round", "s--", "native round"),
                                        ("gbcrf", "cpu_s_per_round", "o--", "GBCRF round"),
                                        ("gbcrf", "objective_cpu_s_per_round", "o-",
                                         "GBCRF objective")):
            pts = sorted((r[x_key], r[key]) for r in part if r["model"] == model and r[key] > 0)
            if len(pts) >= 2:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, style, label=f"{name} (slope {slope(xs, ys):.2f})")
        ax.set(xscale="log", yscale="log", xlabel=label, ylabel="CPU seconds per round (1 thread)")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def large(args):
    out = args.out.with_name("scaling_large.csv")
    print(machine_line(), flush=True)
    print(f"uptime: {os.getloadavg()}", flush=True)
    rows, done = [], {}
    for experiment, config in large_configs(args):
        key = json.dumps(config, sort_keys=True)
        if key not in done:  # a point of two experiments runs once
            done[key] = in_subprocess(config)
        result = done[key]
        if result is None:
            continue
        rows.append({"experiment": experiment, **result,
                     "load_1min": round(os.getloadavg()[0], 2)})
        print(f"  {rows[-1]}", flush=True)
        with open(out, "w", newline="") as handle:  # rewritten after every run
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    plot_curves(rows, out.with_suffix(".png"))
    print("\n| experiment | rows | K | model | threads | train metric | wall s / round | "
          "CPU s / round | objective CPU s | objective share | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['experiment']} | {r['rows']} | {r['K']} | {r['model']} | {r['threads']} | "
              f"{r['train_metric']} | {r['wall_s_per_round']} | {r['cpu_s_per_round']} | "
              f"{r['objective_cpu_s_per_round']} | {r['objective_share']} | "
              f"{r['peak_rss_mib']} |")
    for experiment, x_key in (("rows", "rows"), ("labels", "K")):
        for model, key in (("native", "cpu_s_per_round"), ("gbcrf", "objective_cpu_s_per_round")):
            pts = [(r[x_key], r[key]) for r in rows
                   if r["experiment"] == experiment and r["model"] == model and r[key] > 0]
            if len(pts) >= 2:
                print(f"slope of {model} {key} in {x_key}: {slope(*zip(*pts)):.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "scaling.csv")
    ap.add_argument("--large", action="store_true", help="the large-scale part (c, d)")
    ap.add_argument("--max-rows", type=int, default=10_000_000,
                    help="largest row count of the large-scale part")
    ap.add_argument("--k-rows", type=int, default=1_000_000, help="rows of the K curve")
    ap.add_argument("--quick", action="store_true",
                    help="K = 10 only in (c), every other K in the K curve")
    ap.add_argument("--warm", type=int, default=1,
                    help="untimed rounds before the timed ones (--large; 11 passes the "
                         "one-pass rounds' warm-up refits)")
    ap.add_argument("--warmup-refits", type=int, default=None,
                    help="warm-up refit rounds of the one-pass transition step (default: the "
                         "library's WARMUP); fewer make steady rounds affordable at large K, "
                         "where one refit round costs 5-7 passes")
    ap.add_argument("--parts", nargs="+", choices=("rows", "labels", "large", "memory"),
                    default=["rows", "labels", "large", "memory"],
                    help="experiments of the large-scale part to run")
    ap.add_argument("--large-k", type=int, nargs="+", default=[10, 26], help="K of (c)")
    ap.add_argument("--large-threads", type=int, nargs="+", default=[1, 2],
                    help="threads of (c); the memory runs take the largest")
    ap.add_argument("--replot", action="store_true",
                    help="redraw scaling_large.png from scaling_large.csv")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a JSON config: measure() it
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(json.loads(args.one))))
        return
    if args.replot:
        with open(args.out.with_name("scaling_large.csv"), newline="") as handle:
            rows = [{k: v if k in ("experiment", "model") else float(v) if v[0].isdigit() else v
                     for k, v in r.items()} for r in csv.DictReader(handle)]
        plot_curves(rows, args.out.with_name("scaling_large.png"))
        return
    if args.large:
        large(args)
        return
    print(f"{args.rounds} timed rounds per point, nthread={args.threads}, trees {TREE}")
    print(machine_line(), flush=True)

    rows = []
    experiments = [("length", n, 3) for n in LENGTHS] + [("window", 100, w) for w in WINDOWS]
    for experiment, length, window in experiments:
        dtrain = hmm_data(length, window, args.seed)
        for mode in MODES:
            t = time_round(mode, dtrain, args.rounds, args.threads)
            rows.append({
                "experiment": experiment, "mode": mode, "length": length, "window": window,
                "rows": dtrain.num_row(), "features": dtrain.num_col(),
                "round_s": round(t["round"], 5), "objective_s": round(t["objective"], 5),
                "transitions_s": round(t["transitions"], 5),
                "inference_s": round(t["inference"], 5), "gamma_s": round(t["gamma"], 5),
            })
            print(f"  {rows[-1]}", flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.out.with_suffix(".png"))

    print()
    print("| experiment | mode | length | window | rows | features | s / round | objective s / "
          "round | transitions | inference | gamma + G/H |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['experiment']} | {r['mode']} | {r['length']} | {r['window']} | {r['rows']} | "
              f"{r['features']} | {r['round_s']:.4f} | {r['objective_s']:.4f} | "
              f"{r['transitions_s']:.4f} | {r['inference_s']:.4f} | {r['gamma_s']:.4f} |")


if __name__ == "__main__":
    main()
