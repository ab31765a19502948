"""Engine models are checked before XGBoost or LightGBM sees them (issue 28).

Each damaged file is loaded in a subprocess: before the checks, these
segfaulted, aborted or hung the process. Valid files of every model kind
load and predict bit-identically.
"""

import json

import numpy as np
import pandas as pd
import pytest

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.engines.validate import check_lightgbm_text, check_xgboost_json

pytest.importorskip("lightgbm")

@pytest.fixture(scope="module")
def saved(tmp_path_factory, single_threaded):
    """Tiny XGBoost and LightGBM estimator files, their documents and the data."""
    folder = tmp_path_factory.mktemp("models")
    X, y, L = make_hmm_sequences(30, length=(3, 8), random_state=0)
    files = {}
    for name, clf in {
        "XGBCRFClassifier": sb.XGBCRFClassifier(n_estimators=3, max_depth=2, n_jobs=1),
        "LGBMCRFClassifier": sb.LGBMCRFClassifier(
            n_estimators=3, num_leaves=4, min_child_samples=2, n_jobs=1
        ),
    }.items():
        path = folder / f"{name}.json"
        clf.fit(X, y, lengths=L).save_model(path)
        files[name] = path
    return {"files": files, "folder": folder, "X": X, "y": y, "L": L}


def _xgb(m):
    return m["learner"]["gradient_booster"]["model"]


def _edit_xgb(edit):
    def apply(doc):
        model = json.loads(doc["engine"]["xgboost_json"])
        edit(model)
        doc["engine"]["xgboost_json"] = json.dumps(model)

    return apply


def _edit_lgb(edit, fix_sizes=False):
    from fuzz_models import fix_tree_sizes

    def apply(doc):
        text = edit(doc["engine"]["lgb_model"])
        doc["engine"]["lgb_model"] = fix_tree_sizes(text) if fix_sizes else text

    return apply


def _set(tree, key, i, value):
    def edit(m):
        _xgb(m)["trees"][tree][key][i] = value

    return edit


