"""Chunk tags (IOB1, IOB2, BIOES): parsing, span extraction and encoding.

A tag is ``"O"`` (outside every chunk) or ``"P-TYPE"``: a prefix ``P`` and a
chunk type (``"B-PER"``, ``"I-NP"``). The text is split at the first ``-``, so
types may themselves contain dashes.

Spans are read with conlleval's rules, whatever the scheme: a chunk starts
at ``B-``/``S-``, at an ``I-``/``E-`` after ``O`` or a closed chunk, or where
the type changes; it ends before ``B-``/``S-``/``O``, after ``E-``/``S-``, or
where the type changes (``S-`` is a one-token chunk, as in seqeval). So
ill-formed sequences still give spans; the scheme decides only which prefixes
are legal.
"""

import numpy as np

from ..sequences import check_lengths, offsets_from_lengths

SCHEME_PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}


def check_scheme(scheme, name="scheme"):
    """Return ``scheme`` lower-cased, or raise if it is not a known tagging scheme."""
    key = str(scheme).lower()
    if key not in SCHEME_PREFIXES:
        raise ValueError(
            f"unknown {name} {scheme!r}: use one of {', '.join(map(repr, SCHEME_PREFIXES))}."
        )
    return key


def as_tags(tags, tag_names=None):
    """Tags ``(n,)`` as a ``str`` array; integer codes decoded through ``tag_names`` if given."""
    arr = np.asarray(tags)
    if arr.ndim != 1:
        raise ValueError(f"tags must be 1-D (one tag per token); got shape {arr.shape}.")
    if tag_names is None:
        if arr.size and arr.dtype.kind not in "UO":
            raise ValueError(
                f"tags must be strings such as 'B-PER' or 'O', got dtype {arr.dtype}; pass "
                "tag_names to decode integer label codes."
            )
        return arr.astype(str)
    names = np.asarray(tag_names, dtype=str)
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(
            f"with tag_names, tags must be integer codes 0..{len(names) - 1}; got dtype "
            f"{arr.dtype}. Drop tag_names to pass tag strings."
        )
    bad = (arr < 0) | (arr >= len(names))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"tag code {int(arr[first])} at position {first} is outside 0..{len(names) - 1}: "
            "tag_names must name every code."
        )
    return names[arr.astype(np.int64)]


def parse_tags(tags, scheme):
    """Split tags ``(n,)`` into prefixes, type codes and types, checked against ``scheme``.

    Returns
    -------
    prefixes : (n,) ndarray of str
        ``"O"`` or one of the scheme's prefixes.
    type_codes : (n,) int64 ndarray
        Index into ``type_names``; -1 for ``O``.
    type_names : (t,) ndarray of str
        Sorted chunk types.
    """
    parts = np.char.partition(tags, "-") if tags.size else np.zeros((0, 3), dtype=str)
    prefixes, seps, types = parts[:, 0], parts[:, 1], parts[:, 2]
    outside = tags == "O"
    legal = SCHEME_PREFIXES[scheme]
    good = outside | ((seps == "-") & np.isin(prefixes, legal) & (types != ""))
    if not good.all():
        first = int(np.flatnonzero(~good)[0])
        raise ValueError(
            f"tag {str(tags[first])!r} at position {first} is not a {scheme} tag: use 'O' or "
            f"one of {', '.join(p + '-' for p in legal)} followed by a chunk type (e.g. "
            f"'{legal[0]}-PER')."
        )
    prefixes = np.where(outside, "O", prefixes)
    type_names, codes = np.unique(types[~outside], return_inverse=True)
    type_codes = np.full(tags.size, -1, dtype=np.int64)
    type_codes[~outside] = codes
    return prefixes, type_codes, type_names


