"""The objective's parameters, declared once: choices, defaults and their docs.

Every factory (:func:`structboost.crf_objective`,
:func:`structboost.lgb_crf_objective`, :func:`structboost.tree_crf_objective`),
objective class, estimator and CLI option takes its choices and defaults from
here, and :func:`fill_doc` writes the numpydoc entries of those parameters
into their docstrings, so the copies cannot drift.
"""

import numpy as np

from ..inference.chain import GAMMA_METHODS
from ..transitions.chain import SOLVERS

MODES = ("gbcrf", "treecrf", "logitboost")
#: Transition solvers of tree CRFs (the majorization bound is for chains).
TREE_SOLVERS = tuple(s for s in SOLVERS if s != "majorize")
METRICS = ("nll", "error")
#: Where the transition scores come from: one linear K x K table, or trees on the input.
TRANSITIONS_FROM = ("linear", "input")
#: Modes and gamma methods of boosted, input-dependent transitions (:mod:`.edge`).
EDGE_MODES = ("gbcrf", "treecrf")
EDGE_GAMMAS = ("mixing", "length")
#: Step sizes of GBCRF: the Hessian bound itself, or scaled to the measured curvature (:mod:`.step`).
STEPS = ("bound", "adaptive")
#: Solver iterations per boosting round when ``transition_iter`` is None.
DEFAULT_ITER = {"lbfgs": 5, "newton": 1, "majorize": 1}

#: Defaults of the objective's parameters (also the estimators').
DEFAULTS = {
    "mode": "gbcrf",
    "gamma": "mixing",
    "step": "adaptive",
    "transitions": "lbfgs",
    "reg_transitions": 1.0,
    "metric": "nll",
    "hess_floor": 1e-16,
    "transitions_from": "linear",
}


def _choices(values):
    return "{" + ", ".join(f'"{v}"' for v in values) + "}"


_DOCS = {
    "mode": (
        f"mode : {_choices(MODES)}, default \"{DEFAULTS['mode']}\"",
        "Second-order GBCRF (Chen et al. 2015: Hessian ``gamma p (1 - p)``),",
        "first-order TreeCRF (Dietterich et al. 2008: unit Hessian) or",
        "LogitBoost (no transitions: XGBoost's ``multi:softprob``).",
    ),
    "gamma": (
        f"gamma : {_choices(GAMMA_METHODS)} or float, default \"{DEFAULTS['gamma']}\"",
        "Node bound of the GBCRF Hessian: the mixing-rate bound (Theorem 4.1,",
        "O(nK^2)), the length bound (Corollary 4.1) or the exact smallest value",
        "(quadratic in the length: for analysis); a float fixes it everywhere.",
        "Not XGBoost's split ``gamma``.",
    ),
    "step": (
        f"step : {_choices(STEPS)}, default \"{DEFAULTS['step']}\"",
        "GBCRF's step size: ``\"bound\"`` takes the Hessian ``gamma p (1 - p)``",
        "as it is (every step lowers the NLL, but is as small as the worst",
        "direction demands); ``\"adaptive\"`` scales the bound each round to",
        "the curvature measured along the last round's trees, never above the",
        "bound nor below LogitBoost's ``2 p (1 - p)`` (see",
        ":mod:`structboost.objectives.step`).",
        "Other modes ignore it.",
    ),
    "transitions": (
        "transitions : {solvers}, default \"" + DEFAULTS["transitions"] + "\"",
        "Solver refitting the transition, start and end scores every round:",
        "warm-started L-BFGS, one monotone diagonal Newton step with the edge",
        "bound (Theorem 4.2), or the Jebara & Choromanska quadratic bound",
        "(chains only).",
    ),
    "reg_transitions": (
        f"reg_transitions : float, default {DEFAULTS['reg_transitions']}",
        "L2 penalty on the transition, start and end scores.",
    ),
    "metric": (
        f"metric : {_choices(METRICS)}, default \"{DEFAULTS['metric']}\"",
        "What the objective's metric reports: the CRF negative log-likelihood",
        "per sequence, or the token error of the Viterbi path.",
    ),
    "transition_iter": (
        "transition_iter : int, optional",
        "None: every round refits the transitions before its pass, with "
        + ", ".join(f"{v} iteration(s) of {k}" for k, v in DEFAULT_ITER.items())
        + "",
        "(L-BFGS stops earlier once its next step is predicted to gain",
        "little, :mod:`structboost.transitions.lbfgs`; a Newton step is halved",
        "until it descends), several passes a round. ``1`` with ``\"lbfgs\"``",
        "or ``\"newton\"``: one step a round from the round's own pass, most",
        "rounds one pass in all (:mod:`structboost.transitions.onestep`);",
        "another count: that many iterations of the refit; 0 keeps the",
        "transitions fixed.",
    ),
    "allowed_transitions": (
        "allowed_transitions : Constraints or (K, K) bool array-like, optional",
        "Moves the model may make (from tag names:",
        ":func:`structboost.allowed_transitions`). Forbidden transition, start",
        "and end scores stay at ``-inf`` and are never refit, so they travel",
        "with the model and decoding never makes a forbidden move. Training",
        "labels must obey them.",
    ),
    "nthread": (
        "nthread : int, optional",
        "Threads of the numba kernels while the objective runs (pass the",
        "engine's ``nthread``); None leaves numba's setting. BLAS runs on one",
        "thread meanwhile, so nothing oversubscribes. Batches of fewer than",
        "``structboost._config.SERIAL_ROWS`` rows always run serially.",
    ),
    "transitions_from": (
        f"transitions_from : {_choices(TRANSITIONS_FROM)}, default \"{DEFAULTS['transitions_from']}\"",
        "``\"linear\"``: one K x K transition table shared by every position,",
        "refit by the ``transitions`` solver. ``\"input\"``: boosted,",
        "input-dependent transitions ``F^v(u, X_t)`` (Dietterich et al. 2008):",
        "the trees score every position once per previous label (K times the",
        "rows; see :mod:`structboost.objectives.edge`); modes ``\"gbcrf\"``",
        "(edge bound of Chen et al.'s Theorem 4.2) and ``\"treecrf\"``, gamma",
        "``\"mixing\"``, ``\"length\"`` or a float; ``step``, ``transitions``",
        "and ``reg_transitions`` are unused.",
    ),
    "hess_floor": (
        f"hess_floor : float, default {DEFAULTS['hess_floor']}",
        "Smallest Hessian per row and label before weighting.",
    ),
}


