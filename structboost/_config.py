"""Numba settings shared by every kernel module, and the thread policy.

``KERNEL`` and ``PARALLEL`` are the keyword arguments of ``numba.njit`` for
serial and ``prange`` kernels (:mod:`structboost.inference._chain`,
:mod:`structboost.inference._tree`, :mod:`structboost.text._lexical`, the
objective's row loops in :mod:`structboost.objectives._kernels`). Fast-math
is limited to reassociation, contraction and reciprocals, which let LLVM
vectorise the ``K``-long reductions; never ``nnan``/``ninf``, because forbidden (``-inf``)
transitions are legal input.

:func:`threads` sets numba's thread count for one call: batches below
``SERIAL_ROWS`` rows run the serial kernels on the calling thread (no thread
pool is woken for a 10-sequence fit), larger ones the ``prange`` kernels on
``nthread`` threads (numba's default when None).

Threads on a busy machine: an OpenMP runtime (XGBoost's, scikit-learn's,
LightGBM's and numba's ``omp`` threading layer each load one) keeps its idle
threads spinning between parallel regions. On cores that other work keeps
busy, a team that spins between the many short regions of a boosting round
takes the cores its own other threads wait for: a fit with every core ran
10-70x slower than with one thread (XGBoost alone as well as with
structboost, ``benchmarks/busy_threads.py``). A passive wait policy
(``OMP_WAIT_POLICY=PASSIVE``) cures that but costs a quiet machine more
than the second core gains (53 OCR rounds on 15,214 letters: 9.3 s on two
passive threads against 6.3 s on one and 5.0 s on two spinning ones), so
structboost leaves the policy alone and gives the estimators' ``n_jobs=None``
the cores that are idle when ``fit`` starts (:func:`default_threads`): every
core on a quiet machine, fewer beside other work. A user who chose passive waiting
(:func:`user_waits_passively`) gets every core.
"""

import contextlib
import os
import tempfile
import time
from typing import Any

import numba
from numba.core import config as _numba_config
from numba.core.caching import FunctionCache


def _private_folder(path):
    """``path`` as a folder only this user can write, or None if it cannot be one."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    owner = getattr(os, "getuid", lambda: st.st_uid)()
    private = st.st_uid == owner and not st.st_mode & 0o022
    return path if private and os.path.isdir(path) and not os.path.islink(path) else None


def cache_fallback():
    """Give numba a cache folder when it has none for structboost's files.

    Returns
    -------
    str or None
        The temporary cache folder now in ``NUMBA_CACHE_DIR``, or None when
        numba can cache next to the package, in the user's cache folder or
        in a ``NUMBA_CACHE_DIR`` already set.
    """

    def probe():  # a function of this package's source folder
        pass

    try:
        FunctionCache(probe)
        return None
    except RuntimeError:  # "cannot cache function ...: no locator available"
        pass
    user = getattr(os, "getuid", lambda: "")()
    shared = os.path.join(tempfile.gettempdir(), f"structboost-numba-cache-{user}")
    # Another user's (or a link planted there) is not trusted: numba's cache holds code.
    folder = _private_folder(shared) or tempfile.mkdtemp(prefix="structboost-numba-cache-")
    os.environ["NUMBA_CACHE_DIR"] = folder
    _numba_config.reload_config()
    return folder


FASTMATH = {"reassoc", "contract", "arcp"}
CACHE = True
#: The temporary folder numba caches in when it had no other (None: it had).
CACHE_FALLBACK = cache_fallback()
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


def user_waits_passively(environ=None):
    """Whether the environment makes OpenMP threads wait without spinning.

    ``OMP_WAIT_POLICY=passive``, ``GOMP_SPINCOUNT=0`` (GNU) or
    ``KMP_BLOCKTIME=0`` (LLVM and Intel), read from ``environ``
    (``os.environ``).
    """
    environ = os.environ if environ is None else environ
    if environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive":
        return True
    return environ.get("GOMP_SPINCOUNT", "").strip() == "0" or (
        environ.get("KMP_BLOCKTIME", "").strip() == "0"
    )


def _cpu_times():
    """``(idle, total)`` clock ticks of every CPU of the machine (``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def idle_cores(window=0.05):
    """Cores of this process's CPU set that sat idle over ``window`` seconds.

    Returns
    -------
    int or None
        At least 1; None where the machine does not say (no ``/proc/stat``).
    """
    try:
        idle0, total0 = _cpu_times()
        time.sleep(window)
        idle1, total1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    idle = (idle1 - idle0) / (total1 - total0) * (os.cpu_count() or 1)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return int(max(1, min(usable or 1, round(idle))))


def default_threads():
    """Threads of a fit whose estimator has ``n_jobs=None``.

    None (each engine's default: every core) when the user made OpenMP wait
    passively (:func:`user_waits_passively`); otherwise the cores idle at the
    start of the fit (:func:`idle_cores`), so that spinning thread teams never
    fight other work for busy cores.
    """
    if user_waits_passively():
        return None
    now = time.monotonic()
    if now - _LAST_COUNT[0] > _COUNT_LIFETIME:  # one count serves every part of one fit
        _LAST_COUNT[:] = [now, idle_cores()]
    return _LAST_COUNT[1]


#: Seconds a count of idle cores serves: the calls of one fit ask in quick turn.
#: A fit starts with a fresh count (:func:`forget_idle_count`).
_COUNT_LIFETIME = 0.25
_LAST_COUNT = [-float("inf"), None]


def forget_idle_count():
    """Make the next :func:`default_threads` count the idle cores afresh.

    Every fit calls it first: a count kept from the fit before it (up to
    :data:`_COUNT_LIFETIME` old) would miss work that started since. A
    busy process started right after one fit and before the next gave
    the next fit both cores: 2.2-2.4x the wall time of ``n_jobs=1``
    (``benchmarks/busy_threads.py``).
    """
    _LAST_COUNT[:] = [-float("inf"), None]


def parallel(n_rows):
    """Whether a batch of ``n_rows`` rows runs the ``prange`` kernels."""
    return n_rows >= SERIAL_ROWS


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
