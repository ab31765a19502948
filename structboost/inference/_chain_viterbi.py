"""Labellings of linear chains: the best one of each sequence (Viterbi), the score of one.

Log-space max-product and sums over the interface of
:mod:`structboost.inference._chain`.
"""

import numpy as np
from numba import prange

from .._config import KERNEL, PARALLEL, njit
from ._chain import table

@njit(**KERNEL)
def _sequence_viterbi(i, unary, offsets, trans, start, end, path):
    k = unary.shape[1]
    n_tab = trans.shape[0]
    lo, hi = offsets[i], offsets[i + 1]
    back = np.empty((hi - lo, k), dtype=np.int64)
    score = unary[lo] + start
    nxt = np.empty(k)
    for t in range(lo + 1, hi):
        tr = trans[table(n_tab, t)]
        for b in range(k):
            best = -np.inf
            arg = 0
            for a in range(k):
                v = score[a] + tr[a, b]
                if v > best:
                    best = v
                    arg = a
            nxt[b] = best + unary[t, b]
            back[t - lo, b] = arg
        score[:] = nxt
    score += end
    y = np.argmax(score)
    for t in range(hi - 1, lo - 1, -1):
        path[t] = y
        if t > lo:
            y = back[t - lo, y]


@njit(**PARALLEL)
def _viterbi_parallel(unary, offsets, trans, start, end, path):
    for i in prange(offsets.shape[0] - 1):
        _sequence_viterbi(i, unary, offsets, trans, start, end, path)


@njit(**KERNEL)
def _viterbi_serial(unary, offsets, trans, start, end, path):
    for i in range(offsets.shape[0] - 1):
        _sequence_viterbi(i, unary, offsets, trans, start, end, path)


def viterbi(unary, offsets, trans, start, end, parallel):
    """Most probable label path of every sequence (max-product in log space).

    Returns
    -------
    (n,) int64
    """
    path = np.empty(unary.shape[0], dtype=np.int64)
    (_viterbi_parallel if parallel else _viterbi_serial)(unary, offsets, trans, start, end, path)
    return path


@njit(**KERNEL)
def label_scores(unary, offsets, labels, trans, start, end, with_transitions, out):
    """Score of the given labelling of every sequence into ``out (m,)``, in one sweep.

    Node scores, plus transition, start and end scores ``with_transitions``;
    ``unary (n, K)`` float32 or float64 in any layout, sums float64.
    """
    n_tab = trans.shape[0]
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        total = 0.0
        for t in range(lo, hi):
            total += unary[t, labels[t]]
        if with_transitions:
            for t in range(lo + 1, hi):
                total += trans[table(n_tab, t), labels[t - 1], labels[t]]
            total += start[labels[lo]] + end[labels[hi - 1]]
        out[i] = total
