"""Hardening of issue 15: safe model files, stored-state validation, non-finite
margins, slices and continued training, text input, clear messages.

Every case here failed before the fix (a crash, code execution, a silent
wrong answer or an unclear message); ``tests/README.md`` tabulates them.
"""

import json
import pathlib
import pickle
import re

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from test_tagging import write_conll

import structboost as sb
import structboost.lightgbm as sbl
from structboost.cli import main
from structboost.datasets import make_hmm_sequences, read_conll
from structboost.text.lexical import TokenFeatures
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.engines.state import parse_state
from structboost.tagging import load_tagger
from structboost.transitions.tree import TreeTransitionParams
from structboost.engines.predict import predict_tree
from structboost.engines.xgboost import load_state

pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def hmm():
    X, y, lengths = make_hmm_sequences(n_sequences=30, length=(4, 9), random_state=0)
    return X, y, lengths, xgb.DMatrix(X, label=y, group=lengths)


def _train(dmat, rounds, obj=None, callback=True, **kwargs):
    obj = obj or sb.crf_objective(3)
    callbacks = [obj.callback()] if callback else []
    return xgb.train(sb.xgb_params(3), dmat, rounds, obj=obj, callbacks=callbacks, **kwargs)


@pytest.fixture(scope="module")
def booster(hmm):
    return _train(hmm[3], 4)


# -- 1. model files that cannot run code -------------------------------------


def test_no_pickle_load_in_the_package():
    root = pathlib.Path(sb.__file__).parent
    for path in root.rglob("*.py"):
        assert not re.search(r"pickle\.load|joblib\.load", path.read_text()), path


@pytest.fixture(scope="module")
def estimators(hmm):
    X, y, lengths, _ = hmm
    labels = np.array(["B-X", "B-Y", "O"])[y]
    fitted = {}
    for cls, extra in ((sb.XGBCRFClassifier, {}), (sb.LGBMCRFClassifier, {"min_child_samples": 2})):
        for allowed in ("iob2", np.ones((3, 3), dtype=bool)):
            labels_fit = labels if isinstance(allowed, str) else y
            est = cls(n_estimators=3, allowed_transitions=allowed, **extra)
            fitted[cls, isinstance(allowed, str)] = est.fit(X, labels_fit, lengths=lengths)
    return fitted


@pytest.mark.parametrize("key", ["xgb-scheme", "xgb-masks", "lgb-scheme", "lgb-masks"])
def test_estimator_save_model_load_model_round_trip(estimators, hmm, tmp_path, key):
    cls = sb.XGBCRFClassifier if key.startswith("xgb") else sb.LGBMCRFClassifier
    est = estimators[cls, key.endswith("scheme")]
    X, _, lengths, _ = hmm
    est.save_model(tmp_path / "m.json")
    loaded = cls().load_model(tmp_path / "m.json")
    np.testing.assert_array_equal(
        loaded.predict(X, lengths=lengths), est.predict(X, lengths=lengths)
    )
    np.testing.assert_allclose(
        loaded.predict_marginals(X, lengths=lengths), est.predict_marginals(X, lengths=lengths)
    )
    np.testing.assert_array_equal(loaded.classes_, est.classes_)
    assert loaded.best_iteration_ == est.best_iteration_
    assert loaded.get_params().keys() == est.get_params().keys()
    with pytest.raises(ValueError, match=f"holds a {cls.__name__}"):
        other = sb.LGBMCRFClassifier if cls is sb.XGBCRFClassifier else sb.XGBCRFClassifier
        other().load_model(tmp_path / "m.json")


