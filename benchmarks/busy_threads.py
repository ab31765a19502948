"""Wall time of 60 OCR rounds with the default threads, every core and ``n_jobs=1``, beside a busy job.

Runs ``XGBCRFClassifier`` (max_depth 6, 60 rounds) on the first ``--words``
OCR words with ``n_jobs=None`` (the default: one thread, as in
scikit-learn), ``n_jobs=-1`` (every core, for XGBoost and the numba
kernels) and ``n_jobs=1``, while one other process spins on a core
(``--busy 0`` for an idle machine). ``--preload xgboost`` imports
XGBoost before structboost, as many scripts do (the order does not matter).

    python benchmarks/busy_threads.py --data /path/to/ocr --words 2000
    python benchmarks/busy_threads.py --data /path/to/ocr --busy 0
"""

import argparse
import importlib
import multiprocessing
import os
import time


def _spin():
    while True:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="folder holding letters.npz")
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--busy", type=int, default=1, help="spinning processes beside")
    parser.add_argument("--preload", default=None,
                        help="a module to import before structboost (e.g. xgboost)")
    args = parser.parse_args()
    if args.preload:
        importlib.import_module(args.preload)
    from structboost import XGBCRFClassifier
    from structboost.datasets import load_ocr

    print(f"load {os.getloadavg()}", flush=True)
    data = load_ocr(args.data)
    lengths = data.lengths[: args.words]
    n = int(lengths.sum())
    X, y = data.X[:n], data.y[:n]
    # Compile first, outside the timings.
    m = int(lengths[:200].sum())
    XGBCRFClassifier(n_estimators=1, max_depth=2).fit(X[:m], y[:m], lengths=lengths[:200])
    XGBCRFClassifier(n_estimators=1, max_depth=2).fit(X, y, lengths=lengths)
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    try:
        for n_jobs in (None, -1, 1):
            t0 = time.perf_counter()
            XGBCRFClassifier(n_estimators=args.rounds, max_depth=6, n_jobs=n_jobs).fit(
                X, y, lengths=lengths
            )
            print(f"n_jobs={n_jobs!s:<5} {n} rows, {args.rounds} rounds: "
                  f"{time.perf_counter() - t0:6.1f} s wall", flush=True)
    finally:
        for p in busy:
            p.terminate()


if __name__ == "__main__":
    main()
