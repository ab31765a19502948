"""OCR handwriting benchmark: Table 2 and Figure 1 of Chen et al. (2015).

Taskar's OCR letters (6,877 words, 52,152 letters, 16 x 8 binary pixels,
26 labels, 10 folds) read with :func:`structboost.datasets.load_ocr`.

Protocols
---------
``--folds all``
    10-fold cross validation as in the paper: test on fold k, train on the
    other nine, early stopping on one inner fold carved from them,
    ``valid = (k - 1) mod 10``.
``--folds 0`` (or any comma list)
    The same rule for the listed folds only: ``--folds 0`` trains on folds
    1-8, validates on fold 9 and tests on fold 0 (the quick split).

Methods (``--methods``, comma list)
-----------------------------------
``native``      XGBoost ``multi:softprob`` (the reference for time ratios)
``logitboost``  structboost ``mode="logitboost"`` (must agree with native)
``treecrf``     Dietterich et al. (2008): unit Hessians
``gbcrf``       Chen et al. (2015), one tree per label
``gbcrf-mo``    GBCRF with ``multi_strategy="multi_output_tree"`` (``--multi-output``
                gives every tree method, native included, such trees)
``crf``         linear-chain CRF from sklearn-crfsuite on the same features

Every tree method uses the same tree parameters (``--max-depth``, ``--eta``,
``--min-child-weight``, ...) and stops on the validation token error after
``--patience`` rounds without improvement. Per fold and method one row is
written to ``--csv`` as soon as it is done (rows of an earlier run with the
same command line are replaced). Times are CPU seconds of the process
(``time.process_time``): on a shared machine they do not depend on the
other load, and with ``--threads 1`` they equal the wall time on an idle
core (``objective_s``, the objective's own timers, was wall-clock before
structboost's timers became CPU time: rows up to the 10-fold run of
2026-11-22). A Markdown summary (mean and std over the
folds done) is printed at the end.

``--figures`` draws Figure 1 on the quick-split training words:
(a) training NLL per round of GBCRF and TreeCRF at learning rate 1,
(b) the mean gamma per round of the mixing, exact and length estimators on
the 500 shortest training words, for the GBCRF model as it trains.

Usage::

    python benchmarks/ocr.py --data-dir ../shared/data/ocr --folds 0 \
        --methods native,logitboost,treecrf,gbcrf,gbcrf-mo,crf --figures
    python benchmarks/ocr.py --data-dir ../shared/data/ocr --preset best --folds all \
        --methods gbcrf-mo
"""

import argparse
import fcntl
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import xgboost as xgb
from threadpoolctl import threadpool_limits

import structboost as sb
from structboost import inference
from structboost.datasets import load_ocr, ocr_split
from structboost.metrics import sequence_accuracy, token_accuracy

K = 26
N_FOLDS = 10
RESULTS = Path(__file__).resolve().parent / "results"

PRESETS = {
    # What the paper describes: pixels only, mixing gamma, one tree per label.
    "paper": {
        "patience": 20,
        "max_depth": 6,
        "eta": 0.5,
        "window": 0,
        "hessian_bound": "mixing",
        "transition_solver": "lbfgs",
    },
    # The winner of the fold-0 lever study (benchmarks/README.md), to use with
    # ``--methods gbcrf-mo`` (one multi-output tree per round): the Newton
    # transition step, depth 8, eta 0.3 and patience 40 (fold 0: 4.12% test
    # error, against 4.53% at eta 0.5 / patience 20 and 6.09% with one
    # depth-8 tree per label).
    "best": {
        "max_depth": 8,
        "eta": 0.3,
        "patience": 40,
        "window": 0,
        "hessian_bound": "mixing",
        "transition_solver": "newton",
    },
}
TREE_METHODS = ("native", "logitboost", "treecrf", "gbcrf", "gbcrf-mo")
METHODS = (*TREE_METHODS, "crf")


