"""Numba settings shared by every kernel module, and the thread policy.

``KERNEL`` and ``PARALLEL`` are the keyword arguments of ``numba.njit`` for
serial and ``prange`` kernels (:mod:`structboost.inference._chain`,
:mod:`structboost.inference._tree`, :mod:`structboost.text._lexical`). Fast-math is limited
to reassociation, contraction and reciprocals, which let LLVM vectorise the
``K``-long reductions; never ``nnan``/``ninf``, because forbidden (``-inf``)
transitions are legal input.

:func:`threads` sets numba's thread count for one call: batches below
``SERIAL_ROWS`` rows run the serial kernels on the calling thread (no thread
pool is woken for a 10-sequence fit), larger ones the ``prange`` kernels on
``nthread`` threads (numba's default when None).

numba caches compiled kernels next to the package or, failing that, in the
user's cache folder. On a read-only install with no writable home folder
(common in containers) it has neither, and ``cache=True`` would make the
import fail: :func:`cache_fallback` then points numba's cache at a folder
of the temporary directory (``CACHE_FALLBACK``), which the first compile's
log line names.
"""

import contextlib
import os
import tempfile

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
KERNEL = {"cache": CACHE, "fastmath": FASTMATH, "error_model": "numpy"}
PARALLEL = {**KERNEL, "parallel": True}
#: For kernels whose every value is finite by construction: lets LLVM
#: vectorise min/max reductions.
FINITE = {**KERNEL, "fastmath": FASTMATH | {"nnan", "nsz"}}
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
