"""The ``structboost`` command: version, logging, progress, extras, flags in errors."""

import argparse
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import pytest

import structboost as sb
from structboost import _compile_log
from structboost.cli import build_parser, main


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"structboost {sb.__version__}"


def test_demo_logs_plain_lines_off_a_terminal_and_writes_where_told(tmp_path, capsys):
    args = ["demo", "--sequences", "20", "--rounds", "5", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "\r" not in captured.out
    assert "round    5/5" in captured.err  # progress, through logging, on stderr
    assert "token acc" in captured.out  # the results table, on stdout
    assert (tmp_path / "out" / "demo_training_nll.png").is_file()


def test_demo_defaults_to_a_temporary_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--sequences", "20", "--rounds", "2"]) == 0
    assert not list(tmp_path.iterdir())  # nothing in the current directory
    assert "structboost-demo-" in capsys.readouterr().out


def test_demo_without_matplotlib_fails_before_training(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )  # fmt: skip
    with pytest.raises(SystemExit):
        main(["demo"])
    captured = capsys.readouterr()
    assert 'pip install "structboost-crf[plot]"' in captured.err
    assert "round" not in captured.err  # no training happened


def test_errors_name_the_flags(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--train", str(tmp_path / "none.txt"), "--model", "m.json"])
    assert f"--train {tmp_path / 'none.txt'}: no such file" in capsys.readouterr().err


def test_compile_is_announced_once_and_the_outermost_call_reports_its_wait(caplog, monkeypatch):
    monkeypatch.setattr(_compile_log.CLOCK, "announced", True)  # the package's: said already
    clock = _compile_log.CompileClock()
    monkeypatch.setattr(_compile_log, "CLOCK", clock)
    numba.core.event.register("numba:compile", clock)

    def probe(x):
        return x + 1

    probe.__module__ = "structboost.probe"  # counted as a structboost kernel
    kernel = numba.njit(probe)

    @_compile_log.reports("inner")
    def inner(x):
        return kernel(x)

    @_compile_log.reports("outer")
    def outer():
        return inner(1) + inner(2.0)  # two signatures, two compiles

    try:
        with caplog.at_level(logging.INFO, logger="structboost"):
            outer()
            outer()  # compiled already: no line
    finally:
        numba.core.event.unregister("numba:compile", clock)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("numba is compiling structboost's kernels" in line for line in lines) == 1
    waits = [line for line in lines if "waited" in line]
    assert len(waits) == 1 and waits[0].startswith("outer waited")
    assert clock.seconds > 0 and f"{clock.seconds:.1f} s" in waits[0]


def _subcommands():
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_help_shows_its_defaults(name, capsys):
    parser = _subcommands()[name]
    with pytest.raises(SystemExit):
        main([name, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    shown = [
        a for a in parser._actions
        if a.option_strings and a.default not in (None, False, argparse.SUPPRESS)
    ]  # fmt: skip
    for action in shown:
        assert f"{action.option_strings[0]}" in text
        assert f"(default: {action.default})" in text, action.option_strings


@pytest.mark.parametrize(
    "argv, level",
    [
        (["warmup"], "INFO"),
        (["--log-level", "WARNING", "warmup"], "WARNING"),
        (["warmup", "--log-level", "ERROR"], "ERROR"),
        (["--log-level", "WARNING", "demo", "--log-level", "DEBUG"], "DEBUG"),
    ],
)
def test_global_options_go_before_or_after_the_subcommand(argv, level):
    assert build_parser().parse_args(argv).log_level == level


def _run(code, env=None, cwd=None):
    """Run ``code`` in a fresh interpreter; return its CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=600,
    )  # fmt: skip


WARMUP_COVERS_DEFAULTS = """
import sys
from numba.core.dispatcher import Dispatcher
import structboost as sb
from structboost.cli import main
from structboost.datasets import make_hmm_sequences

def loaded():
    return {
        f"{name}.{attr}": set(obj.signatures)
        for name, module in list(sys.modules.items()) if name.startswith("structboost")
        for attr, obj in vars(module).items() if isinstance(obj, Dispatcher)
    }

assert main(["warmup"]) == 0
before = loaded()
for n in (40, 2000):  # serial and parallel (prange) batches
    X, y, lengths = make_hmm_sequences(n_sequences=n, random_state=1)
    for engine in (sb.XGBCRFClassifier, sb.LGBMCRFClassifier):
        clf = engine(n_estimators=2).fit(X, y, lengths=lengths)
        clf.predict(X, lengths=lengths)
        clf.predict_proba(X, lengths=lengths)
after = loaded()
new = {name: after[name] - before.get(name, set()) for name in after}
print({name: sorted(map(str, sigs)) for name, sigs in new.items() if sigs})
"""


def test_warmup_loads_every_kernel_a_default_fit_and_predict_use():
    # In a fresh process: the kernels (and signatures) it holds after
    # `structboost warmup` must be all that a default fit and predict call;
    # loaded from the on-disk cache or compiled, the set is the same.
    done = _run(WARMUP_COVERS_DEFAULTS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kernels ready in" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "{}"


def test_a_gpu_request_without_a_gpu_fails_at_once_saying_what_to_install():
    code = """
import structboost as sb
from structboost.datasets import make_hmm_sequences
X, y, lengths = make_hmm_sequences(n_sequences=10, random_state=0)
clf = sb.XGBCRFClassifier(n_estimators=3, device="cuda")
try:
    clf.fit(X, y, lengths=lengths)
except ValueError as err:
    print(err)
"""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    probe = _run("from numba import cuda; print(cuda.is_available())", env=env)
    if probe.stdout.strip() == "True":
        pytest.skip("a CUDA GPU is usable here")
    done = _run(code, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'pip install "structboost-crf[gpu]"' in done.stdout
    assert 'device="cpu"' in done.stdout


def test_import_works_on_a_read_only_install_with_no_writable_home(tmp_path):
    # numba can cache neither next to the package (each __pycache__ is a file
    # here, and the folders read-only) nor in the home folder (a path under a
    # file): structboost compiles in the process, says so once, and leaves
    # the environment as it found it.
    package = Path(sb.__file__).parent
    copy = tmp_path / "site" / "structboost"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [copy, *(p for p in copy.rglob("*") if p.is_dir())]:
        (folder / "__pycache__").write_text("")
        folder.chmod(0o555)
    (tmp_path / "home").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home" / "user"), PYTHONPATH=str(tmp_path / "site"))
    code = """
import logging, os
logging.basicConfig(level=logging.INFO, format="%(message)s")
import numpy as np
environ = dict(os.environ)
import structboost
from structboost import _config
from structboost.inference import viterbi
print(structboost.__file__)
print(_config.CACHE, dict(os.environ) == environ)
print(viterbi(np.zeros((3, 2)), [3], np.zeros((2, 2)), np.zeros(2), np.zeros(2)))
"""
    try:
        done = _run(code, env=env, cwd=tmp_path)
    finally:
        for folder in [copy, *(p for p in copy.rglob("*") if p.is_dir())]:
            folder.chmod(0o755)
    assert done.returncode == 0, done.stderr[-3000:]
    path, cached, labels = done.stdout.strip().splitlines()[-3:]
    assert path == str(copy / "__init__.py")
    assert cached == "False True"
    assert labels == "[0 0 0]"
    notes = [line for line in done.stderr.splitlines() if "numba is compiling" in line]
    assert len(notes) == 1 and "NUMBA_CACHE_DIR" in notes[0]


def test_train_defaults_are_the_librarys():
    """The objective's flags default to ObjectiveSpec's; the engine's to the estimator's."""
    import inspect

    from structboost.estimators.chain import XGBCRFClassifier
    from structboost.objectives.params import DEFAULTS

    args = build_parser().parse_args(
        ["train", "--train", "t.txt", "--model", "m.json", "--hessian-bound", "2.5"]
    )
    for name in ("mode", "step", "transition_solver", "reg_transitions"):
        assert getattr(args, name) == DEFAULTS[name]
    assert args.hessian_bound == 2.5
    assert args.learning_rate is None and args.max_depth is None  # the estimator's own
    assert inspect.signature(XGBCRFClassifier).parameters["hessian_bound"].default == "mixing"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--train", "t", "--model", "m", "--transitions", "lbfgs"])
