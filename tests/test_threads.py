"""The default thread count of the estimators (structboost._config)."""

import json
import os
import subprocess
import sys

import pytest

import structboost as sb
from structboost import _config
from structboost.datasets import make_hmm_sequences


@pytest.mark.parametrize(
    "environ, passive",
    [
        ({}, False),
        ({"OMP_WAIT_POLICY": "active"}, False),
        ({"OMP_WAIT_POLICY": " Passive"}, True),
        ({"GOMP_SPINCOUNT": "0"}, True),
        ({"GOMP_SPINCOUNT": "300000"}, False),
        ({"KMP_BLOCKTIME": "0"}, True),
    ],
)
def test_the_users_wait_policy_is_read_not_set(environ, passive):
    before = dict(environ)
    assert _config.user_waits_passively(environ) is passive
    assert environ == before


def test_import_leaves_the_wait_policy_alone():
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    code = "import os, structboost; print(os.environ.get('OMP_WAIT_POLICY'))"
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "None"


def test_idle_cores_is_a_count_of_this_process_cores():
    n = _config.idle_cores(window=0.02)
    if n is None:
        pytest.skip("this machine has no /proc/stat")
    assert 1 <= n <= os.cpu_count()


def _fit_threads(**kwargs):
    X, y, lengths = make_hmm_sequences(20, random_state=0)
    clf = sb.XGBCRFClassifier(n_estimators=2, **kwargs).fit(X, y, lengths=lengths, verbose=False)
    return json.loads(clf.booster_.save_config())["learner"]["generic_param"]["nthread"], clf


def _spinning_policy(monkeypatch):
    """OpenMP's default wait policy (no user setting): ``n_jobs=None`` counts idle cores."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)


def test_default_threads_are_the_idle_cores_and_reach_the_engine(monkeypatch):
    _spinning_policy(monkeypatch)
    monkeypatch.setattr(_config, "idle_cores", lambda window=0.05: 1)
    nthread, clf = _fit_threads()
    assert nthread == "1"
    assert "n_jobs" not in clf.get_params()  # the estimator's parameters stay the user's
    monkeypatch.setattr(_config, "idle_cores", lambda window=0.05: 2)
    assert _fit_threads()[0] == "2"
    assert _fit_threads(n_jobs=1)[0] == "1"  # an explicit n_jobs is never counted


def test_each_fit_counts_the_idle_cores_afresh(monkeypatch):
    """A fit right after another (within a count's lifetime) sees the load that started between them."""
    _spinning_policy(monkeypatch)
    monkeypatch.setattr(_config, "_COUNT_LIFETIME", 3600.0)  # every call of a test's fits within it
    monkeypatch.setattr(_config, "idle_cores", lambda window=0.05: 2)
    assert _fit_threads()[0] == "2"
    monkeypatch.setattr(_config, "idle_cores", lambda window=0.05: 1)  # a busy process started
    assert _fit_threads()[0] == "1"

def test_a_passive_policy_leaves_the_engine_every_core(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    monkeypatch.setattr(_config, "idle_cores", lambda window=0.05: 1)
    assert _fit_threads()[0] == "0"  # XGBoost's "every core"
