"""Latent likelihood and low-rank bound experiments of Jebara & Choromanska (2012), on data at hand.

(a) Maximum latent conditional likelihood (the paper's section 7, Table 2 and
    Figure 1) with :class:`structboost.LatentLogLinearClassifier`, solvers
    ``bound`` (the monotone majorization update), ``lbfgs`` and ``em``
    (generative EM on a Gaussian mixture per class, then conditioned), on

    - ``toy``: a two-class toy in the spirit of Figure 1 (whose exact layout
      the paper does not give): 8 Gaussians, 4 per class (an XOR of tight and
      broad clusters), fitted with ``m = 2`` hidden states per class as in
      the paper, generated here;
    - ``wine`` and ``breast-cancer``: scikit-learn's bundled sets.

    Each set is split 2/3 train and 1/3 test (stratified, ``--seed``), the
    inputs standardized on the training part. On wine and breast-cancer ``m``
    in ``--hidden`` is chosen per solver by 3-fold cross-validation of the held-out latent
    log-likelihood on the training part; every solver starts from the same
    random point (``random_state``). Reported: the summed test latent
    log-likelihood ``sum log p(y | x)`` at convergence, test accuracy,
    iterations and seconds of the final fit.

(b) The low-rank bound on the OCR linear-chain CRF of
    :mod:`structboost.estimators.linear` (``d = 4082``) on the first ``--ocr-words``
    words of fold 0: the dense Algorithm 3 bound, the streamed low-rank
    bound of Algorithm 4 (``--rank``) and L-BFGS, each for
    ``--ocr-iter`` iterations from zero, with the peak memory of one
    bound (or gradient) evaluation measured by ``tracemalloc`` and the
    seconds per iteration.

Prints Markdown tables and writes ``benchmarks/results/latent.json``.

Usage::

    python benchmarks/latent.py --data-dir ../shared/data/ocr [--ocr-words 8] [--ocr-iter 3]
        [--rank 10] [--reg 1.0] [--hidden 1,2,3,4] [--init-scale 1] [--parts latent,ocr]
"""

import argparse
import json
import os
import platform
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import scipy
import sklearn
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

import structboost as sb
from structboost.datasets import load_ocr
from structboost.estimators.latent import SOLVERS, LatentLogLinearClassifier
from structboost.estimators.linear import LinearChainProblem
from structboost.majorize import fit_majorize

from solvers import first_words  # noqa: E402 (benchmarks/ is on the path of a script run)

RESULTS = Path(__file__).resolve().parent / "results"


def figure_1_toy(seed, n=400):
    """Two classes from 8 Gaussians: a tight (sd 0.3, radius 1.5) and a broad (sd 1, radius 4)
    one on the diagonal of every quadrant, the class the quadrant's parity (an XOR)."""
    rng = np.random.default_rng(seed)
    quadrant = rng.integers(0, 4, size=n)
    far = rng.random(n) < 0.5
    signs = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]])[quadrant]
    centre = signs * np.where(far, 4.0, 1.5)[:, None]
    X = centre + np.where(far, 1.0, 0.3)[:, None] * rng.standard_normal((n, 2))
    return X, quadrant % 2


DATASETS = {
    "toy": figure_1_toy,
    "wine": lambda seed: load_wine(return_X_y=True),
    "breast-cancer": lambda seed: load_breast_cancer(return_X_y=True),
}


def make_model(solver, m, args):
    return LatentLogLinearClassifier(
        n_hidden=m,
        solver=solver,
        reg=args.reg,
        max_iter=args.max_iter,
        tol=args.tol,
        init_scale=args.init_scale,
        random_state=args.seed,
    )


def choose_hidden(solver, X, y, args):
    """``m`` with the best 3-fold held-out latent log-likelihood on the training part."""
    folds = StratifiedKFold(3, shuffle=True, random_state=args.seed)
    scores = {}
    for m in args.hidden:
        total = 0.0
        for fit_rows, held_rows in folds.split(X, y):
            scaler = StandardScaler().fit(X[fit_rows])
            model = make_model(solver, m, args).fit(scaler.transform(X[fit_rows]), y[fit_rows])
            total += model.log_likelihood(scaler.transform(X[held_rows]), y[held_rows])
        scores[m] = total
    return max(scores, key=scores.get), scores


def latent_part(args):
    rows = []
    for name, load in DATASETS.items():
        X, y = load(args.seed)
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=1 / 3, stratify=y, random_state=args.seed
        )
        scaler = StandardScaler().fit(X_train)
        for solver in SOLVERS:
            m, cv = (2, {}) if name == "toy" else choose_hidden(solver, X_train, y_train, args)
            start = time.perf_counter()
            model = make_model(solver, m, args).fit(scaler.transform(X_train), y_train)
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "data": name,
                    "n_train": len(y_train),
                    "n_test": len(y_test),
                    "p": X.shape[1],
                    "solver": solver,
                    "m": m,
                    "cv_loglik": cv,
                    "test_loglik": model.log_likelihood(scaler.transform(X_test), y_test),
                    "test_accuracy": model.score(scaler.transform(X_test), y_test),
                    "train_objective": float(model.history_[-1]),
                    "iterations": model.n_iter_,
                    "seconds": seconds,
                }
            )
            print(f"  {name} {solver}: m = {m}, {seconds:.2f} s", file=sys.stderr)
    return rows


