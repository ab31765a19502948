"""XGBoost wiring: the objective callable, its metric, the transition recorder.

The ``DMatrix``'s groups (``group=`` or sorted ``qid=``) carry the sequence
boundaries. The transitions live on the booster as the JSON attribute
``structboost_crf`` with the rounds they belong to, and every round's in
``structboost_crf_history``, so a slice ``booster[:r]`` predicts with round
``r``'s and continued training starts from them.
"""

import json
from typing import Any

import numpy as np
import xgboost as xgb

from .._compat import XGB_VECTOR_INTERCEPT
from .._extras import require_gpu
from ..objectives.chain import CRFObjective, SequenceBatch
from ..objectives.params import LINEAR_PARAMS, ObjectiveSpec, fill_doc
from ..transitions.chain import TransitionParams
from .base import EngineObjective
from .state import STATE_KEY, TransitionHistory, parse_params, parse_state, state_dict
from .validate import check_xgboost_json, mark_checked
from .model_io import parse_json


def _check_device(device):
    """``"cpu"`` or ``"cuda"`` (``"gpu"`` and ``"cuda:N"`` read as ``"cuda"``)."""
    name = str(device).lower()
    if name == "gpu" or name.startswith("cuda"):
        return "cuda"
    if name != "cpu":
        raise ValueError(f'device must be "cpu" or "cuda"; got {device!r}.')
    return name

HISTORY_SUFFIX = "_history"


def xgb_params(num_labels: int, **overrides: Any) -> dict[str, Any]:
    """Parameters a CRF objective needs in XGBoost.

    Parameters
    ----------
    num_labels : int
    **overrides
        Any other XGBoost parameter (``max_depth``, ``eta``,
        ``multi_strategy="multi_output_tree"``, ...).

    Returns
    -------
    dict
        ``num_target=K``, ``base_score=0`` (one zero per label on XGBoost >=
        3.1), the default metric disabled and ``tree_method="hist"``, updated
        with ``overrides``.
    """
    k = int(num_labels)
    params = {
        "num_target": k,
        "base_score": [0.0] * k if XGB_VECTOR_INTERCEPT else 0.0,
        "disable_default_eval_metric": 1,
        "tree_method": "hist",
    }
    params.update(overrides)
    return params


def booster_from_json(model, where, num_features=None, num_labels=None):
    """A booster from XGBoost's JSON model, checked by
    :func:`structboost.engines.validate.check_xgboost_json` (``num_labels``: its ``num_outputs``)
    before XGBoost reads it.
    """
    check_xgboost_json(model, where, num_features, num_labels)
    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(model.encode("utf-8")))
    except xgb.core.XGBoostError as err:
        message = str(err).splitlines()[0]
        raise ValueError(f"{where}: XGBoost cannot read the model it holds ({message}).") from None
    mark_checked(booster)
    return booster


def dmatrix_lengths(dmat):
    """Sequence lengths ``(m,)`` from a DMatrix's group information."""
    ptr = dmat.get_uint_info("group_ptr")
    if ptr.size == 0:
        raise ValueError(
            "the DMatrix has no sequence boundaries: build it with "
            "DMatrix(X, label=y, group=lengths) or a sorted qid=sequence_id."
        )
    return np.diff(ptr.astype(np.int64))


def save_state(booster, objective, params, key=STATE_KEY, rounds=None):
    """Store the CRF description and ``params`` of a ``rounds``-round model as attribute ``key``."""
    state = state_dict(objective.num_labels, objective.mode, params, rounds)
    booster.set_attr(**{key: json.dumps(state)})


def save_history(booster, history, key=STATE_KEY):
    """Store the transitions of every recorded round as attribute ``key + "_history"``."""
    rounds = {str(r): history[r].to_dict() for r in sorted(history)}
    booster.set_attr(**{key + HISTORY_SUFFIX: json.dumps(rounds)})


def _attr_json(booster, key):
    raw = booster.attr(key)
    if raw is None:
        return None
    return parse_json(
        raw, f"the booster's attribute {key!r}",
        "use the model file structboost saved unchanged, or retrain the model",
    )  # fmt: skip


def load_history(booster, num_labels, key=STATE_KEY, param_type=TransitionParams):
    """Round index -> validated parameters stored by :func:`save_history` (empty if none)."""
    doc = _attr_json(booster, key + HISTORY_SUFFIX)
    if doc is None:
        return {}
    if not isinstance(doc, dict) or not all(r.isdigit() for r in doc):
        raise ValueError(
            f"the booster's attribute {key + HISTORY_SUFFIX!r} must map round numbers to "
            "transitions: the model file is damaged; retrain the model."
        )
    return {int(r): parse_params(d, num_labels, param_type) for r, d in doc.items()}


def kept_rounds(booster):
    """Rounds the booster predicts with: ``best_iteration + 1`` after early stopping, else all."""
    best = booster.attr("best_iteration")
    return int(best) + 1 if best is not None else booster.num_boosted_rounds()


