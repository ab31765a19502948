"""LightGBM wiring: the objective callable, its metric, the transition recorder, saving.

The ``Dataset``'s groups (``group=lengths``) carry the sequence boundaries.
LightGBM boosters keep no user attributes through ``save_model``, so the
transitions live in a Python attribute of the booster (kept by pickle) and
in the file of :func:`save_lgb_model`.
"""

import copy
import json
import os
from pathlib import Path
from typing import Any

import lightgbm as lgb

from .._io import atomic_write_text
from .base import EngineObjective, build_batch
from ..objectives.params import LINEAR_PARAMS, ObjectiveSpec, fill_doc
from ..objectives.chain import CRFObjective
from .state import STATE_KEY, TransitionHistory, parse_state, state_dict
from .validate import check_lightgbm_text

MODEL_KEY = "lgb_model"

# Safe defaults and the LightGBM aliases that override each of them: LightGBM's
# floor on a leaf's sum(H) (1e-3) lets a leaf of confident rows take a huge step;
# XGBoost's (min_child_weight=1) is used instead.
_SAFE_DEFAULTS = {
    "min_sum_hessian_in_leaf": (
        1.0,
        ("min_sum_hessian_per_leaf", "min_sum_hessian", "min_hessian", "min_child_weight"),
    ),
}


def lgb_params(num_labels: int, **overrides: Any) -> dict[str, Any]:
    """Parameters a CRF objective needs in LightGBM, with safe defaults.

    Parameters
    ----------
    num_labels : int
    **overrides
        Any other LightGBM parameter (``objective=obj``, ``learning_rate``,
        ...); one given under any alias replaces the matching default.

    Returns
    -------
    dict
        ``num_class=K``, ``metric="None"``, ``verbose=-1`` and
        ``min_sum_hessian_in_leaf=1``, updated with ``overrides``.
    """
    params = {"num_class": int(num_labels), "metric": "None", "verbose": -1}
    for name, (value, aliases) in _SAFE_DEFAULTS.items():
        if name not in overrides and not any(a in overrides for a in aliases):
            params[name] = value
    params.update(overrides)
    return params


def dataset_lengths(dataset):
    """Sequence lengths ``(m,)`` from a constructed Dataset's groups."""
    group = dataset.get_group()
    if group is None:
        raise ValueError(
            "the Dataset has no sequence boundaries: build it with "
            "lightgbm.Dataset(X, label=y, group=lengths)."
        )
    return group


def kept_rounds(booster):
    """Number of rounds the booster predicts with: ``best_iteration`` after early stopping, else
    all.
    """
    best = booster.best_iteration
    return best if best is not None and best > 0 else booster.current_iteration()


def load_state(booster):
    """The ``(num_labels, mode, TransitionParams)`` of the rounds the booster keeps."""
    history = getattr(booster, STATE_KEY, None)
    if not isinstance(history, TransitionHistory):
        raise ValueError(
            "this booster carries no CRF transitions: train it with "
            "callbacks=[obj.callback()] (obj = structboost.lightgbm.lgb_crf_objective(...)), load it "
            "with structboost.lightgbm.load_lgb_model, or unpickle it (a plain LightGBM model file "
            "holds no transitions)."
        )
    return history.num_labels, history.mode, history.for_rounds(kept_rounds(booster))


def copy_booster(booster, memo=None):
    """A deep copy of ``booster`` with the transitions kept on it (LightGBM's copies drop them)."""
    twin = copy.deepcopy(booster, memo)
    history = getattr(booster, STATE_KEY, None)
    if history is not None:
        setattr(twin, STATE_KEY, copy.deepcopy(history, memo))
    return twin


def booster_margins(booster, data):
    """Raw scores ``(n, K)`` of the rounds whose transitions are kept."""
    return booster.predict(data, raw_score=True, num_iteration=kept_rounds(booster))


def booster_document(booster):
    """``{"lgb_model": model text, "structboost_crf": state}`` of the rounds the booster keeps."""
    num_labels, mode, params = load_state(booster)
    n_rounds = kept_rounds(booster)
    return {
        MODEL_KEY: booster.model_to_string(num_iteration=n_rounds),
        STATE_KEY: state_dict(num_labels, mode, params, n_rounds),
    }


