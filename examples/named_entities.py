"""Named entities from CoNLL-style files: IOB2 constraints and span F1.

Reads token files in the CoNLL-2003 layout (token, part of speech, chunk and
entity tag per line; a blank line ends a sentence), builds sparse token-window
features, trains a boosted CRF that can only output well-formed IOB2 tags, and
scores whole entity spans as conlleval does.

Without arguments it writes and reads a small synthetic corpus (seconds). With
the real CoNLL-2003 English files (``eng.train``, ``eng.testa``, ``eng.testb``)::

    python examples/named_entities.py --data-dir ../shared/data/conll2003 --max-sentences 2000
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import structboost as sb
from structboost.datasets import convert_tags, read_conll
from structboost.metrics import span_prf
from structboost.presets import preset
from structboost.text.lexical import TokenFeatures

# Names seen in training come from the first half of each list, test names from
# the second half: the model has to rely on word shape and context, not memory.
FIRST = ["Anna", "Boris", "Chen", "Dana", "Emil", "Fatima", "Goran", "Hana", "Ivo", "Jun",
         "Kofi", "Lena", "Marek", "Nia", "Omar", "Petra"]
LAST = ["Novak", "Smith", "Okafor", "Larsen", "Tanaka", "Rossi", "Meyer", "Silva"]
PLACES = ["Paris", "Lagos", "Oslo", "Kyoto", "Lima", "Quebec", "Prague", "Hanoi", "Jordan",
          "Chad", "Georgia", "Victoria"]
COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Jordan"]
SUFFIXES = ["Corp", "Ltd", "Group", "Inc"]
VERBS = ["met", "visited", "called", "left", "joined", "praised"]


def synthetic_sentence(rng, half):
    """One sentence as (token, pos, chunk, tag) lines, entity tags in IOB1 as in CoNLL-2003."""
    def pick(words):
        n = len(words) // 2
        return words[half * n + rng.integers(n)]

    def person():
        name = [pick(FIRST)] + ([pick(LAST)] if rng.random() < 0.7 else [])
        return [(w, "NNP", "I-NP", "I-PER") for w in name]

    def place():
        return [(pick(PLACES), "NNP", "I-NP", "I-LOC")]

    def company():
        name = [pick(COMPANIES)] + ([rng.choice(SUFFIXES)] if rng.random() < 0.8 else [])
        return [(w, "NNP", "I-NP", "I-ORG") for w in name]

    subject = person() if rng.random() < 0.6 else company()
    verb = [(rng.choice(VERBS), "VBD", "I-VP", "O")]
    obj = [person, place, company][rng.integers(3)]()
    tail = [("in", "IN", "I-PP", "O")] + place() if rng.random() < 0.5 else []
    lead = [("Yesterday", "NN", "I-NP", "O"), (",", ",", "O", "O")] if rng.random() < 0.3 else []
    return lead + subject + verb + obj + tail + [(".", ".", "O", "O")]


def write_synthetic(folder, seed=0):
    """Write train/dev/test files of synthetic sentences; return their paths."""
    rng = np.random.default_rng(seed)
    paths = {}
    for name, size, half in (("train", 300, 0), ("dev", 80, 1), ("test", 150, 1)):
        lines = ["-DOCSTART- -X- O O", ""]
        for _ in range(size):
            lines += [" ".join(fields) for fields in synthetic_sentence(rng, half)] + [""]
        paths[name] = Path(folder) / f"synthetic.{name}"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def first_sentences(frame, n):
    """The first ``n`` sentences of a token frame (all of them when ``n`` is None)."""
    return frame if n is None else frame[frame["sentence"] < n].reset_index(drop=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="folder with eng.train, eng.testa, eng.testb")
    parser.add_argument("--max-sentences", type=int, default=2000,
                        help="training sentences taken from eng.train (real data only)")
    parser.add_argument("--rounds", type=int, default=40, help="at most this many rounds")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        if args.data_dir is None:
            paths = write_synthetic(tmp)
            limit = None
        else:
            paths = {name: args.data_dir / f"eng.{part}"
                     for name, part in (("train", "train"), ("dev", "testa"), ("test", "testb"))}
            limit = args.max_sentences
        # One row per token, a "sentence" id, and the file's columns.
        frames = {name: read_conll(path) for name, path in paths.items()}
    frames["train"] = first_sentences(frames["train"], limit)

    # CoNLL-2003 writes IOB1; the model learns IOB2, whose moves are simpler to constrain.
    data = {}
    for name, frame in frames.items():
        lengths = np.bincount(frame["sentence"].to_numpy())
        tags = convert_tags(frame["tag"].to_numpy(), "iob1", "iob2", lengths)
        data[name] = (frame, tags, lengths)

    # Sparse binary features of a window of two tokens each side: word, shape,
    # affixes, flags, and the POS and chunk columns.
    features = TokenFeatures(half_width=2, extra_columns=("pos", "chunk"), min_count=2)
    X = {name: (features.fit_transform(f) if name == "train" else features.transform(f))
         for name, (f, _, _) in data.items()}
    print(f"{X['train'].shape[0]} training tokens, {X['train'].shape[1]} sparse features")

    # allowed_transitions="iob2": Viterbi can never output "O I-PER"; training sees the
    # same constrained model. The sparse-text preset adds the Newton transition step.
    clf = sb.XGBCRFClassifier(
        **preset("sparse-text"), allowed_transitions="iob2", n_estimators=args.rounds,
        max_depth=4, early_stopping_rounds=10, n_jobs=1,
    )
    start = time.perf_counter()
    _, tags, lengths = data["train"]
    _, dev_tags, dev_lengths = data["dev"]
    clf.fit(X["train"], tags, lengths=lengths,
            eval_set=[(X["dev"], dev_tags, dev_lengths)], verbose=False)
    print(f"trained {clf.best_iteration + 1} rounds in {time.perf_counter() - start:.1f} s")

    _, test_tags, test_lengths = data["test"]
    pred = clf.predict(X["test"], lengths=test_lengths)
    scores = span_prf(test_tags, pred, lengths=test_lengths, scheme="iob2")
    print("\nspan precision / recall / F1 on the test file (conlleval semantics):")
    print(scores[["precision", "recall", "f1", "support"]].round(3).to_string())
    print(f"\noverall span F1: {100 * scores.loc['overall', 'f1']:.2f}")


if __name__ == "__main__":
    main()
