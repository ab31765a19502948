"""Boosted, input-dependent transitions against linear ones, on protein and OCR.

Two chain CRFs with the same trees and the same GBCRF objective (mixing gamma):

- ``linear``: :func:`structboost.crf_objective`, trees on the node potentials
  and one K x K transition table refit by L-BFGS every round;
- ``input``: :func:`structboost.xgboost.edge_crf_objective` on
  :func:`structboost.xgboost.edge_dmatrix` rows, trees on ``F^v(u, X_t)``
  (Dietterich et al. 2008), Hessian ``gamma^(e) p (1 - p)`` (Chen et al.'s
  edge bound); ``input-treecrf`` is the same with the unit Hessian.

Protocols (settings and rounds from training data only):

- protein (``--protein``): the window of 11 residues of
  ``benchmarks/protein_qs.py``, its homology-aware folds of the 111 training
  proteins; one tree setting per method (``--protein-config``, default the
  ones ``protein_qs.py``'s CV chose for GBCRF and TreeCRF with marginal
  decoding, see ``PROTEIN_CONFIGS``) and the
  number of rounds (per decoding) from the mean held-out accuracy curve of
  ``--folds`` folds, capped at ``--rounds``; refit on all 111 proteins and
  scored once on the 17 test proteins (bootstrap interval over proteins).
- OCR (``--ocr``): fold 0 is the test set and fold 9 the early-stopping set,
  as in ``benchmarks/ocr.py``; ``--ocr-words`` training words and
  ``--ocr-valid-words`` validation words (subsamples, first words in file
  order) and early stopping on the validation NLL with patience
  ``--patience``.

Train seconds are CPU seconds of this process (``time.process_time``) with
one XGBoost and one numba thread; model size is the length of the booster's
UBJSON model (``save_raw("ubj")``). Results go to
``benchmarks/results/edge_transitions.csv``; a Markdown table is printed.

Usage::

    PYTHONPATH=. python benchmarks/edge_transitions.py --protein ../shared/data/protein-qs \\
        --ocr ../shared/data/ocr --ocr-words 300
"""

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numba
import numpy as np
import xgboost as xgb

import structboost as sb
import structboost.xgboost as sbx
from structboost.datasets import load_ocr, ocr_split
from structboost.inference.chain import map_labels, posterior
from structboost.objectives.chain import SequenceBatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protein_qs import (  # noqa: E402
    best_first, homology_clusters, load_part, machine_line, protein_bootstrap, protein_folds,
    subset, windowed,
)  # fmt: skip

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("linear", "input", "input-treecrf")
DECODES = ("viterbi", "marginal")
# The settings protein_qs.py's cross-validation chose for marginal decoding:
# GBCRF (both GBCRF rows here) and TreeCRF (the unit-Hessian row).
PROTEIN_CONFIGS = {
    "linear": {**best_first(8, min_child_weight=5.0), "eta": 2.0, "reg_lambda": 100.0},
    "input": {**best_first(8, min_child_weight=5.0), "eta": 2.0, "reg_lambda": 100.0},
    "input-treecrf": {**best_first(30, min_child_weight=5.0), "eta": 1.0, "reg_lambda": 100.0},
}
OCR_CONFIG = {"max_depth": 6, "eta": 0.5, "multi_strategy": "multi_output_tree"}


def objective(method, k):
    if method == "linear":
        return sb.crf_objective(k)
    return sbx.edge_crf_objective(k, mode="treecrf" if method == "input-treecrf" else "gbcrf")


def dmatrix(method, X, y, lengths, k, config):
    """Rows of one method; the previous label is numeric for multi-output trees (no categorical)."""
    if method == "linear":
        return xgb.DMatrix(X, label=y, group=lengths)
    categorical = config.get("multi_strategy") != "multi_output_tree"
    return sbx.edge_dmatrix(X, y, lengths, num_labels=k, categorical=categorical)


def decode_both(obj, margins, batch):
    """Labels of both decodings ``{decode: (n,)}`` under the objective's current state."""
    crf = obj.crf
    if hasattr(crf, "potentials"):  # boosted transitions
        unary, trans = crf.potentials(margins, batch)
    else:
        unary, trans = crf.check_margins(margins), crf.params.transitions
    p = crf.params
    post = posterior(unary, batch.offsets, trans, p.start, p.end, rates=False)
    return {
        "viterbi": map_labels(unary, batch.offsets, trans, p.start, p.end),
        "marginal": post.marginals().argmax(axis=1),
    }


class AccuracyCurve(xgb.callback.TrainingCallback):
    """Held-out accuracy of both decodings after every round."""

    def __init__(self, obj, dheld, y, lengths, k):
        super().__init__()
        self.obj, self.dheld = obj, dheld
        self.batch = SequenceBatch.build(y, lengths, k)
        self.curve = {d: [] for d in DECODES}

    def after_iteration(self, model, epoch, evals_log):
        margins = model.predict(self.dheld, output_margin=True)
        for d, labels in decode_both(self.obj, margins, self.batch).items():
            self.curve[d].append(np.mean(labels == self.batch.labels))
        return False


def fit(method, config, train, k, rounds, threads, **kw):
    obj = objective(method, k)
    params = sb.xgb_params(k, nthread=threads, **config)
    dtrain = dmatrix(method, *train, k, config)
    t0 = time.process_time()
    booster = xgb.train(params, dtrain, num_boost_round=rounds, obj=obj, verbose_eval=False,
                        custom_metric=obj.metric,
                        callbacks=[obj.callback(), *kw.pop("callbacks", [])], **kw)  # fmt: skip
    return booster, obj, time.process_time() - t0


