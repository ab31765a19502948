"""CoNLL-2003 English NER: span F1 of the CRF boosters against linear CRFs.

Reads ``eng.train``, ``eng.testa`` (development) and ``eng.testb`` (test)
with :func:`structboost.datasets.read_conll`, rewrites the IOB1 tags in
``--scheme`` (IOB2 by default), and builds one sparse feature matrix per
file with :class:`structboost.text.lexical.TokenFeatures` fit on the training
file (word, shape, affixes 1-3, flags, POS and chunk tags at offsets
``-w..+w``; ``--min-count`` training tokens per feature).

Methods (``--methods``, comma list)
-----------------------------------
``logitboost``    :class:`structboost.XGBCRFClassifier`, ``mode="logitboost"``
``treecrf``       the same, ``mode="treecrf"`` (Dietterich et al. 2008)
``gbcrf``         the same, ``mode="gbcrf"`` (Chen et al. 2015)
``gbcrf-linear``  GBCRF boosted from a :class:`structboost.LinearChainCRF`
                  fit first on the same features (``base_model=``)
``linear``        that :class:`structboost.LinearChainCRF` alone
``crfsuite``      sklearn-crfsuite (L-BFGS, elastic net ``--crf-c1``,
                  ``--crf-c2``) on the same features: the attributes of a
                  token are the names of its non-zero columns

The tree methods share ``--rounds``, ``--eta``, ``--max-depth`` and stop
early on the CRF negative log-likelihood of ``eng.testa`` after
``--patience`` rounds without improvement. By default they train and decode
under the constraints of ``--scheme`` (``allowed_transitions``: no ``O``
followed by ``I-PER`` in IOB2, ...) with the Newton transition step;
``--allowed-transitions none`` and ``--transition-solver`` change that.

Measurements
------------
Each method runs in its own fresh Python process (``subprocess``), which
loads the feature matrices the parent saved to a temporary folder. Its
peak RSS is that process's ``ru_maxrss`` (``resource.getrusage``) at the
end, so it includes the loaded matrices; ``rss_before_mb`` is the same
figure just before training, so the difference is what training and
prediction added. ``train_s`` is wall-clock seconds of ``fit``,
``train_cpu_s`` the process's CPU seconds over it. Span precision, recall
and F1 per entity type and overall (exact span and type, conlleval
semantics) come from :func:`structboost.metrics.span_prf`.

Results go to ``--csv`` (default ``benchmarks/results/conll2003.csv``), one
row per method, split and entity type; a Markdown summary is printed.

Usage::

    python benchmarks/conll2003.py --data-dir ../shared/data/conll2003 --threads 1
    python benchmarks/conll2003.py --data-dir ../shared/data/conll2003 \
        --max-sentences 300 --rounds 5 --csv /tmp/conll_smoke.csv   # smoke run
"""

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from structboost import LinearChainCRF, XGBCRFClassifier
from structboost.datasets import convert_tags, read_conll
from structboost.text.lexical import TokenFeatures
from structboost.metrics import span_prf

METHODS = ("logitboost", "treecrf", "gbcrf", "gbcrf-linear", "linear", "crfsuite")
TREE_MODES = {"logitboost": "logitboost", "treecrf": "treecrf", "gbcrf": "gbcrf",
              "gbcrf-linear": "gbcrf"}
