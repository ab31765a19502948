"""XGBoost training whose margins stay where the objective runs (``Booster.boost``).

``xgboost.train(obj=...)`` hands the objective a host copy of the margins every
round. This loop keeps the margins itself, in the array module of the features
it is given (CuPy arrays for a GPU booster), adds each round's trees through
``Booster.inplace_predict`` and passes G and H to ``Booster.boost``; callbacks,
evaluation, early stopping and the returned booster are as ``xgboost.train``'s.
"""

import xgboost as xgb
from xgboost.callback import CallbackContainer, EarlyStopping, EvaluationMonitor


def train_kept_margins(params, dtrain, X, num_boost_round, obj, *, evals=(), custom_metric=None,
                       early_stopping_rounds=None, evals_result=None, verbose_eval=True,
                       callbacks=()):  # fmt: skip
    """``xgboost.train(params, dtrain, num_boost_round, obj=obj, ...)`` with kept margins.

    Parameters
    ----------
    params : dict
    dtrain : xgboost.DMatrix
        The training rows, for the trees (labels, groups, weights and base margin).
    X : (n, d) array
        The same rows for ``Booster.inplace_predict``: a NumPy or CuPy array; the
        margins live in its array module.
    num_boost_round : int
    obj : EngineObjective
        Called as ``obj(margins, dtrain)``.
    evals, custom_metric, early_stopping_rounds, evals_result, verbose_eval, callbacks
        As :func:`xgboost.train`'s.

    Returns
    -------
    xgboost.Booster
    """
    evals = list(evals)
    booster = xgb.Booster(params, [dtrain, *(d for d, _ in evals)])
    callbacks = list(callbacks)
    if verbose_eval:
        callbacks.append(EvaluationMonitor(period=1 if verbose_eval is True else verbose_eval))
    if early_stopping_rounds:
        callbacks.append(EarlyStopping(rounds=early_stopping_rounds))
    container = CallbackContainer(callbacks, metric=custom_metric, output_margin=True)
    booster = container.before_training(booster)
    margins = booster.inplace_predict(X, predict_type="margin")  # the base score: zeros
    base_margin = dtrain.get_base_margin()
    if base_margin.size:  # XGBoost puts it where X lives
        margins = booster.inplace_predict(X, predict_type="margin",
                                          base_margin=base_margin.reshape(margins.shape))
    for i in range(num_boost_round):
        if container.before_iteration(booster, i, dtrain, evals):
            break
        grad, hess = obj(margins, dtrain)
        booster.boost(dtrain, i, grad=grad, hess=hess)
        # fresh margins each round: the adaptive step keeps the last ones until the next call
        margins = margins + booster.inplace_predict(X, iteration_range=(i, i + 1),
                                                    predict_type="margin")  # fmt: skip
        if container.after_iteration(booster, i, dtrain, evals):
            break
    booster = container.after_training(booster)
    if evals_result is not None:
        evals_result.update(container.history)
    return booster.reset()
