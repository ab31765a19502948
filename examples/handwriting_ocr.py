"""Handwriting recognition (OCR): the defaults' multi-output trees and the ``"dense"`` preset.

Each word is a sequence of letter images; the CRF couples neighbouring letters.
On dense features with ten or more labels the defaults grow one multi-output
tree per round (a shared split structure with a vector of label scores in every
leaf), the best shape found for such data: trained on all of OCR's training
words they reach 4.46% letter error against 5.50% with a tree per label, and
4.41% over ten folds (benchmarks/README.md). The ``"dense"`` preset deepens
those trees to 8, with the Newton transition step (4.44% at eta 0.1). Both are
compared here under the same round budget; on a small sample of words they
are close.

Without arguments it runs on synthetic "letters" (noisy prototype images,
labels from a Markov chain; eight labels, so the defaults grow a tree per
label). With Taskar's OCR data (``letters.npz``, as in Chen et al. 2015), test
fold 0, validation fold 9, a subsample of the words of the other folds::

    python examples/handwriting_ocr.py --data-dir ../shared/data/ocr --max-words 1500
"""

import argparse
import time
from pathlib import Path

import numpy as np

import structboost as sb
from structboost.datasets import SequenceData, load_ocr, ocr_split
from structboost.metrics import sequence_accuracy
from structboost.presets import preset


def synthetic_letters(n_words, folds, n_labels=8, n_pixels=32, seed=0):
    """Words whose letters are noisy copies of one prototype image per label."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((n_labels, n_pixels)) < 0.5
    # A random "bigram" table: each letter prefers a few successors.
    follow = rng.dirichlet(np.full(n_labels, 0.3), size=n_labels)
    lengths = rng.integers(3, 9, size=n_words)
    labels = []
    for length in lengths:
        word = [rng.integers(n_labels)]
        for _ in range(length - 1):
            word.append(rng.choice(n_labels, p=follow[word[-1]]))
        labels += word
    y = np.array(labels)
    flips = rng.random((y.size, n_pixels)) < 0.3  # 30% of the pixels flipped
    X = (prototypes[y] ^ flips).astype(np.float32)
    return SequenceData(X=X, y=y, lengths=lengths, folds=folds)


def first_words(data, n):
    """The first ``n`` words of a SequenceData."""
    n = min(n, len(data.lengths))
    rows = int(data.lengths[:n].sum())
    return SequenceData(X=data.X[:rows], y=data.y[:rows], lengths=data.lengths[:n])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="folder holding letters.npz")
    parser.add_argument("--max-words", type=int, default=1500,
                        help="training words taken from the training folds (real data only)")
    parser.add_argument("--rounds", type=int, default=150, help="at most this many rounds")
    args = parser.parse_args(argv)

    if args.data_dir is None:
        folds = np.repeat([1, 9, 0], [300, 60, 150])  # training, validation and test words
        data = synthetic_letters(len(folds), folds)
        train, valid, test = ocr_split(data, test_folds=0, valid_folds=9)
    else:
        data = load_ocr(args.data_dir, dtype=np.float32)  # 16 x 8 binary pixels per letter
        train, valid, test = ocr_split(data, test_folds=0, valid_folds=9)
        train = first_words(train, args.max_words)
    print(f"{len(train.lengths)} training words, {train.X.shape[0]} letters, "
          f"{train.X.shape[1]} pixels each")

    models = {
        "defaults": sb.XGBCRFClassifier(n_estimators=args.rounds),
        # One multi-output tree of depth 8 a round, eta 0.1, the Newton transition step.
        # Keywords after the name override the preset's values.
        'preset("dense")': sb.XGBCRFClassifier(
            **preset("dense", learning_rate=0.3), n_estimators=args.rounds
        ),
    }
    for name, clf in models.items():
        start = time.perf_counter()
        clf.set_params(early_stopping_rounds=10, n_jobs=1)
        clf.fit(train.X, train.y, lengths=train.lengths,
                eval_set=[(valid.X, valid.y, valid.lengths)], verbose=False)
        seconds = time.perf_counter() - start
        pred = clf.predict(test.X, lengths=test.lengths)
        letter_error = np.mean(pred != test.y)
        word_error = 1 - sequence_accuracy(test.y, pred, lengths=test.lengths)
        print(f"{name:32s} letter error {100 * letter_error:5.2f}%  word error "
              f"{100 * word_error:5.2f}%  ({clf.best_iteration + 1} rounds, {seconds:.1f} s)")


if __name__ == "__main__":
    main()
