"""A seeded fuzzer of saved model files, run in subprocesses.

:func:`mutants` derives damaged copies of an estimator file written by
``save_model``: JSON-level edits anywhere in the document, including inside
the embedded XGBoost JSON and CRF state (numbers set to edge values, array
entries changed, arrays lengthened or shortened, values of another type,
keys deleted), text-level edits of the embedded LightGBM model (a number
token replaced, removed or duplicated, a line deleted or duplicated; half of
them with ``tree_sizes`` recomputed so the per-tree checks are reached), and
raw byte edits (truncation, bit flips) of the embedded model or the file.

:func:`run` loads each mutant with ``load_model`` and predicts in worker
subprocesses under a per-mutant timeout and an address-space limit
(``RLIMIT_AS``, a few hundred MB above the worker's size after imports).
Many mutants share a worker; the worker announces each mutant before it
starts, so when it dies the mutant it was on is the one that killed it, and
the rest of the batch goes on in a new worker. Outcomes:

``same``
    loads and predicts bit-identically to the original;
``changed``
    loads and predicts differently (a valid model with other numbers: a
    leaf value, a threshold, a transition score changed);
``value_error``
    a ``ValueError`` naming the file (what damaged files must give; the
    outcome string goes on with its message);
``predict_error``
    loads (a valid model), but predicting raises a ``ValueError`` (a leaf
    value so large that the margins are beyond what structboost scores);
``unclear``
    a ``ValueError`` at load that does not name the file;
``other_error``
    any other exception;
``crash``, ``timeout``, ``memory``
    the worker died, hung, or ran out of the address-space limit.

The last four are failures. ``tests/test_fuzz_models.py`` runs a few hundred
mutants; ``benchmarks/fuzz_models.py`` runs thousands.
"""

import copy
import json
import os
import random
import re
import select
import subprocess
import sys
import time
from pathlib import Path

FAILURES = ("unclear", "other_error", "crash", "timeout", "memory")
OUTCOMES = ("same", "changed", "value_error", "predict_error", *FAILURES)

# Numbers that break index checks, sizes and parsers.
_EDGE_INTS = [0, -1, 1, 2, 3, 7, 23, 24, 25, 255, 65535, 2**31 - 1, 2**31, 2**32, -(2**31),
              10**6, 10**9, 2**63, -(2**63) - 1]  # fmt: skip
_EDGE_FLOATS = [0.0, -0.0, 1e-45, 1e308, -1e308, 0.5, float("nan"), float("inf"), float("-inf")]
_ODD_VALUES = [None, True, "x", "1", "", [], {}, [1], {"a": 1}, 1.5]


