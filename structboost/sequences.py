"""Sequence boundaries and node potentials over flat rows, validated once: every other description
turned into ``lengths (m,)``.
"""

import numpy as np


def check_unary(unary):
    """Node potentials ``(n, K)`` as C-contiguous float64, finite, with K >= 1."""
    u = np.ascontiguousarray(unary, dtype=np.float64)
    if u.ndim != 2:
        raise ValueError(f"unary must be 2-D (rows, labels); got shape {u.shape}.")
    if u.shape[1] < 1:
        raise ValueError("unary must have at least one label column.")
    if not np.isfinite(u).all():
        raise ValueError(
            "unary contains NaN or inf; node potentials must be finite (check the margins)."
        )
    return u


def check_lengths(lengths, n_rows):
    """Validated ``(m,)`` int64 rows per sequence covering ``n_rows`` rows."""
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be 1-D (one entry per sequence); got shape {arr.shape}.")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError("lengths must be whole numbers of rows per sequence.")
    arr = arr.astype(np.int64)
    if arr.size == 0 and n_rows > 0:
        raise ValueError(
            f"no sequence boundaries given for {n_rows} rows: pass lengths (rows per "
            "sequence) or groups (a per-row sequence id)."
        )
    if np.any(arr <= 0):
        bad = int(np.flatnonzero(arr <= 0)[0])
        raise ValueError(
            f"sequence {bad} has length {int(arr[bad])}: every sequence needs at least one "
            "row; drop empty sequences from lengths."
        )
    total = int(arr.sum())
    if total != n_rows:
        raise ValueError(
            f"sequence lengths sum to {total} but there are {n_rows} rows; lengths must "
            "count the rows of each sequence in row order."
        )
    return arr


def offsets_from_lengths(lengths):
    """``(m + 1,)`` int64 row offsets: sequence ``i`` is ``offsets[i]:offsets[i + 1]``."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def sequence_blocks(offsets, max_rows):
    """Split a batch into consecutive blocks of whole sequences of at most ``max_rows`` rows (a
    longer sequence alone).

    Parameters
    ----------
    offsets : (m + 1,) int64
    max_rows : int

    Returns
    -------
    (b + 1,) int64
        Block ``j`` holds sequences ``bounds[j]:bounds[j + 1]``; no sequences:
        ``[0, 0]``.
    """
    m = offsets.shape[0] - 1
    bounds = [0]
    while bounds[-1] < m:
        s = bounds[-1]
        end = int(np.searchsorted(offsets, offsets[s] + max_rows, side="right")) - 1
        bounds.append(max(end, s + 1))
    if m == 0:
        bounds.append(0)
    return np.asarray(bounds, dtype=np.int64)


def _kind(value):
    """The comparable family of one value: numbers, strings, bytes, or its own type."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, float, np.number)):
        return "number"
    if isinstance(value, str):
        return "str"
    return type(value).__name__


