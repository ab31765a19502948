"""Chunk tagging of token files: lexical features, a CRF booster and tag schemes together.

:class:`ChunkTagger` is what ``structboost train/predict/evaluate --format
conll`` run, usable from Python as well. It reads a
:func:`structboost.datasets.read_conll` DataFrame, turns it into sparse
lexical window features (:class:`structboost.text.lexical.TokenFeatures`),
rewrites the tags from the file's scheme (CoNLL-2003: IOB1) into the scheme
the model learns (IOB2 by default: every chunk opens with ``B-``, so the
chunk boundaries are labels the CRF sees), trains a CRF classifier
(:class:`structboost.XGBCRFClassifier` by default) whose decoding is
constrained to well-formed tag sequences of that scheme, and writes
predictions back in the file's scheme.
"""

import pickle

import numpy as np
from sklearn.base import BaseEstimator, clone

from .text.tags import check_scheme
from .datasets import convert_tags
from .text.lexical import TokenFeatures
from .metrics import span_prf, span_report
from .estimators.chain import XGBCRFClassifier

__all__ = ["ChunkTagger", "load_tagger"]

_FILE_FORMAT = "structboost-chunk-tagger"
_FILE_VERSION = 1


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

    def __init__(
        self,
        features=None,
        classifier=None,
        scheme="iob1",
        model_scheme="iob2",
        constrained=True,
        tag_column="tag",
    ):
        self.features = features
        self.classifier = classifier
        self.scheme = scheme
        self.model_scheme = model_scheme
        self.constrained = constrained
        self.tag_column = tag_column

    def _lengths(self, frame):
        if "sentence" not in frame.columns:
            raise ValueError(
                "the frame has no 'sentence' column: read files with "
                "structboost.datasets.read_conll, which numbers the sentences."
            )
        return np.bincount(frame["sentence"].to_numpy())

    def _tags(self, frame, lengths):
        if self.tag_column not in frame.columns:
            raise ValueError(
                f"the frame has no tag column {self.tag_column!r}; columns are "
                f"{list(frame.columns)}. Name the columns when reading (columns=...)."
            )
        return convert_tags(
            frame[self.tag_column].to_numpy(), self.scheme, self.model_scheme, lengths
        )

    def fit(self, frame, dev=None, verbose=0):
        """Train on a token frame, optionally watching a development frame.

        Parameters
        ----------
        frame : pandas.DataFrame
            One row per token (:func:`~structboost.datasets.read_conll`).
        dev : pandas.DataFrame, optional
            Development tokens: their CRF NLL is recorded per round and drives
            the classifier's early stopping (if it has ``early_stopping_rounds``).
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
        self.features_ = features
        self.classifier_ = classifier
        self.classes_ = classifier.classes_
        return self

    def predict(self, frame):
        """Tags of every token, in ``scheme``.

        Parameters
        ----------
        frame : pandas.DataFrame
            Tokens (a tag column, if any, is ignored).

        Returns
        -------
        (n,) ndarray of str
        """
        lengths = self._lengths(frame)
        X = self.features_.transform(frame)
        tags = self.classifier_.predict(X, lengths=lengths)
        return np.asarray(convert_tags(tags, self.model_scheme, self.scheme, lengths), dtype=str)

    def score(self, frame):
        """Overall span F1 (exact span and type) of the predictions on a tagged frame."""
        return float(self.evaluate(frame).loc["overall", "f1"])

    def evaluate(self, frame, report=False):
        """Span precision, recall and F1 per chunk type and overall.

        Parameters
        ----------
        frame : pandas.DataFrame
            Tokens with their true tags in ``scheme``.
        report : bool
            Return conlleval-style text instead of the table.

        Returns
        -------
        pandas.DataFrame or str
            See :func:`structboost.metrics.span_prf` / :func:`~structboost.metrics.span_report`.
        """
        lengths = self._lengths(frame)
        truth = frame[self.tag_column].to_numpy().astype(str)
        pred = self.predict(frame)
        scorer = span_report if report else span_prf
        return scorer(truth, pred, lengths, scheme=self.scheme)

    def save(self, path):
        """Write the fitted tagger to ``path`` (a pickle; load with :func:`load_tagger`)."""
        with open(path, "wb") as handle:
            pickle.dump({"format": _FILE_FORMAT, "version": _FILE_VERSION, "tagger": self}, handle)


def load_tagger(path):
    """Read a tagger written by :meth:`ChunkTagger.save`.

    Pickles run code when loaded: only load files you trust.
    """
    with open(path, "rb") as handle:
        try:
            data = pickle.load(handle)
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
            raise ValueError(
                f"{path} is not a structboost tagger file ({err}); train one with "
                "`structboost train --format conll`."
            ) from err
    if not isinstance(data, dict) or data.get("format") != _FILE_FORMAT:
        raise ValueError(
            f"{path} is not a structboost tagger file; train one with "
            "`structboost train --format conll`."
        )
    if data.get("version") != _FILE_VERSION:
        raise ValueError(
            f"{path} was written by tagger file version {data.get('version')}; this "
            f"structboost reads version {_FILE_VERSION}. Retrain the model."
        )
    return data["tagger"]
