"""Per-round cost of the CRF objective beside XGBoost's native multi:softprob.

Generates data the size of the OCR letters set (about 47,000 rows, K = 26,
128 binary features, words of 3-14 letters), or reads the real training
words of the OCR quick split (``--ocr-dir``: folds 1-8), then times
``--rounds`` boosting rounds of native ``multi:softprob`` and of each
structboost mode with the same tree parameters (``--multi-output``: one
multi-output tree per round for all of them), in the same process. Times
are CPU seconds of the process (``time.process_time``): with
``--threads 1`` they are the wall time of an idle core, and other load on
the machine changes them little. Our round is split into transitions
(refit), inference (forward-backward), gamma + G/H assembly, and the rest
(tree building), from the objective's own timers.

Usage::

    python benchmarks/objective_speed.py [--rounds 10] [--max-depth 6] [--threads 2]
    python benchmarks/objective_speed.py --ocr-dir ../shared/data/ocr --max-depth 8 \
        --multi-output --threads 1

Prints a Markdown table for benchmarks/README.md.
"""

import argparse
import os
import platform
import time

import numba
import numpy as np
import xgboost as xgb

import structboost as sb
from structboost import inference
from structboost.datasets import load_ocr, ocr_split


def make_data(n_words, k, d, seed):
    """OCR-shaped synthetic words: sticky-ish labels, noisy binary prototypes."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 15, size=n_words)
    n = int(lengths.sum())
    trans = rng.dirichlet(np.full(k, 0.3), size=k)
    y = np.empty(n, dtype=np.int64)
    pos = 0
    for length in lengths:
        y[pos] = rng.integers(k)
        for t in range(1, length):
            y[pos + t] = rng.choice(k, p=trans[y[pos + t - 1]])
        pos += length
    protos = rng.random((k, d)) < 0.25
    flip = rng.random((n, d)) < 0.2
    X = (protos[y] ^ flip).astype(np.float32)
    return X, y, lengths


def time_rounds(params, dtrain, rounds, obj=None):
    """Seconds per round (after a warm-up round) and the trained booster."""
    # One warm-up round compiles kernels and builds the quantile sketch.
    xgb.train(params, dtrain, 1, obj=obj)
    callbacks = []
    if obj is not None:
        obj.crf.timings = dict.fromkeys(obj.crf.timings, 0.0)
        obj.crf.params = sb.TransitionParams.zeros(obj.num_labels)
        callbacks = [obj.callback()]
    t0 = time.process_time()
    booster = xgb.train(params, dtrain, rounds, obj=obj, callbacks=callbacks)
    return (time.process_time() - t0) / rounds, booster


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=6200)
    ap.add_argument("--labels", type=int, default=26)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--max-depth", type=int, default=6)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ocr-dir", help="time on the OCR quick split's training words instead")
    ap.add_argument("--multi-output", action="store_true",
                    help="multi_strategy='multi_output_tree' for every run")
    args = ap.parse_args()

    if args.ocr_dir:
        train, _, _ = ocr_split(load_ocr(args.ocr_dir), test_folds=[0], valid_folds=[9])
        X, y, lengths = train.X.astype(np.float32), train.y, train.lengths
        k, source = 26, f"OCR folds 1-8 ({args.ocr_dir})"
    else:
        k = args.labels
        X, y, lengths = make_data(args.words, k, args.features, args.seed)
        source = "generated"
    numba.set_num_threads(args.threads)
    tree = {"max_depth": args.max_depth, "eta": 0.3, "nthread": args.threads, "tree_method": "hist"}
    if args.multi_output:
        tree["multi_strategy"] = "multi_output_tree"
    print(
        f"data: {source}, {len(y)} rows, {len(lengths)} sequences, K={k}, d={X.shape[1]}; "
        f"{args.rounds} rounds, max_depth={args.max_depth}, nthread={args.threads}, "
        f"multi_output={args.multi_output}; CPU seconds"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"python {platform.python_version()}, xgboost {xgb.__version__}, numba {numba.__version__}, "
        f"numpy {np.__version__}, structboost {sb.__version__}"
    )

    dnative = xgb.DMatrix(X, label=y)
    native, _ = time_rounds(
        {**tree, "objective": "multi:softprob", "num_class": k, "base_score": 0.0},
        dnative,
        args.rounds,
    )

    # Kernel-level timings on zero margins and random transitions.
    rng = np.random.default_rng(1)
    u = rng.normal(size=(len(y), k))
    T = rng.normal(size=(k, k))
    z = np.zeros(k)
    inference.forward_backward(u[: lengths[:5].sum()], lengths[:5], T, z, z)
    t0 = time.process_time()
    inference.forward_backward(u, lengths, T, z, z)
    t_fb = time.process_time() - t0
    t0 = time.process_time()
    inference.gamma(u, lengths, T, z, z, "mixing")
    t_gamma = time.process_time() - t0
    print(f"forward_backward alone: {t_fb * 1e3:.1f} ms; gamma('mixing') incl. messages: {t_gamma * 1e3:.1f} ms")

    rows = [("XGBoost multi:softprob (native)", native, None, None)]
    configs = [
        ("logitboost", {"mode": "logitboost"}),
        ("treecrf, lbfgs", {"mode": "treecrf"}),
        ("gbcrf, lbfgs", {"mode": "gbcrf"}),
        ("gbcrf, lbfgs 2 iterations", {"mode": "gbcrf", "transition_iter": 2}),
        ("gbcrf, newton", {"mode": "gbcrf", "transitions": "newton"}),
    ]
    for name, kw in configs:
        obj = sb.crf_objective(k, **kw)
        dtrain = xgb.DMatrix(X, label=y, group=lengths)
        per_round, booster = time_rounds(sb.xgb_params(k, **tree), dtrain, args.rounds, obj=obj)
        split = {key: v / args.rounds for key, v in obj.crf.timings.items()}
        nll = -float(np.mean(sb.sequence_log_likelihood(booster, dtrain)))
        rows.append((name, per_round, split, nll))

    print()
    print(
        "| run | s / round | ratio to native | transitions | inference | gamma + G/H | "
        f"objective / native round | train NLL after {args.rounds} rounds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, sec, split, nll in rows:
        if split is None:
            print(f"| {name} | {sec:.3f} | 1.00 | | | | | |")
            continue
        obj_s = sum(split.values())
        print(
            f"| {name} | {sec:.3f} | {sec / native:.2f} | {split['transitions']:.3f} | "
            f"{split['inference']:.3f} | {split['gamma']:.3f} | {obj_s / native:.0%} | {nll:.3f} |"
        )


if __name__ == "__main__":
    main()
