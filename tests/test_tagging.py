"""ChunkTagger and the ``structboost train / predict / evaluate --format conll`` CLI."""

import numpy as np
import pytest

from structboost.cli import main
from structboost.datasets import convert_tags, read_conll
from structboost.metrics import span_prf
from structboost.estimators.chain import XGBCRFClassifier
from structboost.tagging import ChunkTagger, load_tagger

PEOPLE = ["Smith", "Jones", "Brown", "Taylor"]
PLACES = ["Paris", "Berlin", "New York", "Rio de Janeiro"]
FILLER = ["the", "a", "said", "went", "today", "and", "met", "visited"]


def write_conll(path, n_sentences, seed):
    """A CoNLL-2003-like file (token POS chunk IOB1-tag): people after 'Mr', places after 'in'."""
    rng = np.random.default_rng(seed)
    lines = ["-DOCSTART- -X- O O", ""]
    for _ in range(n_sentences):
        tokens = []
        for _ in range(rng.integers(2, 5)):
            kind = rng.integers(3)
            if kind == 0:
                tokens.append(("Mr", "NNP", "O"))
                tokens += [(w, "NNP", "I-PER") for w in [PEOPLE[rng.integers(4)]]]
            elif kind == 1:
                tokens.append(("in", "IN", "O"))
                tokens += [(w, "NNP", "I-LOC") for w in PLACES[rng.integers(4)].split()]
            else:
                tokens.append((FILLER[rng.integers(len(FILLER))], "VB", "O"))
        lines += [f"{w} {pos} I-NP {tag}" for w, pos, tag in tokens] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("conll")
    return write_conll(root / "train.txt", 120, 0), write_conll(root / "dev.txt", 40, 1)


def small_tagger(**kwargs):
    clf = XGBCRFClassifier(n_estimators=15, learning_rate=0.5, max_depth=3, n_jobs=1)
    return ChunkTagger(classifier=clf, **kwargs)


def test_read_conll_line_numbers(files):
    frame = read_conll(files[0], line_numbers=True)
    text = files[0].read_text().splitlines()
    for line, token in zip(frame["line"][:20], frame["token"][:20]):
        assert text[line - 1].split()[0] == token


def test_tagger_learns_spans_and_writes_input_scheme(files, tmp_path):
    train, dev = read_conll(files[0]), read_conll(files[1])
    tagger = small_tagger(constrained=False).fit(train, dev=dev)
    assert set(tagger.classes_) <= {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}
    pred = tagger.predict(dev)
    lengths = np.bincount(dev["sentence"])
    # Written back in IOB1: a chunk never opens with B- after O.
    np.testing.assert_array_equal(pred, convert_tags(pred, "iob1", "iob1", lengths))
    assert tagger.score(dev) > 0.9
    table = tagger.evaluate(dev)
    assert table.loc["overall", "f1"] == pytest.approx(
        span_prf(dev["tag"].to_numpy().astype(str), pred, lengths, "iob1").loc["overall", "f1"]
    )
    tagger.save(tmp_path / "m.json")
    np.testing.assert_array_equal(load_tagger(tmp_path / "m.json").predict(dev), pred)


def test_load_tagger_rejects_other_files(tmp_path):
    path = tmp_path / "x.pkl"
    path.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a structboost model file"):
        load_tagger(path)


def test_cli_train_predict_evaluate(files, tmp_path, capsys):
    model, out = tmp_path / "model.json", tmp_path / "pred.txt"
    common = ["--rounds", "10", "--max-depth", "3", "--threads", "1", "--verbose", "5"]
    assert main(["train", "--format", "conll", "--train", str(files[0]), "--dev",
                 str(files[1]), "--model", str(model), *common]) == 0
    printed = capsys.readouterr().out
    assert "dev-crf-nll" in printed and "FB1" in printed
    assert main(["predict", "--format", "conll", "--model", str(model), "--input",
                 str(files[1]), "--output", str(out)]) == 0
    gold = read_conll(files[1])
    written = read_conll(out, columns=("token", "pos", "chunk", "tag", "predicted"))
    np.testing.assert_array_equal(written["token"], gold["token"])
    np.testing.assert_array_equal(written["sentence"], gold["sentence"])
    capsys.readouterr()
    assert main(["evaluate", "--predictions", str(out)]) == 0
    from_file = capsys.readouterr().out
    assert main(["evaluate", "--model", str(model), "--input", str(files[1])]) == 0
    assert capsys.readouterr().out == from_file
    assert from_file.startswith(f"processed {len(gold)} tokens")


def test_cli_names_line_and_column_of_bad_input(files, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    text = files[0].read_text().splitlines()
    text[4] = text[4].rsplit(" ", 1)[0] + " X-PER"
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--train", str(bad), "--model", str(tmp_path / "m.json")])
    assert exc.value.code == 2
    assert "line 5, column 4: tag 'X-PER'" in capsys.readouterr().err
    text[4] = "only two"
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(SystemExit):
        main(["train", "--train", str(bad), "--model", str(tmp_path / "m.json")])
    assert "line 5: expected 4 columns" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["predict", "--model", str(tmp_path / "none.json"), "--input", str(files[1])])
    assert "no such model file" in capsys.readouterr().err
