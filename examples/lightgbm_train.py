"""The CRF objective in plain ``lightgbm.train``, with early stopping.

``structboost.lightgbm.lgb_crf_objective(K)`` goes in LightGBM's ``params``
as the objective; ``lgb_params(K, ...)`` adds the settings a CRF needs
(``num_class``, no built-in metric, a minimum leaf Hessian). The sequence
boundaries are the Dataset's ``group``; ``callbacks=[obj.callback()]`` keeps
the transition scores with the booster, and ``save_lgb_model`` writes trees and
transitions to one JSON file. Early stopping watches the CRF's NLL per sequence
on a validation set (``feval=obj.metric``).

Synthetic sticky-HMM data (Dietterich et al. 2008, s. 7.3)::

    python examples/lightgbm_train.py
"""

import tempfile
from pathlib import Path

import lightgbm as lgb
import numpy as np

import structboost as sb
import structboost.lightgbm as sbl
from structboost.datasets import make_hmm_sequences

K = 4  # labels


def sequences(n_sequences, seed):
    return make_hmm_sequences(
        n_sequences=n_sequences, length=(10, 30), n_labels=K, stay=0.85, emission=0.6,
        random_state=seed,
    )


def main():
    X, y, lengths = sequences(150, 0)
    Xv, yv, lengths_v = sequences(40, 1)
    Xt, yt, lengths_t = sequences(60, 2)

    obj = sbl.lgb_crf_objective(K)  # GBCRF with the library's defaults
    params = sbl.lgb_params(K, objective=obj, learning_rate=0.3, num_leaves=15,
                            num_threads=1, verbose=-1)
    train = lgb.Dataset(X, label=y, group=lengths)
    valid = lgb.Dataset(Xv, label=yv, group=lengths_v, reference=train)
    booster = lgb.train(
        params, train, num_boost_round=200,
        valid_sets=[valid], valid_names=["valid"], feval=obj.metric,
        callbacks=[obj.callback(), lgb.early_stopping(10, verbose=False)],
    )
    print(f"early stopping kept {booster.best_iteration} rounds "
          f"(valid crf-nll {booster.best_score['valid']['crf-nll']:.3f})")

    pred = sb.predict(booster, Xt, lengths=lengths_t)                 # Viterbi
    marginals = sb.predict_marginals(booster, Xt, lengths=lengths_t)  # (n, K)
    print(f"test token accuracy: Viterbi {np.mean(pred == yt):.3f}, "
          f"marginal {np.mean(marginals.argmax(1) == yt):.3f}")

    # LightGBM's own split-gain importance, summed over the labels' trees.
    gain = booster.feature_importance(importance_type="gain")
    print("top features by gain:", np.argsort(gain)[::-1][:5].tolist())

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crf_lightgbm.json"
        sbl.save_lgb_model(booster, path)  # LightGBM's model and the transitions
        loaded = sbl.load_lgb_model(path)
        same = np.array_equal(sb.predict(loaded, Xt, lengths=lengths_t), pred)
    print(f"reloaded booster predicts the same tags: {same}")


if __name__ == "__main__":
    main()
