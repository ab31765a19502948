"""Numba settings shared by every kernel module, and the thread policy.

``KERNEL`` and ``PARALLEL`` are ``numba.njit``'s keywords for serial and
``prange`` kernels; fast-math never assumes ``nnan``/``ninf`` (``-inf``
transitions are legal). Kernels are cached on disk where numba finds a
place; a damaged cache entry is a miss (:func:`njit`). Nothing here writes
to the environment. :func:`resolve_n_jobs` decides a fit's thread count
once, for the engine and the kernels, with scikit-learn's meaning.
"""

import contextlib
import functools
import os
from typing import Any

import numba
from numba.core.caching import FunctionCache


def _can_cache():
    """Whether numba has a folder to cache this package's kernels in."""

    def probe():  # a function of this package's source folder
        pass

    try:
        FunctionCache(probe)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return False
    return True


class _TolerantCache(FunctionCache):
    """numba's on-disk cache of one kernel, compiling a damaged (truncated) entry again instead of
    raising.
    """

    def _forget(self):
        with contextlib.suppress(OSError):
            os.unlink(self._cache_file._index_path)

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception:  # noqa: BLE001  (any unreadable entry: compile instead)
            self._forget()
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception:  # noqa: BLE001  (an unreadable index: start a new one)
            self._forget()
            super().save_overload(sig, data)


def njit(func=None, **options):
    """``numba.njit``, with ``cache=True`` meaning a cache whose damaged entries are misses.

    Used as ``@njit`` or ``@njit(**options)``, like numba's.
    """
    if func is None:
        return functools.partial(njit, **options)
    cache = options.pop("cache", False)
    dispatcher = numba.njit(**options)(func)
    if cache:  # what Dispatcher.enable_caching does, with the tolerant cache
        dispatcher._cache = _TolerantCache(func)
    return dispatcher


FASTMATH = {"reassoc", "contract", "arcp"}
#: Whether the kernels are cached on disk (False: compiled in each process).
CACHE = _can_cache()
KERNEL: dict[str, Any] = {"cache": CACHE, "fastmath": FASTMATH, "error_model": "numpy"}
PARALLEL: dict[str, Any] = {**KERNEL, "parallel": True}
#: For kernels whose every value is finite by construction: lets LLVM
#: vectorise min/max reductions.
FINITE: dict[str, Any] = {**KERNEL, "fastmath": FASTMATH | {"nnan", "nsz"}}
#: Batches with fewer rows than this run the serial kernels.
SERIAL_ROWS = 8192
#: Rows x labels of a batch that the chain objective's round takes as one block.
WHOLE_BATCH_ENTRIES = 1 << 21
#: Rows x labels of one block of whole sequences of a larger batch (both read at call time).
BLOCK_ENTRIES = 1 << 18


def block_rows(n_rows, num_labels):
    """Rows per block of a round over ``n_rows`` rows of ``num_labels`` labels."""
    if n_rows * num_labels <= WHOLE_BATCH_ENTRIES:
        return max(1, n_rows)
    return max(1, BLOCK_ENTRIES // num_labels)
#: Bound on what a scaled message loses to underflow at one entry, and the
#: smallest normaliser a scaled sweep accepts (see :mod:`structboost.inference._chain`).
TINY = 1e-280
#: A position whose normaliser times overlap is below this marks its sequence
#: for the log-space fallback (what underflow dropped is then < 1e-30 of it).
SAFE = TINY * 1e30


def check_nthread(nthread):
    """``None`` or a positive int, else a ``ValueError``."""
    if nthread is None:
        return None
    if int(nthread) != nthread or nthread < 1:
        raise ValueError(f"nthread must be None or a positive integer; got {nthread!r}.")
    return int(nthread)


def usable_cores():
    """Cores of this process's CPU set (``os.sched_getaffinity`` where there is one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def resolve_n_jobs(n_jobs):
    """The thread count (at least 1) of one fit or prediction from ``n_jobs``: None is 1, -1 every
    usable core, -2 all but one.
    """
    if n_jobs is None:
        return 1
    if isinstance(n_jobs, bool) or int(n_jobs) != n_jobs or n_jobs == 0:
        raise ValueError(
            f"n_jobs must be None, a positive int or a negative one counting back from every "
            f"core (-1: all); got {n_jobs!r}."
        )
    if n_jobs < 0:
        return max(1, usable_cores() + 1 + int(n_jobs))
    return int(n_jobs)


#: The process that started numba's threading layer (None: not started here).
_LAYER_PID = None


def _thread_count():
    """numba's thread count for the calling thread (which starts numba's threading layer)."""
    global _LAYER_PID
    if _LAYER_PID is None:
        _LAYER_PID = os.getpid()
    return numba.get_num_threads()


def forked():
    """Whether this process was forked from one that had started numba's threading layer."""
    return _LAYER_PID is not None and _LAYER_PID != os.getpid()


def parallel(n_rows):
    """Whether a batch of ``n_rows`` rows runs the ``prange`` kernels.

    Batches of :data:`SERIAL_ROWS` rows or more, on more than one thread,
    outside a forked child: numba's OpenMP layer kills a child forked after
    its parent started it, so there the serial kernels run, whatever the
    parent did.
    """
    return n_rows >= SERIAL_ROWS and not forked() and _thread_count() > 1


@contextlib.contextmanager
def threads(nthread):
    """Run the enclosed numba kernels on ``nthread`` threads (None: as is), capped at
    ``NUMBA_NUM_THREADS``, restored on exit.
    """
    if nthread is None:
        yield
        return
    before = _thread_count()
    numba.set_num_threads(min(int(nthread), numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(before)
