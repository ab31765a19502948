"""Where one forward-backward pass spends its time: the chain kernels part by part.

On all OCR letters (52,152 rows, 6,877 words) with random node scores
``N(0, 1)`` and a random ``(K, K)`` table, at ``K = 26`` (OCR), ``K = 10``
(``dask_scaling.py``'s generator) and ``K = 9`` (CoNLL-2003's tags), on one
numba thread, in CPU milliseconds (best of ``--repeat``; the parts
alternate, so that a noisy neighbour hits them alike):

* ``exp_rows``: ``w = exp(unary - row max)`` into a loaded workspace;
* ``messages``: both sweeps (log Z, marginals, the stored messages) on the
  workspace's buffers, without and with the mixing rates, with the rates
  and the edge sums (a round's pass), and the same storing no ``alpha``
  and ``r`` (``keep=False``: what the objective's round runs);
* ``late_rates``: the rates alone, for a pass swept without them (a
  backward sweep over the stored messages);
* ``posterior``: validation-free ``inference.chain.posterior`` on a reused
  workspace (exp of the table, both sweeps);
* ``forward_backward``: the public function, which validates its input and
  allocates fresh buffers on every call (page faults included), and the
  same pass storing ``alpha`` and ``r`` as well (what it ran before it
  stored neither: two more fresh ``(n, K)`` arrays written);
* ``stream``: one pass writing three and reading one ``(n, K)`` float64 array
  (what the sweeps must move at least: they write ``alpha``, ``r`` and the
  marginals), for the memory-traffic floor.

A second table sets the pass (``messages``, both sweeps on a reused
workspace) against the arithmetic limit: a pass is ``4 n K^2`` flops (a
vector-matrix product forward and one backward per position), and the
bound is that work at the rate of one BLAS product ``(n, K) @ (K, K)`` in
float64 on the same core (``2 n K^2`` flops), so ``bound = 2 x`` that
product's time; the ratio is pass / bound. The same table times the pass
with the mixing rates (what the default objective's round runs: the
``"mixing"`` Hessian bound) against the same bound; its rates add two
``K x K`` min-products per position. Both also storing no ``alpha`` and
``r`` (``keep=False``: the pass of ``forward_backward``, of prediction,
and of the objective's rounds). With ``--baseline PATH`` (a
checkout of another revision, e.g. ``git worktree add /tmp/base main``)
that checkout's package is loaded beside this one and its pass is timed in
the same loop (old vs new, calls alternating). With ``--threads 2`` the
``prange`` driver is timed too, in wall time at one and at two threads, to
see that it scales.

With ``--fixed 1000000:20:10`` the limit table is also run on 1M rows of
sequences of 20 at ``K = 10`` (``dask_scaling.py``'s generator), once as
one batch and once as the objective's round runs it: in blocks of
``_config.block_rows`` rows of whole sequences (``BLOCK_ENTRIES`` entries,
cache resident), timed on one block and reported per round (that time
times the number of blocks).

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/chain_kernels.py --data-dir ../shared/data/ocr \
        --baseline /tmp/base --fixed 1000000:20:10

Prints Markdown tables for benchmarks/README.md.
"""

import argparse
import importlib.util
import inspect
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np
from threadpoolctl import threadpool_limits

from structboost import _config, inference
from structboost.datasets import load_ocr
from structboost.inference import _chain, chain
from structboost.sequences import offsets_from_lengths


@numba.njit(cache=True)
def _stream(src, a, b, c):
    """Write three arrays from one: the sweeps' least memory traffic."""
    n, k = src.shape
    for t in range(n):
        for j in range(k):
            v = src[t, j]
            a[t, j] = v
            b[t, j] = v
            c[t, j] = v


def random_chain(lengths, k):
    """Node scores ``(n, K)`` and a ``(K, K)`` table drawn from ``N(0, 1)``; zero ``(K,)``."""
    rng = np.random.default_rng(1)
    return rng.normal(size=(int(lengths.sum()), k)), rng.normal(size=(k, k)), np.zeros(k)


