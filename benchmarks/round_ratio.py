"""Issue 27's round ratio: GBCRF's steady round against the native one, in lockstep runs.

On the OCR quick split (training folds 1-8 of ``--data-dir``, 42,393
letters, K = 26), on ``--threads`` threads (one by default), for both tree
shapes of ``objective_speed.py``
(one tree per label of depth 6; one multi-output tree of depth 8) and the
estimators' default on such data (one multi-output tree of depth 6), trains
native ``multi:softprob``, LogitBoost and GBCRF with the library's defaults
for ``--warm`` + ``--rounds`` rounds and takes the mean CPU and wall
seconds of the last ``--rounds`` rounds (by default past the one-pass
rounds' warm-up refits; ``--warm 0 --rounds 30`` times a whole 30-round
fit). The ratio is of CPU time on one thread, of wall time on more.

The models train in lockstep: one round of each in turn (the order
rotating every round), so that every stretch of the machine's speed
falls on all of them alike. On the shared virtual machine these tables
come from, the same native round took 0.209 s and 0.326 s within one
hour (benchmarks/README.md), in phases of minutes: whole fits timed one
after another compared a model in a fast phase with one in a slow phase. Each of ``--repeat``
lockstep runs gives each model's ratio to native over the same rounds
(on more than one thread each round starts after an untimed pause of
:data:`SETTLE` seconds, see :func:`lockstep`);
the table prints their median and range, and each model's mean seconds
per round over all runs. Also prints the trees' nodes per round (the
tree cost follows the gradients) and GBCRF's refit rounds among the
timed ones, per run (each several passes: a window with one is not a
steady round).

``--sticky-rows N`` runs issue 27's scale case instead: ``dask_scaling.py``'s
generator in this one process (N rows, sequences of 20, K = 10 noisy one-hot
features and labels), per-label trees of depth 6 (as ``dask_scaling.py``),
with the objective's own CPU seconds per round beside.

``--newton`` adds GBCRF with the Newton transition step
(``transition_solver="newton"``) to the same lockstep.

``--kept-messages`` adds GBCRF whose passes all keep their stored
messages (``TransitionProblem.keep_messages``, as before the objective's
passes left them out where nothing reads them) to the same lockstep: the
two differ in that alone, with the same G, H and trees.

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
    python benchmarks/round_ratio.py --sticky-rows 1000000 --kept-messages
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
          # the estimators' default trees on dense features with ten or more labels
          "multi-output, depth 6": {"max_depth": 6, "multi_strategy": "multi_output_tree"},
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

    def objective_totals(self, warm):
        """The objective's CPU seconds per round past the first ``warm``, and its refits among them."""
        if self.objective is None:
            return 0.0, 0
        rounds = len(self.spent) - 1 - warm
        return (self.spent[-1] - self.spent[warm]) / rounds, self.refits[-1] - self.refits[warm]


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
    own, refits = clock.objective_totals(warm)
    seconds = np.diff(np.asarray(clock.times), axis=0)[warm:].mean(axis=0)  # (CPU, wall)
    return seconds, nodes_per_round(booster, warm), own, refits


def keeping_messages(objective):
    """``objective`` (of :func:`structboost.crf_objective`) with every pass keeping its messages."""
    build = objective.crf._problem

    def problem(unary, batch):
        made = build(unary, batch)
        made.keep_messages = True
        return made

    objective.crf._problem = problem
    return objective


def nodes_per_round(booster, warm):
    """Mean nodes of the trees of each round past the first ``warm``."""
    model = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]
    per_tree = np.array([int(t["tree_param"]["num_nodes"]) for t in model["trees"]])
    return float(per_tree.reshape(booster.num_boosted_rounds(), -1).sum(axis=1)[warm:].mean())


#: Seconds each model's round waits, untimed, before it starts on more than one
#: thread: long enough for the OpenMP threads of the round before to stop spinning.
SETTLE = 0.1