class _Payload:
    """Unpickling this creates a file: the code execution the CLI used to allow."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


def test_pickled_model_files_are_refused_without_running_them(tmp_path, capsys):
    marker = tmp_path / "pwned"
    model = tmp_path / "ner.pkl"
    model.write_bytes(pickle.dumps(_Payload(marker)))
    for load in (load_tagger, sb.XGBCRFClassifier().load_model):
        with pytest.raises(ValueError, match="is a pickle .*no longer reads them"):
            load(model)
    with pytest.raises(SystemExit):
        main(["predict", "--model", str(model), "--input", str(model)])
    assert "is a pickle" in capsys.readouterr().err
    assert not marker.exists()


def _damage(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(version=7), "version 7"),
        (lambda d: d.update(format="other"), "not a structboost-crf-classifier"),
        (lambda d: d["classes"].update(values=[2, 1, 0]), "sorted"),
        (lambda d: d["classes"].update(values=[0, None, 2]), "list of int"),
        (lambda d: d["params"].update(predict=1), "parameter named 'predict'"),
        (lambda d: d.pop("engine"), "'engine' is missing"),
        (lambda d: d["engine"].update(xgboost_json="{]"), "XGBoost cannot read"),
        (lambda d: d.update(n_features_in=True), "'n_features_in'"),
    ],
)
def test_damaged_estimator_files_raise(estimators, tmp_path, edit, message):
    path = tmp_path / "m.json"
    estimators[sb.XGBCRFClassifier, False].save_model(path)
    _damage(path, edit)
    with pytest.raises(ValueError, match=message):
        sb.XGBCRFClassifier().load_model(path)


def test_deep_nesting_and_foreign_files_are_refused_as_damaged(estimators, tmp_path):
    path = tmp_path / "m.json"
    estimators[sb.XGBCRFClassifier, False].save_model(path)
    text = path.read_text()
    deep = "[" * 200_000 + "]" * 200_000
    path.write_text(text.replace('"best_score": ', f'"nested": {deep}, "best_score": ', 1))
    with pytest.raises(ValueError, match="not valid JSON .nested too deeply"):
        sb.XGBCRFClassifier().load_model(path)
    booster = estimators[sb.XGBCRFClassifier, False].get_booster().copy()
    booster.set_attr(structboost_crf=deep)
    with pytest.raises(ValueError, match="attribute 'structboost_crf' is damaged"):
        sb.predict(booster, np.zeros((2, booster.num_features())), lengths=[2])
    # a large file of something else is refused from its first bytes
    path.write_text('{"weights": [' + "0, " * 100_000 + "0]}")
    for load in (sb.XGBCRFClassifier().load_model, load_tagger):
        with pytest.raises(ValueError, match="not a structboost model file"):
            load(path)


@pytest.mark.filterwarnings("ignore::UserWarning")  # XGBoost: callback_thing is not used
def test_unsavable_estimators_say_why(hmm, estimators, tmp_path):
    X, y, lengths, _ = hmm
    est = sb.XGBCRFClassifier(n_estimators=1, base_model=sb.LinearChainCRF(max_iter=2))
    with pytest.raises(ValueError, match="base_model .* pickle or joblib"):
        est.fit(X, y, lengths=lengths).save_model(tmp_path / "m.json")
    est = sb.XGBCRFClassifier(n_estimators=1).fit(X, y, lengths=lengths)
    est.set_params(callback_thing=object())  # (an unknown keyword is refused at fit)
    with pytest.raises(ValueError, match="callback_thing=.*cannot be written"):
        est.save_model(tmp_path / "m.json")


def test_token_features_document_round_trip_and_damage():
    frame = pd.DataFrame({"sentence": [0, 0, 1], "token": ["The", "cat", "Sat"]})
    tf = TokenFeatures(half_width=1, kinds=("word", "shape")).fit(frame)
    doc = json.loads(json.dumps(tf.to_document()))
    loaded = TokenFeatures.from_document(doc)
    assert (loaded.transform(frame) != tf.transform(frame)).nnz == 0
    doc["columns"][0][0] = 10**6  # would index past the output columns
    with pytest.raises(ValueError, match="'columns' must be"):
        TokenFeatures.from_document(doc)


# -- 2. one validator for stored CRF state ------------------------------------


def _good_state(k=3):
    return {
        "version": 1,
        "num_labels": k,
        "mode": "gbcrf",
        "transitions": np.zeros((k, k)).tolist(),
        "start": [0.0] * k,
        "end": [0.0] * k,
    }


TAMPERED = {
    "start of length 50": ({"start": [0.0] * 50}, r"'start' has shape \(50,\)"),
    "start of length 1": ({"start": [0.0]}, r"'start' has shape \(1,\)"),
    "ragged transitions": ({"transitions": [[0.0] * 3, [0.0], [0.0] * 3]}, "rectangular"),
    "empty end": ({"end": []}, r"'end' has shape \(0,\)"),
    "missing end": ({"end": None}, "no 'end' field"),
    "non-numeric start": ({"start": ["a", "b", "c"]}, "array of numbers"),
    "bool start": ({"start": [True, False, True]}, "array of numbers"),
    "NaN transition": ({"transitions": [[float("nan")] * 3] * 3}, "NaN or \\+inf"),
    "+inf end": ({"end": [float("inf"), 0.0, 0.0]}, "NaN or \\+inf"),
    "all -inf start": ({"start": [float("-inf")] * 3}, "every 'start' score is -inf"),
    "bogus mode": ({"mode": "bogus"}, "mode must be one of"),
    "string num_labels": ({"num_labels": "3"}, "num_labels must be an integer"),
    "zero num_labels": ({"num_labels": 0}, "num_labels must be an integer"),
    "version 2": ({"version": 2}, "version 2"),
    "rounds 0": ({"rounds": 0}, "rounds must be an integer"),
}


@pytest.mark.parametrize("case", TAMPERED)
def test_tampered_xgboost_state_raises_before_any_kernel_runs(booster, hmm, case):
    change, message = TAMPERED[case]
    state = _good_state()
    for key, value in change.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    tampered = booster.copy()
    tampered.set_attr(structboost_crf=json.dumps(state))
    with pytest.raises(ValueError, match=message):
        sb.predict(tampered, hmm[3])


def test_state_that_is_not_a_json_object_raises(booster, hmm):
    tampered = booster.copy()
    for raw, message in (("[1, 2]", "must be a JSON object"), ("{nope", "not valid JSON")):
        tampered.set_attr(structboost_crf=raw)
        with pytest.raises(ValueError, match=message):
            sb.predict_marginals(tampered, hmm[3])


def test_tampered_lightgbm_file_raises(hmm, tmp_path):
    X, y, lengths, _ = hmm
    obj = sbl.lgb_crf_objective(3)
    dtrain = lgb.Dataset(X, label=y, group=lengths)
    booster = lgb.train(sbl.lgb_params(3, objective=obj, min_data_in_leaf=2), dtrain, 2,
                        callbacks=[obj.callback()])  # fmt: skip
    path = tmp_path / "m.json"
    sbl.save_lgb_model(booster, path)
    for change, message in (TAMPERED["start of length 50"], TAMPERED["bogus mode"]):
        _damage(path, lambda d: d["structboost_crf"].update(change))
        with pytest.raises(ValueError, match=message):
            sbl.load_lgb_model(path)
        sbl.save_lgb_model(booster, path)
    _damage(path, lambda d: d["structboost_crf"].update(rounds=5))
    with pytest.raises(ValueError, match="belong to 5 rounds but the model has 2"):
        sbl.load_lgb_model(path)


def test_tree_state_is_validated(booster, hmm):
    state = {"version": 1, "num_labels": 3, "mode": "gbcrf", "edge_transitions": [[[0.0] * 3] * 2]}
    with pytest.raises(ValueError, match=r"'edge_transitions' has shape \(1, 2, 3\)"):
        parse_state(state, TreeTransitionParams)
    state["edge_transitions"] = [[[float("-inf")] * 3] * 3]
    with pytest.raises(ValueError, match="an edge type has every"):
        parse_state(state, TreeTransitionParams)
    tampered = booster.copy()
    state["edge_transitions"] = [[[0.0] * 3] * 3, [[0.0] * 2] * 3]
    tampered.set_attr(structboost_tree_crf=json.dumps(state))
    with pytest.raises(ValueError, match="rectangular"):
        predict_tree(tampered, hmm[0], lengths=hmm[2], parents=np.full(len(hmm[0]), -1))


# -- 3. non-finite margins and transitions ---------------------------------------


def test_nan_margins_at_predict_time_name_the_row_not_the_constraints(booster, hmm):
    X, _, lengths, dmat = hmm
    base = np.zeros((len(X), 3))
    base[7, 1] = np.nan
    for fn in (sb.predict, sb.predict_marginals):
        with pytest.raises(ValueError, match="row 7, label 1 is nan .*base_margin") as err:
            fn(booster, X, lengths=lengths, base_margin=base)
        assert "allowed_transitions" not in str(err.value)
    with pytest.raises(ValueError, match="row 7, label 1 is nan"):
        sb.sequence_log_likelihood(booster, dmat, base_margin=base)


def test_non_finite_transitions_in_memory_are_caught(hmm):
    X, y, lengths, _ = hmm
    obj = sbl.lgb_crf_objective(3)
    booster = lgb.train(sbl.lgb_params(3, objective=obj, min_data_in_leaf=2),
                        lgb.Dataset(X, label=y, group=lengths), 1,
                        callbacks=[obj.callback()])  # fmt: skip
    booster.structboost_crf[0].start[0] = np.nan
    with pytest.raises(ValueError, match="CRF start scores hold NaN .*diverged"):
        sb.predict(booster, X, lengths=lengths)


def test_diverged_training_margins_are_reported_as_divergence():
    batch = SequenceBatch.build([0, 1, 2, 0], [4], 3)
    margins = np.zeros((4, 3))
    margins[2, 0] = 3.6e16  # where hessian_bound=1.0 with eta=1 on protein ended up
    with pytest.raises(ValueError, match=r"row 2, label 0 is 3.6e\+16 .*training has diverged"):
        CRFObjective(3).grad_hess(margins, batch)


# -- 4. slices and continued training ---------------------------------------------


def test_slice_predicts_with_the_transitions_of_its_rounds(booster, hmm):
    dmat = hmm[3]
    two = _train(dmat, 2)  # training is deterministic: the first two rounds of `booster`
    np.testing.assert_allclose(
        sb.sequence_log_likelihood(booster[0:2], dmat), sb.sequence_log_likelihood(two, dmat)
    )
    reloaded = xgb.Booster()
    reloaded.load_model(bytearray(booster.save_raw("ubj")))
    np.testing.assert_allclose(
        sb.sequence_log_likelihood(reloaded[:2], dmat), sb.sequence_log_likelihood(two, dmat)
    )


def test_continued_training_keeps_model_and_transitions_together(booster, hmm):
    dmat = hmm[3]
    obj = sb.crf_objective(3)
    more = _train(dmat, 2, obj=obj, xgb_model=booster)  # sb.xgb_params: base_score accepted
    assert more.num_boosted_rounds() == 6
    assert json.loads(more.attr("structboost_crf"))["rounds"] == 6
    np.testing.assert_array_equal(load_state(more)[2].transitions, obj.params.transitions)
    np.testing.assert_array_equal(
        load_state(more[:4])[2].transitions, load_state(booster)[2].transitions
    )
    stale = _train(dmat, 2, callback=False, xgb_model=booster)
    with pytest.raises(ValueError, match="predicts with 6 rounds .*4-round model"):
        sb.predict(stale, dmat)


def test_continuing_an_early_stopped_booster_uses_every_round(hmm):
    dmat = hmm[3]
    obj = sb.crf_objective(3)
    stopped = _train(dmat, 30, obj=obj, evals=[(dmat, "d")], custom_metric=obj.metric,
                     early_stopping_rounds=1, verbose_eval=False)  # fmt: skip
    more = _train(dmat, 1, xgb_model=stopped)
    assert more.attr("best_iteration") is None
    np.testing.assert_allclose(
        sb.predict_marginals(more, dmat),
        sb.predict_marginals(more, dmat.get_data(), lengths=hmm[2]),
    )
    assert load_state(more)[2] is not None


def test_lightgbm_continued_training(hmm):
    X, y, lengths, _ = hmm
    dtrain = lgb.Dataset(X, label=y, group=lengths, free_raw_data=False)
    obj = sbl.lgb_crf_objective(3)
    params = sbl.lgb_params(3, objective=obj, min_data_in_leaf=2)
    first = lgb.train(params, dtrain, 2, callbacks=[obj.callback()])
    more = lgb.train(params, dtrain, 2, init_model=first, callbacks=[obj.callback()])
    assert more.current_iteration() == 4
    assert np.isfinite(sb.sequence_log_likelihood(more, X, y, lengths=lengths)).all()
    bare = lgb.train(params, dtrain, 1, init_model=first)
    with pytest.raises(ValueError, match="carries no CRF transitions"):
        sb.predict(bare, X, lengths=lengths)


# -- 5. text input ------------------------------------------------------------------


def test_read_conll_strips_bom_and_names_file_and_line_of_bad_bytes(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffJohn NNP I-NP I-PER\nlives VBZ I-VP O\n".encode("utf-8"))
    assert read_conll(path)["token"].tolist() == ["John", "lives"]
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Peter NNP I-NP I-PER\n\nMünchen NNP I-NP I-LOC\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"{re.escape(str(latin))}, line 3: not utf-8 text"):
        read_conll(latin)
    assert read_conll(latin, encoding="latin-1")["token"].tolist() == ["Peter", "München"]
    with pytest.raises(ValueError, match="unknown text encoding 'klingon'"):
        read_conll(latin, encoding="klingon")


def test_cli_encoding_option(tmp_path, capsys):
    train = write_conll(tmp_path / "train.txt", 40, seed=0)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(train.read_text().replace("Paris", "Zürich").encode("latin-1"))
    model = tmp_path / "m.json"
    args = ["train", "--train", str(latin), "--model", str(model), "--rounds", "2",
            "--min-count", "1", "--threads", "1", "--verbose", "0"]  # fmt: skip
    with pytest.raises(SystemExit):
        main(args)
    assert "not utf-8 text" in capsys.readouterr().err
    assert main([*args, "--encoding", "latin-1"]) == 0
    assert main(["predict", "--model", str(model), "--input", str(latin), "--encoding",
                 "latin-1", "--output", str(tmp_path / "out.txt")]) == 0  # fmt: skip
    assert "Zürich" in (tmp_path / "out.txt").read_text(encoding="utf-8")


# -- 6. clear messages ------------------------------------------------------------------


class _NotAnArray:
    """An array-like that only offers ``__array__`` (as scikit-learn's checks use)."""

    def __init__(self, data):
        self.data = np.asarray(data)

    def __array__(self, dtype=None, copy=None):
        return self.data


@pytest.mark.filterwarnings("ignore:.*Empty dataset")
def test_clear_messages(hmm, booster):
    X, y, lengths, _ = hmm
    labels = np.array(["a", "b", "c"], dtype=object)[y]
    labels[3] = None
    with pytest.raises(ValueError, match="missing label \\(None\\) at row 3"):
        sb.XGBCRFClassifier(n_estimators=1).fit(X, labels, lengths=lengths)
    groups = _NotAnArray(np.repeat(np.arange(len(lengths)), lengths))
    est = sb.XGBCRFClassifier(n_estimators=1).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"not seen in fit, e.g. 5;"):
        est.predict_log_likelihood(X, np.where(np.arange(len(y)) == 2, 5, y), lengths=lengths)
    with pytest.raises(ValueError, match="the data has no rows"):
        sb.predict(booster, np.zeros((0, X.shape[1])), lengths=[])


