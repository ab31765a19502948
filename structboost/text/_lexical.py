"""Numba kernel for windowed token attributes as a sparse matrix (unchecked: see text.lexical)."""

import numpy as np

from .._config import CACHE, njit


@njit(cache=CACHE)
def window_columns(row_ptr, row_attr, seq_offsets, half_width, colmap):
    """Columns of the windowed attributes of every row, CSR layout.

    Parameters
    ----------
    row_ptr : (n + 3,) int64
        ``row_attr[row_ptr[r]:row_ptr[r + 1]]`` are the attribute ids of row
        ``r``; rows ``n`` and ``n + 1`` hold the attributes of a position
        before a sentence's start and after its end.
    row_attr : (row_ptr[-1],) int64
        Attribute ids; ``-1`` (unknown) is skipped.
    seq_offsets : (m + 1,) int64
        Sentence ``i`` is rows ``seq_offsets[i]:seq_offsets[i + 1]``.
    half_width : int
        ``w``.
    colmap : (2w + 1, n_attr) int64
        Output column of attribute ``a`` at offset ``j - w``; ``-1`` drops it.

    Returns
    -------
    indptr : (n + 1,) int64
    indices : (indptr[-1],) int32
        Columns of row ``t`` in ``indices[indptr[t]:indptr[t + 1]]``, in
        offset order (not sorted within a row).
    """
    n = seq_offsets[-1]
    before = n
    after = n + 1
    width = 2 * half_width + 1
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(0, dtype=np.int32)
    for phase in range(2):  # 0: count the columns of each row, 1: write them
        if phase == 1:
            for t in range(n):
                indptr[t + 1] += indptr[t]
            indices = np.empty(indptr[n], dtype=np.int32)
        for s in range(seq_offsets.size - 1):
            start = seq_offsets[s]
            stop = seq_offsets[s + 1]
            for t in range(start, stop):
                count = 0
                for j in range(width):
                    src = t + j - half_width
                    if src < start:
                        src = before
                    elif src >= stop:
                        src = after
                    for p in range(row_ptr[src], row_ptr[src + 1]):
                        a = row_attr[p]
                        if a < 0:
                            continue
                        col = colmap[j, a]
                        if col < 0:
                            continue
                        if phase == 1:
                            indices[indptr[t] + count] = col
                        count += 1
                if phase == 0:
                    indptr[t + 1] = count
    return indptr, indices