def lockstep(dtrain, runs, warm, rounds, settle=0.0):
    """Train ``runs`` one round of each in turn; their timed rounds.

    ``runs``: name -> ``(params, make)``, ``make()`` the objective (None:
    native). The order rotates by one model every round. Each booster
    runs what ``xgboost.train`` runs a round (``Booster.update`` and the
    objective's callback). ``settle``: seconds slept before each round,
    untimed. XGBoost and numba's ``omp`` layer each bring an OpenMP runtime
    (``xgboost.libs/libgomp-*``, the system's ``libgomp``), whose idle
    threads spin for a while after a parallel region: on two threads,
    without a pause, a native round that follows a GBCRF round shares the
    cores with numba's spinning thread, which a native fit never does.

    Returns
    -------
    dict
        name -> ``(seconds (rounds, 2), nodes, own, refits)``: the CPU and
        wall seconds of each round past ``warm``, the trees' nodes per such
        round, the objective's CPU seconds per such round (0 for native)
        and its refit rounds among them.
    """
    state = {}
    for name, (params, make) in runs.items():
        objective = make()
        booster = xgb.Booster(params, [dtrain])
        callbacks = [_Clock(objective)] + ([objective.callback()] if objective is not None else [])
        for cb in callbacks:
            booster = cb.before_training(booster)
        state[name] = (booster, objective, callbacks, [])
    names = list(runs)
    for i in range(warm + rounds):
        for name in names[i % len(names):] + names[: i % len(names)]:
            booster, objective, callbacks, seconds = state[name]
            time.sleep(settle)
            cpu, wall = time.process_time(), time.perf_counter()
            booster.update(dtrain, i, fobj=objective)
            for cb in callbacks[1:]:
                cb.after_iteration(booster, i, {})
            seconds.append((time.process_time() - cpu, time.perf_counter() - wall))
            callbacks[0].after_iteration(booster, i, {})  # the objective's totals, untimed
    out = {}
    for name, (booster, _, callbacks, seconds) in state.items():
        for cb in callbacks[1:]:
            booster = cb.after_training(booster)
        own, refits = callbacks[0].objective_totals(warm)
        out[name] = np.asarray(seconds)[warm:], nodes_per_round(booster, warm), own, refits
    return out


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
    ap.add_argument("--newton", action="store_true",
                    help="add GBCRF with transition_solver='newton' to the lockstep")
    ap.add_argument("--kept-messages", action="store_true",
                    help="also train GBCRF with passes that keep their stored messages")
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
        runs[shape] = {
            "native": ({**base, **tree, "objective": "multi:softprob", "num_class": k}, lambda: None),
            "logitboost": (sb.xgb_params(k, **base, **tree),
                           lambda: sb.crf_objective(k, mode="logitboost", nthread=threads)),
            "gbcrf (defaults)": (sb.xgb_params(k, **base, **tree),
                                 lambda: sb.crf_objective(k, nthread=threads)),
        }
        if args.newton:
            runs[shape]["gbcrf, Newton transitions"] = (
                sb.xgb_params(k, **base, **tree),
                lambda: sb.crf_objective(k, transition_solver="newton", nthread=threads),
            )
        if args.kept_messages:
            runs[shape]["gbcrf, messages kept"] = (
                sb.xgb_params(k, **base, **tree),
                lambda: keeping_messages(sb.crf_objective(k, nthread=threads)),
            )
    settle = SETTLE if threads > 1 else 0.0
    results = {shape: [lockstep(dtrain, models, args.warm, args.rounds, settle)
                       for _ in range(args.repeat)] for shape, models in runs.items()}
    timer = ("CPU", "wall")[clock]
    print(f"\n{args.repeat} lockstep run(s), seconds per round of rounds {args.warm + 1}-"
          f"{args.warm + args.rounds}, {threads} thread(s), load average "
          f"{os.getloadavg()[0]:.2f}; the ratio of {timer} time to native's over the same "
          "rounds: median of the runs [range]\n")
    print(f"| trees | run | CPU s / round | wall s / round | ratio to native ({timer}) "
          "| objective CPU s / round | nodes / round | refit rounds (per run) |")
    print("|---|---|---|---|---|---|---|---|")
    for shape, runs_of_shape in results.items():
        for name in runs[shape]:
            seconds = np.concatenate([one[name][0] for one in runs_of_shape]).mean(axis=0)
            ratios = [one[name][0][:, clock].sum() / one["native"][0][:, clock].sum()
                      for one in runs_of_shape]
            spread = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
            own = np.mean([one[name][2] for one in runs_of_shape])
            nodes = np.mean([one[name][1] for one in runs_of_shape])
            refits = ",".join(str(one[name][3]) for one in runs_of_shape)
            print(f"| {shape} | {name} | {seconds[0]:.3f} | {seconds[1]:.3f} | "
                  f"{np.median(ratios):.2f}{spread} | {own:.3f} | {nodes:.0f} | {refits} |")
    for shape in shapes if args.profile else ():
        params, make = runs[shape]["gbcrf (defaults)"]
        profiler = cProfile.Profile()
        steady(dtrain, params, make(), args.warm, args.rounds, profiler)
        print(f"\nGBCRF (defaults), {shape}: the {args.profile} functions of most own CPU time "
              f"over rounds {args.warm + 1}-{args.warm + args.rounds} (cProfile)\n")
        print("| function | calls / round | own ms / round | with callees, ms / round |")
        print("|---|---|---|---|")
        print("\n".join(profile_rows(profiler, args.rounds, args.profile)))


if __name__ == "__main__":
    main()
