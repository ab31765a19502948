"""One ``logging`` INFO line, with its time, the first time a process compiles kernels.

numba compiles a kernel on its first call for each argument signature and
caches the result on disk; a cache hit emits no compile event. The first
time this process really compiles structboost kernels (outermost compile
of a structboost function, callees included), the ``structboost`` logger
says how long it took. ``structboost warmup`` compiles them all ahead.
"""

import logging
import threading
import time

from numba.core import event

logger = logging.getLogger("structboost")


def _is_ours(ev):
    dispatcher = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
    return module.split(".")[0] == "structboost"


class FirstCompile(event.Listener):
    """Times the first outermost compile of structboost kernels in this process.

    Attributes
    ----------
    seconds : float or None
        How long it took, once it has ended.
    """

    def __init__(self):
        self._local = threading.local()
        self.seconds = None

    def on_start(self, ev):
        if self.seconds is None and _is_ours(ev):
            depth = getattr(self._local, "depth", 0)
            if depth == 0:
                self._local.t0 = time.perf_counter()
            self._local.depth = depth + 1

    def on_end(self, ev):
        if self.seconds is None and _is_ours(ev) and getattr(self._local, "depth", 0):
            self._local.depth -= 1
            if self._local.depth == 0:
                self.seconds = time.perf_counter() - self._local.t0
                logger.info(
                    "compiled structboost's numba kernels for a new signature in %.1f s "
                    "(cached on disk for later runs; `structboost warmup` compiles the "
                    "common ones ahead of time)",
                    self.seconds,
                )


LISTENER = FirstCompile()
event.register("numba:compile", LISTENER)