def peak_mib(call):
    """Result of ``call()`` and the peak of Python-allocated memory during it, MiB."""
    tracemalloc.start()
    result = call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, peak / 2**20


def ocr_part(args):
    data = load_ocr(args.data_dir)
    train = first_words(data, args.ocr_words)
    problem = LinearChainProblem(train.X, train.y, train.lengths, 26, args.reg)
    theta0 = np.zeros(problem.dim)
    rows = []
    for name, rank in (("dense bound (Alg. 3)", None), (f"low-rank bound (Alg. 4, k = {args.rank})", args.rank)):
        _, memory = peak_mib(lambda: problem.bound(theta0, rank))
        start = time.perf_counter()
        _, history = fit_majorize([problem], theta0, args.reg, args.ocr_iter, 0.0, rank)
        seconds = time.perf_counter() - start
        rows.append((name, history, seconds, memory))
    _, memory = peak_mib(lambda: problem.value_and_grad(theta0 + 1e-3))
    history = [problem.value(theta0)]
    start = time.perf_counter()
    minimize(
        problem.value_and_grad,
        theta0,
        jac=True,
        method="L-BFGS-B",
        callback=lambda theta: history.append(problem.value(theta)),
        options={"maxiter": args.ocr_iter, "ftol": 0.0, "gtol": 0.0},
    )
    rows.append(("L-BFGS", history, time.perf_counter() - start, memory))
    info = {
        "words": train.n_sequences,
        "letters": int(train.X.shape[0]),
        "d": problem.dim,
        "dense_curvature_mib": problem.dim**2 * 8 / 2**20,
    }
    return info, [
        {"solver": n, "history": list(map(float, h)), "seconds": s, "peak_mib": mem} for n, h, s, mem in rows
    ]


def print_latent(rows):
    print("\n| data (train/test, p) | solver | m (CV; toy: 2) | test latent log-lik. | test acc. | "
          "train objective | iterations | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['data']} ({r['n_train']}/{r['n_test']}, {r['p']}) | {r['solver']} | {r['m']} | "
              f"{r['test_loglik']:.2f} | {r['test_accuracy']:.3f} | {r['train_objective']:.2f} | "
              f"{r['iterations']} | {r['seconds']:.2f} |")


def print_ocr(info, rows):
    print(f"\nOCR linear CRF: {info['words']} words, {info['letters']} letters, d = {info['d']} "
          f"(a dense d x d curvature is {info['dense_curvature_mib']:.0f} MiB)\n")
    print("| solver | iterations | objective start -> end | seconds | s / iteration | "
          "peak MiB of one evaluation |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        h = r["history"]
        iters = len(h) - 1
        print(f"| {r['solver']} | {iters} | {h[0]:.1f} -> {h[-1]:.1f} | {r['seconds']:.1f} | "
              f"{r['seconds'] / max(iters, 1):.2f} | {r['peak_mib']:.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", help="folder holding letters.npz (for --parts ocr)")
    ap.add_argument("--parts", default="latent,ocr")
    ap.add_argument("--hidden", default="1,2,3,4", help="candidate m, comma separated")
    ap.add_argument("--reg", type=float, default=1.0, help="L2 penalty on the summed log-likelihood")
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-scale", type=float, default=1.0, help="sd of the random start")
    ap.add_argument("--ocr-words", type=int, default=8)
    ap.add_argument("--ocr-iter", type=int, default=3)
    ap.add_argument("--rank", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    args.hidden = [int(m) for m in args.hidden.split(",")]
    parts = args.parts.split(",")
    if "ocr" in parts and not args.data_dir:
        ap.error("--data-dir is needed for the ocr part")

    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"machine: {platform.machine()} {platform.processor()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start; python {platform.python_version()}, "
        f"numpy {np.__version__}, scipy {scipy.__version__}, scikit-learn {sklearn.__version__}, "
        f"structboost {sb.__version__}; {args.threads} thread(s)"
    )
    record = {"command": sys.argv}
    clock = time.perf_counter()
    with threadpool_limits(limits=args.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if "latent" in parts:
            record["latent"] = latent_part(args)
            print_latent(record["latent"])
        if "ocr" in parts:
            info, rows = ocr_part(args)
            record["ocr"] = {"info": info, "rows": rows}
            print_ocr(info, rows)
    print(f"\ntotal {time.perf_counter() - clock:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latent.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