def param_docs(*names, solvers=SOLVERS, indent=4):
    """Numpydoc entries of the named objective parameters.

    Parameters
    ----------
    *names : str
        Keys of the declaration (``"mode"``, ``"gamma"``, ``"transitions"``,
        ``"reg_transitions"``, ``"metric"``, ``"transition_iter"``,
        ``"allowed_transitions"``, ``"nthread"``, ``"hess_floor"``).
    solvers : tuple of str
        The solver choices to document (tree CRFs have no ``"majorize"``).
    indent : int
        Spaces before each parameter line (the description gets 4 more).

    Returns
    -------
    str
    """
    pad = " " * indent
    lines = []
    for name in names:
        head, *body = _DOCS[name]
        lines.append(pad + head.replace("{solvers}", _choices(solvers)))
        lines.extend(pad + "    " + line for line in body)
    return "\n".join(lines)


def fill_doc(*names, solvers=SOLVERS, **sections):
    """Decorator filling placeholder lines of a docstring.

    The line ``{objective_params}`` becomes the entries of ``names`` (see
    :func:`param_docs`); a line ``{key}`` becomes ``sections[key]``, text
    written without indentation. Each placeholder's indentation is kept.
    """
    texts = dict(sections)
    if names:
        texts["objective_params"] = param_docs(*names, solvers=solvers, indent=0)

    def decorate(obj):
        doc = obj.__doc__
        for key, text in texts.items():
            mark = "{" + key + "}"
            at = doc.index(mark)
            pad = " " * (at - doc.rindex("\n", 0, at) - 1)
            lines = text.strip("\n").split("\n")
            body = "\n".join(pad + line if line else line for line in lines)
            doc = doc.replace(mark, body.lstrip(), 1)
        obj.__doc__ = doc
        return obj

    return decorate


def check_params(
    num_labels, mode, gamma, transitions, reg_transitions, solvers=SOLVERS, step=DEFAULTS["step"]
):
    """Raise a ``ValueError`` naming the first invalid objective parameter."""
    if int(num_labels) != num_labels or num_labels < 1:
        raise ValueError(f"num_labels must be a positive integer; got {num_labels!r}.")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}.")
    if isinstance(gamma, str):
        if gamma not in GAMMA_METHODS:
            raise ValueError(f"gamma must be one of {GAMMA_METHODS} or a float; got {gamma!r}.")
    elif not np.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"a fixed gamma must be a positive float; got {gamma!r}.")
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}; got {step!r}.")
    if transitions not in solvers:
        raise ValueError(f"transitions must be one of {solvers}; got {transitions!r}.")
    if reg_transitions < 0:
        raise ValueError(f"reg_transitions must be >= 0; got {reg_transitions!r}.")
