"""How precisely the L-BFGS transition refit should solve each round.

GBCRF with the library's defaults (adaptive step) on three problems, once
per setting of the refit: its diminishing-returns tolerance
(``structboost.transitions.lbfgs.RTOL``, a refit that continues from kept
curvature pairs stops once its next step is predicted to gain less than
this fraction of what it has gained) and ``transition_iter``. Reported per
run: the training NLL per sequence after rounds 5, 10 and the last, the
test NLL and token error (Viterbi), L-BFGS evaluations per round and CPU
seconds of training (one thread).

* ``demo``: the synthetic sticky HMM of ``structboost demo`` (300
  sequences, P(stay) 0.95, emission 0.5, seed 0; 70% training), depth 3,
  eta 1 (the demo's GBCRF settings), 30 rounds;
* ``ocr``: the quick split (test fold 0, training folds 1-8), per-label
  trees of depth 6, eta 0.3, 25 rounds;
* ``protein``: protein-qs's training and test proteins, windows of 11
  residues, depth 6, eta 0.3, 60 rounds.

Usage::

    python benchmarks/refit_tolerance.py --data-dir ../shared/data/ocr \
        --protein-dir ../shared/data/protein-qs [--settings 0.1:5,0.03:5,0.01:5,0.01:2]

Prints a Markdown table for benchmarks/README.md.
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.datasets import load_ocr, make_hmm_sequences, ocr_split
from structboost.transitions import base as transitions_base
from structboost.transitions import lbfgs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protein_qs import load_part, windowed  # noqa: E402


def counting_minimize(rtol, counter):
    """``lbfgs.minimize`` with tolerance ``rtol`` that adds its evaluations to ``counter[0]``."""

    def minimize(fun, x0, max_iter, memory):
        x, evaluations = lbfgs.minimize(fun, x0, max_iter, memory, rtol=rtol)
        counter[0] += evaluations
        return x, evaluations

    return minimize


def problems(args):
    """``name -> (train, test, eta, depth, rounds)`` with parts ``(X, y, lengths)``."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=300, length=(10, 40), stay=0.95, emission=0.5, window=1, random_state=0
    )
    m = int(0.7 * len(lengths))
    cut = int(lengths[:m].sum())
    out = {"demo": ((X[:cut], y[:cut], lengths[:m]), (X[cut:], y[cut:], lengths[m:]), 1.0, 3, 30)}
    train, _, test = ocr_split(load_ocr(args.data_dir), test_folds=[0], valid_folds=[9])
    out["ocr"] = tuple(
        (part.X.astype(np.float32), np.asarray(part.y), np.asarray(part.lengths))
        for part in (train, test)
    ) + (0.3, 6, 25)
    X, y, lengths = load_part(args.protein_dir, "train")
    Xt, yt, lt = load_part(args.protein_dir, "test")
    out["protein"] = ((windowed(X, lengths, 5), y, lengths), (windowed(Xt, lt, 5), yt, lt), 0.3, 6, 60)
    return out


def run(train, test, eta, depth, rounds, rtol, iters):
    k = int(train[1].max()) + 1
    counter = [0]
    transitions_base.minimize = counting_minimize(rtol, counter)
    dtrain = xgb.DMatrix(train[0], label=train[1], group=train[2])
    dtest = xgb.DMatrix(test[0], label=test[1], group=test[2])
    obj = sb.crf_objective(k, transition_iter=iters, nthread=1)
    log = {}
    t0 = time.process_time()
    booster = xgb.train(
        sb.xgb_params(k, max_depth=depth, eta=eta, nthread=1), dtrain, rounds, obj=obj,
        custom_metric=obj.metric, evals=[(dtrain, "train"), (dtest, "test")],
        evals_result=log, verbose_eval=False, callbacks=[obj.callback()],
    )  # fmt: skip
    seconds = time.process_time() - t0
    nll = log["train"]["crf-nll"]
    error = 100 * np.mean(sb.predict(booster, dtest) != test[1])
    return nll[4], nll[9], nll[-1], log["test"]["crf-nll"][-1], error, counter[0] / rounds, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz (OCR)")
    ap.add_argument("--protein-dir", required=True, help="protein-qs folder")
    ap.add_argument("--settings", default="0.1:5,0.03:5,0.01:5,0.01:2",
                    help="comma-separated RTOL:transition_iter")
    args = ap.parse_args()
    numba.set_num_threads(1)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}, "
        f"xgboost {xgb.__version__}, numba {numba.__version__}, structboost {sb.__version__}"
    )
    print()
    print("| problem | RTOL | transition_iter | train NLL round 5 | 10 | last | test NLL | "
          "test error % | evaluations / round | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (train, test, eta, depth, rounds) in problems(args).items():
        for setting in args.settings.split(","):
            rtol, iters = setting.split(":")
            r5, r10, last, test_nll, error, evals, sec = run(
                train, test, eta, depth, rounds, float(rtol), int(iters)
            )
            print(f"| {name} | {rtol} | {iters} | {r5:.4f} | {r10:.4f} | {last:.4f} | "
                  f"{test_nll:.4f} | {error:.2f} | {evals:.2f} | {sec:.1f} |", flush=True)


if __name__ == "__main__":
    main()
