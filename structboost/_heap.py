"""Freed round-sized buffers kept for the next round while a fit trains (glibc).

Every round of ``xgboost.train(obj=...)`` allocates and frees buffers the
size of the batch: XGBoost copies the margins it hands to the objective
(``n x K`` float32, ``Booster.predict``) and the gradients it takes back
(``n x K`` pairs of float32, a fresh matrix in ``XGBoosterTrainOneIter``).
glibc serves an allocation above its mmap threshold (which its own rule
raises to 32 MiB at most) with pages fresh from the kernel, each zeroed
and faulted in on first touch, and returns them when it is freed, so those
buffers cost their page faults anew every round: at 1M rows and K = 10,
0.05-0.09 s of CPU time a round, against a native round of 0.75-0.8 s
(``benchmarks/kept_buffers.py``, ``benchmarks/round_ratio.py
--sticky-rows 1000000``). Native training keeps its own buffers from
round to round.

:func:`keep_freed` (from the training callback, after the first round)
raises the mmap and trim thresholds to their largest value, so that large
buffers come from the heap and freed ones stay there for the next round
(in fits up to :data:`MAX_ROUND_BYTES`, below);
:func:`release_freed` (``after_training``) puts back the thresholds the
process started with (:func:`start_thresholds`) and returns the heap's
free memory to the system (``malloc_trim``). Those are glibc's own rule
where the process started with no threshold set, else the values it set,
as Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``.
In such a process every buffer above 128 KiB is mapped afresh, so a fit
that kept nothing there lost more: at 1M rows and K = 10, in a process
started as Dask starts its workers, a round took 10-13% less CPU time with
its buffers kept, for 8-9% more peak RSS
(``MALLOC_TRIM_THRESHOLD_=65536 python benchmarks/kept_buffers.py``).
The setting is the process's: two fits at once in threads share it, and
the first to end puts it back (the other goes on with the start
thresholds), as does a later fit's end after one that raised. Nothing
changes where the C library is not glibc.

The kept memory is not free: buffers of different rounds overlap in time
(the adaptive step keeps the last round's margins), so the heap holds
holes beside them. At K = 10 (``benchmarks/kept_buffers.py``) a round took
5% less CPU time at 1M rows and 6% less at 10M, and the peak RSS of the fit
rose by 27 MiB (3%) and 245 MiB (5%). Where the time matters more than that
memory, in fits whose round's buffers take at most
:data:`MAX_ROUND_BYTES`, :func:`keep_freed` keeps them. A larger fit
maps its round's buffers apart, and serves the smaller ones (the
objective's blocks: a few MiB each) from the heap as glibc's own rule
would once settled (:data:`SETTLED_MMAP`, :data:`SETTLED_TRIM`): in a
process started with a lower threshold, such as Dask's workers, those
were mapped afresh hundreds of times a round: at 1M rows and K = 10, with
the round's buffers mapped apart as in a 10M-row fit, a round took 0.86 s
of CPU time instead of 0.98 s, at the same peak RSS
(``MALLOC_TRIM_THRESHOLD_=65536 python benchmarks/kept_buffers.py``).
A fit that trains in a thread other than the main one gains only below
64 MiB: glibc's arenas of other threads map any larger buffer apart,
whatever the threshold.
"""

import ctypes
import functools
import os

# mallopt's parameters (malloc.h) and its largest value (an int).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_LARGEST = 2**31 - 1
# What glibc's rule settles on after freeing a chunk of DEFAULT_MMAP_THRESHOLD_MAX
# (64-bit): the mmap threshold at 32 MiB and the trim threshold twice that.
SETTLED_MMAP = 32 << 20
SETTLED_TRIM = 2 * SETTLED_MMAP
# glibc's fixed values of both thresholds where its rule is off from the start
# (DEFAULT_MMAP_THRESHOLD_MIN, DEFAULT_TRIM_THRESHOLD): one of them was set.
DEFAULT_MMAP = DEFAULT_TRIM = 128 << 10
# The mmap and the trim threshold: each one's variable and its name in
# GLIBC_TUNABLES, which takes precedence.
_SETTINGS = (
    ("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"),
    ("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"),
)
#: The largest round's buffers (bytes of the margins' copy and the gradient
#: pairs, 12 per row and label) whose freed memory is kept: about 4.4M rows at K = 10.
MAX_ROUND_BYTES = 512 << 20


