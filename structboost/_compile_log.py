"""``logging`` INFO lines on the time structboost's numba kernels take to compile.

The first compile of the process is announced; each fit or prediction
marked with :func:`reports` that waited for compiling logs, as it ends, how
long (outermost compiles, callees included). numba's listener is installed
only while a marked call runs.
"""

import contextlib

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from numba.core import event

from . import _config

logger = logging.getLogger("structboost")

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _is_ours(ev):
    dispatcher = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
    return module.split(".")[0] == "structboost"


class CompileClock(event.Listener):
    """Adds up the outermost compiles of structboost kernels in this process.

    Attributes
    ----------
    seconds : float
        Wall-clock seconds spent compiling so far.
    announced : bool
        Whether the first compile has been logged.
    """

    def __init__(self):
        self._local = threading.local()
        self._lock = threading.Lock()
        self.seconds = 0.0
        self.announced = False

    def on_start(self, ev):
        if not _is_ours(ev):
            return
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.t0 = time.perf_counter()
        self._local.depth = depth + 1
        with self._lock:
            if self.announced:
                return
            self.announced = True
        if _config.CACHE:
            kept = ("once: they are cached on disk for later runs; `structboost warmup` "
                    "compiles those of a default fit and predict ahead of time")
        else:
            kept = ("in every process: numba found no writable folder to cache them in; set "
                    "NUMBA_CACHE_DIR to a folder of yours before starting Python to keep them")
        logger.info("numba is compiling structboost's kernels for new argument types (%s)", kept)

    def on_end(self, ev):
        if _is_ours(ev) and getattr(self._local, "depth", 0):
            self._local.depth -= 1
            if self._local.depth == 0:
                spent = time.perf_counter() - self._local.t0
                with self._lock:
                    self.seconds += spent


CLOCK = CompileClock()
_active = threading.local()
_listening = {"calls": 0, "clock": None}
_listening_lock = threading.Lock()


@contextlib.contextmanager
def listening():
    """:data:`CLOCK` hears numba's compile events (any thread's) inside the block, announcing the
    process's first.
    """
    with _listening_lock:
        if _listening["calls"] == 0:
            _listening["clock"] = CLOCK
            event.register("numba:compile", CLOCK)
        _listening["calls"] += 1
    try:
        yield
    finally:
        with _listening_lock:
            _listening["calls"] -= 1
            if _listening["calls"] == 0:
                event.unregister("numba:compile", _listening.pop("clock"))
                _listening["clock"] = None


def reports(what: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a function so that it logs the compile time it waited for, if any, naming the call
    ``what`` (e.g. ``"fit"``).
    """

    def decorate(func: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(func)
        def timed(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if getattr(_active, "on", False):
                return func(*args, **kwargs)
            since = CLOCK.seconds
            _active.on = True
            try:
                with listening():
                    return func(*args, **kwargs)
            finally:
                _active.on = False
                if CLOCK.seconds > since:
                    logger.info(
                        "%s waited %.1f s for numba to compile structboost's kernels (cached on "
                        "disk for later runs)", what, CLOCK.seconds - since,
                    )  # fmt: skip

        return timed

    return decorate