class _Interrupt(xgb.callback.TrainingCallback):
    def __init__(self, error):
        self.error = error

    def after_iteration(self, model, epoch, evals_log):
        raise self.error


@pytest.mark.parametrize("error", [RuntimeError("mid-fit"), KeyboardInterrupt()])
def test_a_failed_refit_leaves_the_estimator_as_it_was(hmm, error):
    X, y, lengths, _ = hmm
    clf = sb.XGBCRFClassifier(n_estimators=2, max_depth=2).fit(X, y, lengths=lengths,
                                                               verbose=False)  # fmt: skip
    before = clf.predict(X, lengths=lengths)
    booster = clf.booster_
    wider = np.hstack([X, X])
    with pytest.raises(type(error)):
        clf.set_params(callbacks=[_Interrupt(error)]).fit(wider, y, lengths=lengths)
    assert clf.booster_ is booster and clf.n_features_in_ == X.shape[1]
    np.testing.assert_array_equal(clf.set_params(callbacks=None).predict(X, lengths=lengths), before)
    fresh = sb.XGBCRFClassifier(n_estimators=2, callbacks=[_Interrupt(error)])
    with pytest.raises(type(error)):
        fresh.fit(X, y, lengths=lengths)
    assert not [k for k in vars(fresh) if k.endswith("_")]  # still unfitted