def window_features(X, lengths, width, fill):
    """Append the pixels of the ``width`` previous and next letters of each word.

    Parameters
    ----------
    X : (n, d) array
        Pixels, words concatenated.
    lengths : (m,) int array
        Letters per word.
    width : int
        Neighbours on each side (0 returns ``X``).
    fill : float
        Value outside the word (NaN: XGBoost's missing value).

    Returns
    -------
    (n, (2 * width + 1) * d) float32
        Blocks ordered ``-width .. -1, 0, +1 .. +width``.
    """
    X = np.asarray(X, dtype=np.float32)
    if width == 0:
        return X
    n, d = X.shape
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    word = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(n) - offsets[word]
    size = lengths[word]
    blocks = []
    for shift in range(-width, width + 1):
        if shift == 0:
            blocks.append(X)
            continue
        block = np.full((n, d), fill, dtype=np.float32)
        inside = (position + shift >= 0) & (position + shift < size)
        rows = np.flatnonzero(inside)
        block[rows] = X[rows + shift]
        blocks.append(block)
    return np.hstack(blocks)


def split_fold(data, test_fold, args):
    """Train / valid / test parts of one fold, with the feature window applied."""
    valid_fold = (test_fold - 1) % N_FOLDS
    parts = ocr_split(data, test_folds=test_fold, valid_folds=valid_fold)
    fill = np.nan if args.window_fill == "nan" else 0.0
    return {
        name: (window_features(p.X, p.lengths, args.window, fill), p.y, p.lengths)
        for name, p in zip(("train", "valid", "test"), parts)
    }


def tree_params(args):
    params = {
        "max_depth": args.max_depth,
        "eta": args.eta,
        "min_child_weight": args.min_child_weight,
        "reg_lambda": args.reg_lambda,
        "subsample": args.subsample,
        "colsample_bytree": args.colsample,
        "max_bin": args.max_bin,
        "tree_method": "hist",
        "nthread": args.threads,
        "seed": args.seed,
    }
    if args.multi_output:
        params["multi_strategy"] = "multi_output_tree"
    return params


def word_error(y, pred, lengths):
    return 1.0 - sequence_accuracy(y, pred, lengths)


def train_native(parts, args):
    """XGBoost multi:softprob, early stopping on the validation merror."""
    X, y, _ = parts["train"]
    dtrain = xgb.DMatrix(X, label=y)
    dvalid = xgb.DMatrix(parts["valid"][0], label=parts["valid"][1])
    params = {
        **tree_params(args),
        "objective": "multi:softprob",
        "num_class": K,
        "base_score": 0.0,
        "eval_metric": "merror",
    }
    t0 = time.process_time()
    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=args.rounds,
        evals=[(dvalid, "valid")],
        early_stopping_rounds=args.patience,
        verbose_eval=args.verbose or False,
    )
    train_s = time.process_time() - t0
    Xt, yt, lt = parts["test"]
    t0 = time.process_time()
    dtest = xgb.DMatrix(Xt)
    prob = booster.predict(dtest, iteration_range=(0, booster.best_iteration + 1))
    pred = prob.argmax(axis=1)
    predict_s = time.process_time() - t0
    return {
        "booster": booster,
        "pred": pred,
        "prob": prob,
        "rounds_trained": booster.num_boosted_rounds(),
        "best_round": booster.best_iteration + 1,
        "train_s": train_s,
        "predict_s": predict_s,
    }


def crf_settings(method, args):
    """``(crf_objective kwargs, extra xgb params)`` of a structboost method."""
    if method == "logitboost":
        return {"mode": "logitboost"}, {}
    kw = {
        "mode": "treecrf" if method == "treecrf" else "gbcrf",
        "transition_solver": args.transition_solver,
        "reg_transitions": args.reg_transitions,
    }
    if method != "treecrf":
        bound = args.hessian_bound
        kw["hessian_bound"] = float(bound) if bound[0].isdigit() else bound
        kw["step"] = args.step
    extra = {"multi_strategy": "multi_output_tree"} if method == "gbcrf-mo" else {}
    return kw, extra


