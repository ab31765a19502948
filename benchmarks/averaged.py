"""Seed averaging: several boosted CRFs with row and column subsampling, marginals averaged.

Trains ``--members`` copies of ``XGBCRFClassifier(n_jobs=1, random_state=i,
**--params)`` on the training part of a quick split of ``levers.py``
(``--dataset ocr``: test fold 0, validation fold 9, training on the other
eight; ``protein``: three homology splits of the training proteins) and
averages their posterior marginals before decoding each position by its
most probable label: what ``sklearn.ensemble.VotingClassifier(members,
voting="soft")`` predicts (``docs/getting-started.md``). Each member keeps
the automatic early stopping of the defaults; the validation part only
scores. Prints, and appends to ``--csv``, the error (OCR) or accuracy
(protein) of the first member alone and of the average of the first k
members for k = 1..``--members``, on validation and test, with the CPU
seconds of the fits.

Usage::

    python benchmarks/averaged.py --dataset ocr --data-dir ../shared/data/ocr \
        --params '{"subsample": 0.7, "colsample_bynode": 0.5}' --members 5
"""

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from structboost import XGBCRFClassifier

import levers
from protein_qs import machine_line

RESULTS = Path(__file__).resolve().parent / "results" / "averaged.csv"


def score(dataset, y, marginals, classes):
    """OCR letter error or protein accuracy (%) of the marginals' most probable labels."""
    right = 100.0 * float(np.mean(classes[marginals.argmax(axis=1)] == y))
    return 100.0 - right if dataset == "ocr" else right


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=("ocr", "protein"), required=True)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--params", type=json.loads, default={},
                    help="estimator parameters of every member (a JSON object)")
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--csv", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.merge_labels, args.seed = None, 0  # levers' loaders read them
    splits, (Xt, yt, lt) = levers.DATASETS[args.dataset][0](args)
    sums = [[None, None] for _ in splits]
    cpu = 0.0
    rows = []
    for k in range(1, args.members + 1):
        valid, test = [], []
        for s, ((X, y, lengths), (Xv, yv, lv)) in enumerate(splits):
            t0 = time.process_time()
            est = XGBCRFClassifier(n_jobs=1, random_state=k - 1, **args.params).fit(
                X, y, lengths=lengths)
            cpu += time.process_time() - t0
            parts = (est.predict_marginals(Xv, lengths=lv), est.predict_marginals(Xt, lengths=lt))
            sums[s] = [p if old is None else old + p for old, p in zip(sums[s], parts)]
            valid.append(score(args.dataset, yv, sums[s][0], est.classes_))
            test.append(score(args.dataset, yt, sums[s][1], est.classes_))
        row = {"dataset": args.dataset, "params": json.dumps(args.params, sort_keys=True),
               "members": k, "valid": round(float(np.mean(valid)), 3),
               "test": round(float(np.mean(test)), 3), "fit_cpu_s": round(cpu, 1),
               "machine": machine_line().removeprefix("machine: "), "date": time.strftime("%Y-%m-%d")}
        print(row, flush=True)
        rows.append(row)
    new = not args.csv.exists()
    with open(args.csv, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