def parts(lengths, k):
    """The timed calls at ``k`` labels, by name."""
    u, trans, z = random_chain(lengths, k)
    n = u.shape[0]
    offsets = offsets_from_lengths(lengths)
    ws = chain.Workspace(n, k, len(lengths)).load(u, offsets)
    emat, emax = _chain.exp_tables(trans[None])
    weight = np.ones(len(lengths))
    coef = np.ones((1, n - 1))
    return {
        "exp_rows": lambda: _chain.exp_rows(u, ws.w, ws.row_max, False),
        "messages": lambda: _chain.messages(ws, emat, emax, z, z, False, False),
        "messages with rates": lambda: _chain.messages(ws, emat, emax, z, z, True, False),
        "messages with rates and edge sums (a round's pass)": lambda: _chain.messages(
            ws, emat, emax, z, z, True, False, weight
        ),
        "the same, storing no alpha and r (the objective's round)": lambda: _chain.messages(
            ws, emat, emax, z, z, True, False, weight, keep=False
        ),
        "edge products after a pass (BLAS, its alternative)": lambda: chain._edge_products(
            ws.alpha[:-1], ws.r[1:], coef
        ),
        "late_rates": lambda: _chain.late_rates(
            _chain.Messages.of(ws), emat, False
        ),
        "posterior (reused workspace)": lambda: chain.posterior(
            u, offsets, trans, z, z, workspace=ws
        ),
        "forward_backward (public, fresh buffers)": lambda: inference.forward_backward(
            u, lengths, trans, z, z
        ),
        "the same pass storing alpha and r (fresh buffers)": lambda: chain.posterior(
            *chain.check_chain(u, lengths, trans, z, z), keep_messages=True
        ).marginals(),
        "stream: read 1, write 3 (n, K) arrays": lambda: _stream(ws.w, ws.alpha, ws.r, ws.marg),
    }


