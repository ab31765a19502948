"""Lever study for issue 16: what makes GBCRF win out of the box, on OCR, protein and CoNLL-2003.

Every configuration is an :class:`structboost.XGBCRFClassifier` trained
with one thread on a dataset's training part, stopped early on its
validation part (the same budget for every lever: ``--rounds`` at most,
``--patience``) and scored once on its test part with both decodings; the
rows also keep the training NLL per sequence of the fitted model. The
rows of ``AS_SHIPPED`` are the estimator exactly as a user first meets it
(no argument but the dataset's label scheme and, for LogitBoost, the mode;
no ``eval_set``: since issue 30 the defaults hold out 10% of the training
sequences and stop on them when there are more than 10,000 training rows,
then refit on all of them; the "preset" rows add :func:`structboost.presets.preset`'s
parameters).

Datasets (all read by path from ``--data-dir``, never copied):

* ``ocr``: Taskar's letters, test fold 0, validation fold 9, training on the
  other eight (the "quick split" of ``ocr.py``); letter error. ``--merge-labels K``
  merges the 26 letters into K classes (the same pixels with fewer labels).
* ``protein``: Qian & Sejnowski, window of 11 residues; three splits of the
  111 training proteins into two thirds for training and one third for
  validation (homologous proteins in one third, as in ``protein_qs.py``;
  ``--seed`` draws other splits), one model per split, each scored on the
  17 test proteins; residue accuracy, averaged over the three models.
* ``conll``: CoNLL-2003 English, IOB2 tags under the IOB2 constraints,
  ``TokenFeatures`` as in ``conll2003.py``; training on the first
  ``--max-sentences`` sentences of eng.train, validation on testa, test on
  testb; span F1 (conlleval semantics). ``--features`` adds to those
  features: ``base`` (none) or a ``+``-joined list of the names of
  ``FEATURES`` (e.g. ``affix4+document``); the rows name it in ``features``.

Usage::

    python benchmarks/levers.py --dataset protein --data-dir ../shared/data/protein-qs
    python benchmarks/levers.py --dataset ocr --data-dir ../shared/data/ocr --configs defaults,newton
    python benchmarks/levers.py --dataset conll --data-dir ../shared/data/conll2003 \
        --configs "preset sparse-text" --features affix4+document
    python benchmarks/levers.py --summarize        # markdown tables of results/levers.csv
"""

import argparse
import csv
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

import structboost as sb
from structboost import XGBCRFClassifier
from structboost.datasets import convert_tags, load_ocr, ocr_split, read_conll
from structboost.metrics import span_prf, token_accuracy
from structboost.presets import preset
from structboost.text.lexical import KINDS, TokenFeatures

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protein_qs import homology_clusters, load_part, protein_folds, windowed  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DECODES = ("viterbi", "marginal", "fitted")

