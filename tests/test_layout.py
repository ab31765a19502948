"""The package's imports go one way: kernels -> solvers -> objectives -> engines -> estimators."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import structboost

ROOT = Path(structboost.__file__).resolve().parent

# Layer of each top-level module or subpackage; a module may import only its
# own layer or lower ones.
LAYERS = {
    "_config": 0,
    "_extras": 0,
    "_compile_log": 0,
    "_typing": 0,
    "_version": 0,
    "sequences": 0,
    "text": 1,
    "features": 1,
    "datasets": 1,
    "metrics": 1,
    "inference": 1,
    "transitions": 2,
    "objectives": 3,
    "engines": 4,
    "estimators": 5,
    "tagging": 6,
    "cli": 6,
    "warmup": 6,
    "__init__": 7,
}
ENGINE_PACKAGES = ("xgboost", "lightgbm", "sklearn")


def _modules():
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _top(path):
    """The top-level unit (module or subpackage) a file belongs to."""
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path):
    """``(unit, lineno)`` of every package-internal import, and the external roots."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = rel[:-1]
    internal, external = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)]
            parts = list(base) + (node.module.split(".") if node.module else [])
            names = [a.name if a.name in LAYERS else "__init__" for a in node.names]
            units = [parts[0]] if parts else names
            internal.extend((unit, node.lineno) for unit in units)
        elif isinstance(node, ast.ImportFrom) and node.module:
            external.append(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            external.extend(alias.name.split(".")[0] for alias in node.names)
    return internal, external


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path):
    own = LAYERS[_top(path)]
    internal, _ = _imports(path)
    upward = [(unit, line) for unit, line in internal if LAYERS.get(unit, 0) > own]
    assert not upward, f"{path.name} imports a higher layer: {upward}"


def test_kernels_know_nothing_of_the_engines():
    for path in ROOT.rglob("_*.py"):
        if path.name in ("__init__.py",) or "__pycache__" in path.parts:
            continue
        _, external = _imports(path)
        assert not set(external) & set(ENGINE_PACKAGES), path


def test_every_unit_has_a_layer():
    assert {_top(p) for p in _modules()} <= set(LAYERS)


def test_importing_structboost_imports_no_numba_cuda():
    """The GPU path is optional: importing the package and its engines loads no ``numba.cuda``."""
    code = (
        "import sys, structboost, structboost.engines.xgboost, structboost.estimators; "
        "print(sorted(m for m in sys.modules if m.startswith('numba.cuda')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