# -- JSON mutations -------------------------------------------------------------
def _paths(node, prefix=()):
    """Every path (tuple of keys / indices) into a JSON value, embedded JSON included."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _decode_embedded(node):
    """Parse string values that hold a JSON object (XGBoost's model, the CRF state) in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and value[:1] in "{[" and key != "lgb_model":
                try:
                    node[key] = {"__embedded__": _decode_embedded(json.loads(value))}
                except json.JSONDecodeError:
                    pass
            else:
                _decode_embedded(value)
    elif isinstance(node, list):
        for value in node:
            _decode_embedded(value)
    return node


def _encode_embedded(node):
    if isinstance(node, dict):
        if set(node) == {"__embedded__"}:
            return json.dumps(_encode_embedded(node["__embedded__"]))
        return {key: _encode_embedded(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_encode_embedded(value) for value in node]
    return node


def _mutate_json(doc, rng):
    """One random structural edit of the decoded document (in place); a description."""
    paths = [p for p in _paths(doc) if p and p[-1] != "__embedded__"]
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    value = parent[key]
    ops = ["type", "delete"]
    if isinstance(value, bool):
        ops.append("flip")
    elif isinstance(value, (int, float)):
        ops += ["edge", "edge", "nudge"]
    elif isinstance(value, list):
        ops += ["shorten", "lengthen", "entry"] if value else ["lengthen"]
    elif isinstance(value, str):
        ops += ["digits"] if re.fullmatch(r"-?[0-9]+", value) else ["text"]
    op = rng.choice(ops)
    where = "/".join(map(str, path))
    if op == "delete":
        del parent[key]
    elif op == "type":
        parent[key] = copy.deepcopy(rng.choice(_ODD_VALUES))
    elif op == "flip":
        parent[key] = not value
    elif op == "edge":
        parent[key] = rng.choice(_EDGE_INTS if isinstance(value, int) else _EDGE_FLOATS)
    elif op == "nudge":
        parent[key] = value + rng.choice([-1, 1]) * (1 if isinstance(value, int) else 0.25)
    elif op == "shorten":
        del value[rng.randrange(len(value)) :]
    elif op == "lengthen":
        value.append(copy.deepcopy(rng.choice(value) if value else 0))
    elif op == "entry":
        i = rng.randrange(len(value))
        pool = _EDGE_INTS if isinstance(value[i], int) else _EDGE_FLOATS + _ODD_VALUES
        value[i] = copy.deepcopy(rng.choice(pool))
    elif op == "digits":  # XGBoost stores counts as decimal strings
        parent[key] = str(rng.choice(_EDGE_INTS))
    else:
        parent[key] = rng.choice(["", value[: len(value) // 2], value + "x", "gblinear", "dart"])
    return f"json {op} {where}"


# -- LightGBM text mutations ----------------------------------------------------------
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")
_TEXT_EDGES = ["0", "-1", "1", "-2", "2147483647", "2147483648", "-2147483648", "4294967296",
               "99999999999999999999", "1e400", "nan", "inf", "-inf", "0.5", "x", ""]  # fmt: skip


def fix_tree_sizes(text):
    """LightGBM model text with ``tree_sizes`` recomputed from the trees it holds."""
    start, end = text.find("\nTree="), text.find("\nend of trees\n")
    if start < 0 or end < start or "\ntree_sizes=" not in text[:start]:
        return text
    body = text[start + 1 : end + 1]
    blocks = re.split(r"(?m)^(?=Tree=)", body)
    sizes = " ".join(str(len(b.encode("utf-8"))) for b in blocks if b)
    return re.sub(r"(?m)^tree_sizes=.*$", "tree_sizes=" + sizes, text, count=1)


def _mutate_text(text, rng):
    """One random edit of LightGBM's model text; ``tree_sizes`` fixed half of the time."""
    end = text.find("\nend of trees\n")
    region = text[: end if end > 0 else len(text)]
    lines = region.split("\n")
    i = rng.randrange(len(lines))
    op = rng.choice(["token", "token", "token", "drop_token", "dup_token", "drop_line",
                     "dup_line", "key"])  # fmt: skip
    line = lines[i]
    numbers = list(_NUMBER.finditer(line))
    if op.endswith("token") and numbers:
        m = rng.choice(numbers)
        new = {"token": rng.choice(_TEXT_EDGES), "drop_token": "",
               "dup_token": m.group() + " " + m.group()}[op]  # fmt: skip
        lines[i] = line[: m.start()] + new + line[m.end() :]
    elif op == "drop_line":
        del lines[i]
    elif op == "dup_line":
        lines.insert(i, line)
    else:
        lines[i] = line.replace("=", "_x=", 1) if "=" in line else line + "="
    out = "\n".join(lines) + text[len(region) :]
    fixed = rng.random() < 0.5
    return (fix_tree_sizes(out) if fixed else out), f"text {op} line {i}{' fixed' if fixed else ''}"


def _mutate_bytes(data, rng):
    """Truncation or bit flips of a byte string."""
    if rng.random() < 0.5:
        cut = rng.randrange(len(data))
        return data[:cut], f"truncate at {cut}"
    data = bytearray(data)
    flips = rng.randint(1, 8)
    for _ in range(flips):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data), f"{flips} bit flips"


def mutate(original, rng):
    """One mutant of a saved estimator file's bytes; ``(bytes, description)``."""
    doc = json.loads(original)
    engine = doc["engine"]
    roll = rng.random()
    if roll < 0.15:
        data, what = _mutate_bytes(original, rng)
        return data, "file " + what
    if roll < 0.3:  # raw edits of the embedded engine model
        key = "lgb_model" if "lgb_model" in engine else "xgboost_json"
        data, what = _mutate_bytes(engine[key].encode("utf-8"), rng)
        engine[key] = data.decode("utf-8", errors="replace")
        return json.dumps(doc).encode("utf-8"), f"{key} {what}"
    if "lgb_model" in engine and roll < 0.75:
        engine["lgb_model"], what = _mutate_text(engine["lgb_model"], rng)
        return json.dumps(doc).encode("utf-8"), what
    decoded = _decode_embedded(doc)
    what = _mutate_json(decoded, rng)
    for _ in range(rng.random() < 0.2):  # sometimes a second edit
        what += "; " + _mutate_json(decoded, rng)
    return json.dumps(_encode_embedded(decoded)).encode("utf-8"), what


def mutants(original, n, seed):
    """``n`` mutants ``(bytes, description)`` of ``original`` bytes, seeded."""
    rng = random.Random(seed)
    return [mutate(original, rng) for _ in range(n)]


# -- running them ------------------------------------------------------------------
_WORKER = r"""
import json, os, resource, sys, numpy as np, warnings
warnings.simplefilter("ignore")
# The engines print to standard output: the protocol gets its own copy of it.
channel = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
import importlib
sys.path.insert(0, sys.argv[5])
module, _, name = sys.argv[2].rpartition(".")
cls = getattr(importlib.import_module(module or "structboost"), name)
data = np.load(sys.argv[1]); X, L = data["X"], data["L"]
ref_clf = cls().load_model(sys.argv[3])
ref = ref_clf.predict(X, lengths=L), ref_clf.predict_marginals(X, lengths=L)
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
limit = vm + int(sys.argv[4]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print("READY", file=channel)
for line in sys.stdin:
    path = line.strip()
    print("START", path, file=channel)
    stage = "load"
    try:
        clf = cls().load_model(path)
        stage = "predict"
        labels, marginals = clf.predict(X, lengths=L), clf.predict_marginals(X, lengths=L)
        same = np.array_equal(labels, ref[0]) and np.array_equal(marginals, ref[1])
        outcome = "same" if same else "changed"
    except MemoryError:
        outcome = "memory"
    except ValueError as err:
        text = str(err)
        outcome = ("memory" if "bad_alloc" in text or "emory" in text else
                   "value_error: " + text[:400] if path in text else
                   "predict_error" if stage == "predict" else "unclear: " + text[:200])
    except Exception as err:
        outcome = "other_error: " + type(err).__name__ + ": " + str(err)[:200]
    print("DONE", json.dumps(outcome), file=channel)
"""


class _Worker:
    """One worker subprocess; :meth:`ask` runs one mutant under a timeout."""

    def __init__(self, data, estimator, original, memory_mb):
        env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(data), estimator, str(original), str(memory_mb),
             str(Path(__file__).resolve().parent)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            bufsize=0, env=env,
        )  # fmt: skip
        line = self._line(120)
        if line != "READY":
            self.close()
            raise RuntimeError(f"the fuzz worker did not start (got {line!r})")

    def _line(self, timeout):
        """The next line of output, None on timeout, "" when the worker died."""
        out = self.proc.stdout
        chunks = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            byte = out.read(1)
            if not byte:
                return ""
            if byte == b"\n":
                return b"".join(chunks).decode()
            chunks.append(byte)

    def ask(self, path, timeout):
        """Outcome of one mutant file; the worker is dead afterwards for crash/timeout."""
        self.proc.stdin.write(f"{path}\n".encode())
        self.proc.stdin.flush()
        if self._line(timeout) != f"START {path}":
            return "crash"
        line = self._line(timeout)
        if line is None:
            return "timeout"
        if not line.startswith("DONE "):
            return "crash"
        return json.loads(line[5:])

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run(files, data, estimator, original, *, timeout=20.0, memory_mb=400):
    """Load and predict every mutant file; ``{path: outcome}``.

    Parameters
    ----------
    files : list of pathlib.Path
        Mutant files.
    data : pathlib.Path
        An ``.npz`` with ``X`` and ``L`` (lengths) to predict.
    estimator : str
        The estimator class: its name in ``structboost``, or ``module.Class``
        of a module importable from this folder.
    original : pathlib.Path
        The unmutated file (its predictions are the reference).
    timeout : float
        Seconds one mutant may take.
    memory_mb : int
        Address space a worker may add after its imports.

    Returns
    -------
    dict
        Path -> outcome (one of :data:`OUTCOMES`, failures with a detail).
    """
    results = {}
    worker = None
    for path in files:
        if worker is None:
            worker = _Worker(data, estimator, original, memory_mb)
        outcome = worker.ask(path, timeout)
        results[path] = outcome
        if outcome in ("crash", "timeout"):
            if outcome == "crash":
                try:
                    results[path] = f"crash: exit status {worker.proc.wait(timeout=10)}"
                except subprocess.TimeoutExpired:
                    pass
            worker.close()
            worker = None
    if worker is not None:
        worker.proc.stdin.close()
        worker.close()
    return results


class Misbehaving:
    """A stand-in estimator whose ``load_model`` crashes, hangs or allocates on request.

    It checks the harness itself: a file holding ``crash``, ``hang`` or
    ``alloc`` aborts the process, sleeps, or asks for 64 GiB; any other
    file loads and predicts zeros.
    """

    def load_model(self, path):
        text = Path(path).read_text()
        if text == "crash":
            os.abort()
        if text == "hang":
            time.sleep(3600)
        if text == "alloc":
            bytearray(2**36)
        return self

    def predict(self, X, lengths):
        import numpy as np

        return np.zeros(len(X), dtype=np.int64)

    def predict_marginals(self, X, lengths):
        import numpy as np

        return np.zeros((len(X), 2))


def tally(results):
    """Outcome -> count (failures counted under their class)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome in results.values():
        counts[outcome.split(":")[0]] += 1
    return counts


def prepare(folder, n_per_engine, seed):
    """Train tiny XGBoost and LightGBM estimators, save them and their mutants under ``folder``.

    Returns
    -------
    data : pathlib.Path
    jobs : list of (estimator name, original path, [(mutant path, description)])
    """
    import numpy as np

    import structboost as sb
    from structboost.datasets import make_hmm_sequences

    folder = Path(folder)
    X, y, L = make_hmm_sequences(30, length=(3, 8), random_state=0)
    data = folder / "data.npz"
    np.savez(data, X=X, L=L)
    estimators = {
        "XGBCRFClassifier": sb.XGBCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1),
        "LGBMCRFClassifier": sb.LGBMCRFClassifier(
            n_estimators=3, num_leaves=4, min_child_samples=2, n_jobs=1
        ),
    }
    jobs = []
    for e, (name, clf) in enumerate(estimators.items()):
        original = folder / f"{name}.json"
        clf.fit(X, y, lengths=L).save_model(original)
        made = []
        for i, (blob, what) in enumerate(mutants(original.read_bytes(), n_per_engine, seed + e)):
            path = folder / f"{name}-{i:05d}.json"
            path.write_bytes(blob)
            made.append((path, what))
        jobs.append((name, original, made))
    return data, jobs


def fuzz(folder, n_per_engine, seed=0, timeout=20.0, memory_mb=400):
    """Mutate, run and tally; ``(counts, failures)``, failures as ``(path, what, outcome)``."""
    data, jobs = prepare(folder, n_per_engine, seed)
    results, failures = {}, []
    for name, original, made in jobs:
        got = run([p for p, _ in made], data, name, original, timeout=timeout, memory_mb=memory_mb)
        results.update(got)
        failures += [(p, w, got[p]) for p, w in made if got[p].split(":")[0] in FAILURES]
    return tally(results), failures


