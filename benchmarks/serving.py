"""Tagging latency: ``predict_single`` on one sentence, and batch tokens per second.

A ``XGBSequenceCRF`` (sklearn-crfsuite's dialect: lists of feature dicts)
trained on synthetic sentences of a 3,000-word vocabulary (word, suffix,
previous word and a bias per token; two tags), ``--rounds`` trees of depth 4
per label on one thread; then the median and 99th percentile of
``predict_single`` on a 15-token sentence over ``--calls`` calls (after 30
untimed ones), and ``predict`` on 2,000 such sentences; the same for
``sklearn_crfsuite.CRF`` (L-BFGS, 100 iterations) on the same features when
sklearn-crfsuite is installed (``pip install "structboost-crf[bench]"``).

    python benchmarks/serving.py [--rounds 100] [--calls 300]
"""

import argparse
import time

import numpy as np

import structboost as sb


def sentence(rng, vocab, n):
    words = rng.choice(vocab, n)
    return [{"word": w, "suffix": w[-2:], "bias": 1.0, "prev": words[i - 1] if i else "BOS"}
            for i, w in enumerate(words)]  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(3000)])
    X = [sentence(rng, vocab, int(rng.integers(8, 20))) for _ in range(1500)]
    y = [["B" if int(d["word"][1:]) % 3 == 0 else "O" for d in s] for s in X]
    one = sentence(rng, vocab, 15)
    batch = [sentence(rng, vocab, 15) for _ in range(2000)]
    models = {"structboost XGBSequenceCRF": sb.XGBSequenceCRF(
        n_estimators=args.rounds, max_depth=4, n_jobs=1, early_stopping=False)}
    try:
        import sklearn_crfsuite

        models["sklearn-crfsuite CRF"] = sklearn_crfsuite.CRF(max_iterations=100)
    except ImportError:
        print("sklearn-crfsuite is not installed: structboost alone")
    for name, model in models.items():
        t0 = time.perf_counter()
        model.fit(X, y)
        fit = time.perf_counter() - t0
        for _ in range(30):
            model.predict_single(one)
        seconds = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            model.predict_single(one)
            seconds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.predict(batch)
        rate = 15 * len(batch) / (time.perf_counter() - t0)
        print(f"{name}: fit {fit:.1f} s; predict_single, 15 tokens: median "
              f"{1e3 * np.median(seconds):.2f} ms, p99 {1e3 * np.percentile(seconds, 99):.2f} ms; "
              f"predict: {rate:,.0f} tokens/s")


if __name__ == "__main__":
    main()
