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

ON_GLIBC = _heap._glibc(set()) is not None and hasattr(ctypes.CDLL(None), "mallinfo2")
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


def test_a_fit_raises_both_thresholds_and_its_end_settles_and_trims():
    libc = _FakeLibc()
    assert _heap.keep_freed(_heap.MAX_ROUND_BYTES, libc)
    assert libc.calls == [("mallopt", _heap.M_MMAP_THRESHOLD, 2**31 - 1),
                          ("mallopt", _heap.M_TRIM_THRESHOLD, 2**31 - 1)]  # fmt: skip
    libc.calls.clear()
    _heap.release_freed(libc)
    assert libc.calls == [
        ("mallopt", _heap.M_MMAP_THRESHOLD, 32 << 20),
        ("mallopt", _heap.M_TRIM_THRESHOLD, 64 << 20),
        ("malloc_trim", 0),
    ]


@pytest.mark.parametrize("round_bytes", [_heap.MAX_ROUND_BYTES + 1, 0])
def test_a_fit_with_larger_rounds_or_none_on_the_host_keeps_nothing(round_bytes):
    libc = _FakeLibc()
    assert not _heap.keep_freed(round_bytes, libc)
    assert libc.calls == []


@pytest.mark.parametrize(
    "name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"]
)
def test_an_allocator_the_user_tunes_is_left_alone(name):
    assert _heap._glibc({name}) is None


@pytest.mark.skipif(not ON_GLIBC, reason="glibc's allocator (2.33 or later)")
def test_the_environment_glibc_read_decides_not_a_later_one(monkeypatch):
    # Dask's nanny puts MALLOC_TRIM_THRESHOLD_ in os.environ for the workers
    # it spawns: this process's glibc never read it
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    assert _heap._glibc() is not None
    code = "from structboost import _heap; print(_heap.keep_freed(1))"
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "False"


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
