"""Numpydoc sections the estimators share, filled into their docstrings by ``fill_doc``."""

#: Numpydoc of the rounds, early-stopping and class-weight parameters (``fill_doc`` sections).
ROUNDS_PARAMS = """
n_estimators : int, optional
    Most boosting rounds; None: 1000 when automatic early stopping ends the
    fit (see ``early_stopping``), 100 otherwise.
"""
STOPPING_PARAMS = """
early_stopping_rounds : int, optional
    Stop when the last ``eval_metric`` on the last ``eval_set`` entry has not
    improved for this many rounds; predictions then use the best round and
    its transitions.
early_stopping : {"auto", True, False}
    Hold out ``validation_fraction`` of the training *sequences* (tree
    instances) and stop when the last ``eval_metric`` on them has not
    improved for ``n_iter_no_change`` rounds, as scikit-learn's
    ``HistGradientBoostingClassifier``: ``"auto"`` when the training set has
    more than 10,000 rows (and two sequences or more), ``True`` always,
    ``False`` never. With ``eval_metric=None`` the held-out sequences record
    ``"crf-nll"`` and ``"crf-error"``, and the error decides. With an
    ``eval_set`` or ``early_stopping_rounds`` nothing is held out
    (``early_stopping=True`` with an ``eval_set`` stops on its last entry
    with ``n_iter_no_change`` patience).
validation_fraction : float
    Share of the training sequences held out, drawn with ``random_state``
    (None: seed 0).
n_iter_no_change : int
    Patience of the automatic early stopping, in rounds.
refit : bool
    After automatic early stopping, train again on *all* the training
    sequences for the chosen rounds divided by ``1 - validation_fraction``
    (rounded up, at most ``n_estimators``), without early stopping
    (``callbacks`` run in both runs). ``False`` keeps the model trained on
    the rest. Nothing is refit after an ``eval_set``.
class_weight : dict, "balanced" or None
    Weights of the labels, as in scikit-learn: each training sequence is
    weighted by the mean class weight of its labels, times its
    ``sample_weight`` (the likelihood is a sum over sequences). Evaluation
    sets are not reweighted; the held-out sequences of automatic early
    stopping are.
"""

#: Parameters of the estimators on rows with boundaries (chains and trees).
SEQUENCE_PARAMS = STOPPING_PARAMS + """
sequence_column : str, optional
    Name of the DataFrame column holding the per-row sequence id: every
    call reads the boundaries from it (never a feature), so the data
    carry them through ``GridSearchCV`` / ``cross_val_score`` splits.
eval_metric : str, callable or list of them, optional
    What ``evals_result_`` records on every ``eval_set`` entry:
    ``"crf-nll"`` (default: NLL per sequence; on held-out sequences
    ``["crf-nll", "crf-error"]``), ``"crf-error"`` (Viterbi token error) or
    callables ``f(y_true, y_proba[, sample_weight=])`` (label indices
    ``(n,)``, marginals ``(n, K)``; lower is better, named by
    ``__name__``); the last one drives early stopping.
"""
#: Parameters both chain estimators document (after the engine's).
CHAIN_PARAMS = SEQUENCE_PARAMS + """
base_model : estimator, optional
    A :class:`structboost.LinearChainCRF` (or any estimator with
    ``fit(X, y, lengths, sample_weight=)`` and ``decision_function(X) ->
    (n, K)``): ``fit`` trains a clone of it first and boosts from its node
    scores (XGBoost's ``base_margin``, LightGBM's ``init_score``) and
    transitions; see :mod:`structboost.estimators.chain`.
allowed_transitions : {"iob1", "iob2", "bioes"}, Constraints or (K, K) bool array, optional
    Moves the model may make: a tag scheme (the classes must then be its
    tags, such as ``"B-PER"`` and ``"O"``; see
    :func:`structboost.objectives.constraints.allowed_transitions`) or masks
    over ``classes_``. Forbidden transition, start and end scores stay at
    ``-inf`` in training and in every prediction, so no prediction makes a
    forbidden move. The training labels must obey them.
decode : {"viterbi", "marginal", "auto"}
    What :meth:`predict` (and so ``score``) returns: ``"viterbi"``, the most
    probable label sequence (never a forbidden move), or ``"marginal"``,
    each position's most probable label under the posterior marginals (the
    labels of neighbours need not form an allowed path; automatic early
    stopping with ``eval_metric=None`` then stops on the NLL). ``"auto"``
    picks the one with the lower token error on the sequences that automatic
    early stopping held out (Viterbi without them, or with
    ``allowed_transitions``); ``decode_`` is the choice.
    ``predict(decode=...)`` overrides it for one call.
"""
#: Fitted attributes of the estimators on rows with boundaries (chains and trees).
FIT_ATTRIBUTES = """
classes_ : ndarray, shape (n_classes,)
best_iteration_ : int
    The last round the model uses, in the engine's numbering: 0-based on
    XGBoost (as ``XGBClassifier.best_iteration``), 1-based on LightGBM (as
    ``LGBMClassifier.best_iteration_``, here also without early stopping).
best_iteration : int
    XGBoost's name: the same round 0-based on both engines
    (``best_iteration + 1`` rounds are kept).
best_score : float
    XGBoost's name of ``best_score_``.
evals_result_ : dict
    ``eval_metric`` per round for each ``eval_set`` entry (``validation_i``
    or the entry's ``"name"``), or for the held-out sequences of automatic
    early stopping (``"validation"``).
validation_sequences_ : (v,) int64 ndarray
    Positions (0-based, in row order) of the training sequences that
    automatic early stopping held out; empty when none were.
validation_best_iteration_ : int or None
    The 0-based round at which the metric on the held-out sequences was
    best; None when nothing was held out.
best_score_ : float
    The stopping metric on the last ``eval_set`` entry at
    ``best_iteration_`` (only with an ``eval_set``).
n_classes_ : int
boundaries_ : {"sequences", "rows"}
    ``"rows"`` when ``fit`` got no boundaries (every row its own
    sequence; later calls may then omit them too).
id_column_ : str or None
    The DataFrame column that held the sequence ids in ``fit``.
vectorizer_ : sklearn.feature_extraction.DictVectorizer or None
    The vocabulary of feature-dict input.
feature_importances_ : ndarray, shape ``(n_features_in_,)``
n_features_in_ : int
feature_names_in_ : ndarray of str
    Only when ``X`` was a DataFrame.
"""
CHAIN_ATTRIBUTES = FIT_ATTRIBUTES + """
constraints_ : Constraints or None
    ``allowed_transitions`` resolved against ``classes_``.
transitions_ : pandas.DataFrame
decode_ : {"viterbi", "marginal"}
    What :meth:`predict` decodes: ``decode``, or the choice of ``"auto"``.
base_model_ : estimator or None
    The fitted clone of ``base_model``.
"""
#: Numpydoc of ``fit``'s ``verbose``.
VERBOSE = """
verbose : bool or int, optional
    Print the metrics every round (``True``) or every ``verbose`` rounds;
    ``False``: silent. None: every round for an ``eval_set`` you pass,
    nothing for the held-out sequences of automatic early stopping.
"""
