"""Where one forward-backward pass spends its time: the chain kernels part by part.

On all OCR letters (52,152 rows, 6,877 words) with random node scores
``N(0, 1)`` and a random ``(K, K)`` table, at ``K = 26`` (OCR) and ``K = 9``
(CoNLL-2003's tags), on one numba thread, in CPU milliseconds (best of
``--repeat``; the parts alternate, so that a noisy neighbour hits them
alike):

* ``exp_rows``: ``w = exp(unary - row max)`` into a loaded workspace;
* ``messages``: both sweeps (log Z, marginals, the stored messages) on the
  workspace's buffers, without and with the mixing rates;
* ``mixing_rates``: the rates alone from the stored messages;
* ``posterior``: validation-free ``inference.chain.posterior`` on a reused
  workspace (exp of the table, both sweeps);
* ``forward_backward``: the public function, which validates its input and
  allocates fresh buffers on every call (page faults included);
* ``stream``: one pass writing five and reading one ``(n, K)`` float64 array
  (what the sweeps must move at least), for the memory-traffic floor.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/chain_kernels.py --data-dir ../shared/data/ocr

Prints a Markdown table for benchmarks/README.md.
"""

import argparse
import os
import platform
import time

import numba
import numpy as np

from structboost import inference
from structboost.datasets import load_ocr
from structboost.inference import _chain, chain
from structboost.sequences import offsets_from_lengths


@numba.njit(cache=True)
def _stream(src, a, b, c, d, e):
    """Write five arrays from one: the sweeps' least memory traffic."""
    n, k = src.shape
    for t in range(n):
        for j in range(k):
            v = src[t, j]
            a[t, j] = v
            b[t, j] = v
            c[t, j] = v
            d[t, j] = v
            e[t, j] = v


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
    return {
        "exp_rows": lambda: _chain.exp_rows(u, ws.w, ws.row_max, False),
        "messages": lambda: _chain.messages(ws, emat, emax, z, z, False, False),
        "messages with rates": lambda: _chain.messages(ws, emat, emax, z, z, True, False),
        "mixing_rates": lambda: _chain.mixing_rates(
            offsets, emat, ws.alpha, ws.beta, ws.r, ws.into, ws.beta_scale, ws.right, ws.left,
            False,
        ),
        "posterior (reused workspace)": lambda: chain.posterior(
            u, offsets, trans, z, z, workspace=ws
        ),
        "forward_backward (public, fresh buffers)": lambda: inference.forward_backward(
            u, lengths, trans, z, z
        ),
        "stream: read 1, write 5 (n, K) arrays": lambda: _stream(
            ws.w, ws.alpha, ws.beta, ws.r, ws.into, ws.marg
        ),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder holding letters.npz (OCR)")
    ap.add_argument("--labels", default="26,9", help="comma-separated K")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
