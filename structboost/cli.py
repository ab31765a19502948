"""Command line entry point: ``structboost train | predict | evaluate | demo | warmup``.

``train``, ``predict`` and ``evaluate`` work on CoNLL token files through
:class:`structboost.tagging.ChunkTagger`. Results go to standard output;
progress and notes to the ``structboost`` logger on standard error (one
redrawn line on a terminal, plain lines otherwise).
"""

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ._io import atomic_open
from ._version import __version__
from ._extras import require
from .inference.chain import GAMMA_METHODS
from .objectives.params import DEFAULTS, MODES, SOLVERS, STEPS

logger = logging.getLogger("structboost.cli")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _progress_callback(name, total, every, stream=None):
    """An XGBoost callback reporting the training NLL every ``every`` rounds (one redrawn line on a
    terminal, else INFO lines).
    """
    import xgboost as xgb

    stream = sys.stderr if stream is None else stream
    tty = stream.isatty()

    class Progress(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            done = epoch + 1
            if done % every == 0 or done == total:
                nll = evals_log["train"]["crf-nll"][-1]
                line = f"  {name:<10} round {done:>4}/{total}  train NLL {nll:8.3f}"
                if tty:
                    stream.write("\r" + line + ("\n" if done == total else ""))
                    stream.flush()
                else:
                    logger.info(line.strip())
            return False

    return Progress()


def demo(args):
    """Train GBCRF, TreeCRF and LogitBoost with the library's defaults on sticky HMM data."""
    require("matplotlib", "plot", "structboost demo (its plot)")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file: give a folder for the plot (made if missing).")
    from .datasets import make_hmm_sequences
    from .estimators.chain import XGBCRFClassifier
    from .metrics import sequence_accuracy, token_accuracy
    from .sequences import offsets_from_lengths

    X, y, lengths = make_hmm_sequences(n_sequences=args.sequences, length=(10, 40), stay=args.stay,
                                       emission=args.emission, window=1, random_state=args.seed)
    # 60% training, 20% validation (early stopping), 20% test sequences.
    cuts = [0, int(0.6 * len(lengths)), int(0.8 * len(lengths)), len(lengths)]
    rows = offsets_from_lengths(lengths)[cuts]
    train, valid, test = (
        {"X": X[r0:r1], "y": y[r0:r1], "lengths": lengths[s0:s1]}
        for r0, r1, s0, s1 in zip(rows[:-1], rows[1:], cuts[:-1], cuts[1:])
    )
    defaults = XGBCRFClassifier()
    logger.info(
        f"Synthetic HMM (Dietterich et al. 2008, s.7.3): 3 labels, P(stay)={args.stay}, "
        f"emission {args.emission}, window 1; {len(train['lengths'])} training, "
        f"{len(valid['lengths'])} validation and {len(test['lengths'])} test sequences; "
        f"every mode with the library's defaults (learning_rate {defaults.learning_rate}, "
        f"max_depth {defaults.max_depth}), at most {args.rounds} rounds, early stopping "
        f"after {args.early_stopping}."
    )
    fits = {"eval_set": [{**train, "name": "train"}, {**valid, "name": "valid"}], **train}
    # One round and a prediction per mode first, on the same data, so that
    # numba's compile (once per process, or never with a warm cache) is not timed.
    logger.info("warming up: one round per mode compiles the kernels the timings use ...")
    for mode in MODES:
        clf = XGBCRFClassifier(mode=mode, n_estimators=1).fit(**fits, verbose=False)
        clf.predict_log_likelihood(**test)
        clf.predict(test["X"], lengths=test["lengths"])
    curves, results = {}, []
    for mode in MODES:
        clf = XGBCRFClassifier(mode=mode, n_estimators=args.rounds,
                               early_stopping_rounds=args.early_stopping,
                               callbacks=[_progress_callback(mode, args.rounds, 5)])
        t0 = time.perf_counter()
        clf.fit(**fits, verbose=False)  # the progress callback reports instead
        seconds = time.perf_counter() - t0
        pred = clf.predict(test["X"], lengths=test["lengths"])
        results.append((mode, clf.best_iteration_ + 1, token_accuracy(test["y"], pred),
                        sequence_accuracy(test["y"], pred, test["lengths"]),
                        -float(np.mean(clf.predict_log_likelihood(**test))), seconds))
        curves[mode] = clf.evals_result_["train"]["crf-nll"]
    print()
    print(f"{'mode':<12}{'rounds':>7}{'token acc':>10}{'seq acc':>10}{'test NLL':>10}", end="")
    print(f"{'fit s':>8}")
    for mode, kept, tok, seq, nll, sec in results:
        print(f"{mode:<12}{kept:>7}{tok:>10.4f}{seq:>10.4f}{nll:>10.3f}{sec:>8.2f}")
    print(
        "\nEach mode trained with the library's defaults on the same sequences, stopped "
        "early on the validation NLL (rounds: those kept). Accuracies are of the Viterbi "
        "path on the test sequences; test NLL is the mean negative log-likelihood per test "
        "sequence (lower is better; the CRF objective the modes minimise); fit s is the "
        "training time after a warm-up that compiled the kernels. logitboost has no "
        "transitions."
    )
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="structboost-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    png = out / "demo_training_nll.png"
    _plot_curves(curves, png)
    print(f"Training NLL per round written to {png}")
    return 0


def warmup(args):
    """Compile and cache the numba kernels for the common signatures."""
    from .warmup import warmup as run

    logger.info("compiling the numba kernels (cached on disk for later runs) ...")
    seconds = run(log=logger.info)
    print(f"kernels ready in {seconds:.1f} s")
    return 0


def _plot_curves(curves, path):
    """Training NLL per round of every mode, as a PNG at ``path``."""
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
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)


