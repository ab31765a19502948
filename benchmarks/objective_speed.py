"""Per-round cost of the CRF objective beside the engines' native multiclass rounds.

One run reports, side by side (issues 14 and 27):

1. **Rounds**: CPU seconds per boosting round (``time.process_time``
   between the ends of rounds) of the native multiclass objective
   (XGBoost's ``multi:softprob``, LightGBM's ``multiclass``) and of the rows
   of :data:`ROUND_CONFIGS` with the same trees, for XGBoost and LightGBM:
   on the OCR quick split's training words (folds 1-8 of ``--data-dir``;
   XGBoost's multi-output trees of depth 8 and per-label trees of depth 6,
   LightGBM's per-label trees of 31 leaves) and, with ``--conll-dir``, on
   sparse text (the first 3,000 sentences of CoNLL-2003's eng.train with
   ``conll2003.py``'s features, IOB2 tags); the objective's share from its
   own timers (transitions / inference / gamma + G/H), the forward-backward
   passes per round, and the training NLL. Rows with one-pass rounds (the
   default) are timed after their warm-up refit rounds
   (:data:`structboost.transitions.onestep.WARMUP`), in their steady state.
2. **Steps**: CPU milliseconds of one ``CRFObjective.grad_hess`` (transition
   refit, inference, gamma, G and H) per solver on fixed margins (five
   native ``multi:softprob`` rounds on the quick split), best of 7, and the
   NLL per word after 7 refits from zero on those margins: the objective's
   own cost without the trees' noise, for before/after comparisons.
3. **Kernels** on all OCR letters (K = 26): ``forward_backward``,
   ``gamma("mixing")`` and ``viterbi`` in ms and GFLOP/s (a forward-backward
   pass counted as ``4 n K^2`` flops, Viterbi as ``2 n K^2``) at 1, 2 and all
   numba threads.
4. **Viterbi tokens/s** beside sklearn-crfsuite's tagger at K = 9 and
   K = 26 (OCR labels, ``y mod K``): crfsuite gets one attribute per token,
   so its own decoding dominates its time; ours decodes given margins.
5. **Peak RSS** (``ru_maxrss`` of a fresh process) of native and GBCRF
   training on generated data (``--rss-rows`` rows x 20 features, K = 10,
   depth 6, 3 rounds), also with the training set's metric every round.

Usage::

    python benchmarks/objective_speed.py --data-dir ../shared/data/ocr --threads 1 \
        --rounds 3 [--conll-dir ../shared/data/conll2003] [--rss-rows 1000000] \
        [--skip rounds,text,lightgbm,steps,kernels,viterbi,rss]

Prints Markdown tables for benchmarks/README.md.
"""

import argparse
import itertools
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np
import xgboost as xgb

import structboost as sb
from structboost import inference
from structboost.datasets import load_ocr, ocr_split
from structboost.transitions import onestep

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chain_kernels import random_chain  # noqa: E402


#: The rows of the rounds tables: a name and the objective's keywords (None: native).
ROUND_CONFIGS = [
    ("native", None),
    ("logitboost", {"mode": "logitboost"}),
    ("gbcrf, lbfgs (default: one pass)", {}),
    ("gbcrf, newton (one pass)", {"transition_solver": "newton"}),
    ("gbcrf, lbfgs refit (transition_iter=5)", {"transition_iter": 5}),
    ("treecrf, lbfgs (one pass)", {"mode": "treecrf"}),
]


class _XGBClock(xgb.callback.TrainingCallback):
    def __init__(self, tick):
        self.tick = tick

    def after_iteration(self, model, epoch, evals_log):
        self.tick(epoch)
        return False


