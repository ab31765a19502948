"""XGBoost wiring: the objective callable, its metric, the transition recorder.

Only XGBoost's public API is used: ``xgb.train(obj=...)`` hands the objective
the raw margins ``(n, K)`` and the training ``DMatrix``, whose group
information (``group=`` lengths or sorted ``qid=``) carries the sequence
boundaries. The transition parameters live on the booster as the JSON
attribute ``structboost_crf``, so ``save_model``/``load_model`` (JSON and
UBJ), pickling and slicing keep them.
"""

import json

import numpy as np
import xgboost as xgb

from .base import EngineObjective
from ..objectives.params import DEFAULTS, fill_doc
from ..objectives.chain import CRFObjective, SequenceBatch
from .state import STATE_KEY, TransitionHistory, parse_state, state_dict
from ..transitions.chain import TransitionParams


def _check_device(device):
    """``"cpu"`` or ``"cuda"`` (``"gpu"`` and ``"cuda:N"`` read as ``"cuda"``)."""
    name = str(device).lower()
    if name == "gpu" or name.startswith("cuda"):
        return "cuda"
    if name != "cpu":
        raise ValueError(f'device must be "cpu" or "cuda"; got {device!r}.')
    return name


def xgb_params(num_labels, **overrides):
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
        ``num_target=K`` (K outputs, no link function), ``base_score=0``
        (custom objectives otherwise start from 0.5), the default metric
        disabled and ``tree_method="hist"``, updated with ``overrides``.
    """
    params = {
        "num_target": int(num_labels),
        "base_score": 0.0,
        "disable_default_eval_metric": 1,
        "tree_method": "hist",
    }
    params.update(overrides)
    return params


def dmatrix_lengths(dmat):
    """Sequence lengths ``(m,)`` from a DMatrix's group information."""
    ptr = dmat.get_uint_info("group_ptr")
    if ptr.size == 0:
        raise ValueError(
            "the DMatrix has no sequence boundaries: build it with "
            "DMatrix(X, label=y, group=lengths) or a sorted qid=sequence_id."
        )
    return np.diff(ptr.astype(np.int64))


def save_state(booster, objective, params, key=STATE_KEY):
    """Store the CRF description and ``params`` on the booster as attribute ``key``."""
    state = state_dict(objective.num_labels, objective.mode, params)
    booster.set_attr(**{key: json.dumps(state)})


def load_state(booster, key=STATE_KEY, param_type=TransitionParams, factory="crf_objective"):
    """The ``(num_labels, mode, params)`` stored on a booster under ``key``."""
    raw = booster.attr(key)
    if raw is None:
        raise ValueError(
            "this booster carries no CRF transitions: train it with "
            f"callbacks=[obj.callback()] (obj = structboost.{factory}(...))."
        )
    return parse_state(json.loads(raw), param_type)


def booster_margins(booster, dmat):
    """Raw margins ``(n, K)`` of the iterations whose transitions are stored."""
    best = booster.attr("best_iteration")
    rng = (0, int(best) + 1) if best is not None else (0, 0)
    return booster.predict(dmat, output_margin=True, iteration_range=rng)


class TransitionRecorder(xgb.callback.TrainingCallback):
    """Keeps the transition parameters of every iteration on the booster.

    After each round the objective's current parameters are stored on the
    booster; after training, if early stopping recorded a ``best_iteration``,
    the parameters of that iteration are put back, so the model and its
    transitions always belong together.

    Attributes
    ----------
    history : TransitionHistory
        Round index -> transition parameters of that round.
    """

    def __init__(self, objective):
        super().__init__()
        self.objective = objective
        self.history = TransitionHistory(objective.num_labels, objective.crf.mode)

    def after_iteration(self, model, epoch, evals_log):
        self.history.record(epoch, self.objective.params)
        save_state(model, self.objective.crf, self.history[epoch], self.objective.state_key)
        return False

    def after_training(self, model):
        best = model.attr("best_iteration")
        if best is not None and int(best) in self.history:
            params = self.history.for_rounds(int(best) + 1)
            save_state(model, self.objective.crf, params, self.objective.state_key)
        return model


class XGBCRFObjective(EngineObjective):
    """A chain-CRF objective for ``xgboost.train(obj=...)``.

    Call :func:`crf_objective` to build one. Calling it as
    ``obj(predt, dtrain)`` refits the transitions and returns ``(grad, hess)``,
    both ``(n, K)``.

    Attributes
    ----------
    crf : CRFObjective
        The engine-agnostic objective (mode, gamma, solver, timings).
    metric_name : {"nll", "error"}
    """

    state_key = STATE_KEY

    def _build_batch(self, dmat):
        """Validated labels, boundaries and per-sequence weights of a DMatrix."""
        return SequenceBatch.build(
            dmat.get_label(), dmatrix_lengths(dmat), self.num_labels, dmat.get_weight()
        )

    def metric(self, predt, dmat):
        """XGBoost custom metric on any grouped DMatrix.

        Returns
        -------
        (str, float)
            ``("crf-nll", weighted mean NLL per sequence)`` or
            ``("crf-error", weighted token error of the Viterbi path)``.
        """
        return self.evaluate(predt, dmat)

    def callback(self):
        """A :class:`TransitionRecorder` to pass in ``callbacks=``."""
        return TransitionRecorder(self)


@fill_doc('mode', 'gamma', 'transitions', 'reg_transitions', 'metric', 'allowed_transitions', 'nthread')
def crf_objective(
    num_labels,
    mode=DEFAULTS["mode"],
    gamma=DEFAULTS["gamma"],
    transitions=DEFAULTS["transitions"],
    reg_transitions=DEFAULTS["reg_transitions"],
    metric=DEFAULTS["metric"],
    allowed_transitions=None,
    nthread=None,
    device="cpu",
    **kwargs,
):
    """Build a chain-CRF objective for ``xgboost.train``.

    Parameters
    ----------
    num_labels : int
        Number of labels K; the booster needs ``num_target=K``
        (see :func:`xgb_params`).
    {objective_params}
    device : {"cpu", "cuda"}
        Where the objective's round runs. ``"cuda"`` (needs
        ``structboost[gpu]`` and a CUDA GPU; pair it with XGBoost's
        ``device="cuda"``) refits the transitions and computes G and H with
        the kernels of :mod:`structboost.objectives.gpu` and hands XGBoost
        device arrays; the metric's inference and Viterbi run there too.
    **kwargs
        ``transition_iter``, ``hess_floor``: see
        :class:`~structboost.objectives.chain.CRFObjective`.

    Returns
    -------
    XGBCRFObjective
    """
    cls = CRFObjective
    if _check_device(device) == "cuda":
        from ..objectives.gpu import DeviceCRFObjective as cls
    crf = cls(
        num_labels,
        mode=mode,
        gamma=gamma,
        transitions=transitions,
        reg_transitions=reg_transitions,
        allowed_transitions=allowed_transitions,
        nthread=nthread,
        **kwargs,
    )
    return XGBCRFObjective(crf, metric=metric)
