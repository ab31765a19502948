"""The package's imports go one way: kernels -> bounds -> solvers -> objectives -> engines -> estimators."""

import ast
import re
import importlib
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
    "_io": 0,
    "_compat": 0,
    "sequences": 0,
    "text": 1,
    "features": 1,
    "datasets": 1,
    "metrics": 1,
    "inference": 1,
    "majorize": 2,
    "transitions": 3,
    "objectives": 4,
    "engines": 5,
    "estimators": 6,
    "tagging": 7,
    "cli": 7,
    "warmup": 7,
    "xgboost": 7,
    "lightgbm": 7,
    "presets": 7,
    "__init__": 8,
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


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner(parts):
    """The package that owns ``parts[-1]``: the innermost package among the parts before it."""
    owner = parts[:-1]
    while owner and not ROOT.joinpath(*owner).is_dir():
        owner = owner[:-1]
    return owner


def _private_imports(source, rel):
    """Private names of other packages that a module uses.

    Parameters
    ----------
    source : str
        The module's text.
    rel : tuple of str
        Its path inside the package without the suffix, e.g. ``("objectives", "tree")``.

    Returns
    -------
    list of (str, int)
        ``("inference._tree", lineno)``: each private module or name
        (``B._x``, ``B._module``, ``module._helper`` of a bound module)
        whose owning package is not the importer's own package or above it.
    """
    package = rel[:-1]
    found = []

    def check(parts, lineno):
        for i, part in enumerate(parts):
            if _private(part):
                owner = _owner(parts[: i + 1])
                if package[: len(owner)] != owner:
                    found.append((".".join(parts[: i + 1]), lineno))
                return

    modules = {}  # names bound to package modules -> their parts
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)]
            mod = tuple(base) + (tuple(node.module.split(".")) if node.module else ())
            for alias in node.names:
                check(mod + (alias.name,), node.lineno)
                if ROOT.joinpath(*mod, alias.name).with_suffix(".py").exists() or ROOT.joinpath(
                    *mod, alias.name
                ).is_dir():
                    modules[alias.asname or alias.name] = mod + (alias.name,)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("structboost"):
            mod = tuple(node.module.split("."))[1:]
            for alias in node.names:
                check(mod + (alias.name,), node.lineno)
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            check(modules[node.value.id] + (node.attr,), node.lineno)
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_private_names_stay_in_their_package(path):
    """A module may use ``B._x`` / ``B._module`` only inside ``B`` (or when ``B`` contains it)."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    found = _private_imports(path.read_text(), rel)
    assert not found, f"{path.name} uses private names of another package: {found}"


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        (("objectives", "tree"), "from ..inference import _tree", ["inference._tree"]),
        (("objectives", "tree"), "from ..inference._tree import viterbi", ["inference._tree"]),
        (("engines", "x"), "from ..inference.tree import _check_parents", ["inference.tree._check_parents"]),
        (("estimators", "latent"), "from .. import majorize\nmajorize._running(1)", ["majorize._running"]),
        (("estimators", "dask"), "from .chain import _CRFClassifier", []),
        (("objectives", "gpu"), "from .base import _BLAS", []),
        (("inference", "chain"), "from .. import _config\nfrom . import _chain\n_chain.x", []),
        (("transitions", "chain"), "from .._config import CACHE", []),
        (("cli",), "from ._version import __version__", []),
    ],
)
def test_the_private_name_check_sees_what_it_should(rel, source, expected):
    assert [name for name, _ in _private_imports(source, rel)] == expected


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path):
    own = LAYERS[_top(path)]
    internal, _ = _imports(path)
    upward = [(unit, line) for unit, line in internal if LAYERS.get(unit, 0) > own]
    assert not upward, f"{path.name} imports a higher layer: {upward}"


def test_kernels_know_nothing_of_the_engines():
    for path in ROOT.rglob("_*.py"):
        # _compat.py holds the engines' version shims: no kernel, it must read the engines.
        if path.name in ("__init__.py", "_compat.py") or "__pycache__" in path.parts:
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


# The public contract: names users and outside checks call (docs/api.md).
CONTRACT = (
    "LGBMCRFClassifier",
    "XGBCRFClassifier",
    "crf_objective",
    "inference",
    "predict",
    "predict_marginals",
    "sequence_log_likelihood",
    "xgb_params",
)


@pytest.mark.parametrize(
    "module", ["structboost", "structboost.xgboost", "structboost.lightgbm", "structboost.inference",
               "structboost.majorize"],
)
def test_namespaces_export_sorted_names_that_exist(module):
    mod = importlib.import_module(module)
    assert mod.__all__ == sorted(mod.__all__)
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_the_top_level_is_the_contract_and_little_more():
    assert set(CONTRACT) <= set(structboost.__all__)
    assert len(structboost.__all__) <= 16
    for name in ("forward_backward", "viterbi", "gamma", "tree_forward_backward", "tree_viterbi"):
        assert callable(getattr(structboost.inference, name))


def _without(module):
    """Python code that makes every later import of ``module`` fail, as if uninstalled."""
    return f"""
import sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r} or name.startswith({module + "."!r}):
            raise ImportError("{module} is blocked")
        return None

sys.meta_path.insert(0, Blocked())
"""


def test_star_import_works_without_lightgbm():
    """``from structboost import *`` with LightGBM uninstalled (an import of it fails)."""
    code = _without("lightgbm") + """
from structboost import *
import structboost
names = dir()
missing = [n for n in structboost.__all__ if n not in names]
assert not missing, missing
assert "lightgbm" not in sys.modules
try:
    import structboost.lightgbm
except ImportError as err:
    print("refused:", err)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout


LAYOUT = ROOT.parent / "docs" / "layout.md"


def _listed():
    """``{folder: text}`` of the package tree in docs/layout.md ("" for the top level)."""
    block = LAYOUT.read_text().split("```")[1]
    sections, folder = {"": ""}, ""
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        entry = line.strip().split(" ")[0]
        if indent == 2 and entry.endswith("/"):
            folder = entry.rstrip("/")
            sections[folder] = ""
        elif indent == 2:
            folder = ""
        sections[folder] = sections.get(folder, "") + " " + line
    return sections


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_layout_page_gives_every_module_its_responsibility(path):
    rel = path.relative_to(ROOT)
    folder = rel.parent.as_posix() if len(rel.parts) > 1 else ""
    sections = _listed()
    assert folder in sections, f"docs/layout.md does not list the folder {folder}/"
    if rel.name == "__init__.py" and folder:
        return  # the folder's own line describes it
    words = re.findall(r"[\w.]+\.py", sections[folder])
    assert rel.name in words, f"docs/layout.md does not list {rel} under {folder or 'the top'}"


def test_without_xgboost_the_lightgbm_estimators_import_and_fit():
    """``pip install structboost-crf`` (no extra) brings LightGBM but not XGBoost."""
    code = _without("xgboost") + """
from structboost import *
import structboost
from structboost.datasets import make_hmm_sequences

X, y, lengths = make_hmm_sequences(40, random_state=0)
clf = LGBMCRFClassifier(n_estimators=3, min_child_samples=5).fit(X, y, lengths=lengths)
assert (clf.predict(X, lengths=lengths) >= 0).all()
assert "xgboost" not in sys.modules
assert "XGBCRFClassifier" not in structboost.__all__
try:
    structboost.XGBCRFClassifier
except ImportError as err:
    print("refused:", err)
try:
    from structboost.cli import main
    main(["--help"])
except SystemExit as done:
    print("help:", done.code)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'refused: structboost needs XGBoost' in out.stdout and "[xgboost]" in out.stdout
    assert "help: 0" in out.stdout