def scheme_moves(tags, scheme):
    """Which tag may follow which, and begin and end a sequence, under a chunk tagging scheme.

    Parameters
    ----------
    tags : (K,) ndarray of str
        Tag names (e.g. a model's labels in class order).
    scheme : str
        A key of ``SCHEME_PREFIXES``.

    Returns
    -------
    transitions : (K, K) bool ndarray
        ``transitions[a, b]``: tag ``a`` may be followed by tag ``b``.
    start, end : (K,) bool ndarray
        Tags a sequence may begin / end with.
    """
    prefix, kind, _ = parse_tags(tags, scheme)
    same = kind[:, None] == kind[None, :]
    to = {p: prefix == p for p in ("O", *SCHEME_PREFIXES[scheme])}
    frm = {p: m[:, None] for p, m in to.items()}
    if scheme in ("iob1", "iob2"):
        # the prefix that only continues a chunk of its type: IOB2's I-, IOB1's B-
        follows = to["I" if scheme == "iob2" else "B"]
        trans = ~follows[None, :] | ((frm["B"] | frm["I"]) & same)
        start = ~follows
        end = np.ones(tags.size, dtype=bool)
    else:
        open_chunk = frm["B"] | frm["I"]
        continues = (to["I"] | to["E"])[None, :]
        trans = np.where(open_chunk, continues & same, ~continues)
        start = to["O"] | to["B"] | to["S"]
        end = to["O"] | to["E"] | to["S"]
    return np.ascontiguousarray(trans), start, end


def sentence_offsets(lengths, n):
    """``(m + 1,)`` sentence offsets from validated ``lengths``; ``None`` is one sentence."""
    if lengths is None:
        lengths = [n] if n else []
    return offsets_from_lengths(check_lengths(lengths, n))


def span_arrays(tags, scheme, offsets):
    """Chunks of tags ``(n,)`` in ``scheme``, within the sentences of ``offsets (m + 1,)``.

    Returns
    -------
    starts, ends : (s,) int64 ndarrays
        Chunk ``i`` covers tokens ``starts[i]:ends[i]``, in order.
    types : (s,) ndarray of str
    """
    n = tags.size
    prefixes, codes, type_names = parse_tags(tags, scheme)
    first = np.zeros(n, dtype=bool)
    first[offsets[:-1]] = True
    prev_prefix = np.where(first, "O", np.roll(prefixes, 1))
    prev_code = np.where(first, -1, np.roll(codes, 1))
    inside = prefixes != "O"
    start = inside & (
        np.isin(prefixes, ("B", "S")) | np.isin(prev_prefix, ("O", "E", "S")) | (prev_code != codes)
    )
    # a chunk ends where the next token is outside, starts a chunk or a sentence
    last = np.zeros(n, dtype=bool)
    last[offsets[1:] - 1] = True
    next_breaks = last | np.roll(~inside | start, -1)
    end = inside & next_breaks
    starts = np.flatnonzero(start)
    return starts, np.flatnonzero(end) + 1, type_names[codes[starts]]


def encode_spans(n, starts, ends, types, scheme, offsets):
    """The ``n`` tags ``(n,)`` (object) of ``scheme`` of sorted, disjoint chunks.

    Chunk ``i`` is ``starts[i]:ends[i]`` of type ``types[i]``; ``offsets (m + 1,)``
    are the sentences (IOB1's ``B-`` only after a chunk of the same type).
    """
    sizes = ends - starts
    rows = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes - starts, sizes)
    prefixes = np.full(rows.size, "I", dtype="<U1")
    heads = np.cumsum(sizes) - sizes  # position of each chunk's first token in ``rows``
    if scheme == "iob2":
        prefixes[heads] = "B"
    elif scheme == "iob1":
        sentence_start = np.isin(starts, offsets)
        follows_same = np.zeros(starts.size, dtype=bool)
        follows_same[1:] = (ends[:-1] == starts[1:]) & (types[:-1] == types[1:])
        prefixes[heads[follows_same & ~sentence_start]] = "B"
    else:
        prefixes[heads] = "B"
        prefixes[heads + sizes - 1] = np.where(sizes == 1, "S", "E")
    out = np.full(n, "O", dtype=object)
    out[rows] = np.char.add(np.char.add(prefixes, "-"), np.repeat(types, sizes).astype(str))
    return out