def _read(path, columns, flag, encoding, scheme=None):
    """The token frame of the file of option ``flag``, its tags checked against ``scheme``."""
    from .datasets import read_conll

    if not Path(path).is_file():
        raise ValueError(f"{flag} {path}: no such file.")
    frame = read_conll(path, columns=columns, encoding=encoding, line_numbers=True)
    if frame.empty:
        raise ValueError(f"{flag} {path} holds no tokens: is it a CoNLL column file?")
    if scheme is not None:
        _check_tags(frame, path, columns, scheme)
    return frame


def _check_tags(frame, path, columns, scheme):
    """Raise naming the first line and column whose tag is not of ``scheme``."""
    from .text.tags import SCHEME_PREFIXES, check_scheme, parse_tags

    scheme = check_scheme(scheme)
    tags = frame["tag"].to_numpy().astype(str)
    try:
        parse_tags(tags, scheme)
    except ValueError:
        for line, tag in zip(frame["line"], tags.tolist()):
            try:
                parse_tags(np.array([tag]), scheme)
            except ValueError:
                prefixes = "/".join(f"{p}-" for p in SCHEME_PREFIXES[scheme])
                raise ValueError(
                    f"{path}, line {line}, column {columns.index('tag') + 1}: tag {tag!r} is "
                    f"not a {scheme.upper()} tag ('O', or {prefixes} and a type such as "
                    "'B-PER'). Set --scheme to the file's scheme."
                ) from None
        raise


def _hessian_bound(text):
    """``--hessian-bound``: a bound's name, or a number (checked by the objective's spec)."""
    try:
        return float(text)
    except ValueError:
        return text


#: ``train``'s options of the objective: ObjectiveSpec field -> add_argument keywords.
_OBJECTIVE_OPTIONS = {
    "mode": {"choices": MODES, "help": "CRF objective"},
    "hessian_bound": {"type": _hessian_bound, "help": "GBCRF's Hessian bound: "
                      f"{', '.join(GAMMA_METHODS)} or a positive number"},
    "step": {"choices": STEPS, "help": "GBCRF step size"},
    "transition_solver": {"choices": SOLVERS, "help": "solver of the transitions' step every "
                          "round (lbfgs, newton: from the round's pass)"},
    "reg_transitions": {"type": float, "help": "L2 penalty on the transition scores"},
}  # fmt: skip


def train(args):
    """Fit a :class:`~structboost.tagging.ChunkTagger` on a token file and save it."""
    from .estimators.chain import XGBCRFClassifier
    from .estimators.lgbm import LGBMCRFClassifier
    from .text.lexical import TokenFeatures
    from .tagging import ChunkTagger

    columns = _columns(args.columns)
    _check_output(args.model, "--model", {"--train": args.train, "--dev": args.dev})
    frame = _read(args.train, columns, "--train", args.encoding, args.scheme)
    dev = _read(args.dev, columns, "--dev", args.encoding, args.scheme) if args.dev else None
    extra = tuple(c for c in columns if c not in ("token", "tag"))
    engine = {"xgboost": XGBCRFClassifier, "lightgbm": LGBMCRFClassifier}[args.engine]
    # --learning-rate and --max-depth default to the estimator's own defaults
    given = {k: getattr(args, k) for k in ("learning_rate", "max_depth")}
    classifier = engine(
        **{name: getattr(args, name) for name in _OBJECTIVE_OPTIONS}, n_estimators=args.rounds,
        **{k: v for k, v in given.items() if v is not None}, n_jobs=args.threads,
        early_stopping_rounds=args.early_stopping if dev is not None else None,
    )  # fmt: skip
    features = TokenFeatures(half_width=args.half_width, extra_columns=extra,
                             min_count=args.min_count)
    tagger = ChunkTagger(features=features, classifier=classifier, scheme=args.scheme,
                         model_scheme=args.model_scheme, constrained=not args.unconstrained)
    n_sent = int(frame["sentence"].max()) + 1
    logger.info("training on %s: %d tokens, %d sentences", args.train, len(frame), n_sent)
    t0 = time.perf_counter()
    tagger.fit(frame, dev=dev, verbose=args.verbose)
    clf = tagger.classifier_
    logger.info(
        "trained in %.1f s: %d features, %d rounds kept, tags %s",
        time.perf_counter() - t0, tagger.features_.n_features_out_,
        clf.best_iteration + 1, list(tagger.classes_),
    )  # fmt: skip
    tagger.save(args.model)
    logger.info("model written to %s", args.model)
    if dev is not None:
        print(tagger.evaluate(dev, report=True), end="")
    return 0


