"""sklearn-crfsuite's tutorial with one line changed: the estimator.

The tutorial's steps, in its words: ``word2features`` dicts, ``fit(X_train,
y_train)``, ``predict``, ``flat_f1_score`` / ``flat_classification_report``
over ``classes_`` minus ``"O"``, and ``RandomizedSearchCV(crf, ..., cv=3,
scoring=make_scorer(flat_f1_score, ...))``. The data are a small
CoNLL-2003-format file (token, POS, chunk, IOB1 tag) written by the test.
"""

from collections import Counter

import numpy as np
import pytest
import scipy.stats
from sklearn.base import is_classifier
from sklearn.metrics import make_scorer
from sklearn.model_selection import KFold, RandomizedSearchCV, check_cv

import structboost as sb
from structboost import metrics
from structboost.datasets import read_conll

pytestmark = pytest.mark.usefixtures("single_threaded")

PEOPLE = [("Peter", "Blackburn"), ("Werner", "Zwingmann"), ("Nikolaus", "van der Pas"),
          ("Franz", "Fischler"), ("Anna", "Kowalski")]  # fmt: skip
PLACES = ["BRUSSELS", "Germany", "Britain", "London", "Bonn"]
ORGS = [("European", "Commission"), ("EU",), ("Reuters",)]
VERBS = [("said", "VBD"), ("told", "VBD"), ("visited", "VBD")]


def conll_sample(n_sentences, seed):
    """CoNLL-2003 English lines: ``PER verb ORG in LOC .`` and ``LOC date`` sentences."""
    rng = np.random.default_rng(seed)
    lines = ["-DOCSTART- -X- O O", ""]
    for _ in range(n_sentences):
        if rng.random() < 0.2:
            lines += [f"{PLACES[rng.integers(len(PLACES))]} NNP I-NP I-LOC",
                      "1996-08-22 CD I-NP O", ""]  # fmt: skip
            continue
        person = PEOPLE[rng.integers(len(PEOPLE))]
        verb, tag = VERBS[rng.integers(len(VERBS))]
        org = ORGS[rng.integers(len(ORGS))]
        place = PLACES[rng.integers(len(PLACES))]
        lines += [f"{w} NNP I-NP I-PER" for w in " ".join(person).split()]
        lines += [f"{verb} {tag} I-VP O", "the DT I-NP O"]
        lines += [f"{w} NNP I-NP I-ORG" for w in org]
        lines += ["in IN I-PP O", f"{place} NNP I-NP I-LOC", ". . O O", ""]
    return "\n".join(lines) + "\n"


def read_sents(path):
    """The tutorial's sentences: lists of ``(token, postag, label)``."""
    frame = read_conll(path)
    return [list(zip(part["token"], part["pos"], part["tag"]))
            for _, part in frame.groupby("sentence", sort=True)]  # fmt: skip


# -- the tutorial's feature functions, verbatim ---------------------------------
def word2features(sent, i):
    word = sent[i][0]
    postag = sent[i][1]
    features = {
        "bias": 1.0,
        "word.lower()": word.lower(),
        "word[-3:]": word[-3:],
        "word[-2:]": word[-2:],
        "word.isupper()": word.isupper(),
        "word.istitle()": word.istitle(),
        "word.isdigit()": word.isdigit(),
        "postag": postag,
        "postag[:2]": postag[:2],
    }
    if i > 0:
        word1 = sent[i - 1][0]
        postag1 = sent[i - 1][1]
        features.update({
            "-1:word.lower()": word1.lower(),
            "-1:word.istitle()": word1.istitle(),
            "-1:word.isupper()": word1.isupper(),
            "-1:postag": postag1,
            "-1:postag[:2]": postag1[:2],
        })  # fmt: skip
    else:
        features["BOS"] = True
    if i < len(sent) - 1:
        word1 = sent[i + 1][0]
        postag1 = sent[i + 1][1]
        features.update({
            "+1:word.lower()": word1.lower(),
            "+1:word.istitle()": word1.istitle(),
            "+1:word.isupper()": word1.isupper(),
            "+1:postag": postag1,
            "+1:postag[:2]": postag1[:2],
        })  # fmt: skip
    else:
        features["EOS"] = True
    return features


