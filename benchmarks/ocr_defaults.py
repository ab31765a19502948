"""OCR 10-fold cross-validation with the library's defaults only.

For each test fold k of Taskar's letters (``--data-dir``), trains
``XGBCRFClassifier(n_jobs=1)`` (nothing else set: the automatic early
stopping holds out 10% of the training words, stops on them and refits on
all) on the other nine folds and scores the letter error of ``predict``
(Viterbi) and of marginal decoding on fold k. One row per fold is appended
to ``--csv``; the mean and standard deviation over the folds in the file
are printed. ``--folds`` picks a subset (e.g. two processes, one per core);
``--params`` sets estimator parameters beside the defaults (a JSON object);
``--members N`` also scores the average of N such fits' marginals (seeds
0..N-1; ``fit_cpu_s`` is then per fit).

Usage::

    python benchmarks/ocr_defaults.py --data-dir ../shared/data/ocr [--folds 0,1,2]
    python benchmarks/ocr_defaults.py --data-dir ../shared/data/ocr \
        --params '{"multi_strategy": "one_output_per_tree"}' --csv benchmarks/results/ocr_defaults_per_label.csv
"""

import argparse
import csv
import json
import os
import time
from pathlib import Path

import numpy as np

from structboost import XGBCRFClassifier
from structboost.datasets import load_ocr, ocr_split

from protein_qs import machine_line

RESULTS = Path(__file__).resolve().parent / "results" / "ocr_defaults.csv"


def run_fold(data, fold, params, members):
    """One row: letter errors (%) on ``fold`` of the defaults (and ``params``) trained on the
    other nine; with ``members > 1`` also that of the posterior marginals averaged over
    ``members`` such fits of seeds 0, 1, ... (``error_averaged``, each position's most
    probable label; the other errors are the first fit's).
    """
    train, _, test = ocr_split(data, test_folds=[fold])
    t0 = time.process_time()
    fits = [XGBCRFClassifier(n_jobs=1, random_state=seed, **params).fit(
        train.X, train.y, lengths=train.lengths, verbose=False) for seed in range(members)]
    fit_s = (time.process_time() - t0) / members
    est, y = fits[0], np.asarray(test.y)
    errors = {d: 100.0 * float(np.mean(est.predict(test.X, lengths=test.lengths, decode=d) != y))
              for d in ("viterbi", "marginal")}
    row = {"fold": fold, "error_viterbi": round(errors["viterbi"], 3),
           "error_marginal": round(errors["marginal"], 3), "rounds": est.best_iteration_ + 1,
           "validation_best_iteration": getattr(est, "validation_best_iteration_", ""),
           "fit_cpu_s": round(fit_s, 1), "load_1min": round(os.getloadavg()[0], 2)}
    if members > 1:
        averaged = np.mean([f.predict_marginals(test.X, lengths=test.lengths) for f in fits], axis=0)
        error = 100.0 * float(np.mean(est.classes_[averaged.argmax(axis=1)] != y))
        row = {**row, "members": members, "error_averaged": round(error, 3)}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz")
    ap.add_argument("--folds", default="all", help="'all' or a comma list of test folds")
    ap.add_argument("--csv", type=Path, default=RESULTS)
    ap.add_argument("--params", type=json.loads, default={},
                    help="estimator parameters beside the defaults, a JSON object")
    ap.add_argument("--members", type=int, default=1,
                    help="fits of seeds 0, 1, ... whose marginals are averaged (error_averaged)")
    args = ap.parse_args()
    print(machine_line(), flush=True)
    data = load_ocr(args.data_dir)
    folds = range(10) if args.folds == "all" else [int(f) for f in args.folds.split(",")]
    for fold in folds:
        row = run_fold(data, fold, args.params, args.members)
        print(row, flush=True)
        new = not args.csv.exists()
        with args.csv.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(row))
            if new:
                writer.writeheader()
            writer.writerow(row)
    with args.csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for key in [k for k in rows[0] if k.startswith("error_")]:
        values = np.array([float(r[key]) for r in rows])
        print(f"{key}: {values.mean():.2f} +- {values.std(ddof=1) if len(values) > 1 else 0:.2f} "
              f"over {len(values)} folds")


if __name__ == "__main__":
    main()
