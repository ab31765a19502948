"""Issue 27's round ratio: GBCRF's steady round against the native one, best of interleaved runs.

On the OCR quick split (training folds 1-8 of ``--data-dir``, 42,393
letters, K = 26), one thread, for both tree shapes of ``objective_speed.py``
(one tree per label of depth 6; one multi-output tree of depth 8), trains
native ``multi:softprob``, LogitBoost and GBCRF with the library's defaults
for ``--warm`` + ``--rounds`` rounds and takes the mean CPU seconds of the
last ``--rounds`` rounds (by default past the one-pass rounds' warm-up
refits). The models run interleaved, ``--repeat`` times, and each keeps its
best mean: single runs of the same native round move by up to 50% on a
shared virtual machine, more than the differences measured here. Also
prints the trees' nodes per round (the tree cost follows the gradients).

``--sticky-rows N`` runs issue 27's scale case instead: ``dask_scaling.py``'s
generator in this one process (N rows, sequences of 20, K = 10 noisy one-hot
features and labels), per-label trees of depth 6 (as ``dask_scaling.py``),
one thread, with the objective's own CPU seconds per round beside.

Usage::

    python benchmarks/round_ratio.py --data-dir ../shared/data/ocr [--repeat 3]
    python benchmarks/round_ratio.py --sticky-rows 1000000 [--repeat 3]
"""

import argparse
import json
import os
import time

import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.datasets import load_ocr, ocr_split
from structboost.transitions.onestep import WARMUP

from dask_scaling import _partition
from protein_qs import machine_line

SHAPES = {"per-label, depth 6": {"max_depth": 6},
          "multi-output, depth 8": {"max_depth": 8, "multi_strategy": "multi_output_tree"}}
K = 26
STICKY_K = 10
STICKY_LENGTH = 20


class _Clock(xgb.callback.TrainingCallback):
    """Process CPU time at the end of every round, and the objective's CPU seconds so far."""

    def __init__(self, objective=None):
        super().__init__()
        self.objective = objective
        self.times = [time.process_time()]
        self.spent = [0.0]

    def after_iteration(self, model, epoch, evals_log):
        self.times.append(time.process_time())
        if self.objective is not None:
            self.spent.append(sum(self.objective.crf.timings.values()))
        return False


def steady(dtrain, params, objective, warm, rounds):
    """Mean CPU seconds of the last ``rounds`` rounds, nodes per round and objective seconds.

    The objective's seconds per round (its ``timings``; 0 for native) are
    over the same rounds.
    """
    clock = _Clock(objective)
    callbacks = [clock] + ([objective.callback()] if objective is not None else [])
    booster = xgb.train(params, dtrain, warm + rounds, obj=objective, callbacks=callbacks)
    model = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]
    per_tree = np.array([int(t["tree_param"]["num_nodes"]) for t in model["trees"]])
    per_round = per_tree.reshape(warm + rounds, -1).sum(axis=1)
    own = (clock.spent[-1] - clock.spent[warm]) / rounds if objective is not None else 0.0
    return float(np.diff(clock.times)[warm:].mean()), float(per_round[warm:].mean()), own


def ocr_case(data_dir):
    """``(dtrain, K, shapes)`` of the OCR quick split's training folds."""
    train, _, _ = ocr_split(load_ocr(data_dir), test_folds=[0], valid_folds=[9])
    dtrain = xgb.DMatrix(train.X.astype(np.float32), label=np.asarray(train.y),
                         group=np.asarray(train.lengths), nthread=1)
    return dtrain, K, SHAPES


def sticky_case(rows):
    """``(dtrain, K, shapes)`` of ``dask_scaling.py``'s data, ``rows`` rows in one process."""
    n_seq = rows // STICKY_LENGTH
    X, y, _ = _partition(0, n_seq, STICKY_LENGTH, STICKY_K, 0)
    dtrain = xgb.DMatrix(X, label=y, group=np.full(n_seq, STICKY_LENGTH), nthread=1)
    return dtrain, STICKY_K, {"per-label, depth 6": {"max_depth": 6}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-dir", help="folder holding letters.npz (OCR)")
    source.add_argument("--sticky-rows", type=int,
                        help="rows of dask_scaling.py's data instead of OCR")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10, help="rounds timed, after --warm")
    ap.add_argument("--warm", type=int, default=WARMUP + 1)
    args = ap.parse_args()
    print(machine_line(), f"load average {os.getloadavg()[0]:.2f}")
    if args.sticky_rows:
        dtrain, k, shapes = sticky_case(args.sticky_rows)
    else:
        dtrain, k, shapes = ocr_case(args.data_dir)
    base = {"eta": 0.3, "nthread": 1, "tree_method": "hist"}
    runs = {}
    for shape, tree in shapes.items():
        runs[shape, "native"] = ({**base, **tree, "objective": "multi:softprob",
                                  "num_class": k}, lambda: None)
        runs[shape, "logitboost"] = (sb.xgb_params(k, **base, **tree),
                                     lambda: sb.crf_objective(k, mode="logitboost", nthread=1))
        runs[shape, "gbcrf (defaults)"] = (sb.xgb_params(k, **base, **tree),
                                           lambda: sb.crf_objective(k, nthread=1))
    best = {}
    for _ in range(args.repeat):
        for key, (params, make) in runs.items():
            seconds, nodes, own = steady(dtrain, params, make(), args.warm, args.rounds)
            if key not in best or seconds < best[key][0]:
                best[key] = (seconds, nodes, own)
    print(f"\nbest of {args.repeat}, CPU s per round of rounds {args.warm + 1}-"
          f"{args.warm + args.rounds}, one thread, load average {os.getloadavg()[0]:.2f}\n")
    print("| trees | run | CPU s / round | ratio to native | objective CPU s / round "
          "| nodes / round |")
    print("|---|---|---|---|---|---|")
    for (shape, name), (seconds, nodes, own) in best.items():
        ratio = seconds / best[shape, "native"][0]
        print(f"| {shape} | {name} | {seconds:.3f} | {ratio:.2f} | {own:.3f} | {nodes:.0f} |")


if __name__ == "__main__":
    main()
