"""Issue 27's round ratio: GBCRF's steady round against the native one, best of interleaved runs.

On the OCR quick split (training folds 1-8 of ``--data-dir``, 42,393
letters, K = 26), on ``--threads`` threads (one by default), for both tree
shapes of ``objective_speed.py``
(one tree per label of depth 6; one multi-output tree of depth 8), trains
native ``multi:softprob``, LogitBoost and GBCRF with the library's defaults
for ``--warm`` + ``--rounds`` rounds and takes the mean CPU and wall
seconds of the last ``--rounds`` rounds (by default past the one-pass
rounds' warm-up refits; ``--warm 0 --rounds 30`` times a whole 30-round
fit). The ratio is of CPU time on one thread, of wall time on more. The
models run interleaved, ``--repeat`` times, and each keeps its best mean:
single runs of the same native round move by up to 50% on a shared
virtual machine, more than the differences measured here. Also prints the
trees' nodes per round (the tree cost follows the gradients) and GBCRF's
refit rounds among the timed ones (each several passes: a window with one
is not a steady round).

``--sticky-rows N`` runs issue 27's scale case instead: ``dask_scaling.py``'s
generator in this one process (N rows, sequences of 20, K = 10 noisy one-hot
features and labels), per-label trees of depth 6 (as ``dask_scaling.py``),
with the objective's own CPU seconds per round beside.

``--profile N`` then trains GBCRF once more per tree shape under
``cProfile``, over the same timed rounds, and prints the ``N`` functions of
most own CPU time per round (XGBoost's tree update, each kernel of the
objective, the engine's copies): where the README's per-round breakdowns
come from. The profiler's own cost makes these rounds slower than the
table's, and the tree update (``train_one_iter``) grows with the other
work of the machine: compare the objective's parts with each other.

Usage::

    python benchmarks/round_ratio.py --data-dir ../shared/data/ocr [--repeat 3]
    python benchmarks/round_ratio.py --sticky-rows 1000000 [--repeat 3]
    python benchmarks/round_ratio.py --data-dir ../shared/data/ocr --threads 2 --warm 0 --rounds 30
    python benchmarks/round_ratio.py --data-dir ../shared/data/ocr --repeat 1 --profile 12
"""

import argparse
import cProfile
import json
import os
import pstats
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
    """CPU and wall time after every round; the objective's CPU seconds and refits so far.

    With a ``profiler`` (``cProfile.Profile``), profiles the rounds past the
    first ``warm`` (it is enabled after round ``warm`` and stays on to the
    end of training).
    """

    def __init__(self, objective=None, profiler=None, warm=0):
        super().__init__()
        self.objective = objective
        self.profiler = profiler
        self.warm = warm
        self.times = [(time.process_time(), time.perf_counter())]
        self.spent = [0.0]
        self.refits = [0]

    def before_training(self, model):
        if self.profiler is not None and self.warm == 0:
            self.profiler.enable()
        return model

    def after_training(self, model):
        if self.profiler is not None:
            self.profiler.disable()
        return model

    def after_iteration(self, model, epoch, evals_log):
        self.times.append((time.process_time(), time.perf_counter()))
        if self.profiler is not None and len(self.times) == self.warm + 1:
            self.profiler.enable()
        if self.objective is not None:
            crf = self.objective.crf
            self.spent.append(sum(crf.timings.values()))
            steps = getattr(crf, "_one_step", None)
            self.refits.append(0 if steps is None else steps.refits)
        return False


def steady(dtrain, params, objective, warm, rounds, profiler=None):
    """Mean CPU seconds of the last ``rounds`` rounds, nodes per round, objective seconds, refits.

    The objective's seconds per round (its ``timings``; 0 for native) and
    its refit rounds (one-pass rounds that refit their transitions, each
    several passes) are over the same rounds, which ``profiler`` (a
    ``cProfile.Profile``, optional) profiles.
    """
    clock = _Clock(objective, profiler, warm)
    callbacks = [clock] + ([objective.callback()] if objective is not None else [])
    booster = xgb.train(params, dtrain, warm + rounds, obj=objective, callbacks=callbacks)
    model = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]
    per_tree = np.array([int(t["tree_param"]["num_nodes"]) for t in model["trees"]])
    per_round = per_tree.reshape(warm + rounds, -1).sum(axis=1)
    own = (clock.spent[-1] - clock.spent[warm]) / rounds if objective is not None else 0.0
    refits = clock.refits[-1] - clock.refits[warm] if objective is not None else 0
    seconds = np.diff(np.asarray(clock.times), axis=0)[warm:].mean(axis=0)  # (CPU, wall)
    return seconds, float(per_round[warm:].mean()), own, refits


