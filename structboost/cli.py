"""Command line entry point: ``structboost demo``."""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

MODES = ("logitboost", "treecrf", "gbcrf")


def _progress_callback(name, total, every):
    import xgboost as xgb

    class Progress(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            done = epoch + 1
            if done % every == 0 or done == total:
                nll = evals_log["train"]["crf-nll"][-1]
                print(f"\r  {name:<10} round {done:>4}/{total}  train NLL {nll:8.3f}", end="")
                sys.stdout.flush()
            return False

    return Progress()


def demo(args):
    """Train LogitBoost, TreeCRF and GBCRF on sticky synthetic HMM data."""
    import xgboost as xgb

    from . import predict, sequence_log_likelihood
    from .datasets import make_hmm_sequences
    from .metrics import sequence_accuracy, token_accuracy
    from .xgboost import crf_objective, xgb_params

    X, y, lengths = make_hmm_sequences(
        n_sequences=args.sequences,
        length=(10, 40),
        stay=args.stay,
        emission=args.emission,
        window=1,
        random_state=args.seed,
    )
    m_train = int(0.7 * len(lengths))
    cut = int(lengths[:m_train].sum())
    dtrain = xgb.DMatrix(X[:cut], label=y[:cut], group=lengths[:m_train])
    dtest = xgb.DMatrix(X[cut:], label=y[cut:], group=lengths[m_train:])
    y_test, len_test = y[cut:], lengths[m_train:]
    print(
        f"Synthetic HMM (Dietterich et al. 2008, s.7.3): 3 labels, P(stay)={args.stay}, "
        f"emission {args.emission}, window 1; {m_train} training and "
        f"{len(len_test)} test sequences ({cut} / {len(y_test)} rows); max_depth "
        f"{args.max_depth}, {args.rounds} rounds."
    )
    curves, rows = {}, []
    for mode in MODES:
        obj = crf_objective(3, mode=mode)
        eta = args.gbcrf_eta if mode == "gbcrf" else args.eta
        log = {}
        t0 = time.perf_counter()
        booster = xgb.train(
            xgb_params(3, max_depth=args.max_depth, eta=eta),
            dtrain,
            num_boost_round=args.rounds,
            obj=obj,
            custom_metric=obj.metric,
            evals=[(dtrain, "train")],
            evals_result=log,
            verbose_eval=False,
            callbacks=[obj.callback(), _progress_callback(mode, args.rounds, 5)],
        )
        seconds = time.perf_counter() - t0
        print()
        pred = predict(booster, dtest)
        rows.append(
            (
                mode,
                eta,
                token_accuracy(y_test, pred),
                sequence_accuracy(y_test, pred, len_test),
                -float(np.mean(sequence_log_likelihood(booster, dtest))),
                seconds,
            )
        )
        curves[mode] = log["train"]["crf-nll"]
    print()
    print(f"{'mode':<12}{'eta':>5}{'token acc':>10}{'seq acc':>10}{'test NLL':>10}{'seconds':>10}")
    for mode, eta, tok, seq, nll, sec in rows:
        print(f"{mode:<12}{eta:>5}{tok:>10.4f}{seq:>10.4f}{nll:>10.3f}{sec:>10.2f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "demo_training_nll.png"
    _plot_curves(curves, png)
    print(f"\nTraining NLL per round written to {png}")
    return 0


def _plot_curves(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, values in curves.items():
        ax.plot(np.arange(1, len(values) + 1), values, label=mode)
    ax.set_xlabel("boosting round")
    ax.set_ylabel("training NLL per sequence")
    ax.set_yscale("log")
    ax.set_title("Sticky synthetic HMM")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="structboost", description="CRF objectives for gradient-boosted trees."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="train the three modes on synthetic HMM data")
    d.add_argument("--sequences", type=int, default=300, help="number of sequences")
    d.add_argument("--stay", type=float, default=0.95, help="P(label repeats)")
    d.add_argument("--emission", type=float, default=0.5, help="P(symbol from own block)")
    d.add_argument("--rounds", type=int, default=30)
    d.add_argument("--max-depth", type=int, default=3)
    d.add_argument("--eta", type=float, default=0.5, help="learning rate of logitboost and treecrf")
    d.add_argument(
        "--gbcrf-eta", type=float, default=1.0, help="learning rate of gbcrf (<= 1 is monotone)"
    )
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", default="structboost-demo", help="folder for the PNG")
    d.set_defaults(func=demo)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