#: Runs as a user first meets the estimator: no budget, no eval_set.
AS_SHIPPED = {
    "library defaults": {},
    "previous defaults": {"step": "bound"},  # the library before this study
    "logitboost defaults": {"mode": "logitboost"},
    # issue 30: the automatic early stopping with one knob turned
    "defaults no-stop": {"early_stopping": False},
    "defaults stop-error": {"eval_metric": "crf-error"},
    "defaults patience30": {"n_iter_no_change": 30},
    "defaults no-refit": {"refit": False},  # the hold-out run's model, as scikit-learn keeps it
    "defaults eta0.1": {"learning_rate": 0.1},
    "defaults hold-out0.2": {"validation_fraction": 0.2},
    "defaults stop-error patience30": {"eval_metric": "crf-error", "n_iter_no_change": 30},
    "defaults decode-auto": {"decode": "auto"},  # Viterbi or marginal, chosen on the held-out part
    "newton decode-auto": {"transition_solver": "newton", "decode": "auto"},
    "defaults multi-output": {"multi_strategy": "multi_output_tree"},  # one tree a round, depth 6
    "defaults per-label": {"multi_strategy": "one_output_per_tree"},  # a tree per label a round
    # the named presets (structboost.presets.preset), automatic early stopping as the defaults
    "preset dense": preset("dense"),
    "preset dense eta0.3": preset("dense", learning_rate=0.3),
    "preset sparse-text": preset("sparse-text"),
    "preset per-token": preset("per-token"),
}
#: The levers: keyword arguments of XGBCRFClassifier on top of the budget
#: ("mo8": one multi-output tree per round, depth 8; "stop-error": early
#: stopping on the token error instead of the NLL).
LEVERS = {
    "bound": {"step": "bound"},
    "logitboost": {"mode": "logitboost"},
    "treecrf": {"mode": "treecrf", "transition_solver": "newton"},
    "bound+newton": {"step": "bound", "transition_solver": "newton"},
    "adaptive": {"step": "adaptive"},
    "adaptive+newton": {"step": "adaptive", "transition_solver": "newton"},
    "adaptive+newton+eta0.1": {"step": "adaptive", "transition_solver": "newton", "learning_rate": 0.1},
    "adaptive+newton+eta1": {"step": "adaptive", "transition_solver": "newton", "learning_rate": 1.0},
    "adaptive+newton+mo8": {
        "step": "adaptive", "transition_solver": "newton", "multi_strategy": "multi_output_tree",
        "max_depth": 8,
    },
    "adaptive+newton+mo6": {
        "step": "adaptive", "transition_solver": "newton", "multi_strategy": "multi_output_tree",
    },
    "adaptive+newton+stop-error": {
        "step": "adaptive", "transition_solver": "newton", "eval_metric": "crf-error",
    },
    "adaptive+newton+reg10": {
        "step": "adaptive", "transition_solver": "newton", "reg_transitions": 10.0,
    },
    "adaptive+newton+length": {
        "step": "adaptive", "transition_solver": "newton", "hessian_bound": "length",
    },
    "adaptive+mo8": {
        "step": "adaptive", "multi_strategy": "multi_output_tree", "max_depth": 8,
    },
    "adaptive+mo8+stop-error": {
        "step": "adaptive", "multi_strategy": "multi_output_tree", "max_depth": 8,
        "eval_metric": "crf-error",
    },
    "adaptive+newton+mo8+eta0.1": {
        "step": "adaptive", "transition_solver": "newton", "multi_strategy": "multi_output_tree",
        "max_depth": 8, "learning_rate": 0.1,
    },
    "adaptive+eta0.1": {"step": "adaptive", "learning_rate": 0.1},
    "adaptive+reg10": {"step": "adaptive", "reg_transitions": 10.0},
    "bound+newton+mo8": {
        "step": "bound", "transition_solver": "newton", "multi_strategy": "multi_output_tree", "max_depth": 8,
    },
    "logitboost+mo8": {
        "mode": "logitboost", "multi_strategy": "multi_output_tree", "max_depth": 8,
    },
}
CONFIGS = {**AS_SHIPPED, **LEVERS}
#: Additions to the CoNLL features (``--features``): TokenFeatures parameters,
#: ``kinds`` appended to the defaults.
FEATURES = {
    "affix4": {"affix_lengths": (1, 2, 3, 4)},
    "document": {"kinds": ("document",)},
}


def token_features(spec):
    """The CoNLL TokenFeatures of a ``--features`` value (``base`` or ``a+b+...``)."""
    kwargs = {"half_width": 2, "extra_columns": ("pos", "chunk"), "min_count": 3, "kinds": KINDS}
    for name in [] if spec == "base" else spec.split("+"):
        addition = dict(FEATURES[name])
        kwargs["kinds"] = kwargs["kinds"] + addition.pop("kinds", ())
        kwargs.update(addition)
    return TokenFeatures(**kwargs)


def load_ocr_parts(args):
    data = load_ocr(args.data_dir)
    train, valid, test = ocr_split(data, test_folds=0, valid_folds=9)
    train, valid, test = ((p.X, merged(p.y, args.merge_labels), p.lengths)
                          for p in (train, valid, test))
    return [(train, valid)], test


def merged(y, n_labels):
    """OCR letters ``y`` as ``n_labels`` classes (the i-th letter in class i mod n), or as
    they are when ``n_labels`` is None: the same pixels with fewer labels.
    """
    if n_labels is None:
        return y
    letters = np.unique(y)
    return np.searchsorted(letters, y) % n_labels


