"""The CRF state a trained booster carries, shared by the engine adapters.

The adapters keep every round's transitions in a :class:`TransitionHistory`
(early stopping keeps fewer rounds than ran). The state is a JSON-ready dict
(:func:`state_dict`), read back only through :func:`parse_state`, which
checks it completely.
"""

from collections.abc import Mapping
from numbers import Integral

import numpy as np

from ..objectives.params import MODES
from ..transitions.chain import TransitionParams

STATE_KEY = "structboost_crf"
STATE_VERSION = 1


def state_dict(num_labels, mode, params, rounds=None):
    """JSON-ready dict of a trained CRF: ``version``, ``num_labels``, ``mode``, the fields of
    ``params`` and the model's ``rounds`` when given.
    """
    state = {"version": STATE_VERSION, "num_labels": int(num_labels), "mode": mode, **params.to_dict()}
    if rounds is not None:
        state["rounds"] = int(rounds)
    return state


def _corrupt(problem):
    return ValueError(
        f"the model's CRF state is corrupt: {problem}. Use the file structboost saved "
        "unchanged, or retrain the model."
    )


def _count(value, name, low):
    """``value`` as an int >= ``low`` (JSON integers only), or a corrupt-state error."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise _corrupt(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


def _field(state, name, shape):
    """Field ``name`` as a float64 array of ``shape`` (``None``: any size >= 1)."""
    if name not in state:
        raise _corrupt(f"it has no {name!r} field")
    try:
        arr = np.array(state[name])
    except ValueError:  # ragged nesting
        arr = np.array(None)
    if arr.dtype.kind not in "iuf":
        raise _corrupt(f"{name!r} must be a rectangular array of numbers; got {state[name]!r:.80}")
    sizes_ok = all(a >= 1 if n is None else a == n for a, n in zip(arr.shape, shape))
    if arr.ndim != len(shape) or not sizes_ok:
        expected = "x".join("T" if n is None else str(n) for n in shape)
        raise _corrupt(f"{name!r} has shape {arr.shape}; {expected} expected")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise _corrupt(f"{name!r} holds NaN or +inf (only finite scores or -inf are stored)")
    return arr


def _chain_fields(state, k):
    shapes = {"transitions": (k, k), "start": (k,), "end": (k,)}
    fields = {name: _field(state, name, shape) for name, shape in shapes.items()}
    for name, arr in fields.items():
        if not np.isfinite(arr).any():
            raise _corrupt(f"every {name!r} score is -inf, so no label path is allowed")
    return fields


def _tree_fields(state, k):
    edges = _field(state, "edge_transitions", (None, k, k))
    if not np.isfinite(edges).reshape(edges.shape[0], -1).any(axis=1).all():
        raise _corrupt("an edge type has every 'edge_transitions' score at -inf")
    return {"edge_transitions": edges}


def parse_params(state, num_labels, param_type=TransitionParams):
    """Validated ``param_type`` (:class:`~structboost.transitions.chain.TransitionParams` or
    :class:`~structboost.transitions.tree.TreeTransitionParams`) from a stored dict's fields.
    """
    if not isinstance(state, Mapping):
        raise _corrupt(f"transition parameters must be a JSON object; got {type(state).__name__}")
    fields = (_chain_fields if param_type is TransitionParams else _tree_fields)(state, num_labels)
    return param_type.from_dict(fields)


def parse_state(state, param_type=TransitionParams):
    """Validated inverse of :func:`state_dict`: ``(num_labels, mode, params, rounds or None)``;
    ``ValueError`` naming the first problem (``param_type`` as for :func:`parse_params`).
    """
    if not isinstance(state, Mapping):
        raise _corrupt(f"it must be a JSON object; got {type(state).__name__}")
    version = state.get("version")
    if isinstance(version, bool) or version != STATE_VERSION:
        raise ValueError(
            f"the model's CRF state has version {version!r}; this structboost reads version "
            f"{STATE_VERSION}. Load it with the structboost release that saved it."
        )
    num_labels = _count(state.get("num_labels"), "num_labels", 1)
    mode = state.get("mode")
    if not isinstance(mode, str) or mode not in MODES:
        raise _corrupt(f"mode must be one of {MODES}; got {mode!r}")
    rounds = state.get("rounds")
    if rounds is not None:
        rounds = _count(rounds, "rounds", 1)
    return num_labels, mode, parse_params(state, num_labels, param_type), rounds


class TransitionHistory(Mapping):
    """Read-only mapping from the 0-based round to the parameters refit in it (the first ``r``
    rounds use round ``r - 1``'s).
    """

    def __init__(self, num_labels, mode):
        self.num_labels = int(num_labels)
        self.mode = mode
        self._rounds = {}

    def __getitem__(self, iteration):
        return self._rounds[iteration]

    def __iter__(self):
        return iter(self._rounds)

    def __len__(self):
        return len(self._rounds)

    def record(self, iteration, params):
        """Store a copy of ``params`` as the parameters of round ``iteration``."""
        self._rounds[int(iteration)] = params.copy()

    def for_rounds(self, n_rounds):
        """Parameters of the model made of the first ``n_rounds`` rounds."""
        params = self._rounds.get(int(n_rounds) - 1)
        if params is None:
            recorded = f"rounds {min(self._rounds)}..{max(self._rounds)}" if self._rounds else "no round"
            raise ValueError(
                f"the model keeps {n_rounds} rounds but transitions were recorded for "
                f"{recorded}: pass the objective's callback() to every training call that "
                "adds rounds."
            )
        return params

    @classmethod
    def from_state(cls, state, n_rounds, param_type=TransitionParams):
        """A one-entry history holding a saved state as round ``n_rounds - 1``."""
        num_labels, mode, params, rounds = parse_state(state, param_type)
        if rounds is not None and rounds != n_rounds:
            raise _corrupt(
                f"its transitions belong to {rounds} rounds but the model has {n_rounds}"
            )
        history = cls(num_labels, mode)
        history.record(int(n_rounds) - 1, params)
        return history