SPLITS = {"train": "eng.train", "testa": "eng.testa", "testb": "eng.testb"}
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, type=Path,
                   help="folder with eng.train, eng.testa and eng.testb")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma list from {', '.join(METHODS)}")
    p.add_argument("--scheme", default="iob2", choices=("iob1", "iob2", "bioes"),
                   help="tag scheme to train and score in")
    p.add_argument("--rounds", type=int, default=300, help="most boosting rounds")
    p.add_argument("--patience", type=int, default=20,
                   help="early stopping rounds on the testa CRF NLL")
    p.add_argument("--threads", type=int, default=1, help="threads of every method")
    p.add_argument("--max-depth", type=int, default=6)
    p.add_argument("--eta", type=float, default=0.3)
    p.add_argument("--min-count", type=int, default=3,
                   help="training tokens a feature needs to become a column")
    p.add_argument("--half-width", type=int, default=2, help="window offsets -w..+w")
    p.add_argument("--max-sentences", type=int, default=None,
                   help="keep only the first N sentences of every file (smoke runs)")
    p.add_argument("--allowed-transitions", default="scheme", metavar="SCHEME",
                   help="allowed_transitions of the tree estimators: 'scheme' (that of "
                   "--scheme: only well-formed tag sequences), 'none', or a scheme name")
    p.add_argument("--step", default="bound", choices=("bound", "adaptive"),
                   help="GBCRF step size of the tree estimators")
    p.add_argument("--transition-solver", default="newton", choices=("lbfgs", "newton", "majorize"),
                   help="transition solver of the tree estimators")
    p.add_argument("--multi-output", action="store_true",
                   help="one multi-output tree per round (multi_strategy=multi_output_tree)")
    p.add_argument("--linear-reg", type=float, default=1.0,
                   help="L2 penalty of the LinearChainCRF (summed NLL)")
    p.add_argument("--linear-iter", type=int, default=100, help="L-BFGS iterations of it")
    p.add_argument("--crf-c1", type=float, default=0.1, help="crfsuite L1 penalty")
    p.add_argument("--crf-c2", type=float, default=0.1, help="crfsuite L2 penalty")
    p.add_argument("--crf-iter", type=int, default=100, help="crfsuite L-BFGS iterations")
    p.add_argument("--csv", type=Path, default=RESULTS / "conll2003.csv")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.allowed_transitions == "scheme":
        args.allowed_transitions = args.scheme
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        p.error(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    return args


def peak_rss_mb():
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- parent: data and features ------------------------------------------------
def load_split(path, scheme, max_sentences):
    """Tokens DataFrame, tags ``(n,)`` in ``scheme`` and lengths ``(m,)`` of one file."""
    df = read_conll(path)
    if max_sentences is not None:
        df = df[df["sentence"] < max_sentences].reset_index(drop=True)
    lengths = np.bincount(df["sentence"])
    tags = convert_tags(df["tag"], "iob1", scheme, lengths)
    return df, np.asarray(tags, dtype=str), lengths


def build_cache(args, folder):
    """Read the files, build the features, save them under ``folder``; return a summary."""
    t0 = time.perf_counter()
    parts = {name: load_split(args.data_dir / f, args.scheme, args.max_sentences)
             for name, f in SPLITS.items()}
    unseen = set(np.unique(np.concatenate([parts["testa"][1], parts["testb"][1]]))) - set(
        np.unique(parts["train"][1])
    )
    if unseen:
        raise SystemExit(
            f"tags {sorted(unseen)} occur in testa/testb but not in the training sentences "
            "kept: raise --max-sentences."
        )
    features = TokenFeatures(
        half_width=args.half_width, extra_columns=("pos", "chunk"), min_count=args.min_count
    )
    t1 = time.perf_counter()
    matrices = {"train": features.fit_transform(parts["train"][0])}
    for name in ("testa", "testb"):
        matrices[name] = features.transform(parts[name][0])
    feature_s = time.perf_counter() - t1
    for name, (_, tags, lengths) in parts.items():
        sp.save_npz(folder / f"{name}_X.npz", matrices[name], compressed=False)
        np.save(folder / f"{name}_tags.npy", tags)
        np.save(folder / f"{name}_lengths.npy", lengths)
    np.save(folder / "names.npy", features.get_feature_names_out().astype(str))
    X = matrices["train"]
    return {
        "tokens": {name: int(len(p[1])) for name, p in parts.items()},
        "sentences": {name: int(len(p[2])) for name, p in parts.items()},
        "features": int(X.shape[1]),
        "train_nnz": int(X.nnz),
        "feature_s": feature_s,
        "read_s": t1 - t0,
        "parent_peak_rss_mb": peak_rss_mb(),
    }


# -- worker: one method ---------------------------------------------------------
def load_cache(folder):
    parts = {}
    for name in SPLITS:
        parts[name] = (
            sp.load_npz(folder / f"{name}_X.npz").tocsr(),
            np.load(folder / f"{name}_tags.npy"),
            np.load(folder / f"{name}_lengths.npy"),
        )
    return parts, np.load(folder / "names.npy").astype(object)


def tree_estimator(method, args):
    options = {}
    if args.allowed_transitions != "none":
        options["allowed_transitions"] = args.allowed_transitions
    if args.multi_output:
        options["multi_strategy"] = "multi_output_tree"
    if method == "gbcrf-linear":
        options["base_model"] = LinearChainCRF(reg=args.linear_reg, max_iter=args.linear_iter)
    return XGBCRFClassifier(
        mode=TREE_MODES[method],
        n_estimators=args.rounds,
        learning_rate=args.eta,
        max_depth=args.max_depth,
        early_stopping_rounds=args.patience,
        transition_solver=args.transition_solver,
        step=args.step,
        n_jobs=args.threads,
        **options,
    )


def run_tree(method, parts, args):
    (X, y, lengths), (Xa, ya, la) = parts["train"], parts["testa"]
    est = tree_estimator(method, args)
    est.fit(X, y, lengths=lengths, eval_set=[(Xa, ya, la)])
    return (lambda Xp, lp: est.predict(Xp, lengths=lp)), est.best_iteration_ + 1


def run_linear(parts, args):
    X, y, lengths = parts["train"]
    classes, codes = np.unique(y, return_inverse=True)
    crf = LinearChainCRF(reg=args.linear_reg, max_iter=args.linear_iter).fit(X, codes, lengths)
    return (lambda Xp, lp: classes[crf.predict(Xp, lp)]), crf.n_iter_


def crfsuite_items(X, lengths, names):
    """Per sentence, per token, the names of its non-zero columns (shared str objects)."""
    tokens = [names[X.indices[a:b]].tolist() for a, b in zip(X.indptr[:-1], X.indptr[1:])]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return [tokens[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def run_crfsuite(parts, names, args):
    import sklearn_crfsuite

    X, y, lengths = parts["train"]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    labels = [y[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    crf = sklearn_crfsuite.CRF(
        algorithm="lbfgs", c1=args.crf_c1, c2=args.crf_c2, max_iterations=args.crf_iter,
        all_possible_transitions=True,
    )
    crf.fit(crfsuite_items(X, lengths, names), labels)

    def predict(Xp, lp):
        return np.concatenate(crf.predict(crfsuite_items(Xp, lp, names)))

    return predict, args.crf_iter


def worker(args):
    """Train and score one method; write its result as JSON into the cache folder."""
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    with threadpool_limits(limits=args.threads):
        parts, names = load_cache(args.cache)
        rss_before = peak_rss_mb()
        wall, cpu = time.perf_counter(), time.process_time()
        if args.worker == "linear":
            predict, rounds = run_linear(parts, args)
        elif args.worker == "crfsuite":
            predict, rounds = run_crfsuite(parts, names, args)
        else:
            predict, rounds = run_tree(args.worker, parts, args)
        train_s, train_cpu_s = time.perf_counter() - wall, time.process_time() - cpu
        scores = {}
        for split in ("testa", "testb"):
            Xp, yp, lp = parts[split]
            table = span_prf(yp, predict(Xp, lp), lp, scheme=args.scheme)
            scores[split] = table.reset_index().to_dict(orient="records")
    result = {
        "method": args.worker,
        "rounds": int(rounds),
        "train_s": train_s,
        "train_cpu_s": train_cpu_s,
        "rss_before_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "scores": scores,
    }
    (args.cache / f"{args.worker}.json").write_text(json.dumps(result))


# -- parent: run, tabulate -----------------------------------------------------------
def run_method(method, args, folder, argv):
    command = [sys.executable, str(Path(__file__).resolve()), *argv,
               "--worker", method, "--cache", str(folder)]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        print(f"{method}: worker failed with exit code {done.returncode}", flush=True)
        return None
    return json.loads((folder / f"{method}.json").read_text())


def result_rows(result, args, summary):
    rows = []
    for split, table in result["scores"].items():
        for entry in table:
            rows.append({
                "method": result["method"],
                "split": split,
                **entry,
                "rounds": result["rounds"],
                "train_s": result["train_s"],
                "train_cpu_s": result["train_cpu_s"],
                "rss_before_mb": result["rss_before_mb"],
                "peak_rss_mb": result["peak_rss_mb"],
                "features": summary["features"],
                "min_count": args.min_count,
                "scheme": args.scheme,
                "max_depth": args.max_depth,
                "eta": args.eta,
                "threads": args.threads,
                "max_sentences": args.max_sentences,
                "allowed_transitions": args.allowed_transitions,
                "transition_solver": args.transition_solver,
                "step": args.step,
                "multi_output": args.multi_output,
            })
    return rows


def markdown(frame):
    """One line per method: overall F1 on testa and testb, testb F1 per type, cost."""
    f1 = frame.pivot_table(index="method", columns=["split", "type"], values="f1", sort=False)
    cost = frame.groupby("method", sort=False)[
        ["rounds", "train_s", "rss_before_mb", "peak_rss_mb"]].first()
    types = [t for t in f1["testb"].columns if t != "overall"]
    head = ["method", "testa F1", "testb F1", *[f"testb {t}" for t in types],
            "rounds", "train s", "RSS before MB", "peak RSS MB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in f1.index:
        cells = [method, f"{100 * f1.loc[method, ('testa', 'overall')]:.2f}",
                 f"{100 * f1.loc[method, ('testb', 'overall')]:.2f}",
                 *[f"{100 * f1.loc[method, ('testb', t)]:.2f}" for t in types],
                 f"{cost.loc[method, 'rounds']}", f"{cost.loc[method, 'train_s']:.1f}",
                 f"{cost.loc[method, 'rss_before_mb']:.0f}",
                 f"{cost.loc[method, 'peak_rss_mb']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker is not None:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="conll2003-") as tmp:
        folder = Path(tmp)
        summary = build_cache(args, folder)
        print(f"# CoNLL-2003 ({args.scheme}); {platform.processor() or platform.machine()}, "
              f"python {platform.python_version()}", flush=True)
        print(f"tokens {summary['tokens']}, sentences {summary['sentences']}; "
              f"{summary['features']} features (min_count={args.min_count}), "
              f"train nnz {summary['train_nnz']}; features built in {summary['feature_s']:.1f} s, "
              f"parent peak RSS {summary['parent_peak_rss_mb']:.0f} MB", flush=True)
        rows = []
        for method in args.methods:
            result = run_method(method, args, folder, argv)
            if result is not None:
                overall = {s: t[-1]["f1"] for s, t in result["scores"].items()}
                print(f"{method}: testa F1 {100 * overall['testa']:.2f}, testb F1 "
                      f"{100 * overall['testb']:.2f}, {result['train_s']:.1f} s, "
                      f"peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
                rows.extend(result_rows(result, args, summary))
    if not rows:
        raise SystemExit("no method finished.")
    frame = pd.DataFrame(rows)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.csv, index=False)
    print(f"\nwrote {args.csv}\n")
    print(markdown(frame))


if __name__ == "__main__":
    main()
