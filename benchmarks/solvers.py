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

(c) ``--problems rounds``: the refit inside training (issue 14). GBCRF with
the library's defaults (adaptive step, ``transition_iter`` 5) and per-label
trees of depth 6, eta 0.3, for ``--train-rounds`` rounds on the OCR quick
split's training words and on the 111 protein training sequences
(``--protein-dir``, a window of 11 residues), one solver after another:
``lbfgs`` as it was before (scipy's L-BFGS-B from an empty memory every
round, the code swapped in by this script), ``lbfgs`` now
(:mod:`structboost.transitions.lbfgs`), a refit run to convergence every
round (the reference) and ``newton``. Per round: objective
evaluations (``value_and_grad`` calls), message passes of the transition
problem, CPU seconds of the objective's ``"transitions"`` timer, and the
training NLL per sequence (the metric after the round's tree). Writes
``solvers_rounds.json``. Then, on the problems of one more training run
(which follows the refit now), scipy's refit and the refit now from the
same start, each against a converged solve: the gap ``f - f*`` to the
optimum of the penalised NLL that each leaves, and its evaluations.

Usage::

    python benchmarks/solvers.py --data-dir ../shared/data/ocr [--words 150] [--rounds 5]
        [--rank 20] [--seconds 120] [--max-iter 300] [--threads 1]
    python benchmarks/solvers.py --data-dir ../shared/data/ocr --problems rounds \
        --protein-dir ../shared/data/protein-qs [--train-rounds 40]
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
from structboost.majorize import ChainCRFTerm, fit_majorize
from structboost.objectives import round as objective_round
from structboost.transitions import base as transition_base
from structboost.transitions.chain import TransitionProblem, refit

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


def scipy_refit(problem, params, solver, max_iter, memory=None):
    """The ``"lbfgs"`` refit before issue 14: scipy's L-BFGS-B, empty memory every round."""
    if solver != "lbfgs":
        return refit(problem, params, solver, max_iter, memory)
    res = minimize(problem.value_and_grad, problem._free_part(params.to_vector()), jac=True,
                   method="L-BFGS-B", options={"maxiter": int(max_iter)})
    return problem.param_type.from_vector(problem._full(res.x), problem.num_labels)


class Counter:
    """Counts objective evaluations and message passes of every transition problem."""

    def __init__(self):
        self.evaluations = self.passes = 0
        evaluate, sweep = transition_base.PenalisedProblem.value_and_grad, TransitionProblem._posterior

        def value_and_grad(problem, x):
            self.evaluations += 1
            return evaluate(problem, x)

        def posterior(problem, params, rates):
            self.passes += 1
            return sweep(problem, params, rates)

        transition_base.PenalisedProblem.value_and_grad = value_and_grad
        TransitionProblem._posterior = posterior


class RoundLog(xgb.callback.TrainingCallback):
    """Per round: evaluations, passes, transition CPU seconds and the training NLL."""

    def __init__(self, obj, counter):
        self.obj, self.counter = obj, counter
        self.rows = []

    def before_iteration(self, model, epoch, evals_log):
        self.mark = (self.counter.evaluations, self.counter.passes,
                     self.obj.crf.timings["transitions"])
        return False

    def after_iteration(self, model, epoch, evals_log):
        evaluations, passes, seconds = self.mark
        self.rows.append({
            "evaluations": self.counter.evaluations - evaluations,
            "passes": self.counter.passes - passes,
            "seconds": self.obj.crf.timings["transitions"] - seconds,
            "nll": evals_log["train"]["crf-nll"][-1],
        })
        return False


class PairedRefit:
    """Training's ``"lbfgs"`` refit (now), and on the same problem scipy's (before) and a
    converged solve: per round, the gap to the optimum each leaves and its evaluations."""

    def __init__(self, counter):
        self.counter = counter
        self.rows = []

    def __call__(self, problem, params, solver, max_iter, memory=None):
        start = self.counter.evaluations
        before = problem._free_part(scipy_refit(problem, params, solver, max_iter).to_vector())
        middle = self.counter.evaluations
        now = refit(problem, params, solver, max_iter, memory)
        x_now = problem._free_part(now.to_vector())
        evaluations = (middle - start, self.counter.evaluations - middle)
        best = minimize(problem.value_and_grad, x_now, jac=True, method="L-BFGS-B",
                        options={"maxiter": 1000, "ftol": 0.0, "gtol": 1e-9})
        values = [problem.value(x) for x in (problem._free_part(params.to_vector()), before,
                                             x_now)]
        optimum = min([best.fun] + values)
        self.rows.append({"start_gap": values[0] - optimum, "before_gap": values[1] - optimum,
                          "now_gap": values[2] - optimum, "before_evaluations": evaluations[0],
                          "now_evaluations": evaluations[1]})
        return now


def converged_refit(problem, params, solver, max_iter, memory=None):
    """The reference: a refit from an empty memory run to convergence (200 iterations at most)."""
    return refit(problem, params, solver, 200)


ROUND_SOLVERS = {
    "lbfgs, scipy L-BFGS-B (before)": ("lbfgs", scipy_refit),
    "lbfgs, memory across rounds (now)": ("lbfgs", refit),
    "lbfgs to convergence (reference)": ("lbfgs", converged_refit),
    "newton": ("newton", refit),
}


def training_rounds(X, y, lengths, k, counter, args):
    """Per-round logs of each entry of ``ROUND_SOLVERS`` on one training set."""
    logs = {}
    for name, (solver, refit_with) in ROUND_SOLVERS.items():
        objective_round.refit = refit_with
        obj = sb.crf_objective(k, transition_solver=solver, nthread=args.threads)
        dtrain = xgb.DMatrix(X, label=y, group=lengths)
        log = RoundLog(obj, counter)
        xgb.train(sb.xgb_params(k, max_depth=6, eta=0.3, nthread=args.threads), dtrain,
                  args.train_rounds, obj=obj, custom_metric=obj.metric,
                  evals=[(dtrain, "train")], verbose_eval=False,
                  callbacks=[obj.callback(), log])
        logs[name] = log.rows
    objective_round.refit = refit
    return logs


def rounds_tables(data, args):
    """(c): print the per-round tables and return their logs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from protein_qs import load_part, windowed

    counter = Counter()
    train, _, _ = ocr_split(data, test_folds=[0], valid_folds=[9])
    sets = {"OCR quick split (5,576 words, K = 26)": (
        train.X.astype(np.float32), np.asarray(train.y), np.asarray(train.lengths), 26)}
    if args.protein_dir:
        X, y, lengths = load_part(args.protein_dir, "train")
        sets["protein (111 sequences, K = 3)"] = (windowed(X, lengths, 5), y, lengths, 3)
    logs = {}
    marks = sorted({r for r in (1, 2, 5, 10, 20, 30) if r < args.train_rounds} | {args.train_rounds})
    for name, (X, y, lengths, k) in sets.items():
        logs[name] = training_rounds(X, y, lengths, k, counter, args)
        print(f"\n**(c) {name}, {args.train_rounds} rounds** (per round: mean over rounds "
              "2 to the last, after the first's compilation)\n")
        print("| solver | evaluations | message passes | transitions CPU s | "
              + " | ".join(f"NLL round {r}" for r in marks) + " |")
        print("|---|---|---|---|" + "---|" * len(marks))
        for solver, rows in logs[name].items():
            mean = {key: np.mean([row[key] for row in rows[1:]])
                    for key in ("evaluations", "passes", "seconds")}
            nll = " | ".join(f"{rows[r - 1]['nll']:.4f}" for r in marks)
            print(f"| {solver} | {mean['evaluations']:.2f} | {mean['passes']:.2f} | "
                  f"{mean['seconds']:.4f} | {nll} |", flush=True)
        logs[name]["same margins"] = same_margins(X, y, lengths, k, counter, marks, args)
    return logs


def same_margins(X, y, lengths, k, counter, marks, args):
    """(c), same margins: each round's refit by scipy and now on one problem (training follows now)."""
    paired = PairedRefit(counter)
    objective_round.refit = paired
    obj = sb.crf_objective(k, nthread=args.threads)
    xgb.train(sb.xgb_params(k, max_depth=6, eta=0.3, nthread=args.threads),
              xgb.DMatrix(X, label=y, group=lengths), args.train_rounds, obj=obj)
    objective_round.refit = refit
    rows = paired.rows
    print("\nThe same problems (training follows the refit now; scipy's L-BFGS-B refits the "
          "same margins from the same start; f* from a converged solve):\n")
    print("| round | f(start) - f* | scipy (before): f - f* | evaluations | now: f - f* | "
          "evaluations |")
    print("|---|---|---|---|---|---|")
    for r in marks:
        row = rows[r - 1]
        print(f"| {r} | {row['start_gap']:.4g} | {row['before_gap']:.4g} | "
              f"{row['before_evaluations']} | {row['now_gap']:.4g} | {row['now_evaluations']} |")
    closer = sum(row["now_gap"] <= row["before_gap"] for row in rows)
    print(f"| all {len(rows)} | | mean {np.mean([r['before_gap'] for r in rows]):.4g} | "
          f"mean {np.mean([r['before_evaluations'] for r in rows]):.2f} | "
          f"mean {np.mean([r['now_gap'] for r in rows]):.4g}; at or below scipy's in {closer} | "
          f"mean {np.mean([r['now_evaluations'] for r in rows]):.2f} |", flush=True)
    return rows


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
    ap.add_argument("--problems", default="linear,transitions",
                    help="comma-separated: linear, transitions, rounds")
    ap.add_argument("--train-rounds", type=int, default=40, help="boosting rounds of (c)")
    ap.add_argument("--protein-dir", help="protein-qs folder for (c); OCR only without it")
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
    problems = args.problems.split(",")
    panels = []
    clock = time.perf_counter()
    with threadpool_limits(limits=args.threads):
        for name in problems:
            if name != "rounds":
                panels.append(builders[name](data, args))
        if "rounds" in problems:
            logs = rounds_tables(data, args)
            record = {"command": sys.argv, "load_average_end": os.getloadavg()[0], "rounds": logs}
            (RESULTS / "solvers_rounds.json").write_text(json.dumps(record, indent=1))
    if not panels:
        return
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
