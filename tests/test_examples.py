"""Every script in ``examples/`` runs, as a user would start it, and is on the docs site.

Each runs in a fresh interpreter from an empty folder, with this checkout first
on the import path and its synthetic data (no ``--data-dir``): the Dask and GPU
examples skip themselves cleanly where their extra or the device is missing.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PAGES = ROOT / "docs" / "examples"


def _environment():
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


def test_there_is_a_gallery():
    assert len(EXAMPLES) >= 9, [p.name for p in EXAMPLES]


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True,
        env=_environment(), cwd=tmp_path, timeout=600,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    failed = f"{script.name} failed after {seconds:.1f} s:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, failed
    print(f"{script.name}: {seconds:.1f} s")


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_is_documented_and_on_the_site(script):
    text = script.read_text(encoding="utf-8")
    assert text.startswith('"""'), f"{script.name} has no docstring saying what it shows"
    page = PAGES / f"{script.stem}.md"
    assert page.is_file(), f"{script.name} has no page in docs/examples/"
    assert f"../../examples/{script.name}" in page.read_text(encoding="utf-8")
    assert script.stem in (PAGES / "index.md").read_text(encoding="utf-8")