def load_baseline(path):
    """The ``structboost`` package of another checkout, imported as ``structboost_baseline``."""
    init = Path(path) / "structboost" / "__init__.py"
    if not init.is_file():
        raise ValueError(f"--baseline {path}: no structboost/__init__.py there; pass a checkout.")
    spec = importlib.util.spec_from_file_location(
        "structboost_baseline", init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def best_times(calls, repeat, threads):
    """Seconds of each call (best of ``repeat``, calls alternating) at numba ``threads``.

    CPU time of the calling thread on one thread; wall time on more (their
    point is the scaling).
    """
    numba.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    best = dict.fromkeys(calls, np.inf)
    for fn in calls.values():
        fn()
    for _ in range(repeat):
        for name, fn in calls.items():
            t0 = clock()
            fn()
            best[name] = min(best[name], clock() - t0)
    return best


def limit_table(lengths, k, repeat, threads, baseline, scale=1.0):
    """Rows of the pass against the matmul-rate bound at ``k`` labels (see the module notes).

    Every time (the bound's too) is multiplied by ``scale``: the number of
    such batches a round runs.
    """
    u, trans, z = random_chain(lengths, k)
    n = u.shape[0]
    offsets = offsets_from_lengths(lengths)
    product = np.empty((n, k))
    sides = {"this checkout": chain}
    if baseline is not None:
        sides = {"baseline": baseline.inference.chain, **sides}
    calls = {"matmul": lambda: np.matmul(u, trans, out=product)}
    for side, mod in sides.items():
        ws = mod.Workspace(n, k, len(lengths)).load(u, offsets)
        package = mod.__name__.rsplit(".", 1)[0]
        kern = sys.modules[package + "._chain"]
        # Revisions before the split of the chain kernels sweep in ``_chain`` itself.
        sweeps = sys.modules.get(package + "._chain_sweeps", kern)
        emat, emax = kern.exp_tables(trans[None])
        calls[side] = lambda ws=ws, sweeps=sweeps, e=(emat, emax): sweeps.messages(
            ws, *e, z, z, False, False
        )
        calls[side + ", with the mixing rates"] = (
            lambda ws=ws, sweeps=sweeps, e=(emat, emax): sweeps.messages(ws, *e, z, z, True, False)
        )
        if "keep" in inspect.signature(sweeps.messages).parameters:  # (newer sweeps)
            for rates, label in ((False, ""), (True, ", with the mixing rates")):
                calls[f"{side}{label}, storing no alpha and r"] = (
                    lambda ws=ws, sweeps=sweeps, e=(emat, emax), rates=rates: sweeps.messages(
                        ws, *e, z, z, rates, False, keep=False
                    )
                )
        calls[side + ", prange"] = lambda ws=ws, sweeps=sweeps, e=(emat, emax): sweeps.messages(
            ws, *e, z, z, False, True
        )
    serial = {name: fn for name, fn in calls.items() if "prange" not in name}
    best = {name: t * scale for name, t in best_times(serial, repeat, 1).items()}
    bound = 2.0 * best.pop("matmul")
    rate = 4.0 * n * k * k / bound / 1e9
    rows = [f"| matmul bound: 4nK^2 at {rate:.1f} GFLOP/s | {bound * 1e3:.1f} | 1.00 |"]
    rows += [f"| pass, {side}, 1 thread | {t * 1e3:.1f} | {t / bound:.2f} |" for side, t in best.items()]
    if threads > 1:
        par = {name: fn for name, fn in calls.items() if "prange" in name}
        for n_threads in (1, threads):
            for name, t in best_times(par, repeat, n_threads).items():
                t *= scale
                label = name.replace("prange", f"prange driver, {n_threads} thread(s), wall")
                rows.append(f"| pass, {label} | {t * 1e3:.1f} | {t / bound:.2f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz (OCR)")
    ap.add_argument("--labels", default="26,10,9", help="comma-separated K")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--baseline", help="a checkout of another revision to time beside this one")
    ap.add_argument("--threads", type=int, default=1, help="numba threads of the prange row")
    ap.add_argument(
        "--fixed", metavar="ROWS:LENGTH:K",
        help="also the limit table on ROWS rows of sequences of LENGTH at K labels "
        "(dask_scaling.py's generator: 1000000:20:10)",
    )
    args = ap.parse_args()
    baseline = None if args.baseline is None else load_baseline(args.baseline)
    numba.set_num_threads(1)
    lengths = np.asarray(load_ocr(args.data_dir).lengths, dtype=np.int64)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; numba {numba.__version__}, "
        f"numpy {np.__version__}; n = {int(lengths.sum())}, {len(lengths)} words; "
        f"CPU ms of one thread, best of {args.repeat}"
    )
    print()
    ks = [int(k) for k in args.labels.split(",")]
    print("| part | " + " | ".join(f"K = {k}: ms" for k in ks) + " |")
    print("|---|" + "---|" * len(ks))
    cells = {}
    for k in ks:
        calls = parts(lengths, k)
        best = dict.fromkeys(calls, np.inf)
        for fn in calls.values():
            fn()
        for _ in range(args.repeat):
            for name, fn in calls.items():
                t0 = time.process_time()
                fn()
                best[name] = min(best[name], time.process_time() - t0)
        for name, sec in best.items():
            cells.setdefault(name, []).append(f"{sec * 1e3:.1f}")
    for name, row in cells.items():
        print(f"| {name} | " + " | ".join(row) + " |")
    for k in ks:
        print()
        print(f"Pass against the matmul-rate bound, K = {k} (CPU ms, best of {args.repeat}; "
              f"load average {os.getloadavg()[0]:.1f}):")
        print()
        print("| what | ms | / bound |")
        print("|---|---|---|")
        with threadpool_limits(1):
            print("\n".join(limit_table(lengths, k, args.repeat, args.threads, baseline)))
    if args.fixed:
        rows, length, k = (int(x) for x in args.fixed.split(":"))
        print()
        print(f"Pass against the matmul-rate bound, {rows // length} sequences of {length} rows, "
              f"K = {k} (CPU ms, best of {args.repeat}; load average {os.getloadavg()[0]:.1f}):")
        print()
        print("| what | ms | / bound |")
        print("|---|---|---|")
        fixed = np.full(rows // length, length, dtype=np.int64)
        with threadpool_limits(1):
            print("\n".join(limit_table(fixed, k, args.repeat, args.threads, baseline)))
        per_block = max(1, _config.block_rows(rows, k) // length)
        blocks = len(fixed) / per_block
        print()
        print(f"The same in the round's blocks: one block of {per_block} sequences "
              f"({per_block * length} rows) timed, times {blocks:.2f} blocks (CPU ms per round, "
              f"best of {args.repeat}; load average {os.getloadavg()[0]:.1f}):")
        print()
        print("| what | ms | / bound |")
        print("|---|---|---|")
        with threadpool_limits(1):
            print("\n".join(limit_table(fixed[:per_block], k, args.repeat, args.threads, baseline,
                                         scale=blocks)))


if __name__ == "__main__":
    main()