@functools.cache
def _start_environ():
    """The environment this process started with: what glibc read.

    ``/proc/self/environ`` where there is one, else ``os.environ``. A
    variable put in ``os.environ`` later does not tune glibc (Dask's nanny
    puts ``MALLOC_TRIM_THRESHOLD_`` there for the workers it spawns).
    """
    try:
        with open("/proc/self/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return dict(os.environ)
    pairs = (e.decode(errors="replace").partition("=") for e in entries if e)
    return {name: value for name, _, value in pairs}


def _size(text):
    """A size as glibc reads one (decimal, ``0x`` hex or leading-``0`` octal), else None."""
    text = text.strip()
    base = 16 if text[:2].lower() == "0x" else 8 if text[:1] == "0" and len(text) > 1 else 10
    try:
        value = int(text[2:] if base == 16 else text, base)
    except ValueError:
        return None
    return value if value >= 0 else None


def _first_size(*texts):
    """The first of ``texts`` that :func:`_size` reads (zero included), else None."""
    return next((v for v in map(_size, texts) if v is not None), None)


def start_thresholds(environ=None):
    """The mmap and trim thresholds this process started with: ``(mmap, trim)`` bytes.

    From ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` or their
    ``GLIBC_TUNABLES`` entries (which take precedence); a value glibc
    cannot read counts as unset, as glibc ignores it. With neither set,
    the values glibc's own rule settles on (:data:`SETTLED_MMAP`,
    :data:`SETTLED_TRIM`); with one set, glibc's fixed default
    (:data:`DEFAULT_MMAP`, :data:`DEFAULT_TRIM`) for the other, since
    setting either turns that rule off.

    Parameters
    ----------
    environ : mapping, optional
        The start environment (:func:`_start_environ` when None).
    """
    environ = _start_environ() if environ is None else environ
    tunables = dict(
        entry.partition("=")[::2] for entry in environ.get("GLIBC_TUNABLES", "").split(":")
    )
    mmap, trim = (
        _first_size(tunables.get(tunable, ""), environ.get(variable, ""))
        for variable, tunable in _SETTINGS
    )
    if mmap is None and trim is None:
        return SETTLED_MMAP, SETTLED_TRIM
    return (DEFAULT_MMAP if mmap is None else mmap), (DEFAULT_TRIM if trim is None else trim)


@functools.cache
def _libc():
    """This process's C library if it is glibc (it has ``gnu_get_libc_version``), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version, libc.mallopt, libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed(round_bytes, libc=None, environ=None):
    """Serve large buffers from the heap and keep freed ones there until :func:`release_freed`.

    Both thresholds go to their largest value where a round's buffers
    take at most :data:`MAX_ROUND_BYTES`; above that, to at least the
    values glibc's own rule settles on (:data:`SETTLED_MMAP`,
    :data:`SETTLED_TRIM`), so that the round's own buffers are mapped
    apart and returned when freed, and the smaller ones come from the heap.

    Parameters
    ----------
    round_bytes : int
        What a round allocates afresh in host memory (nothing is set for
        none: a GPU's rounds).
    libc : ctypes.CDLL, optional
        The C library to set (glibc's; found in this process when None).
    environ : mapping, optional
        The start environment, as for :func:`start_thresholds`.

    Returns
    -------
    bool
        Whether a threshold was raised (then call :func:`release_freed` at the end).
    """
    libc = _libc() if libc is None else libc
    if libc is None or round_bytes <= 0:
        return False
    if round_bytes <= MAX_ROUND_BYTES:
        mmap = trim = _LARGEST
    else:
        start = start_thresholds(environ)
        mmap, trim = max(start[0], SETTLED_MMAP), max(start[1], SETTLED_TRIM)
        if (mmap, trim) == start:  # glibc's own rule, or higher values the process set
            return False
    libc.mallopt(M_MMAP_THRESHOLD, min(mmap, _LARGEST))
    libc.mallopt(M_TRIM_THRESHOLD, min(trim, _LARGEST))
    return True


def release_freed(libc=None, environ=None):
    """End :func:`keep_freed`: the start thresholds back, free memory returned.

    ``libc`` as for :func:`keep_freed`; ``environ`` as for :func:`start_thresholds`.
    """
    libc = _libc() if libc is None else libc
    if libc is not None:
        mmap, trim = start_thresholds(environ)
        # (mallopt takes an int: a larger start value is its largest)
        libc.mallopt(M_MMAP_THRESHOLD, min(mmap, _LARGEST))
        libc.mallopt(M_TRIM_THRESHOLD, min(trim, _LARGEST))
        libc.malloc_trim(0)