def load_protein_parts(args):
    X, y, lengths, residues = load_part(args.data_dir, "train", with_residues=True)
    Xt, yt, lt = load_part(args.data_dir, "test")
    X, Xt = windowed(X, lengths, 5), windowed(Xt, lt, 5)
    folds = protein_folds(homology_clusters(residues, lengths, 0.1), lengths, 3, seed=args.seed)
    splits = []
    for f in range(3):
        rows = np.repeat(folds != f, lengths)
        splits.append(((X[rows], y[rows], lengths[folds != f]),
                       (X[~rows], y[~rows], lengths[folds == f])))
    return splits, (Xt, yt, lt)


def load_conll_parts(args):
    frames = {}
    for name, fname, cap in (
        ("train", "eng.train", args.max_sentences),
        ("valid", "eng.testa", None),
        ("test", "eng.testb", None),
    ):
        df = read_conll(args.data_dir / fname, documents=True)
        if cap is not None:
            df = df[df["sentence"] < cap].reset_index(drop=True)
        lengths = np.bincount(df["sentence"])
        tags = np.asarray(convert_tags(df["tag"], "iob1", "iob2", lengths), dtype=str)
        frames[name] = (df, tags, lengths)
    features = token_features(args.features)
    X = features.fit_transform(frames["train"][0])
    valid, test = ((features.transform(df), tags, lengths)
                   for df, tags, lengths in (frames["valid"], frames["test"]))
    return [((X, frames["train"][1], frames["train"][2]), valid)], test


DATASETS = {
    # loader, metric name, scorer(y, pred, lengths), fixed kwargs
    "ocr": (load_ocr_parts, "letter error %",
            lambda y, p, lengths: 100.0 * (1.0 - token_accuracy(y, p)), {}),
    "protein": (load_protein_parts, "accuracy %",
                lambda y, p, lengths: 100.0 * token_accuracy(y, p), {}),
    "conll": (load_conll_parts, "span F1",
              lambda y, p, lengths: 100.0 * span_prf(y, p, lengths).loc["overall", "f1"],
              {"allowed_transitions": "iob2"}),
}


def estimator(name, fixed, args):
    """The estimator of one configuration; those of ``AS_SHIPPED`` with the library's budget."""
    if name in AS_SHIPPED:
        return XGBCRFClassifier(n_jobs=args.threads, **fixed, **AS_SHIPPED[name])
    kwargs = {"n_estimators": args.rounds, "early_stopping_rounds": args.patience,
              "n_jobs": args.threads, **fixed, **LEVERS[name]}
    return XGBCRFClassifier(**kwargs)


def run_config(name, splits, test, args):
    """Train and score one configuration on every split; one CSV row per decoding.

    ``valid`` and ``test`` are means over the splits (one model per split,
    each stopped early on its own validation part), ``rounds`` the mean
    number of rounds kept and ``fit_cpu_s`` the mean CPU seconds of a fit.
    """
    _, metric, score, fixed = DATASETS[args.dataset]
    config = CONFIGS[name]
    Xt, yt, lt = test
    valid, tested = {d: [] for d in DECODES}, {d: [] for d in DECODES}
    rounds, cpu, wall, train_nll = [], [], [], []
    for (X, y, lengths), (Xv, yv, lv) in splits:
        est = estimator(name, fixed, args)
        eval_set = None if name in AS_SHIPPED else [(Xv, yv, lv)]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        est.fit(X, y, lengths=lengths, eval_set=eval_set, verbose=False)
        cpu.append(time.process_time() - cpu0)
        wall.append(time.perf_counter() - wall0)
        rounds.append(est.best_iteration_ + 1)
        train_nll.append(-float(np.mean(est.predict_log_likelihood(X, y, lengths=lengths))))
        for decode in DECODES:  # ("fitted": the estimator's own, decode_)
            chosen = None if decode == "fitted" else decode
            valid[decode].append(score(yv, est.predict(Xv, lengths=lv, decode=chosen), lv))
            tested[decode].append(score(yt, est.predict(Xt, lengths=lt, decode=chosen), lt))
    return [
        {
            "dataset": args.dataset + (f"-{args.merge_labels}-classes" if args.merge_labels else "")
            + (f" seed {args.seed}" if args.seed else ""),
            "config": name, "features": args.features,
            "kwargs": json.dumps(config),
            "decode": decode, "metric": metric,
            "valid": round(float(np.mean(valid[decode])), 3),
            "test": round(float(np.mean(tested[decode])), 3),
            "rounds": round(float(np.mean(rounds))), "fit_cpu_s": round(float(np.mean(cpu)), 1),
            "fit_wall_s": round(float(np.mean(wall)), 1),
            "train_nll": round(float(np.mean(train_nll)), 5),
            "train_rows": int(np.mean([len(split[0][1]) for split in splits])),
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, xgboost {xgb.__version__}, "
                       f"structboost {sb.__version__}",
        }
        for decode in DECODES
    ]


