"""Distributed CRF boosting on a local Dask cluster: time per round, allreduce cost, memory.

For each row count, model and worker count a fresh ``LocalCluster``
(loopback, one thread per worker) generates sticky-chain data on the
workers (sequences of ``--length`` rows, K labels, K noisy one-hot
features, two partitions per worker, no sequence split), then trains
``--warm`` + ``--rounds`` rounds: GBCRF with
:func:`structboost.engines.dask`'s distributed objective and the library's
defaults, and native ``multi:softprob`` through ``xgboost.dask`` on the
same data as the baseline. Measured on every worker and reduced with
XGBoost's collective (max over workers):

- seconds per round (the ``--rounds`` rounds after ``--warm`` untimed ones:
  by default past the one-pass rounds' warm-up refits),
- seconds per round spent inside the objective's allreduce calls (waiting
  for the slowest worker included) and the number of calls per round,
- peak resident memory of the worker process (``ru_maxrss``).

The models of one row and worker count run back to back, so that GBCRF's
ratio to native compares runs minutes apart; ``--repeat`` runs everything
again and the closing table gives each speed-up and ratio as the median of
the repeats [and their range] (this machine's speed moves in phases of
minutes: ``round_ratio.py``).

Usage::

    python benchmarks/dask_scaling.py --rows 1000000 --workers 1 2
    python benchmarks/dask_scaling.py --rows 1000000 10000000 --workers 1 2 --rounds 5
    python benchmarks/dask_scaling.py --rows 1000000 --workers 1 2 --repeat 3

Results are appended to ``benchmarks/results/dask_scaling.csv`` (rows of an
older header are kept, with the new columns empty).
"""

import argparse
import csv
import resource
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import xgboost as xgb
from distributed import Client, LocalCluster
from xgboost import collective
from xgboost import dask as dxgb

import structboost as sb
from structboost.engines import dask as sbd
from structboost.transitions.onestep import WARMUP

RESULTS = Path(__file__).parent / "results" / "dask_scaling.csv"


def _partition(seed, n_seq, length, num_labels, first_id):
    """Features ``(n, K)``, labels ``(n,)`` and sequence ids ``(n,)`` of one partition."""
    rng = np.random.default_rng(seed)
    n = n_seq * length
    switch = rng.random(n) < 0.2
    switch[::length] = True  # every sequence starts with a fresh label
    fresh = rng.integers(0, num_labels, n)
    last = np.maximum.accumulate(np.where(switch, np.arange(n), 0))
    y = fresh[last]
    X = (np.eye(num_labels)[y] + rng.normal(0.0, 1.0, (n, num_labels))).astype(np.float32)
    ids = first_id + np.repeat(np.arange(n_seq, dtype=np.int64), length)
    return X, y, ids


def generate(rows, parts, length, num_labels):
    """Dask arrays ``X, y, ids`` built on the workers, ``parts`` partitions of whole sequences."""
    n_seq = rows // length // parts
    chunk = n_seq * length
    pieces = [
        dask.delayed(_partition, nout=3)(i, n_seq, length, num_labels, i * n_seq)
        for i in range(parts)
    ]
    X = da.concatenate(
        [da.from_delayed(p[0], shape=(chunk, num_labels), dtype=np.float32) for p in pieces]
    )
    y = da.concatenate([da.from_delayed(p[1], shape=(chunk,), dtype=np.int64) for p in pieces])
    ids = da.concatenate([da.from_delayed(p[2], shape=(chunk,), dtype=np.int64) for p in pieces])
    return X, y, ids