def test_a_deep_copy_of_a_lightgbm_estimator_keeps_its_transitions():
    import copy

    from structboost.datasets import make_hmm_sequences

    X, y, lengths = make_hmm_sequences(30, random_state=0)
    clf = sb.LGBMCRFClassifier(n_estimators=3).fit(X, y, lengths=lengths, verbose=False)
    twin = copy.deepcopy(clf)
    assert twin.booster_ is not clf.booster_
    np.testing.assert_array_equal(twin.predict(X, lengths=lengths), clf.predict(X, lengths=lengths))
    np.testing.assert_array_equal(np.asarray(twin.transitions_), np.asarray(clf.transitions_))


def _round_trip(clf, X, lengths, tmp_path):
    clf.save_model(tmp_path / "m.json")
    back = type(clf)().load_model(tmp_path / "m.json")
    np.testing.assert_array_equal(back.predict(X, lengths=lengths), clf.predict(X, lengths=lengths))
    return back


def test_labels_at_the_top_of_uint64_round_trip(tmp_path):
    from structboost.datasets import make_hmm_sequences

    X, y, lengths = make_hmm_sequences(20, random_state=0)
    labels = np.array([7, 2**63 + 5, 2**64 - 1], dtype=np.uint64)[y]
    clf = sb.XGBCRFClassifier(n_estimators=2).fit(X, labels, lengths=lengths, verbose=False)
    assert _round_trip(clf, X, lengths, tmp_path).classes_.dtype == np.uint64


