"""Protein secondary structure past one CRF: stacked sequential learning and seed averaging.

The data, features, homology-grouped folds and selection protocol are those of
``protein_qs.py`` (every choice made by internal cross-validation over the 111
training proteins; the 17 test proteins scored once). Two ways to go past a
single boosted CRF (issue 48):

- **stacked** (Cohen & Carvalho 2005): a first GBCRF (``protein_qs.py``'s
  cross-validated choice for marginal decoding, read from its CSV) gives every
  training residue its out-of-fold posterior marginals (``--stack-folds``
  folds of whole proteins, homologs kept together) and every test residue the
  marginals of the first model refit on all training proteins. A window of
  ``2 --stack-half-width + 1`` residues of those marginals (missing outside
  the protein) joins the one-hot window, and ``protein_qs.py``'s grid search
  runs again on the stacked features for the second model.
- **averaged**: ``--bags`` GBCRFs of the first model's setting with row and
  column subsampling and different seeds; their posterior marginals are
  averaged before decoding. The subsampling, learning rate (``BAGGING``) and
  round count (a multiple of ``--every``, at most ``--bag-rounds``) are
  chosen by the same cross-validation over the training proteins; the
  paper's peak over rounds on test is kept beside the honest figure.

Usage::

    python benchmarks/protein_stacked.py --data-dir ../shared/data/protein-qs [--threads 2]

Writes ``benchmarks/results/protein_stacked.csv`` and prints a Markdown table
with the rows of ``protein_qs.csv`` for comparison.
"""

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.features import SlidingWindow

import protein_qs as pq

HERE = Path(__file__).resolve().parent


