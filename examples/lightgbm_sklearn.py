"""Sequence labelling with the scikit-learn estimators, on XGBoost and LightGBM.

Synthetic sticky-HMM data (Dietterich et al. 2008, s. 7.3) in a pandas
DataFrame: one row per position, a ``sentence_id`` column naming the
sequence, string labels. Both estimators train a GBCRF with early stopping
on a validation set; the LightGBM booster is then saved with its transitions
and loaded back. Runs in seconds::

    python examples/lightgbm_sklearn.py
"""

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from structboost import LGBMCRFClassifier, XGBCRFClassifier, predict_marginals
from structboost.datasets import make_hmm_sequences
from structboost.lightgbm import load_lgb_model, save_lgb_model


def sticky_frame(n_sequences=150, seed=0):
    """A DataFrame of sequences and its string labels."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=n_sequences, length=(10, 30), stay=0.9, emission=0.6, window=1,
        random_state=seed,
    )
    frame = pd.DataFrame(X, columns=[f"obs{i}" for i in range(X.shape[1])])
    frame.insert(0, "sentence_id", np.repeat(np.arange(len(lengths)), lengths))
    return frame, np.array(["ADJ", "NOUN", "VERB"])[y]


def main():
    frame, labels = sticky_frame()
    ids = frame["sentence_id"].to_numpy()
    train, valid, test = ids < 100, (ids >= 100) & (ids < 125), ids >= 125
    print(f"{train.sum()} training rows in {len(np.unique(ids[train]))} sequences; "
          f"{test.sum()} test rows.")

    # n_jobs=1: a few thousand rows train fastest on one engine thread.
    estimators = {
        "XGBoost": XGBCRFClassifier(
            n_estimators=200, learning_rate=1.0, max_depth=4, early_stopping_rounds=10, n_jobs=1
        ),
        "LightGBM": LGBMCRFClassifier(
            n_estimators=200, learning_rate=1.0, num_leaves=16, early_stopping_rounds=10, n_jobs=1
        ),
    }
    for name, est in estimators.items():
        t0 = time.perf_counter()
        est.fit(
            frame[train], labels[train], groups="sentence_id",
            eval_set=[(frame[valid], labels[valid], "sentence_id")], verbose=False,
        )
        seconds = time.perf_counter() - t0
        acc = est.score(frame[test], labels[test], groups="sentence_id")
        print(f"\n{name}: {est.best_iteration + 1} rounds kept, {seconds:.1f} s, "
              f"test token accuracy {acc:.3f}")
        print("transition scores (row label followed by column label):")
        print(est.transitions_.round(2).to_string())
        top = np.argsort(est.feature_importances_)[::-1][:3]
        print("most important features:", ", ".join(est.feature_names_in_[top]))

    lgbm = estimators["LightGBM"]
    print("\nfirst test sequence:", " ".join(lgbm.predict(frame[test], groups="sentence_id")[:8]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crf_lightgbm.json"
        save_lgb_model(lgbm.booster_, path)
        booster = load_lgb_model(path)
    features = frame[test].drop(columns="sentence_id")
    same = np.array_equal(
        predict_marginals(booster, features, groups=ids[test]),
        lgbm.predict_marginals(frame[test], groups="sentence_id"),
    )
    print(f"saved and reloaded LightGBM booster predicts the same marginals: {same}")


if __name__ == "__main__":
    main()