def test_a_refit_on_arrays_after_feature_dicts_saves_the_arrays_model(tmp_path):
    from structboost.datasets import make_hmm_sequences

    X, y, lengths = make_hmm_sequences(20, length=(3, 3), random_state=0)
    words = [[{"w": str(round(v, 1))} for v in X[i:i + 3, 0]] for i in range(0, len(X), 3)]
    tags = [list(np.array(["a", "b", "c"])[y[i:i + 3]]) for i in range(0, len(X), 3)]
    clf = sb.XGBCRFClassifier(n_estimators=2).fit(words, tags, verbose=False)
    clf.fit(X, np.array(["a", "b", "c"])[y], lengths=lengths, verbose=False)
    assert clf.vectorizer_ is None
    _round_trip(clf, X, lengths, tmp_path)


def test_parameters_set_after_fit_are_not_saved_as_the_models(tmp_path):
    from structboost.datasets import make_hmm_sequences

    X, y, lengths = make_hmm_sequences(20, random_state=0)
    clf = sb.XGBCRFClassifier(n_estimators=2, max_depth=2).fit(X, y, lengths=lengths,
                                                               verbose=False)  # fmt: skip
    clf.set_params(max_depth=5)
    with pytest.raises(ValueError, match=r"\['max_depth'\] were set after fit"):
        clf.save_model(tmp_path / "m.json")
    clf.set_params(max_depth=2)
    _round_trip(_round_trip(clf, X, lengths, tmp_path), X, lengths, tmp_path)  # a load saves too


def test_labels_ending_in_nul_are_refused_not_merged():
    from structboost.datasets import make_hmm_sequences

    X, y, lengths = make_hmm_sequences(20, random_state=0)
    labels = [["a", "a\0", "b"][v] for v in y]
    with pytest.raises(ValueError, match="ends in a NUL character"):
        sb.XGBCRFClassifier(n_estimators=1).fit(X, labels, lengths=lengths)
