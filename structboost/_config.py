"""Numba settings shared by every kernel module, and the thread policy.

``KERNEL`` and ``PARALLEL`` are the keyword arguments of ``numba.njit`` for
serial and ``prange`` kernels (:mod:`structboost.inference._chain`,
:mod:`structboost.inference._tree`, :mod:`structboost.text._lexical`, the
objective's row loops in :mod:`structboost.objectives._kernels`). Fast-math
is limited to reassociation, contraction and reciprocals, which let LLVM
vectorise the ``K``-long reductions; never ``nnan``/``ninf``, because forbidden (``-inf``)
transitions are legal input.

The kernels are cached on disk where numba finds a place for them (beside
the package, in the user's cache folder, or ``NUMBA_CACHE_DIR`` when the
user sets it); where it finds none they are compiled in each process
(:data:`CACHE` is False) and the compile log line says so. A damaged cache
entry (a file truncated by a full disk or a killed process) is read as a
miss and written again (:func:`njit`), so it never breaks a fit. Nothing
here writes to the environment.

:func:`threads` sets numba's thread count for one call: batches below
``SERIAL_ROWS`` rows, or any batch on one thread, run the serial kernels on
the calling thread (no thread pool is started), larger ones the ``prange``
kernels on ``nthread`` threads (numba's default when None).

Threads of the estimators: :func:`resolve_n_jobs` turns ``n_jobs`` into one
count, decided once per fit and given to the engine and the kernels alike,
with scikit-learn's meaning (None: one thread; -1: every core of the
process's CPU set). An OpenMP runtime (XGBoost's, LightGBM's and numba's
each load one) keeps its idle threads spinning between parallel regions: on
cores that other work keeps busy, a fit on every core ran 10-70x slower than
on one (XGBoost alone as well, ``benchmarks/busy_threads.py``), so more than
one thread is the user's choice, made where the cores are theirs. Users who
set ``OMP_WAIT_POLICY=passive`` before starting Python can take every core
on a shared machine without that trap.
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
    """numba's on-disk cache of one kernel, reading a damaged entry as a miss.

    numba raises on a truncated index or data file, at every later call,
    until the file is deleted; here such an entry is compiled again and its
    index rewritten.
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
#: Rows x labels of a batch that the chain objective's round takes as one
#: block: its node scores are exponentiated once, and the last message pass
#: of the transition refit serves G and H.
WHOLE_BATCH_ENTRIES = 1 << 21
#: Rows x labels of one block of a larger batch: the round passes its
#: messages and writes G and H over blocks of whole sequences this large
#: (:func:`structboost.sequences.sequence_blocks`), so that its memory is a
#: block's, not the batch's, for one more message pass per round. Both are
#: read at call time (tests lower them).
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
    """The thread count of one fit or prediction from an estimator's ``n_jobs``.

    Parameters
    ----------
    n_jobs : int or None
        None: 1 (scikit-learn's meaning); a negative value counts back from
        every usable core (-1: all of them, -2: all but one); a positive one
        is taken as it is.

    Returns
    -------
    int
        At least 1.
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


def parallel(n_rows):
    """Whether a batch of ``n_rows`` rows runs the ``prange`` kernels.

    Batches of :data:`SERIAL_ROWS` rows or more, on more than one of numba's
    threads (the calling thread's count, :func:`threads`). On one thread the
    serial kernels run and numba's threading layer is never started: a
    process forked afterwards (``multiprocessing``, a pre-forking server)
    can use structboost, which numba's OpenMP layer refuses once it ran.
    """
    return n_rows >= SERIAL_ROWS and numba.get_num_threads() > 1


@contextlib.contextmanager
def threads(nthread):
    """Run the enclosed numba kernels on ``nthread`` threads (None: leave as is).

    Capped at ``numba.config.NUMBA_NUM_THREADS``; numba's setting is per
    calling thread and restored on exit.
    """
    if nthread is None:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(min(int(nthread), numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(before)
