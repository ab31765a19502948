"""Freed round-sized buffers kept in the heap while a fit trains (structboost._heap)."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
import xgboost as xgb

import structboost as sb
from structboost import _heap
from structboost.datasets import make_hmm_sequences
from structboost.engines import xgboost as xgb_engine

ON_GLIBC = _heap._libc() is not None and hasattr(ctypes.CDLL(None), "mallinfo2")
# Larger than the 32 MiB glibc's own rule ever serves from the heap.
BIG = 64 << 20


class _FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


# The start environment -> the (mmap, trim) thresholds a fit's end puts back.
START = [
    ({}, (32 << 20, 64 << 20)),  # glibc's own rule: where it settles
    ({"GLIBC_TUNABLES": "glibc.malloc.check=0"}, (32 << 20, 64 << 20)),
    ({"MALLOC_TRIM_THRESHOLD_": "65536"}, (128 << 10, 65536)),  # Dask's workers
    ({"MALLOC_MMAP_THRESHOLD_": "0x100000"}, (1 << 20, 128 << 10)),
    ({"MALLOC_MMAP_THRESHOLD_": "0400", "MALLOC_TRIM_THRESHOLD_": "7"}, (256, 7)),
    ({"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.trim_threshold=4096"},
     (128 << 10, 4096)),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=2097152", "MALLOC_MMAP_THRESHOLD_": "8"},
     (2 << 20, 128 << 10)),  # the tunable takes precedence
    ({"MALLOC_TRIM_THRESHOLD_": "lots", "MALLOC_MMAP_THRESHOLD_": "-1"}, (32 << 20, 64 << 20)),
    ({"MALLOC_TRIM_THRESHOLD_": str(1 << 40)}, (128 << 10, 1 << 40)),
]


@pytest.mark.parametrize(("environ", "thresholds"), START)
def test_the_thresholds_a_process_starts_with_are_read_as_glibc_reads_them(environ, thresholds):
    assert _heap.start_thresholds(environ) == thresholds


@pytest.mark.parametrize(("environ", "thresholds"), START)
def test_a_fit_raises_both_thresholds_and_its_end_puts_back_the_start_ones_and_trims(
    environ, thresholds
):
    libc = _FakeLibc()
    assert _heap.keep_freed(_heap.MAX_ROUND_BYTES, libc)
    assert libc.calls == [("mallopt", _heap.M_MMAP_THRESHOLD, 2**31 - 1),
                          ("mallopt", _heap.M_TRIM_THRESHOLD, 2**31 - 1)]  # fmt: skip
    libc.calls.clear()
    _heap.release_freed(libc, environ)
    mmap, trim = (min(t, 2**31 - 1) for t in thresholds)  # mallopt's int
    assert libc.calls == [
        ("mallopt", _heap.M_MMAP_THRESHOLD, mmap),
        ("mallopt", _heap.M_TRIM_THRESHOLD, trim),
        ("malloc_trim", 0),
    ]


def test_a_fit_with_no_round_buffers_on_the_host_sets_nothing():
    libc = _FakeLibc()
    assert not _heap.keep_freed(0, libc, {"MALLOC_TRIM_THRESHOLD_": "65536"})
    assert libc.calls == []


SETTLED = (32 << 20, 64 << 20)
# The start environments of START -> the thresholds a fit above MAX_ROUND_BYTES sets
# (None: none, the start ones being glibc's settled values or above).
LARGER_FIT = [None, None, SETTLED, SETTLED, SETTLED, SETTLED, SETTLED, None,
              (32 << 20, 2**31 - 1)]  # fmt: skip


@pytest.mark.parametrize(("environ", "raised"),
                         [(start[0], raised) for start, raised in zip(START, LARGER_FIT)])
def test_a_larger_fit_maps_its_round_buffers_apart_and_serves_smaller_ones_from_the_heap(
    environ, raised
):
    libc = _FakeLibc()
    assert _heap.keep_freed(_heap.MAX_ROUND_BYTES + 1, libc, environ) == (raised is not None)
    expected = [] if raised is None else [("mallopt", _heap.M_MMAP_THRESHOLD, raised[0]),
                                          ("mallopt", _heap.M_TRIM_THRESHOLD, raised[1])]
    assert libc.calls == expected


def _python(code, **environ):
    """The standard output of ``python -c code`` started with ``environ`` added."""
    env = {name: value for name, value in os.environ.items() if "MALLOC" not in name}
    env.pop("GLIBC_TUNABLES", None)
    done = subprocess.run([sys.executable, "-c", code], env={**env, **environ},
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.mark.skipif(not ON_GLIBC, reason="glibc's allocator (2.33 or later)")
def test_the_environment_glibc_read_decides_not_a_later_one():
    # Dask's nanny puts MALLOC_TRIM_THRESHOLD_ in os.environ for the workers
    # it spawns: the process that does so never had glibc read it
    started = "from structboost import _heap; print(_heap.start_thresholds())"
    later = "import os; os.environ['MALLOC_TRIM_THRESHOLD_'] = '65536'; " + started
    assert _python(later) == str((32 << 20, 64 << 20))
    assert _python(started, MALLOC_TRIM_THRESHOLD_="65536") == str((128 << 10, 65536))


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def _mallinfo():
    """glibc's ``mallinfo2()``: ``hblkhd`` bytes mapped apart, ``fordblks`` free in the heap."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    return libc.mallinfo2()


