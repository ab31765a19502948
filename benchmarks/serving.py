"""Tagging at service speed: structboost against sklearn-crfsuite on the tutorial's features.

Data: the first ``--train-sentences`` sentences of CoNLL-2003's ``eng.train``
and all of ``eng.testb`` (``--data-dir``), labelled with their chunk tags in
IOB2 (about 20 tags); each token described by sklearn-crfsuite's tutorial
feature function (:func:`word2features`: word, affixes, case flags and POS of
the token and its neighbours, as feature dicts).

Models: ``XGBSequenceCRF(n_estimators=--rounds, early_stopping=False,
n_jobs=1)`` (or the ``--preset``) and ``sklearn_crfsuite.CRF`` as in its
tutorial (L-BFGS, ``c1=c2=0.1``, ``max_iterations=100``,
``all_possible_transitions=True``).

Measured, in one run: fit seconds; ``predict_single`` on a 15-token test
sentence (median and 99th percentile of ``--calls`` calls after 30 untimed
ones); ``predict`` on ``eng.testb`` in tokens per second (one and two
threads); the floor, the booster's own ``inplace_predict`` of the margins
on rows vectorised beforehand (one sentence, and the test set); chunk span
F1 on ``eng.testb``; and ``predict_single`` right after the fit in the same
process against a fresh process that loads the saved model (first call,
then the median).

The table goes to standard output and, with ``--out``, to a Markdown file::

    python benchmarks/serving.py --data-dir ../shared/data/conll2003 [--rounds 100]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import structboost as sb
from structboost.datasets import convert_tags, read_conll
from structboost.metrics import span_prf
from structboost.presets import preset


def word2features(sent, i):
    """sklearn-crfsuite's tutorial features of token ``i`` of ``sent`` ((word, pos) pairs)."""
    word, postag = sent[i]
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
        word1, postag1 = sent[i - 1]
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
        word1, postag1 = sent[i + 1]
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


def read_split(path, limit=None):
    """Feature dicts and IOB2 chunk tags of the first ``limit`` sentences of a CoNLL file."""
    df = read_conll(path)
    if limit is not None:
        df = df[df["sentence"] < limit]
    lengths = np.bincount(df["sentence"])
    tags = convert_tags(df["chunk"].to_numpy(), "iob1", "iob2", lengths)
    ends = np.cumsum(lengths)
    pairs = list(zip(df["token"], df["pos"]))
    sents = [pairs[e - n:e] for n, e in zip(lengths, ends)]
    X = [[word2features(s, i) for i in range(len(s))] for s in sents]
    y = [list(tags[e - n:e]) for n, e in zip(lengths, ends)]
    return X, y


def latencies(call, calls, warm=30):
    """Seconds of ``calls`` calls of ``call()`` after ``warm`` untimed ones."""
    for _ in range(warm):
        call()
    seconds = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - t0)
    return np.array(seconds)


def first_and_median(call, calls):
    """Seconds of the first call and the median of the next ``calls``, nothing untimed."""
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    return first, float(np.median(latencies(call, calls, warm=0)))


def tokens_per_second(model, X):
    t0 = time.perf_counter()
    model.predict(X)
    return sum(map(len, X)) / (time.perf_counter() - t0)


def span_f1(model, X, y):
    predicted = [list(tags) for tags in model.predict(X)]  # crfsuite: an object array
    return f"{100 * span_prf(y, predicted).loc['overall', 'f1']:.2f}"


def fresh(model_path, sentence_path, calls):
    """The fresh process: load the model, time ``predict_single`` from its first call."""
    clf = sb.XGBSequenceCRF().load_model(model_path)
    one = json.loads(Path(sentence_path).read_text())
    print(json.dumps(first_and_median(lambda: clf.predict_single(one), calls)))


def fresh_process(clf, one, calls):
    with tempfile.TemporaryDirectory() as tmp:
        model, sentence = Path(tmp, "model.json"), Path(tmp, "sentence.json")
        clf.save_model(model)
        sentence.write_text(json.dumps(one))
        args = [sys.executable, __file__, "--fresh", str(model), str(sentence),
                "--calls", str(calls)]  # fmt: skip
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def ms(seconds):
    return f"{1e3 * seconds:.2f}"


def rate(x):
    return f"{x / 1e3:,.0f}k"


def fit_structboost(args, X_train, y_train):
    params = preset(args.preset) if args.preset else {}
    params.update(n_estimators=args.rounds, early_stopping=False, n_jobs=1)
    clf = sb.XGBSequenceCRF(**params)
    t0 = time.perf_counter()
    clf.fit(X_train, y_train)
    return clf, time.perf_counter() - t0