def train_structboost(
    method, parts, args, *, rounds=None, eta=None, evals_train=False, make_callbacks=None
):
    """One structboost model; early stopping on the validation token error.

    With ``evals_train`` it instead runs ``rounds`` rounds logging the
    training NLL (Figure 1a); ``make_callbacks(obj)`` adds callbacks.
    """
    kw, extra = crf_settings(method, args)
    obj = sb.crf_objective(K, metric="crf-error" if not evals_train else "crf-nll", **kw)
    X, y, lengths = parts["train"]
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    params = sb.xgb_params(K, **{**tree_params(args), **extra})
    if eta is not None:
        params["eta"] = eta
    log = {}
    if evals_train:
        evals, stop = [(dtrain, "train")], None
    else:
        Xv, yv, lv = parts["valid"]
        evals, stop = [(xgb.DMatrix(Xv, label=yv, group=lv), "valid")], args.patience
    t0 = time.process_time()
    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=rounds or args.rounds,
        obj=obj,
        custom_metric=obj.metric,
        evals=evals,
        evals_result=log,
        early_stopping_rounds=stop,
        verbose_eval=args.verbose or False,
        callbacks=[obj.callback(), *(make_callbacks(obj) if make_callbacks else [])],
    )
    train_s = time.process_time() - t0
    out = {
        "booster": booster,
        "obj": obj,
        "log": log,
        "rounds_trained": booster.num_boosted_rounds(),
        "train_s": train_s,
        "timings": dict(obj.crf.timings),
    }
    if evals_train:
        return out
    Xt, _, lt = parts["test"]
    t0 = time.process_time()
    out["pred"] = sb.predict(booster, Xt, lengths=lt)
    out["predict_s"] = time.process_time() - t0
    out["best_round"] = booster.best_iteration + 1
    if method == "logitboost":
        out["prob"] = sb.predict_marginals(booster, Xt, lengths=lt)
    return out


