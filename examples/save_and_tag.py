"""Save a trained tagger and tag new text with it.

``structboost.tagging.ChunkTagger`` ties token features, a boosted CRF and the
tag scheme together (it is what the ``structboost train`` command runs): it
learns from a CoNLL-style file, saves everything to one JSON file, and
``load_tagger`` reads it back without running any code from the file. New text
only needs to be split into sentences and tokens. The same holds for the
estimators alone: ``save_model(path)`` / ``load_model(path)``.

Without arguments it trains on a small synthetic corpus; with a CoNLL-2003
folder it trains on the first ``--max-sentences`` sentences of ``eng.train``::

    python examples/save_and_tag.py --data-dir ../shared/data/conll2003 --max-sentences 2000
"""

import argparse
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import structboost as sb
from structboost.datasets import read_conll
from structboost.tagging import ChunkTagger, load_tagger
from structboost.text.lexical import TokenFeatures

PEOPLE = ["Anna Novak", "Boris Smith", "Chen Okafor", "Dana Larsen", "Emil Tanaka"]
PLACES = ["Paris", "Lagos", "Oslo", "Kyoto", "Lima", "Prague"]
GROUPS = ["Acme Corp", "Globex Ltd", "Initech Group", "Umbrella Inc"]
PATTERNS = ["{p} visited {l} .", "{p} joined {g} in {l} .", "{g} hired {p} .",
            "Yesterday , {p} met {p2} in {l} .", "{g} opened an office in {l} ."]


def synthetic_corpus(path, n_sentences=300, seed=0):
    """Write a two-column (token, IOB1 tag) file of template sentences."""
    rng = np.random.default_rng(seed)
    kinds = {"p": ("PER", PEOPLE), "p2": ("PER", PEOPLE), "l": ("LOC", PLACES),
             "g": ("ORG", GROUPS)}
    lines = []
    for _ in range(n_sentences):
        for word in rng.choice(PATTERNS).split():
            slot = re.fullmatch(r"\{(\w+)\}", word)
            if slot:
                kind, names = kinds[slot.group(1)]
                lines += [f"{token} I-{kind}" for token in rng.choice(names).split()]
            else:
                lines.append(f"{word} O")
        lines.append("")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def tokenize(texts):
    """A token frame (``sentence``, ``token``) of raw sentences: words and punctuation."""
    rows = [(i, token) for i, text in enumerate(texts)
            for token in re.findall(r"\w+|[^\w\s]", text)]
    return pd.DataFrame(rows, columns=["sentence", "token"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="folder with eng.train (CoNLL-2003)")
    parser.add_argument("--max-sentences", type=int, default=2000)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        if args.data_dir is None:
            synthetic_corpus(Path(tmp) / "train.txt")
            train = read_conll(Path(tmp) / "train.txt", columns=("token", "tag"))
        else:
            train = read_conll(args.data_dir / "eng.train")[["sentence", "token", "tag"]]
            train = train[train["sentence"] < args.max_sentences]

        # Words, shapes and affixes in a window of two tokens; tags read and written in
        # IOB1 (CoNLL-2003's), learnt and decoded in IOB2 under its constraints.
        tagger = ChunkTagger(
            features=TokenFeatures(half_width=2, min_count=1),
            classifier=sb.XGBCRFClassifier(n_estimators=30, max_depth=4, n_jobs=1),
            scheme="iob1",
        )
        tagger.fit(train)
        path = Path(tmp) / "tagger.json"
        tagger.save(path)
        print(f"saved the tagger: {path.name}, {path.stat().st_size / 1024:.0f} KiB of JSON")

        loaded = load_tagger(path)  # validated field by field; no code runs

        # The estimator inside saves and loads alone as well (a JSON file ending in .json).
        tagger.classifier_.save_model(Path(tmp) / "crf.json")
        clf = sb.XGBCRFClassifier().load_model(Path(tmp) / "crf.json")
        print(f"reloaded {type(clf).__name__}, labels: {', '.join(map(str, clf.classes_))}")

    # New sentences, with name pairs never seen in training.
    texts = ["Yesterday , Anna Smith met Chen Tanaka in Oslo .",
             "Globex Ltd opened an office in Kyoto .",
             "Emil Larsen joined Initech Group in Lima ."]
    frame = tokenize(texts)
    frame["tag"] = loaded.predict(frame)
    assert (frame["tag"] == tagger.predict(frame)).all()  # the reloaded tagger agrees
    for _, sentence in frame.groupby("sentence"):
        pairs = zip(sentence["token"], sentence["tag"])
        print(" ".join(f"{token}/{tag}" if tag != "O" else token for token, tag in pairs))


if __name__ == "__main__":
    main()