def booster_from_document(doc, where, num_features=None):
    """Inverse of :func:`booster_document`, validated before LightGBM reads the text (``where``:
    the file, for the messages; ``num_features``: the feature count the model must have).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get(MODEL_KEY), str) or STATE_KEY not in doc:
        raise ValueError(
            f"{where} is not a file written by structboost.lightgbm.save_lgb_model (a JSON object with "
            f"{MODEL_KEY!r} and {STATE_KEY!r}); a plain LightGBM model file holds no "
            "transitions."
        )
    try:
        num_labels = parse_state(doc[STATE_KEY])[0]
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    check_lightgbm_text(doc[MODEL_KEY], where, num_features=num_features, num_labels=num_labels)
    try:
        booster = lgb.Booster(model_str=doc[MODEL_KEY])
    except lgb.basic.LightGBMError as err:
        raise ValueError(f"{where}: LightGBM cannot read the model it holds ({err}).") from None
    try:
        history = TransitionHistory.from_state(doc[STATE_KEY], booster.current_iteration())
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    setattr(booster, STATE_KEY, history)
    return booster


def save_lgb_model(booster: lgb.Booster, path: str | os.PathLike[str]) -> None:
    """Save a LightGBM booster with its CRF transitions, replacing ``path`` only once complete.

    The file is JSON ``{"lgb_model": model text, "structboost_crf": state}`` of
    the rounds the booster predicts with.

    Parameters
    ----------
    booster : lightgbm.Booster
        Trained with :func:`lgb_crf_objective` and its callback (or loaded).
    path : str or os.PathLike
    """
    atomic_write_text(path, json.dumps(booster_document(booster)))


def load_lgb_model(path: str | os.PathLike[str]) -> lgb.Booster:
    """Load a booster saved by :func:`save_lgb_model`, its transitions attached (for
    :func:`structboost.engines.predict`).
    """
    try:
        doc = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        doc = None
    return booster_from_document(doc, path)


class LGBTransitionRecorder:
    """LightGBM callback keeping every round's transitions on the booster (``structboost_crf``),
    before early stopping.

    Attributes
    ----------
    history : TransitionHistory or None
        The history of the booster trained last.
    """

    def __init__(self, objective):
        self.objective = objective
        self.history = None
        self.order = 10

    def __call__(self, env):
        booster = env.model
        if not isinstance(booster, lgb.Booster):
            raise ValueError(
                "structboost's LightGBM callback needs one booster per training run; "
                "lightgbm.cv would share one objective's transitions across folds. "
                "Cross-validate with structboost.LGBMCRFClassifier and GroupKFold instead."
            )
        history = getattr(booster, STATE_KEY, None)
        if not isinstance(history, TransitionHistory):
            history = TransitionHistory(self.objective.num_labels, self.objective.crf.mode)
            setattr(booster, STATE_KEY, history)
        history.record(env.iteration, self.objective.params)
        self.history = history


class LGBCRFObjective(EngineObjective):
    """A chain-CRF objective for ``lightgbm.train`` (build with :func:`lgb_crf_objective`).

    ``obj(preds, train_set)`` refits the transitions and returns
    ``(grad, hess)``, both ``(n, K)``.

    Attributes
    ----------
    crf : CRFObjective
        The engine-agnostic objective.
    """

    # LightGBM flattens multiclass gradients class-major: column-major arrays need no copy.
    grad_layout = {"order": "F"}

    def __deepcopy__(self, memo):
        # lightgbm.train deep-copies ``params``: the metric and the callback must see this object.
        return self

    def _build_batch(self, dataset):
        """Validated labels, boundaries and sequence weights of a constructed Dataset."""
        return build_batch(
            self.num_labels, dataset.get_label(), dataset_lengths(dataset),
            row_weight=dataset.get_weight()
        )

    def metric(self, preds, eval_data):
        """``lightgbm.train(feval=...)`` metric: ``("crf-nll" or "crf-error", weighted value,
        False)``.
        """
        return (*self.evaluate(preds, eval_data), False)

    def _sklearn_batch(self, y_true, weight, group):
        if group is None:
            raise ValueError(
                "the objective got no sequence groups: LGBMClassifier.fit cannot pass them. "
                "Use structboost.LGBMCRFClassifier, or lightgbm.LGBMModel.fit(..., group=lengths)."
            )
        return build_batch(self.num_labels, y_true, group, row_weight=weight)

    def sklearn_objective(self, y_true, y_pred, weight, group):
        """The objective in the signature of LightGBM's scikit-learn API."""
        return self.crf.grad_hess(
            y_pred, self._sklearn_batch(y_true, weight, group), **self.grad_layout
        )

    def sklearn_metric(self, y_true, y_pred, weight, group):
        """The metric in the signature of LightGBM's scikit-learn ``eval_metric``."""
        batch = self._sklearn_batch(y_true, weight, group)
        return (*self.crf.evaluate(y_pred, batch), False)

    def callback(self):
        """A :class:`LGBTransitionRecorder` to pass in ``callbacks=``."""
        return LGBTransitionRecorder(self)


@fill_doc(*LINEAR_PARAMS)
def lgb_crf_objective(
    num_labels: int, spec: ObjectiveSpec | None = None, **params: Any
) -> LGBCRFObjective:
    """Build a chain-CRF objective for ``lightgbm.train``.

    Parameters
    ----------
    num_labels : int
        Number of labels K; the booster needs ``num_class=K``
        (:func:`lgb_params`).
    spec : ObjectiveSpec, optional
        Settings the keywords below change.
    {objective_params}

    Returns
    -------
    LGBCRFObjective
        For ``params["objective"]``, ``feval=obj.metric`` and
        ``callbacks=[obj.callback()]``.

    Examples
    --------
    >>> obj = lgb_crf_objective(K)                                  # doctest: +SKIP
    >>> booster = lightgbm.train(                                   # doctest: +SKIP
    ...     lgb_params(K, objective=obj, learning_rate=0.3),
    ...     lightgbm.Dataset(X, label=y, group=lengths), num_boost_round=100,
    ...     valid_sets=[dvalid], feval=obj.metric,
    ...     callbacks=[obj.callback(), lightgbm.early_stopping(10)])
    """
    return LGBCRFObjective(CRFObjective(num_labels, spec, **params))
