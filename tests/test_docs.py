"""Every documented line runs: README's and the docs pages' code blocks.

Each ```python block runs as pasted, in a fresh namespace and an empty
folder of its own: a block that leans on a name from another block fails.
All Python blocks run in one fresh interpreter (so the imports are paid
once), started with ``-c`` as pasted code would be (Dask's worker
processes then do not re-run a script). A block that asks for
``device="cuda"`` must, without a usable GPU, stop with the message that
says what to install. Each ```bash block runs in an empty folder with
``structboost`` being this checkout's command; its install commands are
checked instead of run (the distribution name and each extra must be
pyproject's), and README's test command must be the one ``.ci/run`` runs.
"""

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").rglob("*.md") if not {"_build", "generated"} & set(p.parts)
)
FENCE = re.compile(r"^```(\w+)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INSTALL = re.compile(r"^(?:python3? -m )?pip install\b")
TEST_COMMAND = re.compile(r"^(?:python3? -m )?pytest\b")


def code_blocks(language):
    """``(page:line, code)`` of every fenced block in ``language``, in page order."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return found


PYTHON_BLOCKS = code_blocks("python")
BASH_BLOCKS = code_blocks("bash")


def _environment(tmp_path):
    """This checkout first on the import path, and a ``structboost`` command running it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    command = bin_dir / "structboost"
    command.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m structboost.cli "$@"\n')
    command.chmod(command.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


RUNNER = r"""
import json, os, sys, tempfile, traceback
results = {}
for key, code in json.load(sys.stdin):
    os.chdir(tempfile.mkdtemp(prefix="structboost-doc-"))
    try:
        exec(compile(code, key, "exec"), {"__name__": "__main__"})
        results[key] = None
    except BaseException as err:
        results[key] = [type(err).__name__, str(err), traceback.format_exc()]
from numba import cuda
print("\n@@" + json.dumps({"results": results, "gpu": cuda.is_available()}))
"""


@pytest.fixture(scope="module")
def python_results(tmp_path_factory):
    """Run every Python block once, in one interpreter; their outcomes by key."""
    tmp_path = tmp_path_factory.mktemp("python-blocks")
    done = subprocess.run(
        [sys.executable, "-c", RUNNER], input=json.dumps(PYTHON_BLOCKS), capture_output=True,
        text=True, env=_environment(tmp_path), cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.rsplit("\n@@", 1)[1])


@pytest.mark.parametrize("key, code", PYTHON_BLOCKS, ids=[k for k, _ in PYTHON_BLOCKS])
def test_python_block_runs_as_pasted(key, code, python_results):
    outcome = python_results["results"][key]
    if 'device="cuda"' in code and not python_results["gpu"]:
        assert outcome is not None and outcome[0] == "ValueError", outcome
        assert 'pip install "structboost-crf[gpu]"' in outcome[1]
        return
    assert outcome is None, outcome and outcome[2]


def _install_targets(command):
    """``(distribution, extras)`` of each requirement a ``pip install`` line names."""
    targets = []
    for word in shlex.split(command)[1:]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\[([^\]]*)\]", word)
        if match:
            targets.append((match.group(1), {e.strip() for e in match.group(2).split(",")}))
    return targets


def _runnable(code):
    """The block with its install and test commands checked and taken out."""
    lines, heredoc = [], None
    for line in code.splitlines():
        if heredoc is not None:
            lines.append(line)
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        here = re.search(r"<<-?\s*'?(\w+)'?", line)
        heredoc = here.group(1) if here else None
        kept = []
        for part in (p.strip() for p in line.split("&&")):
            if INSTALL.match(part):
                targets = _install_targets(part)
                assert targets, f"an install command names no extras: {part}"
                for name, extras in targets:
                    assert name in (PYPROJECT["name"], "."), part
                    assert extras <= set(PYPROJECT["optional-dependencies"]), part
            elif TEST_COMMAND.match(part):
                ci = (ROOT / ".ci" / "run").read_text()
                assert line.strip() in ci, f".ci/run must run README's test command: {line}"
            elif part:
                kept.append(part)
        if kept:
            lines.append(" && ".join(kept))
    return "\n".join(lines)


_SHELL_RUNS = {}  # script -> CompletedProcess: a command shown on two pages runs once


@pytest.mark.parametrize("key, code", BASH_BLOCKS, ids=[k for k, _ in BASH_BLOCKS])
def test_shell_block_runs_as_pasted(key, code, tmp_path):
    script = _runnable(code)
    if not script.strip():
        return  # install commands only: checked above
    if script not in _SHELL_RUNS:
        work = tmp_path / "work"
        work.mkdir()
        _SHELL_RUNS[script] = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
            env=_environment(tmp_path), cwd=work, timeout=600,
        )  # fmt: skip
    done = _SHELL_RUNS[script]
    assert done.returncode == 0, f"{key}\n{script}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_every_page_has_been_searched():
    names = {k.split(":")[0] for k, _ in PYTHON_BLOCKS + BASH_BLOCKS}
    assert "README.md" in names and any(n.startswith("docs/user-guide/") for n in names)