# (estimator, edit of the saved document, what the message must name). Before the
# checks: the first four segfaulted, tree_info silently predicted, the LightGBM
# ones aborted ("terminate called") or hung.
CASES = {
    "xgb split index 10**6": ("XGBCRFClassifier", _edit_xgb(_set(0, "split_indices", 0, 10**6)),
                              "'split_indices'"),
    "xgb left child 0 (cycle to the root)": (
        "XGBCRFClassifier", _edit_xgb(_set(0, "left_children", 0, 0)), "'left_children'"),
    "xgb child back to the root": (
        "XGBCRFClassifier", _edit_xgb(_set(0, "left_children", 1, 0)), "'left_children'"),
    "xgb right child out of range": (
        "XGBCRFClassifier", _edit_xgb(_set(0, "right_children", 0, 99)), "'right_children'"),
    "xgb two parents of one node": (
        "XGBCRFClassifier", _edit_xgb(_set(0, "right_children", 1, 2)), "reached twice"),
    "xgb tree_info target 7": (
        "XGBCRFClassifier", _edit_xgb(lambda m: _xgb(m)["tree_info"].__setitem__(0, 7)),
        "'tree_info'"),
    "xgb num_feature 2": ("XGBCRFClassifier", _edit_xgb(
        lambda m: m["learner"]["learner_model_param"].__setitem__("num_feature", "2")),
        "num_feature"),
    "xgb num_target 10**8": ("XGBCRFClassifier", _edit_xgb(
        lambda m: m["learner"]["learner_model_param"].__setitem__("num_target", "100000000")),
        "num_target"),
    "xgb num_nodes 10**9": ("XGBCRFClassifier", _edit_xgb(
        lambda m: _xgb(m)["trees"][0]["tree_param"].__setitem__("num_nodes", "1000000000")),
        "'left_children' has 5 entries"),
    "xgb NaN split condition": (
        "XGBCRFClassifier", _edit_xgb(_set(0, "split_conditions", 0, float("nan"))), "NaN"),
    "xgb string in an index array": (
        "XGBCRFClassifier", _edit_xgb(_set(1, "split_indices", 0, "3")), "'split_indices'"),
    "xgb parents disagree": ("XGBCRFClassifier", _edit_xgb(_set(0, "parents", 3, 2)), "parents"),
    "lgb truncated": ("LGBMCRFClassifier", _edit_lgb(lambda t: t[: len(t) // 3]), "end of trees"),
    "lgb one number wider (tree_sizes off)": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("leaf_value=", "leaf_value=0", 1)), "tree_sizes"),
    "lgb left_child back at the root": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("left_child=1 2 -1", "left_child=1 0 -1", 1), fix_sizes=True),
        "reached twice"),
    "lgb split_feature 500000": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("split_feature=1 0 5", "split_feature=1 0 500000", 1),
        fix_sizes=True), "split_feature"),
    "lgb num_leaves 4*10**8": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("num_leaves=4", "num_leaves=400000000", 1), fix_sizes=True),
        "num_leaves"),
    "lgb leaf array too short": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("leaf_value=-0.0088051790175842151 ", "leaf_value=", 1),
        fix_sizes=True), "leaf_value has 3 entries"),
    "lgb num_threads 10**8 in the parameters": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("[num_threads: ", "[num_threads: 100000000", 1)), "num_threads"),
    "lgb max_feature_idx 2": ("LGBMCRFClassifier", _edit_lgb(
        lambda t: t.replace("max_feature_idx=23", "max_feature_idx=2", 1)), "max_feature_idx"),
}  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(saved):
    """Outcome of loading and predicting every damaged file, in subprocesses."""
    from fuzz_models import run

    np.savez(saved["folder"] / "data.npz", X=saved["X"], L=saved["L"])
    paths = {}
    for i, (case, (name, edit, _)) in enumerate(CASES.items()):
        doc = json.loads(saved["files"][name].read_text())
        edit(doc)
        paths[case] = saved["folder"] / f"damaged-{i}.json"
        paths[case].write_text(json.dumps(doc))
    found = {}
    for name, original in saved["files"].items():
        mine = [c for c in CASES if CASES[c][0] == name]
        got = run([paths[c] for c in mine], saved["folder"] / "data.npz", name, original)
        found.update({c: (paths[c], got[paths[c]]) for c in mine})
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_engine_models_raise_value_error_in_a_subprocess(outcomes, case):
    path, outcome = outcomes[case]
    field = CASES[case][2]
    assert outcome.startswith("value_error: "), f"{case}: {outcome}"
    assert str(path) in outcome and field in outcome, outcome


def test_edits_in_the_lightgbm_examples_hit_the_saved_text(saved):
    """The LightGBM cases edit lines that are really in the file (else they test nothing)."""
    text = json.loads(saved["files"]["LGBMCRFClassifier"].read_text())["engine"]["lgb_model"]
    for needle in ("left_child=1 2 -1", "split_feature=1 0 5", "num_leaves=4\n",
                   "leaf_value=-0.0088051790175842151 ", "[num_threads: ",
                   "max_feature_idx=23"):  # fmt: skip
        assert needle in text


def test_load_lgb_model_checks_the_text(saved, tmp_path):
    import lightgbm as lgb

    import structboost.lightgbm as sblgb

    X, y, L = saved["X"], saved["y"], saved["L"]
    obj = sblgb.lgb_crf_objective(3)
    booster = lgb.train(sblgb.lgb_params(3, objective=obj, num_leaves=4, min_data_in_leaf=2),
                        lgb.Dataset(X, label=y, group=L), num_boost_round=2,
                        callbacks=[obj.callback()])  # fmt: skip
    path = tmp_path / "b.json"
    sblgb.save_lgb_model(booster, path)
    loaded = sblgb.load_lgb_model(path)
    np.testing.assert_array_equal(sb.predict(loaded, X, lengths=L), sb.predict(booster, X, lengths=L))
    doc = json.loads(path.read_text())
    doc["lgb_model"] = doc["lgb_model"].replace("tree_sizes=", "tree_sizes=1", 1)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="b.json: LightGBM cannot read .*tree_sizes"):
        sblgb.load_lgb_model(path)


