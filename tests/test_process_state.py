"""A process that uses structboost is left as it was found.

After importing structboost, fitting (to the end, with an exception
mid-fit, interrupted), predicting and saving, and after two fits at once in
two threads, the process has the same environment, umask, numba thread
count, BLAS and OpenMP thread limits and allocator behaviour as before.
Each check runs in a fresh interpreter, where nothing else set them.
"""

import subprocess
import sys

import pytest

SCRIPT = r"""
import ctypes, os, threading
import numpy as np, numba, xgboost
from threadpoolctl import threadpool_info

def umask():
    with open("/proc/self/status") as status:  # read without setting it
        return next(line.split()[1] for line in status if line.startswith("Umask:"))

def mapped_apart():
    # glibc serves a 64 MiB buffer with its own mapping, and unmaps it when freed
    libc = ctypes.CDLL(None)
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc.mallinfo2.restype = Info
    before = libc.mallinfo2().hblkhd
    a = np.ones(64 << 20, dtype=np.uint8)
    during = libc.mallinfo2().hblkhd
    del a
    return during - before >= 64 << 20 and libc.mallinfo2().hblkhd == before

def state():
    return {
        "environ": dict(os.environ),
        "umask": umask(),
        "numba threads": numba.get_num_threads(),
        "pools": sorted((p["user_api"], p["filepath"], p["num_threads"]) for p in threadpool_info()
                        if p["user_api"] == "blas"),
        "mapped apart": mapped_apart(),
    }

os.umask(0o027)
before = {k: v for k, v in state().items() if k != "pools"}
import structboost as sb
from structboost.datasets import make_hmm_sequences
pools = state()["pools"]  # the libraries structboost's imports loaded are in both
before["pools"] = pools

X, y, lengths = make_hmm_sequences(60, length=(5, 15), random_state=0)

class Stop(xgboost.callback.TrainingCallback):
    def __init__(self, error):
        self.error = error
    def after_iteration(self, model, epoch, evals_log):
        if epoch == 1:
            raise self.error
        return False

def fit(**kwargs):
    return sb.XGBCRFClassifier(n_estimators=4, max_depth=2, **kwargs).fit(
        X, y, lengths=lengths, verbose=False)

changed = {}

def check(step):
    after = state()
    changed.update({(step, k): (before[k], after[k]) for k in before if before[k] != after[k]})

clf = fit(n_jobs=2)
check("fit")
for error in (RuntimeError("mid-fit"), KeyboardInterrupt()):
    try:
        fit(n_jobs=2, callbacks=[Stop(error)])
    except (RuntimeError, KeyboardInterrupt):
        pass
    else:
        raise AssertionError("the callback did not stop the fit")
    check(type(error).__name__)
clf.predict(X, lengths=lengths)
clf.predict_proba(X, lengths=lengths)
clf.save_model("model.json")
check("predict and save")
threads = [threading.Thread(target=fit, kwargs={"n_jobs": 2}) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("two threads")
print("changed:", changed)
print("mode:", oct(os.stat("model.json").st_mode & 0o777))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc")
def test_fits_predictions_and_saves_leave_the_process_as_they_found_it(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == "changed: {}"
    assert lines[-1] == "mode: 0o640"  # 0o666 less the process's umask, never changed to read it


FORK = r"""
import multiprocessing
import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.engines.xgboost import load_state

X, y, lengths = make_hmm_sequences(1000, length=(9, 12), random_state=0)  # above SERIAL_ROWS
clf = sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=N_JOBS)
clf.fit(X, y, lengths=lengths, verbose=False)
expected = clf.predict(X, lengths=lengths).tolist()

def child(queue):
    # the engine's OpenMP cannot run threads in a child either: one thread there
    same = clf.set_params(n_jobs=1).predict(X, lengths=lengths).tolist() == expected
    # numba's kernels on every thread they have (prange) run serial in a forked child
    margins = clf.get_booster().inplace_predict(X, predict_type="margin")
    t = load_state(clf.get_booster())[2]
    marginals = sb.inference.forward_backward(margins, lengths, t.transitions, t.start, t.end)[1]
    queue.put(same and marginals.shape == margins.shape)

context = multiprocessing.get_context("fork")
queue = context.Queue()
process = context.Process(target=child, args=(queue,))
process.start()
process.join(120)
print("child:", process.exitcode, queue.get(timeout=10) if process.exitcode == 0 else None)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks")
@pytest.mark.parametrize("n_jobs", [None, 2])
def test_a_forked_child_predicts_after_the_parent_fitted_and_predicted_large_batches(
    tmp_path, n_jobs
):
    script = FORK.replace("N_JOBS", repr(n_jobs))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "child: 0 True"