def measure_structboost(clf, args, X_test, y_test, one):
    """The serving measurements of a tagger, starting right after its fit."""
    after_fit = first_and_median(lambda: clf.predict_single(one), args.calls)
    single = latencies(lambda: clf.predict_single(one), args.calls)
    batch1 = tokens_per_second(clf, X_test)
    clf.set_params(n_jobs=2)
    batch2 = tokens_per_second(clf, X_test)
    clf.set_params(n_jobs=1)
    loaded = fresh_process(clf, one, args.calls)
    return {
        "single": f"{ms(np.median(single))} / {ms(np.percentile(single, 99))} ms",
        "batch": f"{rate(batch1)} / {rate(batch2)}",
        "f1": span_f1(clf, X_test, y_test),
        "after_fit": f"{ms(after_fit[0])} / {ms(after_fit[1])} ms",
        "fresh": f"{ms(loaded[0])} / {ms(loaded[1])} ms",
    }


def floor(clf, X_test, one, calls):
    """The booster's own ``inplace_predict`` on rows vectorised beforehand."""
    booster = clf.booster_
    rows_one = clf.vectorizer_.transform(one)
    rows_all = clf.vectorizer_.transform(d for s in X_test for d in s)
    single = latencies(lambda: booster.inplace_predict(rows_one, predict_type="margin"), calls)
    t0 = time.perf_counter()
    booster.inplace_predict(rows_all, predict_type="margin")
    batch = rows_all.shape[0] / (time.perf_counter() - t0)
    return {"single": f"{ms(np.median(single))} / {ms(np.percentile(single, 99))} ms",
            "batch": f"{rate(batch)} (1 thread)"}  # fmt: skip


def measure_crfsuite(args, X_train, y_train, X_test, y_test, one):
    import sklearn_crfsuite

    crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.1, c2=0.1, max_iterations=100,
                               all_possible_transitions=True)  # fmt: skip
    t0 = time.perf_counter()
    crf.fit(X_train, y_train)
    fit = time.perf_counter() - t0
    single = latencies(lambda: crf.predict_single(one), args.calls)
    return {
        "fit": f"{fit:.1f} s",
        "single": f"{ms(np.median(single))} / {ms(np.percentile(single, 99))} ms",
        "batch": f"{rate(tokens_per_second(crf, X_test))} (1 thread)",
        "f1": span_f1(crf, X_test, y_test),
    }


ROWS = {
    "fit": "fit, {n} sentences",
    "single": "`predict_single`, 15 tokens, median / p99",
    "batch": "`predict`, eng.testb, tokens/s (1 / 2 threads)",
    "f1": "chunk span F1, eng.testb",
    "after_fit": "`predict_single` right after the fit: first call / median",
    "fresh": "`predict_single`, fresh process that loaded the model: first / median",
}


def table(columns, n_train):
    names = list(columns)
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for key, label in ROWS.items():
        cells = [columns[name].get(key, "") for name in names]
        lines.append(f"| {label.format(n=f'{n_train:,}')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data/conll2003")
    parser.add_argument("--train-sentences", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--preset", default=None, help="a structboost.presets name")
    parser.add_argument("--out", default=None, help="Markdown file for the table")
    parser.add_argument("--fresh", nargs=2, metavar=("MODEL", "SENTENCE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fresh:
        return fresh(*args.fresh, args.calls)
    data = Path(args.data_dir)
    X_train, y_train = read_split(data / "eng.train", args.train_sentences)
    X_test, y_test = read_split(data / "eng.testb")
    one = next(s for s in X_test if len(s) == 15)
    labels = len({t for s in y_train for t in s})
    load = os.getloadavg()[0]
    print(f"{len(X_train)} training sentences, {labels} tags, {sum(map(len, X_test))} test "
          f"tokens; load {load:.2f}", flush=True)  # fmt: skip
    columns = {}
    try:
        columns["sklearn-crfsuite"] = measure_crfsuite(args, X_train, y_train, X_test, y_test, one)
    except ImportError:
        print("sklearn-crfsuite is not installed: structboost alone")
    clf, fit = fit_structboost(args, X_train, y_train)
    columns["structboost"] = {"fit": f"{fit:.1f} s",
                              **measure_structboost(clf, args, X_test, y_test, one)}
    columns["booster `inplace_predict` (floor)"] = floor(clf, X_test, one, args.calls)
    text = table(columns, len(X_train))
    text += f"\n\n(load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end)\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
