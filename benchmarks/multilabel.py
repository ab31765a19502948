"""Multi-label benchmark: label-tree CRFs (independent, Chow-Liu, ESS) vs XGBoost per label.

Reads the MULAN train/test splits of yeast, scene and emotions from
``--data-dir`` (see ``../shared/data/multilabel/README.md``) and reports, on
the test split: Hamming loss (marginals thresholded at 0.5, the
Hamming-optimal decision), subset accuracy and example-based F1 (of the MAP
label set of each model), the mean test log-likelihood ``log P(Y | x)`` per
example, and train / predict seconds. All boosters run on one thread (the
machine is shared); settings are printed with the table.

    python benchmarks/multilabel.py --data-dir ../shared/data/multilabel
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import xgboost as xgb

from structboost.estimators.arff import read_arff_multilabel
from structboost.estimators.multilabel import ESSTreeCRFClassifier

SETS = ("emotions", "scene", "yeast")


def load(data_dir, name):
    folder = Path(data_dir) / name
    xml = folder / f"{name}.xml"
    parts = []
    for split in ("train", "test"):
        path = folder / f"{name}-{split}.arff"
        if not path.exists():
            path = folder / f"{name}-{split}.arff.gz"
        parts.append(read_arff_multilabel(path, xml)[:2])
    (xtr, ytr), (xte, yte) = parts
    mean, std = xtr.mean(axis=0), xtr.std(axis=0) + 1e-12
    return (xtr - mean) / std, ytr, (xte - mean) / std, yte


def example_f1(y, pred):
    inter = (y & pred).sum(axis=1)
    total = y.sum(axis=1) + pred.sum(axis=1)
    return float(np.mean(np.where(total > 0, 2 * inter / np.maximum(total, 1), 1.0)))


def scores(y, proba, pred, loglik):
    return {
        "hamming": float(np.mean((proba > 0.5) != y)),
        "subset_acc": float(np.mean((pred == y).all(axis=1))),
        "f1": example_f1(y, pred),
        "test_ll": float(np.mean(loglik)),
    }


class PerLabelXGB:
    """Binary relevance: one XGBoost binary classifier per label."""

    def __init__(self, rounds, depth, eta, seed):
        self.params = {
            "objective": "binary:logistic",
            "max_depth": depth,
            "eta": eta,
            "nthread": 1,
            "tree_method": "hist",
            "seed": seed,
        }
        self.rounds = rounds

    def fit(self, X, Y):
        self.models = [
            xgb.train(self.params, xgb.DMatrix(X, label=Y[:, j]), self.rounds)
            for j in range(Y.shape[1])
        ]
        return self

    def predict_proba(self, X):
        d = xgb.DMatrix(X)
        return np.column_stack([m.predict(d) for m in self.models])


def run_one(name, model, xtr, ytr, xte, yte):
    t0 = time.perf_counter()
    model.fit(xtr, ytr)
    t1 = time.perf_counter()
    proba = np.clip(model.predict_proba(xte), 1e-12, 1 - 1e-12)
    if isinstance(model, PerLabelXGB):
        pred = (proba > 0.5).astype(np.int64)
        loglik = np.where(yte == 1, np.log(proba), np.log1p(-proba)).sum(axis=1)
    else:
        pred = model.predict(xte)
        loglik = model.predict_log_likelihood(xte, yte)
    t2 = time.perf_counter()
    out = scores(yte, proba, pred, loglik)
    out.update(model=name, train_s=t1 - t0, predict_s=t2 - t1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="../shared/data/multilabel")
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--eta", type=float, default=0.2)
    ap.add_argument("--pair-rounds", type=int, default=30)
    ap.add_argument("--pair-depth", type=int, default=3)
    ap.add_argument("--max-pairs", type=int, default=45)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    print(
        f"settings: rounds={args.rounds} depth={args.depth} eta={args.eta} "
        f"pair models: XGBoost {args.pair_rounds} rounds depth {args.pair_depth}, "
        f"max_pairs={args.max_pairs}, 2-fold out-of-fold; nthread=1; mode=gbcrf, "
        "edge types per ordered label pair, L-BFGS transitions"
    )
    rows = []
    common = {
        "mode": "gbcrf",
        "n_estimators": args.rounds,
        "max_depth": args.depth,
        "learning_rate": args.eta,
        "nthread": 1,
        "random_state": args.seed,
    }
    for data in args.sets:
        xtr, ytr, xte, yte = load(args.data_dir, data)
        models = {
            "xgb-per-label": PerLabelXGB(args.rounds, args.depth, args.eta, args.seed),
            "crf-independent": ESSTreeCRFClassifier(structure="independent", **common),
            "crf-chow-liu": ESSTreeCRFClassifier(structure="chow-liu", **common),
            "crf-ess": ESSTreeCRFClassifier(
                structure="ess",
                pairwise_estimators=args.pair_rounds,
                pairwise_depth=args.pair_depth,
                max_pairs=args.max_pairs,
                **common,
            ),
        }
        print(f"\n{data}: train {xtr.shape}, test {xte.shape}, labels {ytr.shape[1]}")
        print("| model | Hamming loss | subset acc | example F1 | test LL | train s | predict s |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, model in models.items():
            r = run_one(name, model, xtr, ytr, xte, yte)
            r["data"] = data
            rows.append(r)
            print(
                f"| {name} | {r['hamming']:.4f} | {r['subset_acc']:.4f} | {r['f1']:.4f} | "
                f"{r['test_ll']:.4f} | {r['train_s']:.1f} | {r['predict_s']:.2f} |",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
