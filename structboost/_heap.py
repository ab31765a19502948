"""Freed round-sized buffers kept for the next round while a fit trains (glibc).

Every round of ``xgboost.train(obj=...)`` allocates and frees buffers the
size of the batch: XGBoost copies the margins it hands to the objective
(``n x K`` float32, ``Booster.predict``) and the gradients it takes back
(``n x K`` pairs of float32, a fresh matrix in ``XGBoosterTrainOneIter``).
glibc serves an allocation above its mmap threshold (which its own rule
raises to 32 MiB at most) with pages fresh from the kernel, each zeroed
and faulted in on first touch, and returns them when it is freed, so those
buffers cost their page faults anew every round: at 1M rows and K = 10,
about 0.08 s of a 0.8 s native round (``benchmarks/round_ratio.py
--sticky-rows``). Native training keeps its buffers and pays nothing.

:func:`keep_freed` (from the training callback's ``before_training``)
raises the mmap and trim thresholds to their largest value, so that large
buffers come from the heap and freed ones stay there for the next round;
:func:`release_freed` (``after_training``) sets the values glibc's rule
itself settles on once a buffer of 32 MiB or more has been freed (every
fit of that size frees several), and returns the heap's free memory to the
system (``malloc_trim``). The setting is the process's: two fits at once in
threads share it, and the first to end releases it (the other goes on at
glibc's own pace), as does a later fit's end after one that raised. Nothing
changes where the C library is
not glibc, or where the user tunes glibc's allocator
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
``GLIBC_TUNABLES`` set).
"""

import ctypes
import os

# mallopt's parameters (malloc.h) and its largest value (an int).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_LARGEST = 2**31 - 1
# What glibc's rule settles on after freeing a chunk of DEFAULT_MMAP_THRESHOLD_MAX
# (64-bit): the mmap threshold at 32 MiB and the trim threshold twice that.
SETTLED_MMAP = 32 << 20
SETTLED_TRIM = 2 * SETTLED_MMAP
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def _glibc(environ=None):
    """The C library if it is glibc and the user leaves its allocator alone, else None."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in _USER_SETTINGS):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version, libc.mallopt, libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed(libc=None):
    """Serve large buffers from the heap and keep freed ones there until :func:`release_freed`.

    ``libc``: the C library to set (glibc's; found in this process when None).
    """
    libc = _glibc() if libc is None else libc
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, _LARGEST)
        libc.mallopt(M_TRIM_THRESHOLD, _LARGEST)


def release_freed(libc=None):
    """End :func:`keep_freed`: glibc's settled thresholds back, free memory returned.

    ``libc`` as for :func:`keep_freed`.
    """
    libc = _glibc() if libc is None else libc
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, SETTLED_MMAP)
        libc.mallopt(M_TRIM_THRESHOLD, SETTLED_TRIM)
        libc.malloc_trim(0)
