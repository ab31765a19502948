"""Damaged model files never crash, hang or exhaust memory (issue 28).

A few hundred seeded mutants of XGBoost and LightGBM estimator files are
loaded and predicted in worker subprocesses (see ``fuzz_models.py``);
``benchmarks/fuzz_models.py`` runs thousands.
"""

import json

import numpy as np
import pytest

from fuzz_models import FAILURES, fix_tree_sizes, fuzz, mutants, run, tally

pytest.importorskip("lightgbm")


def test_the_harness_attributes_crashes_hangs_and_allocations_to_their_file(tmp_path):
    np.savez(tmp_path / "data.npz", X=np.zeros((4, 2)), L=np.array([4]))
    contents = ["ok", "crash", "ok", "hang", "ok", "alloc", "ok"]
    files = []
    for i, text in enumerate(contents):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(text)
    got = run(files, tmp_path / "data.npz", "fuzz_models.Misbehaving", files[0], timeout=8)
    outcomes = [got[f].split(":")[0] for f in files]
    assert outcomes == ["same", "crash", "same", "timeout", "same", "memory", "same"]


def test_mutants_are_seeded_and_varied():
    doc = {"format": "x", "engine": {"xgboost_json": json.dumps({"a": [1, 2.5, "3"], "b": {}})},
           "n": 3}  # fmt: skip
    blob = json.dumps(doc).encode()
    first, again = mutants(blob, 50, seed=1), mutants(blob, 50, seed=1)
    assert first == again
    assert len({m for m, _ in first}) > 25 and all(m != blob for m, _ in first[:10])


def test_fix_tree_sizes_restores_lightgbm_sizes():
    text = "tree\nversion=v4\ntree_sizes=1 1\n\nTree=0\nab\n\n\nTree=1\nc\n\n\nend of trees\n"
    assert "tree_sizes=12 11\n" in fix_tree_sizes(text)  # "Tree=0\\nab\\n\\n\\n" is 12 bytes


def test_a_few_hundred_mutants_load_or_raise_value_error(tmp_path):
    counts, failures = fuzz(tmp_path, n_per_engine=150, seed=20261127)
    assert sum(counts.values()) == 300
    assert not failures, "\n".join(f"{p.name} ({what}): {outcome}" for p, what, outcome in failures)
    assert counts["value_error"] > 200 and counts["same"] + counts["changed"] > 10
    assert set(FAILURES) <= set(tally({}))
