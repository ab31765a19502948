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
    ``HistGradientBoostingClassifier``: ``"auto"`` does so when the training
    set has more than 10,000 rows (and two sequences or more), ``True``
    always, ``False`` never. With ``eval_metric=None`` the held-out
    sequences record the NLL (``"crf-nll"``) and the Viterbi token error
    (``"crf-error"``), and the error decides: the NLL's minimum comes
    rounds before the error's. An ``eval_set`` or ``early_stopping_rounds``
    keeps XGBoost's behaviour instead: nothing is held out
    (``early_stopping=True`` with an ``eval_set`` stops on its last entry
    with ``n_iter_no_change`` patience).
validation_fraction : float
    Share of the training sequences held out, drawn with ``random_state``
    (None: seed 0, as the engines' own default seed).
n_iter_no_change : int
    Patience of the automatic early stopping, in rounds (30: the token
    error of a few held-out sequences moves in steps, and rests on
    plateaus that a patience of 10 mistakes for its minimum).
refit : bool
    After automatic early stopping chose the number of rounds on the
    held-out sequences, train again on *all* the training sequences for
    that number divided by ``1 - validation_fraction`` (rounded up, at most
    ``n_estimators``), without early stopping: the held-out sequences are
    trained on too, and more sequences take more rounds to overfit. The
    fit then costs about twice as much, and ``callbacks`` run in both
    runs. ``False`` keeps the model trained on the rest, as scikit-learn's
    ``HistGradientBoostingClassifier`` does. Nothing is refit after an
    ``eval_set``.
class_weight : dict, "balanced" or None
    Weights of the labels, as in scikit-learn (``{label: weight}``, or
    ``"balanced"``: ``n / (K * count)``): each training sequence is
    weighted by the mean class weight of its labels, times its
    ``sample_weight``. The likelihood is a sum over sequences; per-row
    weights in the gradient would make it the gradient of no function,
    which the adaptive step, the transition solver and early stopping all
    measure. Evaluation sets are not reweighted; the held-out sequences of
    automatic early stopping are, as in scikit-learn.
"""

#: Parameters of the estimators on rows with boundaries (chains and trees).
SEQUENCE_PARAMS = STOPPING_PARAMS + """
sequence_column : str, optional
    Name of the DataFrame column holding the per-row sequence id: every
    call reads the boundaries from it (never a feature), so the data
    carry them through ``GridSearchCV`` / ``cross_val_score`` splits.
eval_metric : str, callable or list of them, optional
    What ``evals_result_`` records on every ``eval_set`` entry, as in
    XGBoost's scikit-learn wrapper: ``"crf-nll"`` (default: negative
    log-likelihood per sequence; on the held-out sequences of automatic
    early stopping ``["crf-nll", "crf-error"]``), ``"crf-error"`` (Viterbi
    token error)
    or callables ``f(y_true, y_proba[, sample_weight=])`` (label indices
    ``(n,)``, posterior marginals ``(n, K)``; lower is better, named by
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
decode : {"viterbi", "marginal"}
    What :meth:`predict` returns (and so ``score``, ``cross_val_score``
    and grid searches see): ``"viterbi"``, the most probable label
    sequence (a consistent path: never a forbidden move), or
    ``"marginal"``, each position's most probable label under the
    posterior marginals (the most labels right in expectation: better
    per-token accuracy where the features already carry the context, as
    windows of residues do, but the labels of neighbours need not form an
    allowed path). With automatic early stopping and ``eval_metric=None``,
    ``"marginal"`` stops on the NLL, which scores the marginals it reads.
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
    best (``best_iteration`` of the run that held them out; with
    ``refit=True`` the final model keeps ``best_iteration + 1`` = that
    count scaled by ``1 / (1 - validation_fraction)``); None when nothing
    was held out.
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
