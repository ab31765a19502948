"""Chunk tagging of token files: lexical features, a CRF booster and tag schemes together.

:class:`ChunkTagger` (what ``structboost train/predict/evaluate`` run) turns a
:func:`structboost.datasets.read_conll` DataFrame into lexical window features,
trains a CRF classifier in the model's tag scheme, constrained to well-formed
sequences, and writes predictions back in the file's scheme; one JSON file
(:meth:`ChunkTagger.save`, :func:`load_tagger`) holds it.
"""

import numpy as np
from sklearn.base import BaseEstimator, clone

from .text.tags import check_scheme
from .datasets import convert_tags
from .text.lexical import TokenFeatures
from .metrics import span_prf, span_report
from .engines.model_io import field, read_document, write_document
from .estimators.chain import XGBCRFClassifier
from .estimators.lgbm import LGBMCRFClassifier
from .estimators.base import keep_params

__all__ = ["ChunkTagger", "load_tagger"]

_FILE_FORMAT = "structboost-chunk-tagger"
_FILE_VERSION = 3
_FILE_HINT = "train one with `structboost train --format conll`"
_CLASSIFIERS = {cls.__name__: cls for cls in (XGBCRFClassifier, LGBMCRFClassifier)}
_SETTINGS = ("scheme", "model_scheme", "constrained", "tag_column")


class ChunkTagger(BaseEstimator):
    """Sequence tagger for chunk tags (named entities, phrase chunks).

    Parameters
    ----------
    features : TokenFeatures, optional
        Feature extractor (cloned at fit); default
        ``TokenFeatures(extra_columns=("pos", "chunk"), min_count=2)`` when
        the training frame has those columns, else without them.
    classifier : XGBCRFClassifier or LGBMCRFClassifier, optional
        CRF classifier (cloned at fit); default ``XGBCRFClassifier()``.
    scheme : {"iob1", "iob2", "bioes"}
        Scheme of the tags read and written.
    model_scheme : {"iob1", "iob2", "bioes"}
        Scheme the classifier learns and decodes in.
    constrained : bool
        Decode (and train) only well-formed ``model_scheme`` sequences: sets
        the classifier's ``allowed_transitions=model_scheme``.
    tag_column : str
        DataFrame column holding the tags.

    Attributes
    ----------
    features_ : TokenFeatures
    classifier_ : fitted classifier
    classes_ : ndarray of str
        Tags of the model scheme, in the classifier's order.
    """

    def __init__(self, features=None, classifier=None, scheme="iob1", model_scheme="iob2",
                 constrained=True, tag_column="tag"):
        keep_params(self, locals())

    def _lengths(self, frame):
        """Tokens per sentence ``(m,)`` of a frame with a ``sentence`` column."""
        if "sentence" not in frame.columns:
            raise ValueError("the frame has no 'sentence' column: read files with "
                             "structboost.datasets.read_conll, which numbers the sentences.")
        return np.bincount(frame["sentence"].to_numpy())

    def _tags(self, frame, lengths):
        """The frame's tags ``(n,)`` in ``model_scheme``."""
        if self.tag_column not in frame.columns:
            raise ValueError(f"the frame has no tag column {self.tag_column!r}; columns are "
                             f"{list(frame.columns)}. Name the columns when reading (columns=...).")
        return convert_tags(frame[self.tag_column].to_numpy(), self.scheme, self.model_scheme,
                            lengths)

    def fit(self, frame, dev=None, verbose=0):
        """Train on a token frame, optionally watching a development frame.

        Parameters
        ----------
        frame : pandas.DataFrame
            One row per token (:func:`~structboost.datasets.read_conll`).
        dev : pandas.DataFrame, optional
            Development tokens: the classifier's ``eval_set`` (early stopping).
        verbose : int
            Print the metrics every ``verbose`` rounds (0: silent).

        Returns
        -------
        self
        """
        check_scheme(self.scheme)
        check_scheme(self.model_scheme, "model_scheme")
        lengths = self._lengths(frame)
        y = self._tags(frame, lengths)
        if self.features is None:
            extra = tuple(c for c in ("pos", "chunk") if c in frame.columns)
            features = TokenFeatures(extra_columns=extra, min_count=2)
        else:
            features = clone(self.features)
        classifier = clone(self.classifier if self.classifier is not None else XGBCRFClassifier())
        if self.constrained:
            classifier.set_params(allowed_transitions=self.model_scheme)
        X = features.fit_transform(frame)
        eval_set = None
        if dev is not None:
            dev_lengths = self._lengths(dev)
            eval_set = [{
                "X": features.transform(dev), "y": self._tags(dev, dev_lengths),
                "lengths": dev_lengths, "name": "dev",
            }]  # fmt: skip
        classifier.fit(X, y, lengths=lengths, eval_set=eval_set, verbose=verbose)
        return self._set_fitted(features, classifier)

    def _set_fitted(self, features, classifier):
        """Take the fitted ``features`` and ``classifier`` (and its ``classes_``); self."""
        self.features_, self.classifier_, self.classes_ = features, classifier, classifier.classes_
        return self

    def predict(self, frame):
        """Tags ``(n,)`` of every token of ``frame``, in ``scheme`` (a tag column is ignored)."""
        lengths = self._lengths(frame)
        X = self.features_.transform(frame)
        tags = self.classifier_.predict(X, lengths=lengths)
        return np.asarray(convert_tags(tags, self.model_scheme, self.scheme, lengths), dtype=str)

    def score(self, frame):
        """Overall span F1 (exact span and type) of the predictions on a tagged frame."""
        return float(self.evaluate(frame).loc["overall", "f1"])

    def evaluate(self, frame, report=False):
        """Span scores of the predictions: :func:`~structboost.metrics.span_prf` (or its report)."""
        lengths = self._lengths(frame)
        truth = frame[self.tag_column].to_numpy().astype(str)
        pred = self.predict(frame)
        scorer = span_report if report else span_prf
        return scorer(truth, pred, lengths, scheme=self.scheme)

    def save(self, path):
        """Write the fitted tagger to ``path`` as JSON (load with :func:`load_tagger`)."""
        if not isinstance(self.features_, TokenFeatures):
            raise ValueError(
                f"a tagger with {type(self.features_).__name__} features cannot be written as "
                "JSON: pickle or joblib it instead (and load only files you trust)."
            )
        body = {
            "settings": {name: getattr(self, name) for name in _SETTINGS},
            "features": self.features_.to_document(),
            "classifier": self.classifier_.to_document(),
        }
        write_document(path, _FILE_FORMAT, _FILE_VERSION, body)