def train_rows(method, lengths, k):
    """Rows the booster trains on: positions, or edge rows ``1 + (L - 1) K`` per sequence."""
    return int(lengths.sum() if method == "linear" else (1 + (lengths - 1) * k).sum())


def scored(method, booster, test, k):
    """``{decode: (n,) bool}`` correct labels on the test set."""
    X, y, lengths = test
    return {d: sb.predict(booster, X, lengths=lengths, decode=d) == y for d in DECODES}


def row(dataset, method, decode, config, rounds, correct, lengths, seconds, booster, n_rows, cv):
    low, high = protein_bootstrap(correct, lengths)
    return {
        "dataset": dataset, "method": method, "decode": decode, "config": json.dumps(config),
        "rounds": rounds, "cv_acc": "" if cv is None else round(100 * cv, 2),
        "test_acc": round(100 * correct.mean(), 2),
        "interval": f"{100 * low:.1f}-{100 * high:.1f}", "train_cpu_s": round(seconds, 1),
        "model_kb": round(len(booster.save_raw("ubj")) / 1024, 1), "train_rows": n_rows,
    }  # fmt: skip


def run_protein(args, methods):
    k = 3
    X, y, lengths, residues = load_part(args.protein, "train", with_residues=True)
    Xt, yt, lt = load_part(args.protein, "test")
    W, Wt = windowed(X, lengths, 5), windowed(Xt, lt, 5)
    folds = protein_folds(homology_clusters(residues, lengths, 0.1), lengths, args.folds, seed=0)
    rows = []
    for method in methods:
        config = json.loads(args.protein_config) if args.protein_config else PROTEIN_CONFIGS[method]
        mean = {d: np.zeros(args.rounds) for d in DECODES}
        for f in range(args.folds):
            keep = folds != f
            sub, held = subset(W, y, lengths, keep), subset(W, y, lengths, ~keep)
            obj = objective(method, k)
            curve = AccuracyCurve(obj, dmatrix(method, *held, k, config), held[1], held[2], k)
            params = sb.xgb_params(k, nthread=args.threads, **config)
            xgb.train(params, dmatrix(method, *sub, k, config), num_boost_round=args.rounds, obj=obj,
                      callbacks=[obj.callback(), curve], verbose_eval=False)  # fmt: skip
            for d in DECODES:
                mean[d] += np.array(curve.curve[d]) / args.folds
            print(f"  protein {method} fold {f}: best "
                  f"{ {d: round(float(mean[d].max()), 4) for d in DECODES} }", flush=True)
        for d in DECODES:
            best = int(np.argmax(mean[d])) + 1
            booster, _, seconds = fit(method, config, (W, y, lengths), k, best, args.threads)
            correct = scored(method, booster, (Wt, yt, lt), k)[d]
            n_rows = train_rows(method, lengths, k)
            rows.append(row("protein", method, d, config, best, correct, lt, seconds, booster,
                            n_rows, float(mean[d][best - 1])))  # fmt: skip
            print(rows[-1], flush=True)
    return rows


def run_ocr(args, methods):
    data = load_ocr(args.ocr, dtype=np.float32)
    k = 26
    train, valid, test = ocr_split(data, test_folds=0, valid_folds=9)

    def head(part, words):
        m = min(words, len(part.lengths))
        n = int(part.lengths[:m].sum())
        return part.X[:n], part.y[:n], part.lengths[:m]

    train, valid = head(train, args.ocr_words), head(valid, args.ocr_valid_words)
    test = (test.X, test.y, test.lengths)
    config = json.loads(args.ocr_config) if args.ocr_config else OCR_CONFIG
    rows = []
    for method in methods:
        dvalid = dmatrix(method, *valid, k, config)
        booster, _, seconds = fit(
            method, config, train, k, args.rounds, args.threads,
            evals=[(dvalid, "valid")], early_stopping_rounds=args.patience,
        )  # fmt: skip
        correct = scored(method, booster, test, k)
        lengths = train[2]
        n_rows = train_rows(method, lengths, k)
        for d in DECODES:
            rows.append(row("ocr", method, d, config, int(booster.best_iteration) + 1,
                            correct[d], test[2], seconds, booster, n_rows, None))  # fmt: skip
            print(rows[-1], flush=True)
    return rows


def markdown(rows):
    head = ("dataset", "method", "decode", "rounds", "cv_acc", "test_acc", "interval",
            "train_cpu_s", "model_kb", "train_rows")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--protein", help="folder of protein-secondary-structure.{train,test}")
    parser.add_argument("--ocr", help="folder of letters.npz")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--rounds", type=int, default=300, help="round cap")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--protein-config", help="JSON xgboost parameters (default: see module)")
    parser.add_argument("--ocr-config", help="JSON xgboost parameters (default OCR_CONFIG)")
    parser.add_argument("--ocr-words", type=int, default=300)
    parser.add_argument("--ocr-valid-words", type=int, default=200)
    parser.add_argument("--patience", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    numba.set_num_threads(1)
    methods = args.methods.split(",")
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    rows = []
    if args.protein:
        rows += run_protein(args, methods)
    if args.ocr:
        rows += run_ocr(args, methods)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "edge_transitions.csv"
    with open(path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) + ["command", "machine"])
        if fh.tell() == 0:
            writer.writeheader()
        for r in rows:
            writer.writerow({**r, "command": " ".join(sys.argv), "machine": machine_line()})
    print(markdown(rows))


if __name__ == "__main__":
    main()
