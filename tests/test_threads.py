"""The estimators' thread count (structboost._config.resolve_n_jobs)."""

import json
import os
import subprocess
import sys

import numba
import pytest

import structboost as sb
from structboost import _config
from structboost.datasets import make_hmm_sequences


def test_import_leaves_the_wait_policy_alone():
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    code = "import os, structboost; print(os.environ.get('OMP_WAIT_POLICY'))"
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "None"


@pytest.mark.parametrize(
    "n_jobs, expected",
    [(None, 1), (1, 1), (3, 3), (-1, _config.usable_cores()),
     (-2, max(1, _config.usable_cores() - 1)), (-1000, 1)],
)
def test_n_jobs_reads_as_in_scikit_learn(n_jobs, expected):
    assert _config.resolve_n_jobs(n_jobs) == expected


@pytest.mark.parametrize("n_jobs", [0, 1.5, True, "2"])
def test_a_bad_n_jobs_is_named(n_jobs):
    with pytest.raises((ValueError, TypeError), match="n_jobs"):
        _config.resolve_n_jobs(n_jobs)


def _fit_threads(**kwargs):
    X, y, lengths = make_hmm_sequences(20, random_state=0)
    clf = sb.XGBCRFClassifier(n_estimators=2, **kwargs).fit(X, y, lengths=lengths, verbose=False)
    return json.loads(clf.booster_.save_config())["learner"]["generic_param"]["nthread"], clf


def test_the_thread_count_is_decided_once_and_reaches_the_engine(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    nthread, clf = _fit_threads()
    assert nthread == "1"  # None: one thread, whatever the load
    assert "n_jobs" not in clf.get_params()  # the estimator's parameters stay the user's
    assert _fit_threads(n_jobs=2)[0] == "2"
    assert _fit_threads(n_jobs=-1)[0] == str(_config.usable_cores())
    seen = []
    monkeypatch.setattr(_config, "resolve_n_jobs", lambda n: seen.append(n) or 1)
    _fit_threads(n_jobs=2)
    assert set(seen) == {2}  # no other source of a count


def test_predict_runs_every_kernel_on_the_estimators_threads(monkeypatch):
    X, y, lengths = make_hmm_sequences(1000, length=(9, 12), random_state=0)  # > SERIAL_ROWS
    clf = sb.XGBCRFClassifier(n_estimators=2, max_depth=2).fit(X, y, lengths=lengths)
    seen, parallel = [], _config.parallel
    monkeypatch.setattr(
        _config, "parallel", lambda n: seen.append(numba.get_num_threads()) or parallel(n)
    )
    clf.predict(X, lengths=lengths)
    clf.predict_marginals(X, lengths=lengths)
    assert seen and set(seen) == {1}  # n_jobs=None: one thread, for every kernel
