"""decode="auto": the decoding with the lower token error on the held-out sequences."""

import json

import numpy as np
import pytest

from structboost.estimators.chain import XGBCRFClassifier
from structboost.estimators.lgbm import LGBMCRFClassifier

pytestmark = pytest.mark.usefixtures("single_threaded")

SMALL = {
    XGBCRFClassifier: {"max_depth": 2, "n_jobs": 1, "n_estimators": 6},
    LGBMCRFClassifier: {"num_leaves": 4, "n_jobs": 1, "n_estimators": 6},
}
ESTIMATORS = pytest.mark.parametrize(
    "cls", [XGBCRFClassifier, LGBMCRFClassifier], ids=["xgboost", "lightgbm"]
)


def sticky(m=120, length=12, seed=0):
    """Sticky label chains seen through weak, noisy features."""
    rng = np.random.default_rng(seed)
    y = np.empty(m * length, dtype=np.int64)
    for s in range(m):
        label = rng.integers(3)
        for t in range(length):
            if rng.random() < 0.2:
                label = rng.integers(3)
            y[s * length + t] = label
    X = np.eye(3)[y] * 0.7 + rng.normal(size=(y.size, 3))
    return X, y, np.full(m, length)


def held_rows(lengths, held):
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in held])


@ESTIMATORS
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_takes_the_lower_held_out_error_viterbi_on_a_tie(cls, seed):
    X, y, lengths = sticky(seed=seed)
    est = cls(**SMALL[cls], decode="auto", early_stopping=True, refit=False)
    est.fit(X, y, lengths=lengths)
    held = est.validation_sequences_
    assert len(held) > 0
    rows = held_rows(lengths, held)
    error = {d: np.mean(est.predict(X[rows], lengths=lengths[held], decode=d) != y[rows])
             for d in ("viterbi", "marginal")}
    expected = "marginal" if error["marginal"] < error["viterbi"] else "viterbi"
    assert est.decode_ == expected
    assert np.array_equal(est.predict(X, lengths=lengths),
                          est.predict(X, lengths=lengths, decode=expected))


@ESTIMATORS
def test_auto_is_viterbi_without_held_out_sequences(cls):
    X, y, lengths = sticky()
    est = cls(**SMALL[cls], decode="auto").fit(X, y, lengths=lengths)  # 1,440 rows: none held out
    assert est.decode_ == "viterbi"


def test_auto_is_viterbi_under_allowed_transitions():
    X, y, lengths = sticky()
    allowed = np.ones((3, 3), dtype=bool)
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode="auto", early_stopping=True,
                           allowed_transitions=allowed).fit(X, y, lengths=lengths)
    assert est.decode_ == "viterbi"


@pytest.mark.parametrize("decode", ["viterbi", "marginal"])
def test_a_set_decoding_is_kept(decode):
    X, y, lengths = sticky()
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode=decode, early_stopping=True)
    assert est.fit(X, y, lengths=lengths).decode_ == decode


def test_the_model_file_keeps_the_choice(tmp_path):
    X, y, lengths = sticky()
    est = XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode="auto", early_stopping=True)
    est.fit(X, y, lengths=lengths)
    est.decode_ = "marginal"  # whatever the fit chose, the file must give it back
    path = tmp_path / "model.json"
    est.save_model(path)
    back = XGBCRFClassifier().load_model(path)
    assert back.decode_ == "marginal"
    assert np.array_equal(back.predict(X, lengths=lengths), est.predict(X, lengths=lengths))
    doc = json.loads(path.read_text())
    doc["decode"] = "beam"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="decode must be one of"):
        XGBCRFClassifier().load_model(path)


def test_a_bad_decode_is_named():
    X, y, lengths = sticky()
    with pytest.raises(ValueError, match="decode"):
        XGBCRFClassifier(**SMALL[XGBCRFClassifier], decode="best").fit(X, y, lengths=lengths)