def crfsuite_items(X, lengths):
    """sklearn-crfsuite input: per word a list of {feature: value} dicts (ink only)."""
    names = np.array([f"p{j}" for j in range(X.shape[1])])
    rows = []
    for x in X:
        on = np.flatnonzero(np.nan_to_num(x) != 0)
        rows.append(dict(zip(names[on], x[on].astype(float))) | {"bias": 1.0})
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [rows[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def train_crfsuite(parts, args):
    """Linear-chain CRF (L-BFGS, L2 ``--crf-c2``) from sklearn-crfsuite."""
    import sklearn_crfsuite

    X, y, lengths = parts["train"]
    xs = crfsuite_items(X, lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ys = [[str(v) for v in y[a:b]] for a, b in zip(offsets[:-1], offsets[1:])]
    model = sklearn_crfsuite.CRF(
        algorithm="lbfgs", c1=0.0, c2=args.crf_c2, max_iterations=args.crf_iter
    )
    t0 = time.process_time()
    model.fit(xs, ys)
    train_s = time.process_time() - t0
    Xt, _, lt = parts["test"]
    t0 = time.process_time()
    pred = np.concatenate([np.array(p, dtype=np.int64) for p in model.predict(crfsuite_items(Xt, lt))])
    predict_s = time.process_time() - t0
    return {
        "pred": pred,
        "rounds_trained": args.crf_iter,
        "best_round": np.nan,
        "train_s": train_s,
        "predict_s": predict_s,
    }


def config_label(method, args):
    """Short description of the settings that matter for ``method``."""
    if method == "crf":
        return f"c2={args.crf_c2},iter={args.crf_iter},window={args.window}"
    label = (
        f"depth={args.max_depth},eta={args.eta},mcw={args.min_child_weight},"
        f"lambda={args.reg_lambda},window={args.window}"
    )
    if args.window:
        label += f",fill={args.window_fill}"
    if args.multi_output and method != "crf":
        label += ",multi-output"
    if args.subsample < 1 or args.colsample < 1:
        label += f",sub={args.subsample},col={args.colsample}"
    if method in ("treecrf", "gbcrf", "gbcrf-mo"):
        label += f",solver={args.transition_solver},reg_t={args.reg_transitions}"
    if method in ("gbcrf", "gbcrf-mo"):
        label += f",bound={args.hessian_bound},step={args.step}"
    return label


def run_fold(data, fold, args, command, stamp):
    parts = split_fold(data, fold, args)
    y_test, l_test = parts["test"][1], parts["test"][2]
    rows = []
    native = None
    for method in args.methods:
        if method == "crf":
            res = train_crfsuite(parts, args)
        elif method == "native":
            res = train_native(parts, args)
            native = res
        else:
            res = train_structboost(method, parts, args)
        err = 1.0 - token_accuracy(y_test, res["pred"])
        row = {
            "time": stamp,
            "command": command,
            "protocol": "10-fold" if args.folds_all else "split",
            "fold": fold,
            "method": method,
            "config": config_label(method, args),
            "letter_error": err,
            "word_error": word_error(y_test, res["pred"], l_test),
            "best_round": res["best_round"],
            "rounds_trained": res["rounds_trained"],
            "train_s": res["train_s"],
            "s_per_round": res["train_s"] / res["rounds_trained"],
            "predict_s": res["predict_s"],
            "objective_s": sum(res.get("timings", {}).values()) or np.nan,
            "note": "",
        }
        if method == "logitboost" and native is not None:
            n_common = min(res["best_round"], native["best_round"])
            Xt = parts["test"][0]
            p_nat = native["booster"].predict(xgb.DMatrix(Xt), iteration_range=(0, n_common))
            p_our = res["booster"].predict(
                xgb.DMatrix(Xt), output_margin=True, iteration_range=(0, n_common)
            )
            p_our = np.exp(p_our - p_our.max(axis=1, keepdims=True))
            p_our /= p_our.sum(axis=1, keepdims=True)
            row["note"] = (
                f"vs native @{n_common} rounds: max|dp|={np.abs(p_our - p_nat).max():.1e}, "
                f"argmax agree={np.mean(p_our.argmax(1) == p_nat.argmax(1)):.4f}; "
                f"s/round ratio {row['s_per_round'] / (native['train_s'] / native['rounds_trained']):.2f}"
            )
        elif method != "native" and native is not None and method != "crf":
            ratio = row["s_per_round"] / (native["train_s"] / native["rounds_trained"])
            row["note"] = f"s/round ratio to native {ratio:.2f}"
        print(
            f"fold {fold} {method:10s} err={err:.4f} word_err={row['word_error']:.4f} "
            f"rounds={row['best_round']}/{row['rounds_trained']} train={row['train_s']:.1f}s "
            f"({row['s_per_round']:.3f} s/round) predict={row['predict_s']:.2f}s {row['note']}",
            flush=True,
        )
        rows.append(row)
        write_rows(args.csv, [row])
    return rows


def write_rows(path, rows):
    """Append ``rows`` to the CSV, replacing earlier rows of the same command, fold and method.

    A lock file serialises writers, so several runs may share one CSV.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / f"structboost-{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        new = pd.DataFrame(rows)
        if path.exists():
            old = pd.read_csv(path)
            key = ["command", "fold", "method"]
            stale = old[key].apply(tuple, axis=1).isin(set(new[key].apply(tuple, axis=1)))
            new = pd.concat([old[~stale], new], ignore_index=True)
        new.to_csv(path, index=False)


def summary_table(rows, native_s_per_round=None):
    """Markdown table: one line per (method, config), mean and std over folds.

    ``native_s_per_round`` defaults to the mean of the ``native`` rows.
    """
    df = pd.DataFrame(rows)
    nat = native_s_per_round
    if nat is None:
        nat = df[df.method == "native"]["s_per_round"].mean() if (df.method == "native").any() else np.nan
    lines = [
        "| method | config | folds | letter error | word error | rounds (best/trained) | "
        "train s | s / round | ratio to native | predict s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (method, _), g in df.groupby(["method", "config"], sort=False):
        std = g.letter_error.std(ddof=1) if len(g) > 1 else np.nan
        err = f"{g.letter_error.mean():.4f}" + (f" ± {std:.4f}" if len(g) > 1 else "")
        lines.append(
            f"| {method} | {g.config.iloc[0]} | {len(g)} | {err} | {g.word_error.mean():.4f} | "
            f"{g.best_round.mean():.0f}/{g.rounds_trained.mean():.0f} | {g.train_s.mean():.1f} | "
            f"{g.s_per_round.mean():.3f} | {g.s_per_round.mean() / nat:.2f} | "
            f"{g.predict_s.mean():.2f} |"
        )
    return "\n".join(lines)


def print_csv_summary(path):
    """The Markdown tables of a results CSV, one per protocol and fold set.

    The time ratio uses the native rows of the same folds.
    """
    df = pd.read_csv(path)
    for protocol, g in df.groupby("protocol", sort=False):
        for folds, h in g.groupby(g.groupby(["method", "config"]).fold.transform(
            lambda f: ",".join(map(str, sorted(f)))
        ), sort=False):
            nat = h[h.method == "native"]["s_per_round"].mean() if (h.method == "native").any() else None
            if nat is None and (g.method == "native").any():
                nat = g[(g.method == "native") & g.fold.isin(h.fold)]["s_per_round"].mean()
            print(f"\n{protocol}, folds {folds}\n")
            print(summary_table(h.to_dict("records"), nat))
    print("\ncommands:")
    for c in df.command.unique():
        print(f"- `{c}`")


class GammaTrace(xgb.callback.TrainingCallback):
    """Mean gamma of each estimator on some words after every round.

    The margins are the booster's on ``words`` (a grouped DMatrix); the
    transitions are the objective's current ones (``obj.params``).
    """

    def __init__(self, obj, dwords, lengths, methods=("mixing", "exact", "length")):
        super().__init__()
        self.obj, self.dwords, self.lengths, self.methods = obj, dwords, lengths, methods
        self.trace = {m: [] for m in methods}

    def after_iteration(self, model, epoch, evals_log):
        u = model.predict(self.dwords, output_margin=True).astype(np.float64)
        p = self.obj.params
        for m in self.methods:
            g = inference.gamma(u, self.lengths, p.transitions, p.start, p.end, m)
            self.trace[m].append(float(g.mean()))
        return False


def figures(data, args):
    """Figure 1a (training NLL, eta = 1) and 1b (gamma estimators) on the quick split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = split_fold(data, 0, args)
    X, y, lengths = parts["train"]
    shortest = np.sort(np.argsort(lengths, kind="stable")[:500])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in shortest])
    dwords = xgb.DMatrix(X[rows], label=y[rows], group=lengths[shortest])
    curves, trace = {}, None
    for method in ("gbcrf", "treecrf"):
        traces = []

        def gamma_callbacks(obj, method=method):
            if method != "gbcrf":
                return []
            traces.append(GammaTrace(obj, dwords, lengths[shortest]))
            return traces

        res = train_structboost(
            method,
            parts,
            args,
            rounds=args.figure_rounds,
            eta=1.0,
            evals_train=True,
            make_callbacks=gamma_callbacks,
        )
        if traces:
            trace = traces[0].trace
        curves[method] = res["log"]["train"]["crf-nll"]
        print(
            f"figure 1a: {method} train NLL per word {curves[method][0]:.3f} -> "
            f"{curves[method][-1]:.3f} ({res['train_s'] / res['rounds_trained']:.2f} s/round)",
            flush=True,
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for method, label in (("gbcrf", "GBCRF"), ("treecrf", "TreeCRF")):
        ax.plot(np.arange(1, len(curves[method]) + 1), curves[method], label=label)
    ax.set_xlabel("boosting round")
    ax.set_ylabel("training NLL per word")
    ax.set_yscale("log")
    ax.set_title(f"OCR, learning rate 1, depth {args.max_depth}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "ocr_fig1a_nll.png", dpi=120)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for m, label in (("length", "length (2n)"), ("mixing", "mixing rate"), ("exact", "exact (brute force)")):
        ax.plot(np.arange(1, len(trace[m]) + 1), trace[m], label=label)
    ax.set_xlabel("boosting round")
    ax.set_ylabel("mean gamma, 500 shortest words")
    ax.set_title("OCR, GBCRF at learning rate 1")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "ocr_fig1b_gamma.png", dpi=120)
    ratio = np.array(trace["mixing"]) / np.array(trace["exact"])
    print(
        f"figure 1b: mean gamma length {np.mean(trace['length']):.2f}, mixing "
        f"{trace['mixing'][0]:.2f} -> {trace['mixing'][-1]:.2f}, exact {trace['exact'][0]:.2f} -> "
        f"{trace['exact'][-1]:.2f}; mixing / exact max {ratio.max():.2f}"
    )
    print(f"figures saved under {RESULTS}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz")
    ap.add_argument("--folds", default="0", help="'all' or a comma list of test folds")
    ap.add_argument("--methods", default="native,logitboost,treecrf,gbcrf,gbcrf-mo,crf")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="defaults for the levers below")
    ap.add_argument("--max-depth", type=int)
    ap.add_argument("--eta", type=float)
    ap.add_argument("--window", type=int, help="neighbour letters on each side as features")
    ap.add_argument("--multi-output", action="store_true",
                    help="one multi-output tree per round for every tree method (native too)")
    ap.add_argument("--window-fill", choices=("nan", "zero"), default="nan")
    ap.add_argument("--hessian-bound", help="mixing, exact, length or a number")
    ap.add_argument("--transition-solver", choices=("lbfgs", "newton"))
    ap.add_argument("--step", choices=("bound", "adaptive"), default="bound",
                    help="GBCRF step size (crf_objective's step)")
    ap.add_argument("--reg-transitions", type=float, default=1.0)
    ap.add_argument("--min-child-weight", type=float, default=1.0)
    ap.add_argument("--reg-lambda", type=float, default=1.0)
    ap.add_argument("--subsample", type=float, default=1.0)
    ap.add_argument("--colsample", type=float, default=1.0)
    ap.add_argument("--max-bin", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=400, help="cap on boosting rounds")
    ap.add_argument("--patience", type=int, help="early stopping rounds (default 20)")
    ap.add_argument("--crf-c2", type=float, default=1.0, help="L2 of the linear CRF")
    ap.add_argument("--crf-iter", type=int, default=300, help="L-BFGS iterations of the linear CRF")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", type=int, default=0, help="print the metric every N rounds")
    ap.add_argument("--figures", action="store_true", help="draw Figure 1a/1b")
    ap.add_argument("--figure-rounds", type=int, default=60)
    ap.add_argument("--csv", type=Path, default=RESULTS / "ocr.csv")
    ap.add_argument(
        "--summarize", action="store_true", help="only print the tables of the rows in --csv"
    )
    args = ap.parse_args(argv)
    defaults = PRESETS[args.preset or "paper"]
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        ap.error(f"unknown methods {unknown}; choose from {list(METHODS)}")
    args.folds_all = args.folds == "all"
    args.fold_list = list(range(N_FOLDS)) if args.folds_all else [int(f) for f in args.folds.split(",")]
    return args


def main(argv=None):
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/ocr.py", *(sys.argv[1:] if argv is None else argv)])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    if args.summarize:
        print_csv_summary(args.csv)
        return
    # The CRF's matrix products are K x K (K = 26): BLAS threads only spin, and
    # on a loaded machine they multiplied the objective's CPU time by ten.
    threadpool_limits(1, user_api="blas")
    data = load_ocr(args.data_dir, dtype=np.float32)
    header = [
        f"command: `{command}`",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
        f"(nthread={args.threads}); python {platform.python_version()}, xgboost {xgb.__version__}, "
        f"numba {numba.__version__}, numpy {np.__version__}, structboost {sb.__version__}",
        f"data: {data.n_sequences} words, {len(data.y)} letters; folds {args.folds} "
        f"(valid = test - 1 mod 10); window={args.window}; times in CPU seconds",
    ]
    print("\n".join(header), flush=True)
    if args.figures:
        figures(data, args)
    rows = []
    for fold in args.fold_list if args.methods else []:
        rows += run_fold(data, fold, args, command, stamp)
    if rows:
        print()
        print("\n".join(header))
        print()
        print(summary_table(rows))


if __name__ == "__main__":
    main()
