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
buffers come from the heap and freed ones stay there for the next round;
:func:`release_freed` (``after_training``) sets the values glibc's rule
itself settles on once a buffer of 32 MiB or more has been freed (every
fit of that size frees several), and returns the heap's free memory to the
system (``malloc_trim``). The setting is the process's: two fits at once in
threads share it, and the first to end releases it (the other goes on at
glibc's own pace), as does a later fit's end after one that raised.
Nothing changes where the C library is not glibc, or where the process
started with glibc's allocator tuned (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES`` set), as Dask's workers
do (its nanny starts them with ``MALLOC_TRIM_THRESHOLD_``).

The kept memory is not free: buffers of different rounds overlap in time
(the adaptive step keeps the last round's margins), so the heap holds
holes beside them. At K = 10 (``benchmarks/kept_buffers.py``) a round took
5% less CPU time at 1M rows and 6% less at 10M, and the peak RSS of the fit
rose by 27 MiB (3%) and 245 MiB (5%). Where the time matters more than that
memory, in fits whose round's buffers take at most
:data:`MAX_ROUND_BYTES`, :func:`keep_freed` keeps them; a larger fit
runs as before. A fit that trains in a thread other than the main one
gains only below 64 MiB: glibc's arenas of other threads map any larger
buffer apart, whatever the threshold.
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
#: The largest round's buffers (bytes of the margins' copy and the gradient
#: pairs, 12 per row and label) whose freed memory is kept: about 4.4M rows at K = 10.
MAX_ROUND_BYTES = 512 << 20
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


@functools.cache
def _start_names():
    """Names of the environment variables this process started with: what glibc read.

    ``/proc/self/environ`` where there is one, else ``os.environ``'s. A
    variable put in ``os.environ`` later does not tune glibc (Dask's nanny
    puts ``MALLOC_TRIM_THRESHOLD_`` there for the workers it spawns).
    """
    try:
        with open("/proc/self/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return frozenset(os.environ)
    return frozenset(e.split(b"=", 1)[0].decode(errors="replace") for e in entries if e)


@functools.cache
def _libc():
    """This process's C library if it is glibc (it has ``gnu_get_libc_version``), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version, libc.mallopt, libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def _glibc(names=None):
    """The C library if it is glibc and the user leaves its allocator alone, else None.

    ``names``: the environment variables glibc read (:func:`_start_names` when None).
    """
    names = _start_names() if names is None else names
    return None if any(name in names for name in _USER_SETTINGS) else _libc()


def keep_freed(round_bytes, libc=None):
    """Serve large buffers from the heap and keep freed ones there until :func:`release_freed`.

    Parameters
    ----------
    round_bytes : int
        What a round allocates afresh in host memory: nothing is kept
        above :data:`MAX_ROUND_BYTES`, nor for none (a GPU's rounds).
    libc : ctypes.CDLL, optional
        The C library to set (glibc's; found in this process when None).

    Returns
    -------
    bool
        Whether freed memory is kept (then call :func:`release_freed` at the end).
    """
    libc = _glibc() if libc is None else libc
    if libc is None or not 0 < round_bytes <= MAX_ROUND_BYTES:
        return False
    libc.mallopt(M_MMAP_THRESHOLD, _LARGEST)
    libc.mallopt(M_TRIM_THRESHOLD, _LARGEST)
    return True


def release_freed(libc=None):
    """End :func:`keep_freed`: glibc's settled thresholds back, free memory returned.

    ``libc`` as for :func:`keep_freed`.
    """
    libc = _glibc() if libc is None else libc
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, SETTLED_MMAP)
        libc.mallopt(M_TRIM_THRESHOLD, SETTLED_TRIM)
        libc.malloc_trim(0)
