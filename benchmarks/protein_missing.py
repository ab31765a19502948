"""Missing residues in the protein benchmark: Dietterich et al. (2008) s. 7.4, Figure 4a.

At each rate (5, 10, 20, 40%) residues are made missing at random (all 20
indicators of a residue at once, before windowing) in ``--train-versions``
copies of the training set and ``--test-versions`` copies of the test set.
A GBCRF is trained on every training copy with each strategy of
``structboost.features.MissingValues`` and scored on every test copy:

- ``native``: NaN left in place; XGBoost learns a default direction per split;
- ``impute``: the training set's most frequent residue (a one-hot group);
- ``indicator``: one "residue missing" column per position, indicators set to 0.

The residues are then windowed over 11 positions (zeros outside a protein,
so padding and missing stay distinct). The GBCRF setting is fixed (``--config``,
``--rounds``; by default the one ``protein_qs.py`` selected for marginal
decoding), the same for every strategy, instead of a fresh selection per
strategy as in the paper. Accuracy is per residue, with marginal decoding
(the paper's -FB) and Viterbi, averaged over all train x test pairs.

Usage::

    python benchmarks/protein_missing.py --data-dir ../shared/data/protein-qs \\
        [--train-versions 5] [--test-versions 5] [--threads 2]

Writes ``benchmarks/results/protein_missing.csv`` and ``protein_missing.png``
and prints a Markdown table.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import xgboost as xgb

from structboost.features import MissingValues

from protein_qs import DECODES, RESULTS, hits, load_part, machine_line, train, windowed, write_csv

STRATEGIES = ("native", "impute", "indicator")
RATES = (0.05, 0.10, 0.20, 0.40)
RESIDUE = {"residue": list(range(20))}
DEFAULT_CONFIG = '{"crf": {"transition_solver": "newton"}, "eta": 1.0, "max_depth": 2, "min_child_weight": 1.0}'


def with_missing(X, rate, seed):
    """A copy of the one-hot residues with a ``rate`` share of them all NaN."""
    rng = np.random.default_rng(seed)
    out = X.astype(np.float32)
    out[rng.random(X.shape[0]) < rate] = np.nan
    return out


def features(handler, X, lengths, half_width):
    """Missing-value handling per residue, then the window."""
    return windowed(handler.transform(X), lengths, half_width)


def plot(summary, reference, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, decode in zip(axes, DECODES):
        for strategy in STRATEGIES:
            part = [s for s in summary if s["strategy"] == strategy]
            ax.errorbar([100 * s["rate"] for s in part], [s[f"mean_{decode}"] for s in part],
                        yerr=[s[f"std_{decode}"] for s in part], marker="o", capsize=3,
                        label=strategy)
        ax.axhline(reference[decode], color="grey", ls=":", label="no missing values")
        ax.set(xlabel="missing residues (%)", title=f"GBCRF, {decode} decoding")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy per residue (%)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--half-width", type=int, default=5)
    ap.add_argument("--train-versions", type=int, default=5)
    ap.add_argument("--test-versions", type=int, default=5)
    ap.add_argument("--rates", type=float, nargs="+", default=list(RATES))
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="GBCRF grid entry as JSON")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "protein_missing.csv")
    args = ap.parse_args()
    config = json.loads(args.config)

    X, y, lengths = load_part(args.data_dir, "train")
    Xt, yt, lt = load_part(args.data_dir, "test")
    print(f"GBCRF {config}, {args.rounds} rounds; {args.train_versions} training x "
          f"{args.test_versions} test versions per rate; window {2 * args.half_width + 1}; "
          f"nthread={args.threads}")
    print(machine_line(), flush=True)

    def fit(X_train):
        booster, seconds = train("gbcrf", config, xgb.DMatrix(
            X_train, label=y, group=lengths), args.rounds, args.threads)
        return booster, seconds

    t_start = time.perf_counter()
    booster, _ = fit(windowed(X, lengths, args.half_width))
    reference = {d: 100 * c.mean() for d, c in hits(
        booster, xgb.DMatrix(windowed(Xt, lt, args.half_width), group=lt), yt).items()}
    print(f"  no missing values: {reference}", flush=True)

    rows = []
    for r_idx, rate in enumerate(args.rates):
        tests = [with_missing(Xt, rate, 1000 * r_idx + 500 + j) for j in range(args.test_versions)]
        for i in range(args.train_versions):
            X_miss = with_missing(X, rate, 1000 * r_idx + i)
            for strategy in STRATEGIES:
                handler = MissingValues(strategy, groups_of_columns=RESIDUE).fit(X_miss)
                booster, seconds = fit(features(handler, X_miss, lengths, args.half_width))
                for j, X_test in enumerate(tests):
                    dtest = xgb.DMatrix(features(handler, X_test, lt, args.half_width), group=lt)
                    correct = hits(booster, dtest, yt)
                    rows.append({"rate": rate, "strategy": strategy, "train_version": i,
                                 "test_version": j, "train_seconds": round(seconds, 1),
                                 **{f"accuracy_{d}": round(100 * c.mean(), 3)
                                    for d, c in correct.items()}})
                print(f"  rate {rate:.2f}, train version {i}, {strategy}: marginal "
                      f"{np.mean([r['accuracy_marginal'] for r in rows[-len(tests):]]):.2f}, "
                      f"{seconds:.0f} s", flush=True)
        write_csv(rows, args.out)

    summary = []
    for rate in args.rates:
        for strategy in STRATEGIES:
            part = [r for r in rows if r["rate"] == rate and r["strategy"] == strategy]
            entry = {"rate": rate, "strategy": strategy}
            for d in DECODES:
                acc = np.array([r[f"accuracy_{d}"] for r in part])
                entry[f"mean_{d}"], entry[f"std_{d}"] = float(acc.mean()), float(acc.std())
            summary.append(entry)
    plot(summary, reference, args.out.with_suffix(".png"))

    print(f"\ntotal {time.perf_counter() - t_start:.0f} s\n")
    print("| missing rate | " + " | ".join(f"{s} (marginal)" for s in STRATEGIES) + " | "
          + " | ".join(f"{s} (viterbi)" for s in STRATEGIES) + " |")
    print("|---" * (1 + 2 * len(STRATEGIES)) + "|")
    print("| 0% | " + " | ".join(f"{reference['marginal']:.2f}" for _ in STRATEGIES) + " | "
          + " | ".join(f"{reference['viterbi']:.2f}" for _ in STRATEGIES) + " |")
    for rate in args.rates:
        cells = {(s["strategy"], d): f"{s[f'mean_{d}']:.2f} ± {s[f'std_{d}']:.2f}"
                 for s in summary if s["rate"] == rate for d in DECODES}
        print(f"| {100 * rate:.0f}% | " + " | ".join(cells[(s, "marginal")] for s in STRATEGIES)
              + " | " + " | ".join(cells[(s, "viterbi")] for s in STRATEGIES) + " |")


if __name__ == "__main__":
    main()