def load_tagger(path):
    """Read a tagger written by :meth:`ChunkTagger.save` at ``path``, validated; runs no code.

    Returns
    -------
    ChunkTagger
        Fitted; its ``features`` and ``classifier`` parameters are unfitted copies.
    """
    where = str(path)
    doc = read_document(path, _FILE_FORMAT, _FILE_VERSION, _FILE_HINT)
    settings = field(doc, "settings", dict, where)
    if set(settings) != set(_SETTINGS):
        raise ValueError(f"{where} is damaged: 'settings' must hold {list(_SETTINGS)}.")
    tagger = ChunkTagger(**settings)
    check_scheme(tagger.scheme)
    check_scheme(tagger.model_scheme, "model_scheme")
    features = TokenFeatures.from_document(field(doc, "features", dict, where), where)
    classifier_doc = field(doc, "classifier", dict, where)
    cls = _CLASSIFIERS.get(classifier_doc.get("estimator"))
    if cls is None:
        name = classifier_doc.get("estimator")
        raise ValueError(f"{where} is damaged: unknown classifier {name!r}.")
    classifier = cls().from_document(classifier_doc, where)
    if classifier.n_features_in_ != features.n_features_out_:
        raise ValueError(
            f"{where} is damaged: the classifier reads {classifier.n_features_in_} features "
            f"but the vocabulary makes {features.n_features_out_}."
        )
    tagger.set_params(features=clone(features), classifier=clone(classifier))
    return tagger._set_fitted(features, classifier)
