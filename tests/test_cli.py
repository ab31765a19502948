"""The ``structboost`` command: version, logging, progress, extras, flags in errors."""

import importlib.util
import logging

import numba
import pytest

import structboost as sb
from structboost import _compile_log
from structboost.cli import main


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


def test_first_compile_is_logged_once_with_its_time(caplog, monkeypatch):
    monkeypatch.setattr(_compile_log.LISTENER, "seconds", 0.0)  # the package's: done already
    listener = _compile_log.FirstCompile()
    numba.core.event.register("numba:compile", listener)

    def probe(x):
        return x + 1

    probe.__module__ = "structboost.probe"  # counted as a structboost kernel
    try:
        with caplog.at_level(logging.INFO, logger="structboost"):
            numba.njit(probe)(1)
            numba.njit(probe)(2.0)
    finally:
        numba.core.event.unregister("numba:compile", listener)
    lines = [r.getMessage() for r in caplog.records if "compiled structboost" in r.getMessage()]
    assert len(lines) == 1 and listener.seconds is not None
    assert f"{listener.seconds:.1f} s" in lines[0]