def load_state(booster, key=STATE_KEY, param_type=TransitionParams, factory="crf_objective"):
    """The ``(num_labels, mode, params)`` of the rounds the booster predicts with; ``ValueError``
    for no state, a damaged one, or none recorded for those rounds.
    """
    state = _attr_json(booster, key)
    if state is None:
        raise ValueError(
            "this booster carries no CRF transitions: train it with "
            f"callbacks=[obj.callback()] (obj = structboost.{factory}(...))."
        )
    num_labels, mode, params, rounds = parse_state(state, param_type)
    kept = kept_rounds(booster)
    if rounds is not None and rounds != kept:
        params = load_history(booster, num_labels, key, param_type).get(kept - 1)
        if params is None:
            raise ValueError(
                f"the booster predicts with {kept} rounds but its CRF transitions belong to a "
                f"{rounds}-round model and none were recorded for round {kept}: it was sliced "
                "or trained further without the objective's callback. Pass "
                f"callbacks=[obj.callback()] (obj = structboost.{factory}(...)) to every "
                "training call, and slice only boosters trained with it."
            )
    return num_labels, mode, params


def booster_margins(booster, dmat):
    """Raw margins ``(n, K)`` of the iterations whose transitions are stored."""
    return booster.predict(dmat, output_margin=True, iteration_range=(0, kept_rounds(booster)))


class TransitionRecorder(xgb.callback.TrainingCallback):
    """Keeps the transition parameters of every iteration on the booster (those of the
    ``best_iteration`` in place after training); continued training starts from the stored ones.

    Attributes
    ----------
    history : TransitionHistory
        Round index -> transition parameters of that round.
    """

    def __init__(self, objective):
        super().__init__()
        self.objective = objective
        self.history = TransitionHistory(objective.num_labels, objective.crf.mode)
        self._first_round = 0

    def before_training(self, model):
        self._first_round = model.num_boosted_rounds()
        if self._first_round:
            self._resume(model)
        return model

    def _resume(self, model):
        """Start from the transitions stored on the booster being trained further."""
        obj = self.objective
        key, param_type = obj.state_key, obj.param_type
        # Training continues from every round, so does prediction: an earlier
        # run's early-stopping mark would hide the new rounds.
        model.set_attr(best_iteration=None, best_score=None)
        num_labels, mode, params = load_state(model, key, param_type)
        if (num_labels, mode) != (obj.num_labels, obj.crf.mode):
            raise ValueError(
                f"the booster was trained with a {num_labels}-label {mode!r} CRF; continue it "
                f"with the same objective, not a {obj.num_labels}-label {obj.crf.mode!r} one."
            )
        for r, stored in load_history(model, num_labels, key, param_type).items():
            self.history.record(r, stored)
        self.history.record(kept_rounds(model) - 1, params)
        constraints = getattr(obj.crf, "constraints", None)
        obj.crf.params = params.copy() if constraints is None else constraints.apply(params)

    def after_iteration(self, model, epoch, evals_log):
        r = self._first_round + epoch
        self.history.record(r, self.objective.params)
        save_state(model, self.objective.crf, self.history[r], self.objective.state_key, r + 1)
        return False

    def after_training(self, model):
        rounds = kept_rounds(model)
        key = self.objective.state_key
        save_state(model, self.objective.crf, self.history.for_rounds(rounds), key, rounds)
        save_history(model, self.history, key)
        mark_checked(model)  # trained here: prediction need not re-parse its model
        return model


class XGBCRFObjective(EngineObjective):
    """A chain-CRF objective for ``xgboost.train(obj=...)`` (build with :func:`crf_objective`).

    ``obj(predt, dtrain)`` refits the transitions and returns ``(grad, hess)``,
    both ``(n, K)`` float32: the objective's own buffers, rewritten by the next
    call, which checks that ``predt`` did not change in place meanwhile
    (:meth:`NodeObjective.grad_hess <structboost.objectives.round.NodeObjective.grad_hess>`).

    Attributes
    ----------
    crf : CRFObjective
        The engine-agnostic objective.
    """

    state_key = STATE_KEY
    param_type: type = TransitionParams
    # XGBoost stores gradients as float32 pairs (GradientPair, include/xgboost/base.h)
    # and casts what it is given (CustomGradHessOp, include/xgboost/gradient.h).
    grad_layout = {"dtype": np.float32}

    def _build_batch(self, dmat):
        """Validated labels, boundaries and per-sequence weights of a DMatrix."""
        return SequenceBatch.build(
            dmat.get_label(), dmatrix_lengths(dmat), self.num_labels, dmat.get_weight()
        )

    def metric(self, predt, dmat):
        """XGBoost custom metric on any grouped DMatrix: ``("crf-nll" or "crf-error", weighted
        value)``.
        """
        return self.evaluate(predt, dmat)

    def callback(self):
        """A :class:`TransitionRecorder` to pass in ``callbacks=``."""
        return TransitionRecorder(self)


@fill_doc(*LINEAR_PARAMS)
def crf_objective(
    num_labels: int, spec: ObjectiveSpec | None = None, *, device: str = "cpu", **params: Any
) -> "XGBCRFObjective":
    """Build a chain-CRF objective for ``xgboost.train``.

    Parameters
    ----------
    num_labels : int
        Number of labels K; the booster needs ``num_target=K`` (:func:`xgb_params`).
    spec : ObjectiveSpec, optional
        Settings the keywords below change.
    device : {"cpu", "cuda"}
        Where the round runs. ``"cuda"`` (needs ``structboost-crf[gpu]``; pair
        it with XGBoost's ``device="cuda"``) runs it with
        :mod:`structboost.objectives.gpu` and hands XGBoost device arrays.
    {objective_params}

    Returns
    -------
    XGBCRFObjective
    """
    cls = CRFObjective
    if _check_device(device) == "cuda":
        require_gpu(f"crf_objective(device={device!r})")
        from ..objectives.gpu import DeviceCRFObjective as cls
    return XGBCRFObjective(cls(num_labels, spec, **params))