def _kinds(X, y, L):
    frame = pd.DataFrame(X[:, :3], columns=list("abc"))
    frame["c"] = pd.Categorical(np.array(["u", "v", "w"])[X[:, 3].astype(int) + X[:, 4].astype(int)])
    small = dict(n_estimators=3, max_depth=3, n_jobs=1)
    return {
        "xgboost": (sb.XGBCRFClassifier(**small), X),
        "xgboost boosted transitions (categorical splits)": (
            sb.XGBCRFClassifier(transitions_from="input", **small), X),
        "xgboost vector leaves": (
            sb.XGBCRFClassifier(multi_strategy="multi_output_tree", **small), X),
        "xgboost categorical DataFrame": (sb.XGBCRFClassifier(**small), frame),
        "xgboost exact + pruning (deleted nodes)": (sb.XGBCRFClassifier(
            n_estimators=5, max_depth=4, tree_method="exact", min_split_loss=2.0, n_jobs=1), X),
        "xgboost dart": (sb.XGBCRFClassifier(booster="dart", **small), X),
        "lightgbm": (sb.LGBMCRFClassifier(n_estimators=3, num_leaves=6, min_child_samples=2,
                                          n_jobs=1), X),
        "lightgbm categorical DataFrame": (sb.LGBMCRFClassifier(
            n_estimators=3, num_leaves=6, min_child_samples=2, n_jobs=1), frame),
    }  # fmt: skip


@pytest.mark.parametrize("kind", list(_kinds(np.zeros((1, 5)), None, None)))
def test_valid_models_load_unchanged_and_predict_bit_identically(saved, kind, tmp_path):
    X, y, L = saved["X"], saved["y"], saved["L"]
    clf, data = _kinds(X, y, L)[kind]
    clf.fit(data, y, lengths=L)
    path = tmp_path / "m.json"
    clf.save_model(path)
    loaded = type(clf)().load_model(path)
    np.testing.assert_array_equal(loaded.predict(data, lengths=L), clf.predict(data, lengths=L))
    np.testing.assert_array_equal(
        loaded.predict_marginals(data, lengths=L), clf.predict_marginals(data, lengths=L)
    )
    engine = json.loads(path.read_text())["engine"]
    if "xgboost_json" in engine:
        check_xgboost_json(engine["xgboost_json"], "m.json")
    else:
        check_lightgbm_text(engine["lgb_model"], "m.json")


_RAW_BOOSTER = """
import json, sys, numpy as np, xgboost as xgb, structboost as sb
from structboost.datasets import make_hmm_sequences
X, y, L = make_hmm_sequences(30, length=(3, 8), random_state=0)
booster = sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1).fit(X, y, lengths=L).booster_
model = json.loads(booster.save_raw("json"))
model["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"][0] = 10**6
raw = xgb.Booster()
raw.load_model(bytearray(json.dumps(model).encode()))  # XGBoost itself loads it silently
try:
    sb.predict(raw, X, lengths=L)
    print("PREDICTED")
except ValueError as err:
    print("ValueError:", err)
"""


def test_raw_xgboost_boosters_are_checked_before_they_predict():
    """A booster XGBoost loaded itself from a damaged file (it segfaulted in predict)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _RAW_BOOSTER], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-300:]
    assert run.stdout.startswith("ValueError: the booster: XGBoost cannot read") and (
        "'split_indices'[0] is 1000000" in run.stdout
    ), run.stdout


def test_cli_predict_refuses_a_damaged_engine_model(tmp_path):
    """The issue's segfault through ``structboost predict`` (a subprocess, as a crash would be)."""
    import subprocess
    import sys

    from test_tagging import write_conll

    from structboost.cli import main

    data = write_conll(tmp_path / "train.txt", 40, 0)
    model = tmp_path / "tagger.json"
    assert main(["train", "--train", str(data), "--model", str(model), "--rounds", "2",
                 "--max-depth", "2", "--threads", "1"]) == 0  # fmt: skip
    doc = json.loads(model.read_text())
    engine = json.loads(doc["classifier"]["engine"]["xgboost_json"])
    _xgb(engine)["trees"][0]["split_indices"][0] = 10**6
    doc["classifier"]["engine"]["xgboost_json"] = json.dumps(engine)
    model.write_text(json.dumps(doc))
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from structboost.cli import main; sys.exit(main())",
         "predict", "--model", str(model), "--input", str(data), "--output", "-"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, (run.returncode, run.stderr[-300:])
    assert f"{model}: XGBoost cannot read the model it holds" in run.stderr
    assert "'split_indices'[0] is 1000000" in run.stderr
