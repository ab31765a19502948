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

Usage::

    python benchmarks/scaling.py [--rounds 20] [--threads 2]

Writes ``benchmarks/results/scaling.csv`` and ``scaling.png`` and prints a
Markdown table.
"""

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.features import SlidingWindow

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "scaling.csv")
    args = ap.parse_args()
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