def _load(args):
    """The tagger of ``--model``."""
    from .tagging import load_tagger

    if not Path(args.model).is_file():
        raise ValueError(
            f"--model {args.model}: no such model file; write one with `structboost train`."
        )
    return load_tagger(args.model)


def _same_file(a, b):
    """Whether two paths name one file (or would: equal once resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _check_output(path, flag, inputs):
    """Refuse an output ``path`` (option ``flag``) that is one of ``inputs`` (option -> path) or
    cannot be written, before any work.
    """
    for name, given in inputs.items():
        if given is not None and _same_file(path, given):
            raise ValueError(
                f"{flag} {path} is also the {name} file: writing it would destroy the input. "
                f"Choose another {flag} path."
            )
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path} is a folder: give a file name.")
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist; create it first.")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot write in {folder} ({err.strerror}).") from None


def predict(args):
    """Tag a token file; write it back with the predicted tags as the last column."""
    if args.output != "-":
        _check_output(args.output, "--output", {"--input": args.input, "--model": args.model})
    tagger = _load(args)
    columns = _columns(args.columns, need_tag=False)
    frame = _read(args.input, columns, "--input", args.encoding)
    frame["predicted"] = tagger.predict(frame)
    stdout = args.output == "-"
    with contextlib.nullcontext(sys.stdout) if stdout else atomic_open(args.output) as out:
        previous = None
        fields = [*columns, "predicted"]
        for row in frame[["sentence", *fields]].itertuples(index=False):
            if previous is not None and row[0] != previous:
                out.write("\n")
            previous = row[0]
            out.write(" ".join(map(str, row[1:])) + "\n")
        out.write("\n")
    if not stdout:
        logger.info("%d tokens tagged, written to %s", len(frame), args.output)
    return 0


def evaluate(args):
    """Span precision / recall / F1 report (conlleval layout)."""
    from .metrics import span_report

    columns = _columns(args.columns)
    if args.predictions:
        frame = _read(args.predictions, [*columns, "predicted"], "--predictions", args.encoding,
                      args.scheme)
        pred = frame["predicted"].to_numpy().astype(str)
    else:
        if not (args.model and args.input):
            raise ValueError("evaluate needs --predictions F, or --model M with --input F.")
        tagger = _load(args)
        frame = _read(args.input, columns, "--input", args.encoding, tagger.scheme)
        pred = tagger.predict(frame)
        args.scheme = tagger.scheme
    lengths = np.bincount(frame["sentence"].to_numpy())
    truth = frame["tag"].to_numpy().astype(str)
    print(span_report(truth, pred, lengths, scheme=args.scheme), end="")
    return 0


def _columns(text, need_tag=True):
    """The column names of ``--columns``, checked to name the token (and tag) column."""
    columns = [c.strip() for c in text.split(",") if c.strip()]
    needed = ["token", "tag"] if need_tag else ["token"]
    if not set(needed) <= set(columns):
        raise ValueError(f"--columns must name the column(s) {needed}; got {text!r} "
                         "(CoNLL-2003: token,pos,chunk,tag).")
    return columns


def _add_file_options(p):
    """The token-file options of train, predict and evaluate."""
    p.add_argument("--format", choices=["conll"], default="conll", help="token file format")
    p.add_argument("--columns", default="token,pos,chunk,tag",
                   help="names of the columns of every token line, comma separated; must include "
                   "token and tag (the default is CoNLL-2003's four)")
    p.add_argument("--encoding", default="utf-8",
                   help="text encoding of the token files (a byte-order mark is skipped; German "
                   "CoNLL-2003: latin-1)")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default (except None and False), help text or not."""

    def _get_help_string(self, action):
        text = action.help or ""
        hidden = (None, False, argparse.SUPPRESS)
        if "%(default)" in text or any(action.default is value for value in hidden):
            return text
        return f"{text} (default: %(default)s)" if action.option_strings else text


def _global_options(parser, default):
    """The options that may stand before or after the subcommand."""
    parser.add_argument(
        "--log-level", default=default, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="what the structboost logger reports on standard error",
    )  # fmt: skip