@pytest.mark.skipif(not ON_GLIBC, reason="glibc's allocator (2.33 or later)")
def test_a_big_buffer_comes_from_the_heap_and_stays_there_until_release():
    try:
        assert _heap.keep_freed(BIG)
        mapped = _mallinfo().hblkhd
        a = np.ones(BIG, dtype=np.uint8)
        assert _mallinfo().hblkhd == mapped  # not mapped apart: from the heap
        del a
        assert _mallinfo().fordblks >= BIG  # freed, kept for the next one
    finally:
        _heap.release_freed()
    mapped = _mallinfo().hblkhd
    a = np.ones(2 * BIG, dtype=np.uint8)  # above the settled threshold: mapped apart again
    assert _mallinfo().hblkhd >= mapped + 2 * BIG
    del a


@pytest.mark.skipif(not ON_GLIBC, reason="glibc's allocator (2.33 or later)")
def test_a_process_started_as_dask_starts_its_workers_keeps_too_and_gets_its_threshold_back():
    # there every buffer above 128 KiB is mapped apart, and is again after the fit
    code = f"""
import sys
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
import numpy as np
from structboost import _heap
from test_heap import BIG, _mallinfo
assert _heap.keep_freed(BIG)
mapped = _mallinfo().hblkhd
a = np.ones(BIG, dtype=np.uint8)
kept = _mallinfo().hblkhd == mapped
del a
_heap.release_freed()
mapped = _mallinfo().hblkhd
b = np.ones(256 << 10, dtype=np.uint8)
print(kept, _mallinfo().hblkhd >= mapped + (256 << 10))
"""
    assert _python(code, MALLOC_TRIM_THRESHOLD_="65536") == "True True"


@pytest.mark.parametrize("kept", [True, False])
def test_the_training_callback_keeps_freed_memory_after_the_first_round_to_the_end(
    monkeypatch, kept
):
    events = []

    def keep(round_bytes):
        events.append(("keep", round_bytes))
        return kept

    monkeypatch.setattr(xgb_engine._heap, "keep_freed", keep)
    monkeypatch.setattr(xgb_engine._heap, "release_freed", lambda: events.append("release"))
    x, y, lengths = make_hmm_sequences(20, length=(3, 8), random_state=0)
    dtrain = xgb.DMatrix(x, label=y)
    dtrain.set_group(lengths)
    obj = sb.crf_objective(3)
    original = obj.crf.grad_hess

    def recorded(*args, **kwargs):
        events.append("round")
        return original(*args, **kwargs)

    monkeypatch.setattr(obj.crf, "grad_hess", recorded)
    xgb.train(sb.xgb_params(3, max_depth=2), dtrain, 3, obj=obj, callbacks=[obj.callback()])
    n = int(np.sum(lengths))
    end = ["release"] if kept else []
    assert events == ["round", ("keep", 12 * n * 3), "round", "round", *end]


@pytest.mark.skipif(not ON_GLIBC, reason="glibc's allocator (2.33 or later)")
def test_a_larger_fit_in_a_process_started_as_dask_starts_its_workers_maps_only_big_buffers():
    # the objective's block-sized buffers from the heap, the round's own mapped apart,
    # and after the fit every buffer above 128 KiB mapped apart again
    code = f"""
import sys
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
import numpy as np
from structboost import _heap
from test_heap import BIG, _mallinfo
def mapped_apart(size):
    before = _mallinfo().hblkhd
    a = np.ones(size, dtype=np.uint8)
    return _mallinfo().hblkhd >= before + size
assert _heap.keep_freed(_heap.MAX_ROUND_BYTES + 1)
during = mapped_apart(4 << 20), mapped_apart(BIG)
_heap.release_freed()
print(during, mapped_apart(4 << 20))
"""
    assert _python(code, MALLOC_TRIM_THRESHOLD_="65536") == "(False, True) True"
