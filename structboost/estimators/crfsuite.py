"""sklearn-crfsuite's dialect: one sample is one sequence (:class:`SequenceSamples`).

:class:`~structboost.XGBSequenceCRF` and :class:`~structboost.LGBMSequenceCRF`
take ``X`` as a list of sequences (each a list of feature dicts, or a 2-D
array) and ``y`` as a list of label lists, as ``sklearn_crfsuite.CRF`` does::

    crf = XGBSequenceCRF(allowed_transitions="iob2")    # was sklearn_crfsuite.CRF(...)
    crf.fit(X_train, y_train)
    f1 = make_scorer(metrics.flat_f1_score, average="weighted", labels=labels)
    RandomizedSearchCV(crf, {"max_depth": [3, 6]}, cv=3, scoring=f1).fit(X_train, y_train)

with ``structboost.metrics`` in place of ``sklearn_crfsuite.metrics``. Like
``sklearn_crfsuite.CRF`` they are no classifiers in scikit-learn's sense: an
integer ``cv`` gives plain ``KFold`` over whole sequences.
"""

from .inputs import kind


class SequenceSamples:
    """Mixin of the sequence-level estimators: lists of sequences only, no classifier tag."""

    def __sklearn_tags__(self):
        """No classifier tags: an integer ``cv`` is KFold over the sequences."""
        tags = super().__sklearn_tags__()
        tags.estimator_type = None
        tags.classifier_tags = None
        return tags

    def _check_X(self, X, groups, lengths, *, reset, where="X"):
        """As :meth:`SequenceInputs._check_X`, for lists of sequences only."""
        if kind(X) is None:
            flat = type(self).__name__.replace("SequenceCRF", "CRFClassifier")
            raise ValueError(
                f"{type(self).__name__} takes {where} as a list of sequences, each a list of "
                "feature dicts or a 2-D array (sklearn-crfsuite's input); for one row per "
                f"token with groups=/lengths=, use {flat}."
            )
        return super()._check_X(X, groups, lengths, reset=reset, where=where)

    @property
    def transition_features_(self):
        """sklearn-crfsuite's ``transition_features_``: ``{(label_from, label_to): score}``.

        The ``n_classes ** 2`` entries of ``transitions_`` (a forbidden move is
        ``-inf``); there is no ``state_features_`` (the node scores are trees).
        """
        table = self.transitions_
        return {(a, b): float(table.loc[a, b]) for a in table.index for b in table.columns}


SEQUENCE_DOC = """Chain-CRF sequence labeller on {engine} with sklearn-crfsuite's interface.

    One sample is one sequence: ``fit(X, y)`` takes a list of sequences
    (each a list of feature dicts, vectorised once by a ``DictVectorizer``
    kept as ``vectorizer_``, or a 2-D array ``(n_i, d)``) and a list of label
    lists; ``predict`` returns a list of label lists, ``predict_single`` the
    label list of one sequence, ``predict_marginals`` a list of ``(n_i, K)``
    arrays in ``classes_`` order, ``transition_features_`` the transition
    scores as sklearn-crfsuite's dict. scikit-learn's model selection splits the
    sequences (an integer ``cv`` is ``KFold`` over them; see
    :mod:`structboost.estimators.crfsuite`).

    The parameters, attributes and other methods are those of
    :class:`structboost.{base}`; ``eval_set`` entries are ``(X, y)`` tuples
    of such lists.
"""
