"""The OpenMP wait policy and the default thread count (structboost._config)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import structboost as sb
from structboost import _config
from structboost.datasets import make_hmm_sequences


def _run(code, **env):
    """Run ``code`` in a fresh interpreter without the wait variables; its stdout."""
    environ = {k: v for k, v in os.environ.items() if k not in _config._WAIT_VARIABLES}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environ, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize(
    "environ, loaded, passive, policy",
    [
        ({}, False, True, "PASSIVE"),  # nothing chose a policy yet: passive
        ({}, True, False, None),  # a runtime read its policy already
        ({"OMP_WAIT_POLICY": "active"}, False, False, "active"),  # the user's choice stands
        ({"OMP_WAIT_POLICY": "Passive"}, True, True, "Passive"),
        ({"GOMP_SPINCOUNT": "0"}, False, True, None),
        ({"GOMP_SPINCOUNT": "300000"}, False, False, None),
        ({"KMP_BLOCKTIME": "0"}, False, True, None),
    ],
)
def test_passive_policy_is_requested_only_when_it_can_act_and_nobody_chose(
    environ, loaded, passive, policy, monkeypatch
):
    monkeypatch.setattr(_config, "OPENMP_PASSIVE", None)
    assert _config.request_passive_openmp(environ, loaded=loaded) is passive
    assert _config.OPENMP_PASSIVE is passive
    assert environ.get("OMP_WAIT_POLICY") == policy


def test_import_sets_the_policy_before_xgboost_loads_openmp():
    out = _run(
        """
        import os, structboost, xgboost
        from structboost import _config
        print(os.environ.get("OMP_WAIT_POLICY"), _config.OPENMP_PASSIVE)
        """
    )
    assert out == "PASSIVE True"


def test_a_runtime_loaded_first_keeps_its_policy_and_fits_count_idle_cores():
    out = _run(
        """
        import os, xgboost, structboost
        from structboost import _config
        n = _config.default_threads()
        print(os.environ.get("OMP_WAIT_POLICY"), _config.OPENMP_PASSIVE, 1 <= n <= os.cpu_count())
        """
    )
    assert out == "None False True"


def test_idle_cores_is_a_count_of_this_process_cores():
    n = _config.idle_cores(window=0.02)
    if n is None:
        pytest.skip("this machine has no /proc/stat")
    assert 1 <= n <= os.cpu_count()


def test_default_threads_reach_the_engine_when_openmp_spins(monkeypatch):
    monkeypatch.setattr(_config, "OPENMP_PASSIVE", False)
    monkeypatch.setattr(_config, "_LAST_COUNT", [-float("inf"), None])
    monkeypatch.setattr(_config, "idle_cores", lambda window=0.05: 1)
    X, y, lengths = make_hmm_sequences(20, random_state=0)
    clf = sb.XGBCRFClassifier(n_estimators=2).fit(X, y, lengths=lengths)
    config = json.loads(clf.booster_.save_config())["learner"]["generic_param"]
    assert config["nthread"] == "1"
    assert "n_jobs" not in clf.get_params()  # the estimator's parameters stay the user's


def test_passive_default_leaves_the_engine_its_own_count(monkeypatch):
    monkeypatch.setattr(_config, "OPENMP_PASSIVE", True)
    X, y, lengths = make_hmm_sequences(20, random_state=0)
    clf = sb.XGBCRFClassifier(n_estimators=2).fit(X, y, lengths=lengths)
    config = json.loads(clf.booster_.save_config())["learner"]["generic_param"]
    assert config["nthread"] == "0"  # XGBoost's "every core"
    assert "n_jobs" not in clf.get_params()