def profile_rows(profiler, rounds, top):
    """Markdown rows of the ``top`` functions by own CPU time: calls and milliseconds per round."""
    stats = pstats.Stats(profiler).stats
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    out = []
    for (path, line, name), (_, calls, own, total, _) in rows:
        where = f"{os.path.basename(path)}:{line}({name})" if line else name
        out.append(f"| `{where}` | {calls / rounds:g} | {1e3 * own / rounds:.1f} "
                   f"| {1e3 * total / rounds:.1f} |")
    return out


def ocr_case(data_dir, threads):
    """``(dtrain, K, shapes)`` of the OCR quick split's training folds."""
    train, _, _ = ocr_split(load_ocr(data_dir), test_folds=[0], valid_folds=[9])
    dtrain = xgb.DMatrix(train.X.astype(np.float32), label=np.asarray(train.y),
                         group=np.asarray(train.lengths), nthread=threads)
    return dtrain, K, SHAPES


def sticky_case(rows, threads):
    """``(dtrain, K, shapes)`` of ``dask_scaling.py``'s data, ``rows`` rows in one process."""
    n_seq = rows // STICKY_LENGTH
    X, y, _ = _partition(0, n_seq, STICKY_LENGTH, STICKY_K, 0)
    dtrain = xgb.DMatrix(X, label=y, group=np.full(n_seq, STICKY_LENGTH), nthread=threads)
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
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of XGBoost and of the objective (wall time decides above 1)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile GBCRF's timed rounds and print its N costliest functions")
    args = ap.parse_args()
    if args.profile < 0:
        ap.error(f"--profile must be a count of functions (0 for none); got {args.profile}")
    threads, clock = args.threads, 0 if args.threads == 1 else 1
    print(machine_line(), f"load average {os.getloadavg()[0]:.2f}")
    if args.sticky_rows:
        dtrain, k, shapes = sticky_case(args.sticky_rows, threads)
    else:
        dtrain, k, shapes = ocr_case(args.data_dir, threads)
    base = {"eta": 0.3, "nthread": threads, "tree_method": "hist"}
    runs = {}
    for shape, tree in shapes.items():
        runs[shape, "native"] = ({**base, **tree, "objective": "multi:softprob",
                                  "num_class": k}, lambda: None)
        runs[shape, "logitboost"] = (sb.xgb_params(k, **base, **tree),
                                     lambda: sb.crf_objective(k, mode="logitboost", nthread=threads))
        runs[shape, "gbcrf (defaults)"] = (sb.xgb_params(k, **base, **tree),
                                           lambda: sb.crf_objective(k, nthread=threads))
    best = {}
    for _ in range(args.repeat):
        for key, (params, make) in runs.items():
            run = steady(dtrain, params, make(), args.warm, args.rounds)
            if key not in best or run[0][clock] < best[key][0][clock]:
                best[key] = run
    timer = ("CPU", "wall")[clock]
    print(f"\nbest of {args.repeat} by {timer} time, seconds per round of rounds "
          f"{args.warm + 1}-{args.warm + args.rounds}, {threads} thread(s), load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print(f"| trees | run | CPU s / round | wall s / round | ratio to native ({timer}) "
          "| objective CPU s / round | nodes / round | refit rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for (shape, name), (seconds, nodes, own, refits) in best.items():
        ratio = seconds[clock] / best[shape, "native"][0][clock]
        print(f"| {shape} | {name} | {seconds[0]:.3f} | {seconds[1]:.3f} | {ratio:.2f} | "
              f"{own:.3f} | {nodes:.0f} | {refits} |")
    for shape in shapes if args.profile else ():
        params, make = runs[shape, "gbcrf (defaults)"]
        profiler = cProfile.Profile()
        steady(dtrain, params, make(), args.warm, args.rounds, profiler)
        print(f"\nGBCRF (defaults), {shape}: the {args.profile} functions of most own CPU time "
              f"over rounds {args.warm + 1}-{args.warm + args.rounds} (cProfile)\n")
        print("| function | calls / round | own ms / round | with callees, ms / round |")
        print("|---|---|---|---|")
        print("\n".join(profile_rows(profiler, args.rounds, args.profile)))


if __name__ == "__main__":
    main()