def append_rows(path, rows):
    new = not path.exists()
    if not new and pd.read_csv(path, nrows=0).columns.tolist() != list(rows[0]):
        # a file of an earlier version's columns: rewritten with the new ones
        pd.concat([pd.read_csv(path), pd.DataFrame(rows)]).to_csv(path, index=False)
        return
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def summarize(path):
    """Print one markdown table per dataset: the last run of every configuration."""
    frame = pd.read_csv(path)
    if "features" in frame:  # rows of added features named "config [features]"
        extra = frame["features"].fillna("base") != "base"
        frame.loc[extra, "config"] += " [" + frame.loc[extra, "features"] + "]"
    frame = frame.drop_duplicates(["dataset", "config", "decode"], keep="last")
    for dataset, part in frame.groupby("dataset", sort=False):
        wide = part.pivot(index="config", columns="decode", values=["valid", "test"])
        info = part.groupby("config")[["rounds", "fit_cpu_s"]].first()
        metric = part["metric"].iloc[0]
        print(f"\n{dataset} ({metric}; valid / test, Viterbi and marginal decoding)\n")
        print("| config | valid V | valid M | test V | test M | test, as fitted | rounds | fit CPU s |")
        print("|---|---|---|---|---|---|---|---|")
        order = [c for c in CONFIGS if c in wide.index]
        order += sorted(set(wide.index) - set(order))  # runs of earlier code, named so
        for c in order:
            v, t = wide.loc[c, "valid"], wide.loc[c, "test"]
            fitted = t.get("fitted", float("nan"))  # (runs before the "fitted" rows: blank)
            print(f"| {c} | {v['viterbi']:.2f} | {v['marginal']:.2f} | {t['viterbi']:.2f} | "
                  f"{t['marginal']:.2f} | {'' if fitted != fitted else f'{fitted:.2f}'} | "
                  f"{info.loc[c, 'rounds']} | {info.loc[c, 'fit_cpu_s']} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(DATASETS))
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma list of configuration names (see CONFIGS)")
    ap.add_argument("--rounds", type=int, default=400, help="most rounds of every lever")
    ap.add_argument("--patience", type=int, default=30, help="early-stopping rounds")
    ap.add_argument("--max-sentences", type=int, default=3000,
                    help="conll: training sentences kept (of 14,041)")
    ap.add_argument("--features", default="base",
                    help="conll: 'base' or a '+' list of FEATURES names added to the features")
    ap.add_argument("--seed", type=int, default=0,
                    help="protein: the seed of the three homology splits")
    ap.add_argument("--merge-labels", type=int, default=None,
                    help="ocr: merge the 26 letters into this many classes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv", type=Path, default=RESULTS / "levers.csv")
    ap.add_argument("--summarize", action="store_true", help="print the tables and exit")
    args = ap.parse_args(argv)
    if args.summarize:
        summarize(args.csv)
        return
    if args.dataset is None or args.data_dir is None:
        ap.error("--dataset and --data-dir are required unless --summarize")
    names = [c.strip() for c in args.configs.split(",")]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        ap.error(f"unknown configurations {unknown}; choose from {list(CONFIGS)}")
    additions = [] if args.features == "base" else args.features.split("+")
    if not set(additions) <= set(FEATURES) or len(set(additions)) != len(additions):
        ap.error(f"--features must be 'base' or distinct names from {list(FEATURES)} joined "
                 f"by '+'; got {args.features!r}")
    splits, test = DATASETS[args.dataset][0](args)
    for name in names:
        rows = run_config(name, splits, test, args)
        append_rows(args.csv, rows)
        print(name, [(r["decode"], r["valid"], r["test"]) for r in rows],
              rows[0]["rounds"], rows[0]["fit_cpu_s"], rows[0]["train_nll"], flush=True)


if __name__ == "__main__":
    main()