def sent2features(sent):
    return [word2features(sent, i) for i in range(len(sent))]


def sent2labels(sent):
    return [label for token, postag, label in sent]


@pytest.mark.parametrize("cls", [sb.XGBSequenceCRF, sb.LGBMSequenceCRF],
                         ids=["xgboost", "lightgbm"])  # fmt: skip
def test_the_tutorial_runs_with_the_estimator_swapped(cls, tmp_path):
    (tmp_path / "eng.train").write_text(conll_sample(60, seed=0))
    (tmp_path / "eng.testb").write_text(conll_sample(20, seed=1))
    train_sents = read_sents(tmp_path / "eng.train")
    test_sents = read_sents(tmp_path / "eng.testb")
    X_train = [sent2features(s) for s in train_sents]
    y_train = [sent2labels(s) for s in train_sents]
    X_test = [sent2features(s) for s in test_sents]
    y_test = [sent2labels(s) for s in test_sents]

    # The one line changed (was: sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.1, ...)).
    crf = cls(n_estimators=10, learning_rate=0.5, min_child_weight=0.1, n_jobs=1)
    crf.fit(X_train, y_train)

    labels = list(crf.classes_)
    labels.remove("O")
    y_pred = crf.predict(X_test)
    assert [len(p) for p in y_pred] == [len(t) for t in y_test]
    assert metrics.flat_f1_score(y_test, y_pred, average="weighted", labels=labels) > 0.9
    sorted_labels = sorted(labels, key=lambda name: (name[1:], name[0]))
    report = metrics.flat_classification_report(y_test, y_pred, labels=sorted_labels, digits=3)
    assert "I-PER" in report
    # Span scores and sequence accuracy read the estimators' own output shape.
    assert metrics.span_prf(y_test, y_pred, scheme="iob1").loc["overall", "f1"] > 0.9
    assert metrics.sequence_accuracy_score(y_test, y_pred) > 0.5
    assert crf.predict_single(X_test[0]) == y_pred[0]
    marginals = crf.predict_marginals(X_test)
    assert [m.shape for m in marginals] == [(len(t), len(crf.classes_)) for t in y_test]

    # "Let's check what classifier learned": the transitions, as crfsuite's Counter.
    top = Counter(crf.transition_features_).most_common(3)
    assert ("I-PER", "I-PER") in [pair for pair, _ in top]  # names go on
    assert crf.transition_features_[("I-PER", "O")] == crf.transitions_.loc["I-PER", "O"]
    assert len(crf.transition_features_) == len(crf.classes_) ** 2

    # Model selection: sequences are the samples, so cv=3 is KFold over sentences.
    assert not is_classifier(crf)
    assert isinstance(check_cv(3, y_train, classifier=is_classifier(crf)), KFold)
    params_space = {"max_depth": [2, 4], "learning_rate": scipy.stats.uniform(0.3, 0.7)}
    f1_scorer = make_scorer(metrics.flat_f1_score, average="weighted", labels=labels)
    rs = RandomizedSearchCV(crf, params_space, cv=3, verbose=0, n_jobs=1, n_iter=2,
                            scoring=f1_scorer, random_state=0)  # fmt: skip
    rs.fit(X_train, y_train)
    assert rs.best_score_ > 0.8
    assert {"split0_test_score", "split2_test_score"} <= set(rs.cv_results_)
    crf = rs.best_estimator_
    assert metrics.flat_f1_score(y_test, crf.predict(X_test), average="weighted",
                                 labels=labels) > 0.9  # fmt: skip


def test_the_row_dialect_and_the_sequence_dialect_say_which_is_which():
    X = [np.zeros((3, 2)), np.ones((2, 2))]
    with pytest.raises(ValueError, match="list of sequences.*use XGBCRFClassifier"):
        sb.XGBSequenceCRF().fit(np.zeros((5, 2)), [0, 1, 0, 1, 0], lengths=[3, 2])
    est = sb.XGBCRFClassifier(n_estimators=2, n_jobs=1).fit(X, [[0, 1, 0], [1, 1]])
    with pytest.raises(ValueError, match="one sequence of feature dicts.*predict_single"):
        est.predict([{"a": 1.0}, {"a": 2.0}])
    assert est.predict_single(np.zeros((3, 2))) == est.predict(X)[0]
