"""OCR 10-fold cross-validation with the library's defaults only.

For each test fold k of Taskar's letters (``--data-dir``), trains
``XGBCRFClassifier(n_jobs=1)`` (nothing else set: the automatic early
stopping holds out 10% of the training words, stops on them and refits on
all) on the other nine folds and scores the letter error of ``predict``
(Viterbi) and of marginal decoding on fold k. One row per fold is appended
to ``--csv``; the mean and standard deviation over the folds in the file
are printed. ``--folds`` picks a subset (e.g. two processes, one per core);
``--params`` sets estimator parameters beside the defaults (a JSON object).

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
FIELDS = ("fold", "error_viterbi", "error_marginal", "rounds", "validation_best_iteration",
          "fit_cpu_s", "load_1min")


def run_fold(data, fold, params):
    """One row: letter errors (%) on ``fold`` of the defaults (and ``params``) trained on the
    other nine.
    """
    train, _, test = ocr_split(data, test_folds=[fold])
    est = XGBCRFClassifier(n_jobs=1, **params)
    t0 = time.process_time()
    est.fit(train.X, train.y, lengths=train.lengths, verbose=False)
    fit_s = time.process_time() - t0
    y = np.asarray(test.y)
    errors = {d: 100.0 * float(np.mean(est.predict(test.X, lengths=test.lengths, decode=d) != y))
              for d in ("viterbi", "marginal")}
    return {"fold": fold, "error_viterbi": round(errors["viterbi"], 3),
            "error_marginal": round(errors["marginal"], 3), "rounds": est.best_iteration_ + 1,
            "validation_best_iteration": getattr(est, "validation_best_iteration_", ""),
            "fit_cpu_s": round(fit_s, 1), "load_1min": round(os.getloadavg()[0], 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz")
    ap.add_argument("--folds", default="all", help="'all' or a comma list of test folds")
    ap.add_argument("--csv", type=Path, default=RESULTS)
    ap.add_argument("--params", type=json.loads, default={},
                    help="estimator parameters beside the defaults, a JSON object")
    args = ap.parse_args()
    print(machine_line(), flush=True)
    data = load_ocr(args.data_dir)
    folds = range(10) if args.folds == "all" else [int(f) for f in args.folds.split(",")]
    for fold in folds:
        row = run_fold(data, fold, args.params)
        print(row, flush=True)
        new = not args.csv.exists()
        with args.csv.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            if new:
                writer.writeheader()
            writer.writerow(row)
    with args.csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for key in ("error_viterbi", "error_marginal"):
        values = np.array([float(r[key]) for r in rows])
        print(f"{key}: {values.mean():.2f} +- {values.std(ddof=1) if len(values) > 1 else 0:.2f} "
              f"over {len(values)} folds")


if __name__ == "__main__":
    main()