def first_model(results):
    """``protein_qs.py``'s cross-validated GBCRF for marginal decoding: (config, rounds)."""
    with open(results, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["method"] == "gbcrf" and row["decode"] == "marginal":
                return json.loads(row["params"]), int(row["rounds"])
    raise SystemExit(f"{results} has no gbcrf/marginal row: run protein_qs.py first.")


def marginals(config, rounds, train, test, threads, seed=0):
    """Posterior marginals ``(n_test, 3)`` of a GBCRF trained on ``train`` (X, y, lengths)."""
    X, y, lengths = train
    booster, _ = pq.train(
        "gbcrf", {**config, "seed": seed}, xgb.DMatrix(X, label=y, group=lengths), rounds, threads
    )
    return sb.predict_marginals(booster, test[0], lengths=test[2])


def out_of_fold(config, rounds, data, folds, threads):
    """Every training residue's marginals from the first model trained without its fold."""
    W, y, lengths = data
    out = np.empty((y.size, len(pq.PROTEIN_LABELS)))
    rows = np.repeat(folds, lengths)
    for f in np.unique(folds):
        out[rows == f] = marginals(
            config, rounds, pq.subset(W, y, lengths, folds != f),
            pq.subset(W, y, lengths, folds == f), threads,
        )  # fmt: skip
    return out


def stacked(W, probs, lengths, half_width):
    """The one-hot window beside the window of marginals (NaN, i.e. missing, outside)."""
    window = SlidingWindow(half_width=half_width, fill=np.nan).fit_transform(probs, lengths=lengths)
    return np.hstack([W, window]).astype(np.float32)


#: The bagging settings the averaged ensemble chooses from by cross-validation, on top of
#: the first model's setting: row and column subsampling, and the learning rate.
BAGGING = (
    {"subsample": 0.7, "colsample_bynode": 0.5},
    {"subsample": 0.5, "colsample_bynode": 0.5},
    {"subsample": 0.7, "colsample_bynode": 0.5, "eta": 0.2},
    {"subsample": 0.5, "colsample_bynode": 0.3, "eta": 0.2},
)


def averaged_hits(config, train, test, bags, rounds, every, threads):
    """Whether each residue of ``test`` is labelled right by the marginals averaged over
    ``bags`` GBCRFs of different seeds, after every ``every`` rounds: ``(rounds // every, n)``.
    """
    X, y, lengths = train
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    checkpoints = range(every, rounds + 1, every)
    total = np.zeros((len(checkpoints), test[1].size, len(pq.PROTEIN_LABELS)))
    for seed in range(bags):
        booster, _ = pq.train("gbcrf", {**config, "seed": seed}, dtrain, rounds, threads)
        for i, r in enumerate(checkpoints):
            total[i] += sb.predict_marginals(booster[:r], test[0], lengths=test[2])
    return total.argmax(axis=2) == test[1]


def choose_bagging(config, data, folds, args):
    """The bagging setting and round count of the best mean held-out accuracy over the
    folds: ``(config, rounds, cv_accuracy)``.
    """
    W, y, lengths = data
    best = None
    for bagging in BAGGING:
        t0 = time.perf_counter()
        bagged = {**config, **bagging}
        curve = np.mean([
            averaged_hits(bagged, pq.subset(W, y, lengths, folds != f),
                          pq.subset(W, y, lengths, folds == f), args.bags, args.bag_rounds,
                          args.every, args.threads).mean(axis=1)
            for f in range(args.folds)
        ], axis=0)  # fmt: skip
        rounds = args.every * (int(np.argmax(curve)) + 1)
        print(f"  averaged {bagging}: best {rounds} rounds, CV acc {curve.max():.4f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        if best is None or curve.max() > best[2]:
            best = (bagged, rounds, float(curve.max()))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder with protein-secondary-structure.*")
    ap.add_argument("--half-width", type=int, default=5)
    ap.add_argument("--stack-half-width", type=int, default=6)
    ap.add_argument("--stack-folds", type=int, default=5)
    ap.add_argument("--bags", type=int, default=10)
    ap.add_argument("--bag-rounds", type=int, default=160,
                    help="averaged: most rounds of a member, chosen by cross-validation")
    ap.add_argument("--every", type=int, default=8,
                    help="averaged: round counts tried are the multiples of this")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-rounds", type=int, default=600)
    ap.add_argument("--patience", type=int, default=100)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--homology", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", nargs="+", default=["averaged", "stacked"],
                    choices=["averaged", "stacked"])
    ap.add_argument("--first", type=Path, default=pq.RESULTS / "protein_qs.csv")
    ap.add_argument("--out", type=Path, default=pq.RESULTS / "protein_stacked.csv")
    args = ap.parse_args()

    X, y, lengths, residues = pq.load_part(args.data_dir, "train", with_residues=True)
    Xt, yt, lt = pq.load_part(args.data_dir, "test")
    W, Wt = pq.windowed(X, lengths, args.half_width), pq.windowed(Xt, lt, args.half_width)
    clusters = pq.homology_clusters(residues, lengths, args.homology)
    folds = pq.protein_folds(clusters, lengths, args.folds, args.seed)
    config, rounds = first_model(args.first)
    print(f"first model: {config}, {rounds} rounds; {pq.machine_line()}", flush=True)

    rows = []
    if "averaged" in args.methods:
        t0 = time.perf_counter()
        bagged, bag_rounds, cv = choose_bagging(config, (W, y, lengths), folds, args)
        t1 = time.perf_counter()
        hits = averaged_hits(bagged, (W, y, lengths), (Wt, yt, lt), args.bags,
                             args.bag_rounds, args.every, args.threads)
        curve, correct = hits.mean(axis=1), hits[bag_rounds // args.every - 1]
        row = pq.result_row(f"gbcrf averaged x{args.bags}", "marginal", bagged, bag_rounds,
                            cv, correct, lt, time.perf_counter() - t1)
        rows.append({**row, "test_peak": round(100 * curve.max(), 2),
                     "peak_round": args.every * (int(np.argmax(curve)) + 1)})
        print(f"averaged: {100 * correct.mean():.2f}% (peak {100 * curve.max():.2f}%; choice "
              f"{t1 - t0:.0f} s)", flush=True)
    if "stacked" in args.methods:
        t0 = time.perf_counter()
        stack_folds = pq.protein_folds(clusters, lengths, args.stack_folds, args.seed + 1)
        oof = out_of_fold(config, rounds, (W, y, lengths), stack_folds, args.threads)
        test_probs = marginals(config, rounds, (W, y, lengths), (Wt, yt, lt), args.threads)
        first_seconds = time.perf_counter() - t0
        data = (
            (stacked(W, oof, lengths, args.stack_half_width), y, lengths),
            (stacked(Wt, test_probs, lt, args.stack_half_width), yt, lt),
            folds,
        )
        for row in pq.run_mode("gbcrf", data, args):
            row["method"] = "gbcrf stacked on gbcrf"
            row["train_seconds"] = round(row["train_seconds"] + first_seconds, 1)
            rows.append(row)
            print(f"stacked ({row['decode']}): {row['test_accuracy']:.2f}%", flush=True)
    pq.write_csv(rows, args.out)
    print()
    print(pq.markdown(pq.earlier_rows(args.first, []) + rows))


if __name__ == "__main__":
    main()
