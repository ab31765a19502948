"""The scikit-learn estimators XGBCRFClassifier and LGBMCRFClassifier."""

import pickle
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.utils.estimator_checks import check_estimator

import structboost as sb
from structboost.datasets import make_hmm_sequences
from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.lgbm import LGBMCRFClassifier

pytestmark = pytest.mark.usefixtures("single_threaded")

LABELS = np.array(["B-X", "I-X", "O"])
# Small, fast models; one thread: the CI machine has two busy cores.
SMALL = {
    XGBCRFClassifier: {"n_estimators": 8, "learning_rate": 1.0, "max_depth": 3, "n_jobs": 1},
    LGBMCRFClassifier: {"n_estimators": 8, "learning_rate": 1.0, "num_leaves": 8, "n_jobs": 1},
}
ESTIMATORS = pytest.mark.parametrize(
    "cls", [XGBCRFClassifier, LGBMCRFClassifier], ids=["xgboost", "lightgbm"]
)


def small(cls, **kw):
    return cls(**{**SMALL[cls], **kw})


@pytest.fixture(scope="module")
def data():
    """A DataFrame with a sentence-id column, string labels, a train/test split."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=60, length=(8, 20), stay=0.9, emission=0.7, random_state=0
    )
    ids = np.repeat(np.arange(len(lengths)) * 7 % 61, lengths)  # unsorted, contiguous
    frame = pd.DataFrame(X, columns=[f"sym{i}" for i in range(X.shape[1])])
    frame.insert(0, "sentence_id", ids)
    cut = int(lengths[:40].sum())
    return {
        "frame": frame,
        "X": X,
        "y": LABELS[y],
        "codes": y,
        "lengths": lengths,
        "ids": ids,
        "train": slice(0, cut),
        "test": slice(cut, None),
        "m_train": 40,
    }


def split(data, part):
    rows = data[part]
    return data["frame"].iloc[rows], data["y"][rows]


@pytest.fixture(scope="module")
def fitted(data):
    frame, y = split(data, "train")
    return {cls: small(cls).fit(frame, y, groups="sentence_id") for cls in SMALL}


@ESTIMATORS
def test_dataframe_with_sequence_id_column_and_string_labels(data, fitted, cls):
    est = fitted[cls]
    frame, y = split(data, "test")
    X_num = data["X"][data["test"]]
    lengths = data["lengths"][data["m_train"]:]
    np.testing.assert_array_equal(est.classes_, LABELS)
    assert est.n_features_in_ == X_num.shape[1]
    assert "sentence_id" not in est.feature_names_in_
    assert est.best_iteration == 7  # XGBoost's name, 0-based; best_iteration_ the engine's
    assert est.best_iteration_ == (8 if cls is LGBMCRFClassifier else 7)

    pred = est.predict(frame, groups="sentence_id")
    assert pred.dtype == LABELS.dtype and set(pred) <= set(LABELS)
    codes = sb.predict(est.booster_, est._engine_data(frame.drop(columns="sentence_id")),
                       lengths=lengths)
    np.testing.assert_array_equal(pred, LABELS[codes])
    assert est.score(frame, y, groups="sentence_id") == pytest.approx(np.mean(pred == y))
    assert est.score(frame, y, groups="sentence_id") > 0.6

    marg = est.predict_marginals(frame, groups="sentence_id")
    assert marg.shape == (len(y), 3)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0)
    loglik = est.predict_log_likelihood(frame, y, groups="sentence_id")
    assert loglik.shape == (len(lengths),) and (loglik < 0).all()
    np.testing.assert_allclose(
        loglik,
        sb.sequence_log_likelihood(
            est.booster_, est._engine_data(frame.drop(columns="sentence_id")),
            data["codes"][data["test"]], lengths=lengths,
        ),
    )

    trans = est.transitions_
    assert list(trans.index) == list(LABELS) and list(trans.columns) == list(LABELS)
    assert np.diag(trans).min() > trans.to_numpy()[~np.eye(3, dtype=bool)].max()  # sticky
    imp = est.feature_importances_
    assert imp.shape == (X_num.shape[1],) and imp.sum() == pytest.approx(1.0)

    # The same rows given as numpy with per-row ids or lengths.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "X does not have valid feature names"
        np.testing.assert_array_equal(est.predict(X_num, groups=frame["sentence_id"]), pred)
        np.testing.assert_array_equal(est.predict(X_num, lengths=lengths), pred)


@ESTIMATORS
def test_numpy_lengths_and_sparse_input(data, cls):
    X, y = data["X"][data["train"]], data["y"][data["train"]]
    lengths = data["lengths"][: data["m_train"]]
    dense = small(cls).fit(X, y, lengths=lengths)
    assert not hasattr(dense, "feature_names_in_")
    Xt, lt = data["X"][data["test"]], data["lengths"][data["m_train"]:]
    sparse = small(cls).fit(sp.csr_matrix(X), y, lengths=lengths)
    pred = sparse.predict(sp.csr_matrix(Xt), lengths=lt)
    if cls is LGBMCRFClassifier:  # XGBoost reads absent sparse entries as missing, not 0
        np.testing.assert_array_equal(pred, dense.predict(Xt, lengths=lt))
    assert np.mean(pred == data["y"][data["test"]]) > 0.6


@ESTIMATORS
def test_early_stopping_on_eval_set(data, cls):
    frame, y = split(data, "train")
    valid, yv = split(data, "test")
    lengths_v = data["lengths"][data["m_train"]:]
    overfit = {"n_estimators": 40, "early_stopping_rounds": 3}
    if cls is XGBCRFClassifier:
        overfit.update(max_depth=6, reg_lambda=0.0, min_child_weight=0.0)
    else:
        overfit.update(num_leaves=31, min_child_samples=1, min_child_weight=0.0)
    forms = [
        (valid, yv, "sentence_id"),
        (valid.drop(columns="sentence_id"), yv, valid["sentence_id"].to_numpy()),
        {"X": valid.drop(columns="sentence_id"), "y": yv, "lengths": lengths_v},
    ]
    fits = [small(cls, **overfit).fit(frame, y, groups="sentence_id", eval_set=[f]) for f in forms]
    best = fits[0].best_iteration  # 0-based on both engines
    assert best < 39, "the overfitting setup should stop early"
    assert len(fits[0].evals_result_["validation_0"]["crf-nll"]) > best + 1
    for est in fits[1:]:
        assert est.best_iteration == best
        np.testing.assert_array_equal(est.transitions_, fits[0].transitions_)
    # The kept model is the one trained for best + 1 rounds, transitions included.
    short = small(cls, **{**overfit, "n_estimators": best + 1, "early_stopping_rounds": None})
    short.fit(frame, y, groups="sentence_id")
    np.testing.assert_allclose(fits[0].transitions_, short.transitions_)
    np.testing.assert_allclose(
        fits[0].predict_marginals(valid, groups="sentence_id"),
        short.predict_marginals(valid, groups="sentence_id"),
        atol=1e-6,
    )


@ESTIMATORS
def test_sample_weight_is_per_sequence(data, fitted, cls):
    frame, y = split(data, "train")
    test, _ = split(data, "test")
    ones = small(cls).fit(frame, y, groups="sentence_id", sample_weight=np.ones(len(y)))
    np.testing.assert_array_equal(
        ones.predict(test, groups="sentence_id"), fitted[cls].predict(test, groups="sentence_id")
    )
    lengths = data["lengths"][: data["m_train"]]
    per_seq = np.repeat(np.linspace(0.5, 2.0, len(lengths)), lengths)
    small(cls).fit(frame, y, groups="sentence_id", sample_weight=per_seq)
    varying = np.ones(len(y))
    varying[1] = 3.0
    with pytest.raises(ValueError, match="varies within sequence 0"):
        small(cls).fit(frame, y, groups="sentence_id", sample_weight=varying)


@ESTIMATORS
def test_clear_errors(data, fitted, cls):
    frame, y = split(data, "train")
    X = frame.drop(columns="sentence_id").to_numpy()
    ids = frame["sentence_id"].to_numpy()
    est = small(cls)
    with pytest.raises(NotFittedError):
        est.predict(X, groups=ids)
    with pytest.raises(NotFittedError):
        est.transitions_  # noqa: B018
    with pytest.raises(ValueError, match="contiguous"):
        est.fit(X, y, groups=np.roll(ids, 3))
    with pytest.raises(ValueError, match="sum to"):
        est.fit(X, y, lengths=[len(y) - 1, 0][:1])
    with pytest.raises(ValueError, match="names a column"):
        est.fit(X, y, groups="sentence_id")
    with pytest.raises(ValueError, match="no column 'sid'"):
        est.fit(frame, y, groups="sid")
    with pytest.raises(ValueError, match=r"\(X, y, groups\)"):
        est.fit(X, y, groups=ids, eval_set=[(X,)])
    with pytest.raises(ValueError, match=r"fitted on sequences, so eval_set\[0\] needs"):
        est.fit(X, y, groups=ids, eval_set=[(X, y)])
    with pytest.raises(ValueError, match="must have keys"):
        est.fit(X, y, groups=ids, eval_set=[{"X": X, "labels": y}])
    with pytest.raises(ValueError, match="not seen in fit"):
        est.fit(X, y, groups=ids, eval_set=[(X, np.where(y == "O", "Z", y), ids)])
    with pytest.raises(ValueError, match="only one class"):
        est.fit(X, np.full(len(y), "O"), groups=ids)
    with pytest.raises(ValueError, match="needs an eval_set"):
        small(cls, early_stopping_rounds=2).fit(X, y, groups=ids)
    with pytest.raises(ValueError, match="set by"):
        small(cls, objective="multiclass").fit(X, y, groups=ids)
    with pytest.raises(ValueError, match="zero everywhere"):
        est.fit(X, y, groups=ids, sample_weight=np.zeros(len(y)))
    with pytest.raises(ValueError, match="feature names"):
        fitted[cls].predict(frame.drop(columns="sym0"), groups="sentence_id")


@ESTIMATORS
def test_params_clone_pickle_joblib(data, fitted, cls, tmp_path):
    est = small(cls, reg_alpha=0.5)
    params = est.get_params()
    assert params["reg_alpha"] == 0.5 and params["mode"] == "gbcrf"
    twin = clone(est)
    assert twin.get_params() == params
    twin.set_params(mode="treecrf", colsample_bytree=0.9)
    assert twin.get_params()["colsample_bytree"] == 0.9 and twin.mode == "treecrf"
    assert "colsample_bytree" not in est.get_params()

    test, _ = split(data, "test")
    expected = fitted[cls].predict_marginals(test, groups="sentence_id")
    joblib.dump(fitted[cls], tmp_path / "est.joblib")
    for copy in (pickle.loads(pickle.dumps(fitted[cls])), joblib.load(tmp_path / "est.joblib")):
        np.testing.assert_array_equal(copy.predict_marginals(test, groups="sentence_id"), expected)


class RecordingGroupKFold(GroupKFold):
    """GroupKFold that remembers the groups it was given."""

    seen = []

    def split(self, X, y=None, groups=None):
        RecordingGroupKFold.seen.append(groups)
        return super().split(X, y, groups)


@ESTIMATORS
def test_grid_search_over_sequences_with_metadata_routing(data, cls):
    X, y, ids = data["X"], data["y"], data["ids"]
    with sklearn.config_context(enable_metadata_routing=True):
        est = small(cls).set_fit_request(groups=True).set_score_request(groups=True)
        search = GridSearchCV(
            est, {"max_depth": [2, 4]}, cv=RecordingGroupKFold(n_splits=2), error_score="raise"
        )
        RecordingGroupKFold.seen.clear()
        search.fit(X, y, groups=ids)
    assert RecordingGroupKFold.seen and RecordingGroupKFold.seen[0] is ids
    assert search.best_params_["max_depth"] in (2, 4)
    assert search.cv_results_["mean_test_score"].min() > 0.5
    assert search.best_estimator_.predict(X, groups=ids).shape == y.shape


# -- scikit-learn's estimator checks ------------------------------------------
#
# scikit-learn's generic checks call fit(X, y) and predict(X) on plain arrays
# of unrelated rows. The estimators read a fit without boundaries as one
# sequence per row (an ordinary classifier; a model fitted on sequences
# refuses predict without boundaries instead), so the checks run on the real
# classes. Each check that still fails is listed with its reason; the test
# asserts that exactly these fail.

EXPECTED_FAILURES = {
    XGBCRFClassifier: {},
    LGBMCRFClassifier: {
        "check_no_attributes_set_in_init": "engine parameters given as keyword arguments "
        "(min_child_samples here, which the checks' few dozen rows need) become attributes, "
        "as in XGBoost's and LightGBM's own estimators",
        "check_sample_weight_equivalence_on_dense_data": "LightGBM counts rows, not weight, "
        "for min_child_samples and its histogram bins, so a weight of 2 is not a repeated row "
        "(XGBoost's hist passes this check)",
        "check_sample_weight_equivalence_on_sparse_data": "as on dense data",
    },
}
CHECKED = {
    "xgboost": (lambda: XGBCRFClassifier(n_estimators=2, max_depth=2), XGBCRFClassifier),
    "xgboost-input": (
        lambda: XGBCRFClassifier(n_estimators=2, max_depth=2, transitions_from="input"),
        XGBCRFClassifier,
    ),
    # min_child_samples: the checks fit a few dozen rows; LightGBM's 20 leaves no split.
    "lightgbm": (
        lambda: LGBMCRFClassifier(n_estimators=2, num_leaves=4, min_child_samples=2, n_jobs=1),
        LGBMCRFClassifier,
    ),
}


@pytest.mark.parametrize("case", list(CHECKED))
def test_scikit_learn_check_estimator(case):
    make, cls = CHECKED[case]
    statuses = {}

    def record(estimator, check_name, exception, status, expected_to_fail,
               expected_to_fail_reason):  # fmt: skip
        if status != "skipped":
            statuses.setdefault(check_name, set()).add(status)

    expected = EXPECTED_FAILURES[cls]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(
            make(), expected_failed_checks=expected, on_fail=None, on_skip=None,
            callback=record,
        )  # fmt: skip
    failed = {name for name, seen in statuses.items() if seen - {"passed"}}
    assert failed == set(expected), {name: statuses[name] for name in failed ^ set(expected)}
    assert len(statuses) > 50


def test_predict_decodes_by_viterbi_or_by_marginals():
    X, y, lengths = make_hmm_sequences(n_sequences=30, length=(5, 12), stay=0.9, random_state=3)
    labels = np.array(["a", "b", "c"])[y]
    est = XGBCRFClassifier(n_estimators=5, max_depth=3, n_jobs=1).fit(X, labels, lengths=lengths)
    marg = est.predict_marginals(X, lengths=lengths)
    np.testing.assert_array_equal(
        est.predict(X, lengths=lengths, decode="marginal"), est.classes_[marg.argmax(axis=1)]
    )
    assert set(est.predict(X, lengths=lengths)) <= set(est.classes_)
    with pytest.raises(ValueError, match="decode"):
        est.predict(X, lengths=lengths, decode="greedy")