def _train_xgb(X, y, lengths, k, tree, rounds, obj, tick):
    """``rounds`` XGBoost rounds with ``tick(round)`` after each; the CRF booster (native: None)."""
    if obj is None:
        params = {**tree, "objective": "multi:softprob", "num_class": k, "base_score": 0.0}
        dtrain, callbacks = xgb.DMatrix(X, label=y), []
    else:
        params = sb.xgb_params(k, **tree)
        dtrain, callbacks = xgb.DMatrix(X, label=y, group=lengths), [obj.callback()]
    booster = xgb.train(params, dtrain, rounds, obj=obj, callbacks=[*callbacks, _XGBClock(tick)])
    return booster if obj is not None else None


def _train_lgb(X, y, lengths, k, tree, rounds, obj, tick):
    """``rounds`` LightGBM rounds, ``tick(round)`` after each; the CRF booster (native: None)."""
    import lightgbm as lgb

    from structboost.engines.lightgbm import lgb_params

    def clock(env):
        tick(env.iteration)

    if obj is None:
        params = {**tree, "objective": "multiclass", "num_class": k, "verbose": -1}
        data, callbacks = lgb.Dataset(X, label=y), []
    else:
        params = lgb_params(k, objective=obj, **tree)
        data, callbacks = lgb.Dataset(X, label=y, group=lengths), [obj.callback()]
    booster = lgb.train(params, data, rounds, callbacks=[*callbacks, clock])
    return booster if obj is not None else None


def cpu_per_round(train, timed, obj=None):
    """CPU seconds per round over the last ``timed`` rounds, and the trained booster.

    ``train(rounds, obj, tick)`` trains and returns the booster;
    ``tick(r)`` runs after round ``r``.
    The untimed rounds before them are one round (compiling, sketching)
    plus, for a one-pass objective, :data:`~structboost.transitions.onestep.WARMUP`
    (its warm-up refits): the one-pass rows are timed in their steady
    state. The objective's timers and pass count restart with the timed
    rounds.
    """
    warm = 1 + (onestep.WARMUP if obj is not None and obj.crf.spec.one_pass else 0)
    stamps = []

    def tick(r):
        stamps.append(time.process_time())
        if r == warm - 1 and obj is not None:
            obj.crf.timings = dict.fromkeys(obj.crf.timings, 0.0)
            obj.crf.passes = 0

    booster = train(warm + timed, obj, tick)
    return (stamps[-1] - stamps[warm - 1]) / timed, booster


def count_passes(obj):
    """Count the forward-backward passes of ``obj``'s rounds in ``obj.crf.passes``."""
    crf = obj.crf
    crf.passes = 0
    real = crf._problem

    def problem(unary, batch):
        made = real(unary, batch)
        whole = getattr(made, "_one", True) is not None  # a batch passed in one block
        evaluate = made._evaluate

        def counted(*args):
            crf.passes += whole  # (blocks count themselves)
            return evaluate(*args)

        made._evaluate = counted
        blocks = made.blocks

        def counted_blocks(params, rates=False, need=0):
            if not whole:
                crf.passes += 1
            yield from blocks(params, rates, need)

        made.blocks = counted_blocks
        return made

    crf._problem = problem


