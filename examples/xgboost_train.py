"""The CRF objective in plain ``xgboost.train``: early stopping, importance, SHAP.

``structboost.crf_objective(K)`` is a custom objective like any other: XGBoost
grows the trees, the objective runs exact forward-backward inference over each
sequence every round and hands back the CRF gradient and Hessian. The sequence
boundaries travel as the DMatrix's ``group`` (rows per sequence, in row
order); the transition scores travel inside the booster (``callbacks=
[obj.callback()]``), so ``save_model`` keeps them. Everything else is XGBoost's:
early stopping on a validation set, ``get_score`` importances and per-feature
contributions (SHAP values) from ``predict(pred_contribs=True)``.

Synthetic sticky-HMM data (Dietterich et al. 2008, s. 7.3); a PNG of the
importances and mean absolute SHAP values is written with ``--plot FILE``::

    python examples/xgboost_train.py --plot importance.png
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.datasets import make_hmm_sequences

K = 3  # labels


def dmatrix(n_sequences, seed):
    """A DMatrix of sequences with named features; the boundaries as ``group``."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=n_sequences, length=(10, 30), n_labels=K, stay=0.85, emission=0.6,
        random_state=seed,
    )
    names = [f"symbol_{i}" for i in range(X.shape[1])]
    return xgb.DMatrix(X, label=y, group=lengths, feature_names=names)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="write importance and SHAP bars to this PNG")
    args = parser.parse_args(argv)

    dtrain, dvalid, dtest = dmatrix(150, 0), dmatrix(40, 1), dmatrix(60, 2)

    obj = sb.crf_objective(num_labels=K)  # GBCRF: adaptive step, L-BFGS transitions
    booster = xgb.train(
        {**sb.xgb_params(num_labels=K), "max_depth": 4, "eta": 0.3, "nthread": 1},
        dtrain,
        num_boost_round=200,
        obj=obj,
        custom_metric=obj.metric,       # the CRF's NLL per sequence ("crf-nll")
        evals=[(dtrain, "train"), (dvalid, "valid")],
        early_stopping_rounds=10,       # on the last entry of evals
        callbacks=[obj.callback()],     # keeps the transitions with the booster
        verbose_eval=False,
    )
    print(f"early stopping kept {booster.best_iteration + 1} rounds "
          f"(valid crf-nll {booster.best_score:.3f})")

    labels = sb.predict(booster, dtest)             # Viterbi path, flat (n,)
    marginals = sb.predict_marginals(booster, dtest)  # (n, K)
    truth = dtest.get_label().astype(int)
    print(f"test token accuracy: Viterbi {np.mean(labels == truth):.3f}, "
          f"marginal {np.mean(marginals.argmax(1) == truth):.3f}")

    # Importance: XGBoost's own, over the trees of every label.
    gain = booster.get_score(importance_type="gain")
    top = sorted(gain, key=gain.get, reverse=True)[:5]
    print("top features by gain:", ", ".join(f"{f} ({gain[f]:.1f})" for f in top))

    # SHAP values of the node scores: (rows, K, features + 1), the last column the bias.
    # They explain each label's node potential; the transitions add the chain's part.
    rounds = (0, booster.best_iteration + 1)
    contribs = booster.predict(dtest, pred_contribs=True, iteration_range=rounds)
    mean_abs = np.abs(contribs[:, :, :-1]).mean(axis=0)  # (K, features)
    names = np.array(dtest.feature_names)
    for k in range(K):
        best = np.argsort(mean_abs[k])[::-1][:3]
        print(f"label {k}: largest mean |SHAP| from {', '.join(names[best])}")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crf.json"
        booster.save_model(path)                    # trees and transitions in one file
        loaded = xgb.Booster(model_file=path)
        same = np.array_equal(sb.predict(loaded, dtest), labels)
    print(f"reloaded booster predicts the same tags: {same}")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        order = np.argsort([gain.get(n, 0.0) for n in names])[::-1][:10]
        left.barh(names[order][::-1], [gain.get(n, 0.0) for n in names[order]][::-1])
        left.set_title("gain (get_score)")
        total = mean_abs.sum(axis=0)
        order = np.argsort(total)[::-1][:10]
        right.barh(names[order][::-1], total[order][::-1])
        right.set_title("mean |SHAP|, summed over labels")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
