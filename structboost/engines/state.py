"""The CRF state a trained booster carries, shared by the engine adapters.

A booster's trees give the node potentials; the transition parameters are
refit by the objective every round and must travel with the model. Both
engines stop early and keep fewer rounds than they ran (XGBoost records
``best_iteration``; LightGBM even truncates the returned booster), so the
adapters keep the parameters of every round in a :class:`TransitionHistory`
and pick the ones that belong to the rounds the model keeps.

The state itself is a JSON-ready dict (:func:`state_dict`), stored as a
booster attribute by XGBoost and in a wrapper file for LightGBM.
"""

from collections.abc import Mapping

from ..transitions.chain import TransitionParams

STATE_KEY = "structboost_crf"
STATE_VERSION = 1


def state_dict(num_labels, mode, params):
    """JSON-ready description of a trained CRF.

    Parameters
    ----------
    num_labels : int
    mode : str
    params : TransitionParams or TreeTransitionParams
        Anything with ``to_dict()``.

    Returns
    -------
    dict
        ``version``, ``num_labels``, ``mode``, ``transitions``, ``start``, ``end``.
    """
    return {
        "version": STATE_VERSION,
        "num_labels": int(num_labels),
        "mode": mode,
        **params.to_dict(),
    }


def parse_state(state, param_type=TransitionParams):
    """Inverse of :func:`state_dict`.

    Parameters
    ----------
    state : dict
    param_type : type
        The parameter class, with ``from_dict``.

    Returns
    -------
    num_labels : int
    mode : str
    params : param_type
    """
    version = state.get("version")
    if version != STATE_VERSION:
        raise ValueError(
            f"the model's CRF state has version {version!r}; this structboost reads version "
            f"{STATE_VERSION}. Load it with the structboost release that saved it."
        )
    params = param_type.from_dict(state)
    num_labels = int(state["num_labels"])
    if params.transitions.shape[-2:] != (num_labels, num_labels):
        raise ValueError(
            f"the model's CRF state is corrupt: {num_labels} labels but transitions of shape "
            f"{params.transitions.shape}."
        )
    return num_labels, state["mode"], params


class TransitionHistory(Mapping):
    """Transition parameters after every boosting round of one training run.

    A read-only mapping from the 0-based round index to the
    :class:`~structboost.transitions.chain.TransitionParams` refit in that round;
    the model made of the first ``r`` rounds uses the parameters of round
    ``r - 1``.

    Parameters
    ----------
    num_labels : int
    mode : str
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
            recorded = (
                f"rounds {min(self._rounds)}..{max(self._rounds)}" if self._rounds else "no round"
            )
            raise ValueError(
                f"the model keeps {n_rounds} rounds but transitions were recorded for "
                f"{recorded}: pass the objective's callback() to every training call that "
                "adds rounds."
            )
        return params

    def state(self, n_rounds):
        """:func:`state_dict` of the model made of the first ``n_rounds`` rounds."""
        return state_dict(self.num_labels, self.mode, self.for_rounds(n_rounds))

    @classmethod
    def from_state(cls, state, n_rounds, param_type=TransitionParams):
        """A one-entry history holding a saved state as round ``n_rounds - 1``."""
        num_labels, mode, params = parse_state(state, param_type)
        history = cls(num_labels, mode)
        history.record(int(n_rounds) - 1, params)
        return history