def rounds_table(cases, args):
    """One table: every case (engine, data, trees) with every row of :data:`ROUND_CONFIGS`.

    ``cases``: ``(engine, data, trees, train, k, (X, y, lengths))``,
    ``train(rounds, obj, tick)`` as for :func:`cpu_per_round`.
    """
    print(
        "| engine | data | trees | run | CPU s / round | ratio to native | transitions | "
        "inference | gamma + G/H | objective / native round | passes / round | "
        "train NLL per sequence |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for engine, data, trees, train, k, (X, y, lengths) in cases:
        head = f"| {engine} | {data} | {trees}"
        native = None
        for name, kw in ROUND_CONFIGS:
            obj = None
            if kw is not None:
                factory = sb.crf_objective
                if engine == "LightGBM":
                    from structboost.engines.lightgbm import lgb_crf_objective as factory
                obj = factory(k, nthread=args.threads, **kw)
                count_passes(obj)
            sec, booster = cpu_per_round(train, args.rounds, obj)
            if obj is None:
                native = sec
                print(f"{head} | {name} | {sec:.3f} | 1.00 | | | | | | |", flush=True)
                continue
            split = {key: v / args.rounds for key, v in obj.crf.timings.items()}
            nll = -float(np.mean(sb.sequence_log_likelihood(booster, X, y, lengths=lengths)))
            print(
                f"{head} | {name} | {sec:.3f} | {sec / native:.2f} | "
                f"{split['transitions']:.3f} | {split['inference']:.3f} | {split['gamma']:.3f} | "
                f"{sum(split.values()) / native:.0%} | {obj.crf.passes / args.rounds:.2f} | "
                f"{nll:.3f} |",
                flush=True,
            )


def text_data(conll_dir, sentences=3000):
    """The sparse-text case: the first ``sentences`` of eng.train, ``conll2003.py``'s features.

    Returns
    -------
    X : (n, d) scipy.sparse CSR float32
    y : (n,) int
        IOB2 tags as indices.
    lengths : (m,) int
    k : int
    """
    from structboost.datasets import convert_tags, read_conll
    from structboost.text.lexical import TokenFeatures

    df = read_conll(Path(conll_dir) / "eng.train")
    df = df[df["sentence"] < sentences].reset_index(drop=True)
    lengths = np.bincount(df["sentence"])
    tags = np.asarray(convert_tags(df["tag"], "iob1", "iob2", lengths), dtype=str)
    X = TokenFeatures(half_width=2, extra_columns=("pos", "chunk"), min_count=3).fit_transform(df)
    names, y = np.unique(tags, return_inverse=True)
    return X.astype(np.float32).tocsr(), y, lengths, len(names)


def round_cases(ocr, text, args):
    """The cases of :func:`rounds_table`: OCR and (``text`` not None) sparse text, both engines."""
    cases = []
    xgb_trees = [("multi-output, depth 8", {"max_depth": 8, "multi_strategy": "multi_output_tree"}),
                 ("per-label, depth 6", {"max_depth": 6})]
    lgb_trees = ("per-label, 31 leaves", {"num_leaves": 31})
    for data, parts in (("OCR quick split", ocr), ("sparse text", text)):
        if parts is None:
            continue
        X, y, lengths, k = parts
        for trees, tree in xgb_trees if parts is ocr else xgb_trees[1:]:  # text: per-label
            tree = {**tree, "eta": 0.3, "nthread": args.threads, "tree_method": "hist"}
            cases.append(("XGBoost", data, trees, _bind(_train_xgb, X, y, lengths, k, tree), k,
                          (X, y, lengths)))
        if "lightgbm" not in args.skip_set:
            tree = {**lgb_trees[1], "learning_rate": 0.3, "num_threads": args.threads}
            cases.append(("LightGBM", data, lgb_trees[0],
                          _bind(_train_lgb, X, y, lengths, k, tree), k, (X, y, lengths)))
    return cases


def _bind(train, X, y, lengths, k, tree):
    return lambda rounds, obj, tick: train(X, y, lengths, k, tree, rounds, obj, tick)


def steps_table(X, y, lengths, k, threads):
    from structboost.objectives.chain import CRFObjective, SequenceBatch

    native = {"objective": "multi:softprob", "num_class": k, "max_depth": 6, "eta": 0.3,
              "nthread": threads, "base_score": 0.0}
    dtrain = xgb.DMatrix(X, label=y)
    u = xgb.train(native, dtrain, 5).predict(dtrain, output_margin=True).astype(np.float64)
    batch = SequenceBatch.build(y, lengths, k)
    print("| solver | step | grad_hess CPU ms | train NLL per word after 7 refits |")
    print("|---|---|---|---|")
    runs = [("newton", 1), ("lbfgs", 5), ("lbfgs", 2), ("lbfgs", 1)]
    for (solver, iters), step in itertools.product(runs, ("bound", "adaptive")):
        obj = CRFObjective(k, transition_solver=solver, transition_iter=iters, nthread=threads,
                           step=step)
        for _ in range(7):
            obj.grad_hess(u, batch)
        nll = float(np.mean(obj.sequence_nll(u, batch)))
        start = obj.params.copy()
        best = np.inf
        for _ in range(7):
            obj.params = start.copy()
            t0 = time.process_time()
            obj.grad_hess(u, batch)
            best = min(best, time.process_time() - t0)
        print(f"| {solver}, {iters} iteration{'s' * (iters > 1)} | {step} | {best * 1e3:.1f} | "
              f"{nll:.5f} |", flush=True)


def best_seconds(fn, repeat=5):
    """Smallest wall time of ``repeat`` calls (the least disturbed one)."""
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def kernels_table(lengths, k):
    u, T, z = random_chain(lengths, k)
    n = u.shape[0]
    calls = {
        "forward_backward": (lambda: inference.forward_backward(u, lengths, T, z, z), 4),
        "gamma (mixing)": (lambda: inference.gamma(u, lengths, T, z, z), 4),
        "viterbi": (lambda: inference.viterbi(u, lengths, T, z, z), 2),
    }
    most = numba.config.NUMBA_NUM_THREADS
    threads = sorted({min(t, most) for t in (1, 2, most)})
    print(f"All OCR letters: n = {n}, {len(lengths)} words, K = {k}; best of 5 wall times.")
    print()
    print("| kernel | " + " | ".join(f"{t} thread{'s' * (t > 1)}: ms (GFLOP/s)" for t in threads) + " |")
    print("|---|" + "---|" * len(threads))
    for name, (fn, flops) in calls.items():
        fn()
        cells = []
        for t in threads:
            numba.set_num_threads(t)
            sec = best_seconds(fn)
            cells.append(f"{sec * 1e3:.1f} ({flops * n * k * k / sec / 1e9:.2f})")
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        print(f"| {name} | " + " | ".join(cells) + " |")


def viterbi_table(lengths, y, threads):
    import sklearn_crfsuite

    numba.set_num_threads(threads)
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    rng = np.random.default_rng(2)
    print("| K | structboost viterbi, tokens/s | sklearn-crfsuite tagger (CRF.predict), tokens/s | ratio |")
    print("|---|---|---|---|")
    for k in (9, 26):
        labels = y % k
        hint = np.where(rng.random(len(labels)) < 0.7, labels, rng.integers(0, k, len(labels)))
        xseq = [[{f"h{hint[t]}": 1.0} for t in range(a, b)] for a, b in zip(bounds[:-1], bounds[1:])]
        yseq = [[str(v) for v in labels[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", max_iterations=20)
        crf.fit(xseq, yseq)
        crf.predict(xseq[:10])
        theirs = len(labels) / best_seconds(lambda: crf.predict(xseq), repeat=3)
        u = rng.normal(size=(len(labels), k))
        T = rng.normal(size=(k, k))
        z = np.zeros(k)
        inference.viterbi(u, lengths, T, z, z)
        ours = len(labels) / best_seconds(lambda: inference.viterbi(u, lengths, T, z, z))
        print(f"| {k} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.1f}x |")


def rss_child(mode, rows, threads):
    """Train 3 rounds in this process and print its peak RSS in MiB.

    ``mode``: ``native`` or a transition solver, then optionally ``,bound``
    (the step) and ``,eval`` (the training set's metric every round).
    """
    k, d = 10, 20
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 30, size=rows // 17)
    n = int(lengths.sum())
    y = rng.integers(0, k, size=n)
    X = (rng.normal(size=(n, d)) + y[:, None] * 0.1).astype(np.float32)
    tree = {"max_depth": 6, "eta": 0.3, "nthread": threads, "tree_method": "hist"}
    solver, *options = mode.split(",")
    if solver == "native":
        params = {**tree, "objective": "multi:softprob", "num_class": k, "base_score": 0.0}
        dtrain, obj = xgb.DMatrix(X, label=y), None
    else:
        step = "bound" if "bound" in options else "adaptive"
        obj = sb.crf_objective(k, transition_solver=solver, step=step, nthread=threads)
        params = sb.xgb_params(k, **tree)
        dtrain = xgb.DMatrix(X, label=y, group=lengths)
    evals = [(dtrain, "train")] if "eval" in options else ()
    xgb.train(params, dtrain, 3, evals=evals, obj=obj, custom_metric=obj and obj.metric,
              verbose_eval=False)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def rss_table(rows, threads):
    print(f"Generated data: about {rows:,} rows x 20 features, K = 10, depth 6, 3 rounds, nthread {threads}.")
    print()
    print("| run | peak RSS MiB | ratio to native |")
    print("|---|---|---|")
    peak = {}
    modes = ("native", "lbfgs", "newton", "lbfgs,bound", "native,eval", "lbfgs,eval")
    for mode in modes:
        out = subprocess.run(
            [sys.executable, __file__, "--rss-child", mode, "--rss-rows", str(rows), "--threads", str(threads)],
            capture_output=True, text=True, check=True,
        )
        peak[mode] = float(out.stdout.split()[-1])
        solver, *options = mode.split(",")
        name = "XGBoost multi:softprob (native)" if solver == "native" else f"gbcrf, {solver}"
        name += ', step="bound"' * ("bound" in options)
        name += ", training-set metric every round" * ("eval" in options)
        base = peak["native,eval" if "eval" in options else "native"]
        print(f"| {name} | {peak[mode]:.0f} | {peak[mode] / base:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", help="folder holding letters.npz (OCR)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="XGBoost and objective threads")
    ap.add_argument("--rss-rows", type=int, default=1_000_000)
    ap.add_argument("--conll-dir", help="folder holding eng.train (CoNLL-2003): the sparse-text rows")
    ap.add_argument("--skip", default="",
                    help="comma-separated parts to skip: rounds, text, lightgbm, steps, kernels, "
                         "viterbi, rss")
    ap.add_argument("--rss-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.rss_rows, args.threads)
        return
    if not args.data_dir:
        ap.error("--data-dir is required (the folder holding letters.npz)")
    skip = args.skip_set = set(filter(None, args.skip.split(",")))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}, "
        f"xgboost {xgb.__version__}, numba {numba.__version__} "
        f"({numba.config.NUMBA_NUM_THREADS} threads), numpy {np.__version__}, "
        f"structboost {sb.__version__}"
    )
    print()
    data = load_ocr(args.data_dir)
    all_lengths = np.asarray(data.lengths, dtype=np.int64)
    train, _, _ = ocr_split(data, test_folds=[0], valid_folds=[9])
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    if "rounds" not in skip:
        ocr = (train.X.astype(np.float32), np.asarray(train.y), np.asarray(train.lengths), 26)
        text = None
        if "text" not in skip and args.conll_dir:
            text = text_data(args.conll_dir)
            print(f"Sparse text: {text[0].shape[0]:,} rows, {text[0].shape[1]:,} sparse columns, "
                  f"K = {text[3]}.")
            print()
        rounds_table(round_cases(ocr, text, args), args)
        print()
    if "steps" not in skip:
        steps_table(train.X.astype(np.float32), np.asarray(train.y), np.asarray(train.lengths), 26,
                    args.threads)
        print()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    if "kernels" not in skip:
        kernels_table(all_lengths, 26)
        print()
    if "viterbi" not in skip:
        viterbi_table(all_lengths, np.asarray(data.y), args.threads)
        print()
    if "rss" not in skip:
        rss_table(args.rss_rows, args.threads)


if __name__ == "__main__":
    main()