def _missing(values):
    """Bool mask ``(n,)`` of None, NaN and NaT entries of a 1-D array."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "mM":
        return np.isnat(values)
    if values.dtype.kind == "O":
        return np.array([v is None or (isinstance(v, (float, np.floating)) and v != v)
                         or (isinstance(v, (np.datetime64, np.timedelta64)) and np.isnat(v))
                         for v in values.tolist()], dtype=bool)  # fmt: skip
    return np.zeros(values.shape, dtype=bool)


def check_values(values, name, what):
    """Refuse missing (None, NaN, NaT) or mixed-type entries of a 1-D array (``name``, ``what`` for
    the message).
    """
    missing = _missing(values)
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise ValueError(
            f"{name} has a missing {what} ({values.tolist()[row]!r}) at row {row} "
            f"({int(missing.sum())} in all): give every row a {what}."
        )
    if values.dtype.kind == "O":
        items = values.tolist()
        kinds = [_kind(v) for v in items]
        odd = next((i for i, k in enumerate(kinds) if k != kinds[0]), None)
        if odd is not None:
            raise ValueError(
                f"{name} mixes {what} types: row 0 holds {items[0]!r} ({kinds[0]}) but row "
                f"{odd} holds {items[odd]!r} ({kinds[odd]}); convert them to one type (e.g. all "
                "str)."
            )


def lengths_from_groups(groups):
    """Lengths ``(m,)`` int64, in order of first appearance, of a per-row sequence id ``groups
    (n,)`` (rows contiguous).
    """
    ids = np.asarray(groups)
    if ids.ndim != 1:
        raise ValueError(f"groups must be 1-D (one sequence id per row); got shape {ids.shape}.")
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    check_values(ids, "groups", "sequence id")
    change = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    starts = np.concatenate(([0], change))
    firsts = ids[starts]
    if len(np.unique(firsts)) != len(firsts):
        values, counts = np.unique(firsts, return_counts=True)
        dup = values[counts > 1][0].tolist()  # a Python value: its repr is the id
        raise ValueError(
            f"sequence id {dup!r} appears in more than one run of rows: the rows of a "
            "sequence must be contiguous. Sort the rows by sequence (keeping the order "
            "within each sequence) first."
        )
    return np.diff(np.concatenate((starts, [ids.size]))).astype(np.int64)


def resolve_lengths(n_rows, *, groups=None, lengths=None):
    """Lengths from exactly one of ``groups`` or ``lengths``, validated."""
    if groups is not None and lengths is not None:
        raise ValueError("pass either groups (per-row sequence ids) or lengths, not both.")
    if groups is None and lengths is None:
        raise ValueError(
            "sequence boundaries are required: pass groups (a per-row sequence id) or "
            "lengths (rows per sequence)."
        )
    if groups is not None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or len(groups) != n_rows:
            raise ValueError(f"groups has {len(groups)} entries but X has {n_rows} rows.")
        lengths = lengths_from_groups(groups)
    return check_lengths(lengths, n_rows)


def weighted_total(weights, values):
    """``weights @ values`` over sequences, ``(m,)`` by ``(m, ...)``, on the calling thread (no BLAS
    pool).
    """
    return np.einsum("s,s...->...", weights, values)


def sequence_weights(row_weight, lengths):
    """One weight ``(m,)`` per sequence from per-row weights ``(n,)`` constant within each."""
    w = np.asarray(row_weight, dtype=np.float64)
    n = int(lengths.sum())
    if w.shape != (n,):
        raise ValueError(f"sample_weight must have one entry per row ({n}); got shape {w.shape}.")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("sample_weight must be finite and non-negative.")
    if n == 0:
        return np.zeros(0)
    if not w.any():
        raise ValueError("sample_weight is zero everywhere: at least one sequence needs weight.")
    firsts = w[offsets_from_lengths(lengths)[:-1]]
    varies = np.repeat(firsts, lengths) != w
    if varies.any():
        row = int(np.flatnonzero(varies)[0])
        seq = int(np.searchsorted(np.cumsum(lengths), row, side="right"))
        raise ValueError(
            f"sample_weight varies within sequence {seq} (row {row}): a CRF weighs whole "
            "sequences, so give every row of a sequence the same weight."
        )
    return firsts


def check_labels(labels, n_labels, n_rows):
    """Validated integer labels ``(n,)`` int64 in ``0..n_labels-1``."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        raise ValueError(f"labels must have one entry per row ({n_rows}); got shape {arr.shape}.")
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            first = int(np.flatnonzero(np.isnan(arr))[0])
            raise ValueError(f"label of row {first} is NaN: every row needs a label.")
        if not np.all(arr == np.round(arr)):
            raise ValueError("labels must be whole numbers 0..K-1 (class indices).")
    elif arr.dtype.kind not in "iub":
        raise ValueError(
            f"labels must be integers 0..K-1, got dtype {arr.dtype}; encode them first "
            "(the scikit-learn estimators do this for you)."
        )
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= n_labels)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"label {int(arr[first])} of row {first} is outside 0..{n_labels - 1}: "
            f"num_labels={n_labels} must exceed every label."
        )
    return arr
