"""Nothing is lost on write, and a loaded model is all the file's (issue 28).

Files are replaced only once the new one is complete; the CLI refuses an
output that is one of its inputs and checks the output folder before it
trains; everything ``fit`` learned round-trips through ``save_model`` /
``load_model``, and ``load_model`` leaves nothing of an earlier fit.
"""

import errno
import json
import os

import numpy as np
import pytest

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost import _io
from structboost.cli import main
from test_tagging import write_conll


@pytest.fixture(scope="module")
def data():
    X, y, L = make_hmm_sequences(40, length=(3, 8), random_state=0)
    return X, y, L


def _full_disk(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_save_keeps_the_previous_model(data, tmp_path, monkeypatch):
    X, y, L = data
    path = tmp_path / "model.json"
    first = sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1).fit(X, y, lengths=L)
    first.save_model(path)
    before = path.read_bytes()
    second = sb.XGBCRFClassifier(n_estimators=4, max_depth=3, n_jobs=1).fit(X, y, lengths=L)
    monkeypatch.setattr(_io.os, "fsync", _full_disk)
    with pytest.raises(OSError, match="No space"):
        second.save_model(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]  # no temporary left
    monkeypatch.undo()
    second.save_model(path)
    assert path.read_bytes() != before
    np.testing.assert_array_equal(
        sb.XGBCRFClassifier().load_model(path).predict(X, lengths=L), second.predict(X, lengths=L)
    )


def test_atomic_open_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    _io.atomic_write_text(path, "new")
    assert path.read_text() == "new" and (os.stat(path).st_mode & 0o777) == 0o640
    with pytest.raises(RuntimeError), _io.atomic_open(path) as handle:
        handle.write("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "new" and len(list(tmp_path.iterdir())) == 1


@pytest.fixture(scope="module")
def conll(tmp_path_factory):
    root = tmp_path_factory.mktemp("conll")
    return write_conll(root / "train.txt", 60, 0)


def _train(train, model, *extra):
    return main(["train", "--train", str(train), "--model", str(model), "--rounds", "3",
                 "--max-depth", "2", "--threads", "1", *extra])  # fmt: skip


def test_cli_refuses_outputs_that_are_inputs(conll, tmp_path, capsys):
    before = conll.read_bytes()
    with pytest.raises(SystemExit):
        _train(conll, conll)
    assert "--model" in capsys.readouterr().err and conll.read_bytes() == before
    # the same file under another name (a symbolic link) is refused too
    link = tmp_path / "link.txt"
    link.symlink_to(conll)
    with pytest.raises(SystemExit):
        _train(conll, link)
    assert "also the --train file" in capsys.readouterr().err and conll.read_bytes() == before
    model = tmp_path / "m.json"
    assert _train(conll, model) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["predict", "--model", str(model), "--input", str(conll), "--output", str(conll)])
    assert "also the --input file" in capsys.readouterr().err and conll.read_bytes() == before
    saved = model.read_bytes()
    with pytest.raises(SystemExit):
        main(["predict", "--model", str(model), "--input", str(conll), "--output", str(model)])
    assert "also the --model file" in capsys.readouterr().err and model.read_bytes() == saved


def test_cli_checks_the_model_folder_before_training(conll, tmp_path, capsys, monkeypatch):
    import structboost.tagging as tagging

    def never(*args, **kwargs):
        raise AssertionError("trained although the model could not be written")

    monkeypatch.setattr(tagging.ChunkTagger, "fit", never)
    with pytest.raises(SystemExit):
        _train(conll, tmp_path / "missing" / "m.json")
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _train(conll, tmp_path)
    assert "is a folder" in capsys.readouterr().err


def test_fitted_state_round_trips_and_load_replaces_it(data, tmp_path):
    X, y, L = data
    cut = int(L[:30].sum())
    with_eval = sb.XGBCRFClassifier(n_estimators=30, max_depth=2, early_stopping_rounds=2,
                                    n_jobs=1)  # fmt: skip
    with_eval.fit(X[:cut], y[:cut], lengths=L[:30], eval_set=[(X[cut:], y[cut:], L[30:])])
    path = tmp_path / "eval.json"
    with_eval.save_model(path)
    loaded = sb.XGBCRFClassifier().load_model(path)
    assert loaded.best_score_ == with_eval.best_score_
    assert loaded.best_iteration_ == with_eval.best_iteration_
    assert loaded.evals_result_ == with_eval.evals_result_
    np.testing.assert_array_equal(loaded.classes_, with_eval.classes_)
    # Loading a model fitted without an eval_set into that estimator leaves no best_score_.
    plain = sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1).fit(X, y, lengths=L)
    plain.save_model(tmp_path / "plain.json")
    loaded.load_model(tmp_path / "plain.json")
    assert not hasattr(loaded, "best_score_") and loaded.evals_result_ == {}
    assert loaded.n_estimators == 2 and loaded.early_stopping_rounds is None
    np.testing.assert_array_equal(loaded.predict(X, lengths=L), plain.predict(X, lengths=L))


def test_a_damaged_file_leaves_the_estimator_unchanged(data, tmp_path):
    X, y, L = data
    clf = sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1).fit(X, y, lengths=L)
    expected = clf.predict(X, lengths=L)
    other = sb.XGBCRFClassifier(n_estimators=3, max_depth=3, n_jobs=1).fit(X, y, lengths=L)
    other.save_model(tmp_path / "bad.json")
    doc = json.loads((tmp_path / "bad.json").read_text())
    doc["engine"]["xgboost_json"] = doc["engine"]["xgboost_json"].replace(
        '"split_indices":[', '"split_indices":[99999,', 1
    )
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="split_indices"):
        clf.load_model(tmp_path / "bad.json")
    assert clf.n_estimators == 2
    np.testing.assert_array_equal(clf.predict(X, lengths=L), expected)


def test_cli_reports_write_failures_without_a_traceback(conll, tmp_path, capsys):
    model = tmp_path / "m.json"
    assert _train(conll, model) == 0
    capsys.readouterr()
    if os.path.exists("/dev/full"):  # a full disk
        with pytest.raises(SystemExit) as stop:
            main(["predict", "--model", str(model), "--input", str(conll), "--output", "/dev/full"])
        assert stop.value.code == 1
        err = capsys.readouterr().err
        assert "No space left on device" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--out", str(model)])
    assert stop.value.code == 2 and "is a file" in capsys.readouterr().err


def test_cli_writes_to_a_fifo_and_stops_quietly_on_a_closed_pipe(conll, tmp_path):
    import subprocess
    import sys
    import threading

    model = tmp_path / "m.json"
    assert _train(conll, model) == 0
    fifo = tmp_path / "tags.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    assert main(["predict", "--model", str(model), "--input", str(conll), "--output", str(fifo)]) == 0
    reader.join(timeout=60)
    assert fifo.is_fifo() and got and len(got[0].splitlines()) > 10
    # `structboost predict ... | head -1`: the reader leaves after one line
    code = "import sys; from structboost.cli import main; sys.exit(main(sys.argv[1:]))"
    big = tmp_path / "big.txt"
    big.write_text(conll.read_text() * 40)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "predict", "--model", str(model), "--input", str(big)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1 and "Traceback" not in err and "Exception" not in err
