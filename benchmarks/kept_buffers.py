"""The freed round buffers kept in the heap (``structboost._heap``): time and peak RSS, kept or not.

Trains GBCRF with the library's defaults on ``dask_scaling.py``'s data in
one process (``round_ratio.py --sticky-rows``: sequences of 20, K = 10,
per-label trees of depth 6, one thread) for ``--rounds`` rounds, each
configuration in a fresh subprocess (so that its peak RSS, ``ru_maxrss``,
is its own), ``--repeat`` times interleaved:

* ``kept``: the buffers each round frees stay in the heap for the next one
  (forced on whatever the fit's size: ``MAX_ROUND_BYTES`` lifted);
* ``round buffers apart``: what a fit above ``MAX_ROUND_BYTES`` does (forced
  on whatever its size): the round's own buffers mapped apart, the smaller
  ones served from the heap at glibc's settled thresholds;
* ``nothing kept``: ``keep_freed`` never called (a fit above
  ``MAX_ROUND_BYTES`` before the thresholds were raised; the CSV's older rows call it ``as before``).

Prints CPU seconds per round of the rounds past the one-pass warm-up
(mean over those rounds, best of the repeats) and the peak RSS, and
writes them to ``--out`` with the mmap and trim thresholds the processes
started with (``structboost._heap.start_thresholds``: set them as Dask's
nanny does, ``MALLOC_TRIM_THRESHOLD_=65536``, to measure a worker's case).

Usage::

    python benchmarks/kept_buffers.py --rows 1000000 [--rounds 22] [--repeat 2]
    python benchmarks/kept_buffers.py --rows 10000000 --rounds 4 --repeat 1
    MALLOC_TRIM_THRESHOLD_=65536 python benchmarks/kept_buffers.py --rows 1000000
"""

import argparse
import csv
import json
import os
import subprocess
import sys

#: The configurations: name -> ``MAX_ROUND_BYTES`` (None: ``keep_freed`` never called).
CONFIGS = {"kept": 1 << 62, "round buffers apart": -1, "nothing kept": None}


def _child(rows, warm, rounds, name):
    """One fit of configuration ``name`` here; prints ``{"cpu": s per round, "peak_mib": ...}``."""
    import resource

    import structboost as sb
    from structboost import _heap

    from round_ratio import steady, sticky_case

    max_bytes = CONFIGS[name]
    if max_bytes is None:
        _heap.keep_freed = lambda round_bytes: False
    else:
        _heap.MAX_ROUND_BYTES = max_bytes
    dtrain, k, shapes = sticky_case(rows, 1)
    params = sb.xgb_params(k, eta=0.3, nthread=1, tree_method="hist", **shapes["per-label, depth 6"])
    seconds = steady(dtrain, params, sb.crf_objective(k, nthread=1), warm, rounds)[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"cpu": float(seconds[0]), "peak_mib": peak}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=22)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "kept_buffers.csv"))
    ap.add_argument("--child", choices=list(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    from structboost.transitions.onestep import WARMUP

    # time the rounds past the warm-up's refit rounds (at least the last one)
    warm = min(WARMUP + 1, args.rounds - 1)
    if args.child is not None:
        _child(args.rows, warm, args.rounds - warm, args.child)
        return
    from protein_qs import machine_line

    from structboost._heap import start_thresholds

    thresholds = "/".join(str(t) for t in start_thresholds())
    print(machine_line(), f"load average {os.getloadavg()[0]:.2f}; glibc's mmap/trim "
          f"thresholds at start {thresholds}")
    best = {}
    for _ in range(args.repeat):
        for name in CONFIGS:
            cmd = [sys.executable, __file__, "--rows", str(args.rows), "--rounds",
                   str(args.rounds), "--child", name]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            old = best.get(name)
            best[name] = (min(got["cpu"], old[0]), max(got["peak_mib"], old[1])) if old else (
                got["cpu"], got["peak_mib"])
    base_cpu, base_peak = best["nothing kept"]
    print(f"\nrows {args.rows}, K = 10, one thread; CPU s per round of rounds "
          f"{warm + 1}-{args.rounds} (best of {args.repeat}), peak RSS (highest of "
          f"{args.repeat}); load average {os.getloadavg()[0]:.2f}\n")
    print("| freed buffers | CPU s / round | ratio | peak RSS MiB | ratio |")
    print("|---|---|---|---|---|")
    rows = []
    for name in CONFIGS:
        cpu, peak = best[name]
        print(f"| {name} | {cpu:.3f} | {cpu / base_cpu:.2f} | {peak:,.0f} | {peak / base_peak:.2f} |")
        rows.append({"rows": args.rows, "rounds": args.rounds, "buffers": name,
                     "cpu_s_per_round": round(cpu, 4), "peak_rss_mib": round(peak),
                     "start_thresholds": thresholds})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    new = not os.path.exists(args.out)
    with open(args.out, "a", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            out.writeheader()
        out.writerows(rows)


if __name__ == "__main__":
    main()
