"""scikit-learn model selection with whole sequences: GroupKFold and GridSearchCV.

A row is one position of a sequence, so a cross-validation split must never cut
a sequence in two. With ``sequence_column=`` the estimator reads the sequence
ids from a DataFrame column (never as a feature), the column travels with the
rows through every split, and ``GroupKFold`` given the same ids keeps each
sequence in one fold. ``score`` is token accuracy of the decoding the
estimator is set to (``decode=``), so the search can also choose it.

Synthetic sticky-HMM data with string labels::

    python examples/model_selection.py
"""

import time

import numpy as np
import pandas as pd
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score

import structboost as sb
from structboost.datasets import make_hmm_sequences


def token_frame(n_sequences, seed):
    """One row per token, a ``sentence_id`` column, and string labels."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=n_sequences, length=(8, 25), stay=0.85, emission=0.55, random_state=seed
    )
    frame = pd.DataFrame(X, columns=[f"obs{i}" for i in range(X.shape[1])])
    frame.insert(0, "sentence_id", np.repeat(np.arange(len(lengths)), lengths))
    return frame, np.array(["DET", "NOUN", "VERB"])[y]


def main():
    frame, labels = token_frame(180, 0)
    test_frame, test_labels = token_frame(80, 1)
    groups = frame["sentence_id"]
    cv = GroupKFold(n_splits=3)

    base = sb.XGBCRFClassifier(
        sequence_column="sentence_id", n_estimators=30, learning_rate=0.3, n_jobs=1
    )

    # Cross-validated token accuracy of one setting; no fold shares a sequence.
    start = time.perf_counter()
    scores = cross_val_score(base, frame, labels, groups=groups, cv=cv)
    print(f"3-fold token accuracy {scores.mean():.3f} +- {scores.std():.3f} "
          f"({time.perf_counter() - start:.1f} s)")

    # A small grid: tree depth and the decoding that predict() and score() use.
    grid = {"max_depth": [2, 4], "decode": ["viterbi", "marginal"]}
    search = GridSearchCV(base, grid, cv=cv)
    start = time.perf_counter()
    search.fit(frame, labels, groups=groups)
    print(f"grid search of {len(search.cv_results_['params'])} settings x 3 folds "
          f"in {time.perf_counter() - start:.1f} s")
    results = pd.DataFrame(search.cv_results_)[["params", "mean_test_score", "std_test_score"]]
    print(results.round(3).to_string(index=False))
    print("best:", search.best_params_)

    # The refitted best model, scored on sequences it never saw.
    print(f"held-out token accuracy: {search.score(test_frame, test_labels):.3f}")
    print("first held-out sentence:", " ".join(search.predict(test_frame)[:10]))


if __name__ == "__main__":
    main()
