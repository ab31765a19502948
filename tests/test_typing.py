"""The public API carries type hints (``py.typed``), and mypy accepts the package."""

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import structboost as sb
import structboost.lightgbm as sbl
import structboost.xgboost as sbx
from structboost import inference

ROOT = Path(sb.__file__).resolve().parents[1]


def _public_callables():
    """``(name, function)`` of every public function and public method of the API."""
    found = []
    for module in (sb, sbx, sbl, inference):
        names = module.__all__
        for name in names:
            obj = getattr(module, name)
            if inspect.isfunction(inspect.unwrap(obj)):
                found.append((f"{module.__name__}.{name}", obj))
            elif inspect.isclass(obj):
                for attr, member in inspect.getmembers(obj):
                    func = inspect.unwrap(member) if callable(member) else None
                    ours = inspect.isfunction(func) and func.__module__.startswith("structboost")
                    method = ours and "." in func.__qualname__  # not a function stored on the class
                    if method and (attr == "__init__" or not attr.startswith("_")):
                        found.append((f"{name}.{attr}", member))
    return found


@pytest.mark.parametrize("name, func", _public_callables(), ids=lambda v: v if isinstance(v, str) else "")
def test_public_api_is_annotated(name, func):
    signature = inspect.signature(func)
    missing = [
        p.name for p in signature.parameters.values()
        if p.name != "self" and p.annotation is inspect.Parameter.empty
    ]  # fmt: skip
    assert not missing, f"{name}: parameters without a type hint: {missing}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return hint"


def test_package_declares_its_hints():
    assert (ROOT / "structboost" / "py.typed").is_file()


def test_mypy_accepts_the_package():
    # Configured in pyproject.toml ([tool.mypy]: the structboost package).
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