def build_parser():
    """The ``structboost`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(prog="structboost", formatter_class=_HelpFormatter,
                                     description="CRF objectives for gradient-boosted trees.")
    parser.add_argument("--version", action="version", version=f"structboost {__version__}")
    _global_options(parser, "INFO")
    # After the subcommand the same options override those before it, if given.
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, argparse.SUPPRESS)
    subparsers = parser.add_subparsers(dest="command", required=True)

    def sub(name, help):
        return subparsers.add_parser(
            name, help=help, description=help, parents=[common], formatter_class=_HelpFormatter
        )

    d = sub("demo", "train the three modes on synthetic HMM data")
    d.add_argument("--sequences", type=int, default=300, help="number of sequences")
    d.add_argument("--stay", type=float, default=0.95, help="P(label repeats)")
    d.add_argument("--emission", type=float, default=0.5, help="P(symbol from own block)")
    d.add_argument("--rounds", type=int, default=100, help="most boosting rounds of each mode")
    d.add_argument("--early-stopping", type=int, default=10,
                   help="patience on the validation NLL (rounds)")
    d.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    d.add_argument("--out", default=None, help="folder for the PNG (default: a new temporary folder)")
    d.set_defaults(func=demo)

    w = sub("warmup", "compile and cache the numba kernels of a default fit and predict now")
    w.set_defaults(func=warmup)

    t = sub("train", "train a chunk tagger on a token file")
    _add_file_options(t)
    t.add_argument("--train", required=True, help="training token file")
    t.add_argument("--dev", help="development token file (early stopping and a report)")
    t.add_argument("--model", required=True, help="where to write the model (JSON)")
    t.add_argument("--scheme", default="iob1", help="tag scheme of the files: iob1, iob2, bioes")
    t.add_argument("--model-scheme", default="iob2", help="tag scheme the model learns")
    t.add_argument("--unconstrained", action="store_true", help="allow ill-formed tag sequences")
    t.add_argument("--engine", choices=["xgboost", "lightgbm"], default="xgboost",
                   help="boosting library")
    for name, option in _OBJECTIVE_OPTIONS.items():  # defaults: the library's (ObjectiveSpec)
        t.add_argument("--" + name.replace("_", "-"), default=DEFAULTS[name], **option)
    t.add_argument("--rounds", type=int, default=300, help="boosting rounds (at most)")
    t.add_argument(
        "--learning-rate", type=float, default=None,
        help="learning rate (default: the engine estimator's)",
    )  # fmt: skip
    t.add_argument("--max-depth", type=int, default=None, help="(default: the estimator's)")
    t.add_argument("--early-stopping", type=int, default=20, help="patience on --dev (rounds)")
    t.add_argument("--half-width", type=int, default=2, help="token window half width")
    t.add_argument("--min-count", type=int, default=2, help="vocabulary threshold")
    t.add_argument(
        "--threads", type=int, default=None,
        help="threads of the engine and the numba kernels (the estimator's n_jobs; "
        "default: one; -1: every core)",
    )  # fmt: skip
    t.add_argument("--verbose", type=int, default=10, help="print metrics every N rounds")
    t.set_defaults(func=train)

    p = sub("predict", "tag a token file with a trained model")
    _add_file_options(p)
    p.add_argument("--model", required=True, help="model file written by `train`")
    p.add_argument("--input", required=True, help="token file (a tag column is kept if named)")
    p.add_argument("--output", default="-", help="output file ('-': standard output)")
    p.set_defaults(func=predict)

    e = sub("evaluate", "span F1 report (conlleval layout)")
    _add_file_options(e)
    e.add_argument("--predictions", help="file written by `predict` (gold and predicted tags)")
    e.add_argument("--model", help="model to run on --input instead")
    e.add_argument("--input", help="tagged token file to predict and score")
    e.add_argument("--scheme", default="iob1", help="tag scheme of --predictions")
    e.set_defaults(func=evaluate)
    return parser


def main(argv=None):
    """Run the command line ``argv`` (None: ``sys.argv``); the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    package_logger = logging.getLogger("structboost")
    if all(isinstance(h, logging.NullHandler) for h in package_logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        package_logger.addHandler(handler)
    package_logger.setLevel(args.log_level)
    try:
        return args.func(args)
    except (ValueError, ImportError) as err:
        parser.exit(2, f"structboost {args.command}: error: {err}\n")
    except BrokenPipeError:
        # the reader closed the pipe (`| head`): stop quietly, as other tools do, and keep
        # the interpreter's final flush of stdout from failing again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # a full disk, a vanished folder, a file in the way
        where = f"{err.filename}: " if err.filename else ""
        parser.exit(1, f"structboost {args.command}: error: {where}{err.strerror or err}\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
