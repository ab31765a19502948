"""Objective vs iterations and seconds: majorization (full, low-rank), L-BFGS, steepest descent.

Two problems on the OCR letters (Taskar), both with their L2 penalty:

(a) the linear-chain CRF of :mod:`structboost.estimators.linear` (node scores linear in
    the 128 pixels plus intercepts, transitions, start and end: d = 4082) on
    the first ``--words`` words of fold 0;
(b) the per-round transition refit of GBCRF (d = 728): the margins of a
    booster after ``--rounds`` GBCRF rounds on fold 0 (all 626 words), and the
    transition, start and end scores refit from zero at those margins.

Solvers: ``majorize`` (Jebara & Choromanska 2012, Algorithm 3 bound, full
curvature), ``majorize-lowrank`` (the same bound's rank-one terms streamed
into rank ``--rank`` plus a diagonal, Algorithm 4, never forming ``d x d``), L-BFGS (scipy L-BFGS-B) and
steepest descent with a backtracking (Armijo) line search. Each runs from the
same start until ``--max-iter`` iterations or ``--seconds`` seconds.

Writes ``benchmarks/results/solvers.png`` and ``solvers.json`` and prints a
Markdown table.

Usage::

    python benchmarks/solvers.py --data-dir ../shared/data/ocr [--words 150] [--rounds 5]
        [--rank 20] [--seconds 120] [--max-iter 300] [--threads 1]
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import matplotlib
import numba
import numpy as np
import scipy
import xgboost as xgb
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

import structboost as sb
from structboost.datasets import load_ocr, ocr_split
from structboost.estimators.linear import LinearChainProblem
from structboost.transitions.majorize import ChainCRFTerm, fit_majorize
from structboost.transitions.chain import TransitionProblem

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SOLVERS = ("majorize", "majorize-lowrank", "lbfgs", "steepest")
REACH = 1e-4  # "reached": within this relative gap of the best value found (the paper's epsilon)


class _OutOfTime(Exception):
    """Raised from a callback to stop a solver at its time budget."""


class Trace:
    """Objective values and the seconds at which a solver reached them."""

    def __init__(self, budget):
        self.budget = budget
        self.start = time.perf_counter()
        self.values, self.seconds = [], []

    def record(self, value):
        self.values.append(float(value))
        self.seconds.append(time.perf_counter() - self.start)
        if self.seconds[-1] > self.budget:
            raise _OutOfTime


def run_majorize(term, offset, theta0, reg, rank, args):
    trace = Trace(args.seconds)
    try:
        fit_majorize(
            [term], theta0, reg, args.max_iter, 0.0, rank,
            lambda i, theta, j: trace.record(j + offset),
        )
    except _OutOfTime:
        pass
    return trace


def run_lbfgs(value_and_grad, value, theta0, args):
    trace = Trace(args.seconds)
    trace.record(value(theta0))
    try:
        minimize(
            value_and_grad,
            theta0,
            jac=True,
            method="L-BFGS-B",
            callback=lambda theta: trace.record(value(theta)),
            options={"maxiter": args.max_iter, "ftol": 0.0, "gtol": 0.0},
        )
    except _OutOfTime:
        pass
    return trace


def run_steepest(value_and_grad, theta0, args, shrink=0.5, armijo=1e-4):
    """Steepest descent; the step doubles after each success and halves until Armijo holds."""
    trace = Trace(args.seconds)
    theta = theta0
    value, grad = value_and_grad(theta)
    trace.record(value)
    step = 1.0 / max(1.0, np.linalg.norm(grad))
    try:
        for _ in range(args.max_iter):
            step *= 2.0
            slope = grad @ grad
            while True:
                candidate = theta - step * grad
                cand_value, cand_grad = value_and_grad(candidate)
                if cand_value <= value - armijo * step * slope or step < 1e-20:
                    break
                step *= shrink
            theta, value, grad = candidate, cand_value, cand_grad
            trace.record(value)
    except _OutOfTime:
        pass
    return trace


def first_words(data, words):
    """The first ``words`` training words of OCR fold 0."""
    train, _, _ = ocr_split(data, test_folds=range(1, 10))
    keep = np.zeros(train.n_sequences, dtype=bool)
    keep[:words] = True
    return train.subset(keep)


def linear_problem(data, args):
    """(a): the linear-chain CRF on the first ``--words`` words of fold 0."""
    train = first_words(data, args.words)
    problem = LinearChainProblem(train.X, train.y, train.lengths, 26, args.reg)
    theta0 = np.zeros(problem.dim)
    traces = {
        "majorize": run_majorize(problem, 0.0, theta0, args.reg, None, args),
        "majorize-lowrank": run_majorize(problem, 0.0, theta0, args.reg, args.rank, args),
        "lbfgs": run_lbfgs(problem.value_and_grad, problem.value, theta0, args),
        "steepest": run_steepest(problem.value_and_grad, theta0, args),
    }
    info = (
        f"(a) linear CRF, fold 0 words 1-{train.n_sequences} ({train.X.shape[0]} letters), "
        f"d = {problem.dim}"
    )
    return info, traces


def transition_problem(data, args):
    """(b): the transition refit at the margins of a GBCRF booster."""
    train, _, _ = ocr_split(data, test_folds=range(1, 10))
    dtrain = xgb.DMatrix(train.X, label=train.y, group=train.lengths)
    obj = sb.crf_objective(26, reg_transitions=args.reg)
    booster = xgb.train(
        sb.xgb_params(26, max_depth=6, eta=0.3, nthread=args.threads),
        dtrain,
        num_boost_round=args.rounds,
        obj=obj,
    )
    margins = booster.predict(dtrain, output_margin=True).astype(np.float64)
    batch = obj.batch(dtrain)
    problem = TransitionProblem(margins, batch.offsets, batch.seq_weight, batch.counts, args.reg)
    term = ChainCRFTerm(margins, train.lengths, train.y)
    theta0 = np.zeros(term.dim)
    # TransitionProblem.value leaves out the gold node scores that the term counts
    traces = {
        "majorize": run_majorize(term, term.observed_score, theta0, args.reg, None, args),
        "majorize-lowrank": run_majorize(
            term, term.observed_score, theta0, args.reg, args.rank, args
        ),
        "lbfgs": run_lbfgs(problem.value_and_grad, problem.value, theta0, args),
        "steepest": run_steepest(problem.value_and_grad, theta0, args),
    }
    info = (
        f"(b) transition refit, margins after {args.rounds} GBCRF rounds, fold 0 "
        f"({train.n_sequences} words, {train.X.shape[0]} letters), d = {term.dim}"
    )
    return info, traces


def reached(trace, best):
    """First iteration and second within ``REACH`` (relative) of ``best``, or None."""
    values = np.asarray(trace.values)
    hits = np.flatnonzero(values - best <= REACH * abs(best))
    return (int(hits[0]), trace.seconds[hits[0]]) if hits.size else None


def table(name, traces):
    best = min(min(t.values) for t in traces.values())
    print(f"\n**{name}** (best value found {best:.4f})\n")
    print("| solver | iterations | seconds | s / iteration | final value | rel. gap | "
          f"iterations to gap {REACH:g} | seconds to gap {REACH:g} |")
    print("|---|---|---|---|---|---|---|---|")
    for solver, t in traces.items():
        iters = len(t.values) - 1
        per = t.seconds[-1] / max(iters, 1)
        hit = reached(t, best)
        to_iter, to_sec = (f"{hit[0]}", f"{hit[1]:.2f}") if hit else ("not reached", "")
        gap = (t.values[-1] - best) / abs(best)
        print(f"| {solver} | {iters} | {t.seconds[-1]:.1f} | {per:.3f} | {t.values[-1]:.4f} | "
              f"{gap:.1e} | {to_iter} | {to_sec} |")


def plot(panels, path):
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 4 * len(panels)), squeeze=False)
    for row, (name, traces) in enumerate(panels):
        best = min(min(t.values) for t in traces.values())
        for col, x_of in enumerate(("iteration", "seconds")):
            ax = axes[row, col]
            for solver, t in traces.items():
                gap = np.maximum((np.asarray(t.values) - best) / abs(best), 1e-12)
                x = np.arange(gap.size) if x_of == "iteration" else t.seconds
                ax.semilogy(x, gap, marker="." if gap.size < 40 else None, label=solver)
            ax.set_xlabel(x_of)
            ax.set_ylabel("(f - f_best) / |f_best|")
            ax.set_title(name.replace(", ", "\n", 1), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz")
    ap.add_argument("--words", type=int, default=150, help="fold-0 words for the linear CRF")
    ap.add_argument("--rounds", type=int, default=5, help="GBCRF rounds before the refit")
    ap.add_argument("--reg", type=float, default=1.0, help="L2 penalty (on the summed NLL)")
    ap.add_argument("--rank", type=int, default=20, help="rank of the low-rank curvature")
    ap.add_argument("--seconds", type=float, default=120.0, help="budget per solver and problem")
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1, help="BLAS, numba and XGBoost threads")
    ap.add_argument("--problems", default="linear,transitions")
    args = ap.parse_args()

    numba.set_num_threads(args.threads)
    RESULTS.mkdir(exist_ok=True)
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"machine: {platform.machine()} {platform.processor()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start; python {platform.python_version()}, "
        f"numpy {np.__version__}, scipy {scipy.__version__}, numba {numba.__version__}, "
        f"xgboost {xgb.__version__}, structboost {sb.__version__}; {args.threads} thread(s)"
    )
    data = load_ocr(args.data_dir)
    builders = {"linear": linear_problem, "transitions": transition_problem}
    panels = []
    clock = time.perf_counter()
    with threadpool_limits(limits=args.threads):
        for name in args.problems.split(","):
            panels.append(builders[name](data, args))
    for name, traces in panels:
        table(name, traces)
    load = os.getloadavg()[0]
    print(f"\ntotal {time.perf_counter() - clock:.0f} s; load average {load:.1f} at the end")
    plot(panels, RESULTS / "solvers.png")
    raw = {
        name: {s: {"values": t.values, "seconds": t.seconds} for s, t in traces.items()}
        for name, traces in panels
    }
    record = {"command": sys.argv, "problems": raw}
    (RESULTS / "solvers.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