class TimedAllreduce:
    """The distributed allreduce, timed: seconds and calls accumulate on the instance."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, values):
        t0 = time.perf_counter()
        out = sbd.allreduce_sum(values)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


class Probe(xgb.callback.TrainingCallback):
    """Round wall times, allreduce totals and peak memory, stored on the booster (max over workers).

    ``warm``: rounds left out of the means.
    """

    def __init__(self, timer, warm):
        super().__init__()
        self.timer = timer
        self.warm = warm
        self.rounds = []
        self.marks = []

    def before_iteration(self, model, epoch, evals_log):
        self.marks.append((time.perf_counter(), self.timer.seconds, self.timer.calls))
        return False

    def after_iteration(self, model, epoch, evals_log):
        t0, s0, c0 = self.marks[-1]
        self.rounds.append(
            (time.perf_counter() - t0, self.timer.seconds - s0, self.timer.calls - c0)
        )
        return False

    def after_training(self, model):
        steady = np.array(self.rounds[self.warm:] or self.rounds).mean(axis=0)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        stats = collective.allreduce(np.append(steady, rss_mib), collective.Op.MAX)
        model.set_attr(probe=" ".join(repr(float(v)) for v in stats))
        return model


def run(rows, workers, model, rounds, warm, length, num_labels, threads):
    with LocalCluster(
        n_workers=workers,
        threads_per_worker=threads,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster, Client(cluster) as client:
        X, y, ids = (client.persist(c) for c in generate(rows, 2 * workers, length, num_labels))
        timer = TimedAllreduce()
        callbacks = [Probe(timer, warm)]
        t0 = time.perf_counter()
        if model == "gbcrf":
            dtrain = sbd.sequence_dmatrix(client, X, y, groups=ids)
            dobj = sbd.distributed_objective(sb.crf_objective(num_labels))
            dobj.crf.allreduce = timer
            params = sb.xgb_params(num_labels, max_depth=6, eta=0.3, nthread=threads)
            callbacks.insert(0, dobj.callback())
        else:
            dtrain = dxgb.DaskDMatrix(client, X, y)
            dobj = None
            params = {"objective": "multi:softprob", "num_class": num_labels, "max_depth": 6,
                      "eta": 0.3, "nthread": threads, "tree_method": "hist"}
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = dxgb.train(client, params, dtrain, warm + rounds, obj=dobj, callbacks=callbacks,
                         verbose_eval=False)
        total = time.perf_counter() - t0
        per_round, allreduce_s, calls, rss = map(float, out["booster"].attr("probe").split())
    return {
        "rows": rows,
        "workers": workers,
        "model": model,
        "threads_per_worker": threads,
        "K": num_labels,
        "seq_length": length,
        "rounds": rounds,
        "warm": warm,
        "dmatrix_s": round(build, 2),
        "train_s": round(total, 2),
        "s_per_round": round(per_round, 3),
        "allreduce_s_per_round": round(allreduce_s, 4),
        "allreduce_calls_per_round": round(calls, 1),
        "peak_rss_mib_per_worker": round(rss, 0),
    }


def append_row(path, row):
    """Append ``row`` to the CSV at ``path``, widening an older header (missing cells empty)."""
    rows, fields = [], list(row)
    if path.exists():
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            fields += [f for f in reader.fieldnames or () if f not in fields]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows + [row])


def summary(results, models, workers):
    """Markdown rows: per row count and model, s / round by workers, speed-up and ratio to native.

    ``results``: one dict per repeat, ``(rows, model, workers) -> s / round``.
    Each repeat's speed-up (first to last worker count) and GBCRF's ratio
    to native at each worker count come from runs of the same repeat,
    which ran one after another; the table gives their median and [range].
    """

    def spread(values):
        values = [v for v in values if v is not None]
        if not values:
            return ""
        text = f"{np.median(values):.2f}x"
        return text + (f" [{min(values):.2f}-{max(values):.2f}]" if len(values) > 1 else "")

    lines = [f"| rows | model | s / round, {' / '.join(map(str, workers))} workers (median) "
             f"| speed-up {workers[0]} -> {workers[-1]} | ratio to native at "
             f"{' / '.join(map(str, workers))} workers |", "|---|---|---|---|---|"]
    for rows in sorted({key[0] for key in results[0]}):
        for model in models:
            times = [[one[rows, model, w] for w in workers] for one in results]
            median = " / ".join(f"{np.median(col):.3f}" for col in zip(*times))
            speed = spread([t[0] / t[-1] for t in times] if len(workers) > 1 else [])
            ratios = ""
            if model != "native" and "native" in models:
                ratios = ", ".join(spread([one[rows, model, w] / one[rows, "native", w]
                                           for one in results]) for w in workers)  # fmt: skip
            lines.append(f"| {rows:,} | {model} | {median} | {speed} | {ratios} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5, help="rounds timed, after --warm")
    parser.add_argument("--warm", type=int, default=WARMUP + 1,
                        help="untimed rounds first (default: past the one-pass warm-up refits)")
    parser.add_argument("--models", nargs="+", choices=("native", "gbcrf"),
                        default=["native", "gbcrf"])
    parser.add_argument("--length", type=int, default=20, help="rows per sequence")
    parser.add_argument("--labels", type=int, default=10, help="K")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of every configuration, the models of one worker count "
                             "back to back")
    parser.add_argument("--out", type=Path, default=RESULTS, help="CSV the rows are appended to")
    args = parser.parse_args()
    args.out.parent.mkdir(exist_ok=True)
    results = []
    for _ in range(args.repeat):
        results.append({})
        for rows in args.rows:
            for workers in args.workers:
                for model in args.models:
                    row = run(rows, workers, model, args.rounds, args.warm, args.length,
                              args.labels, args.threads)
                    print(row, flush=True)
                    append_row(args.out, row)
                    results[-1][rows, model, workers] = row["s_per_round"]
    print()
    print(summary(results, args.models, args.workers))


if __name__ == "__main__":
    main()
