"""The objective's settings, declared once: :class:`ObjectiveSpec`.

Every factory, objective class, estimator and CLI option takes its choices
and defaults from :class:`ObjectiveSpec`'s fields; :func:`fill_doc` writes
their numpydoc entries into the docstrings. Objectives and factories take
one spec (or flat keywords, built into one); estimators build it in ``fit``.
"""

import dataclasses
import inspect
import numbers
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .. import _config
from ..inference.chain import GAMMA_METHODS
from ..transitions.chain import SOLVERS
from ..transitions.onestep import ONE_PASS_SOLVERS

MODES = ("gbcrf", "treecrf", "logitboost")
#: Transition solvers of tree CRFs (the majorization bound is for chains).
TREE_SOLVERS = tuple(s for s in SOLVERS if s != "majorize")
#: The CRF metrics by name (a callable ``f(y_true, y_proba[, sample_weight=])`` is also a metric).
METRICS = ("crf-nll", "crf-error")
#: Where the transition scores come from: one linear K x K table, or trees on the input.
TRANSITIONS_FROM = ("linear", "input")
#: Modes and Hessian bounds of boosted, input-dependent transitions (:mod:`.edge`).
EDGE_MODES = ("gbcrf", "treecrf")
EDGE_BOUNDS = ("mixing", "length")
#: Step sizes of GBCRF: the Hessian bound itself, or scaled to the measured curvature (:mod:`.step`).
STEPS = ("bound", "adaptive")
#: Iterations of a refit (``transition_iter`` None: ``"majorize"``, one-pass training's refit rounds).
DEFAULT_ITER = {"lbfgs": 5, "newton": 1, "majorize": 1}
#: Keywords of earlier development versions and their names now.
RENAMED = {"gamma": "hessian_bound", "transitions": "transition_solver"}


def _choices(values):
    return "{" + ", ".join(f'"{v}"' for v in values) + "}"


def _setting(default, kind, *doc, choices=None):
    """A field of :class:`ObjectiveSpec`: its default, numpydoc type, description and choices."""
    return field(default=default, metadata={"kind": kind, "doc": doc, "choices": choices})


@dataclass(frozen=True, eq=False)
class ObjectiveSpec:
    """The settings of a CRF boosting objective, validated once.

    Build one with keywords (``ObjectiveSpec(mode="treecrf")``) or through
    :meth:`build`; change one with :meth:`replace`. Every field is checked
    on construction: a ``ValueError`` names the first invalid one.

    Parameters
    ----------
    {objective_params}
    """

    mode: str = _setting(
        "gbcrf", _choices(MODES),
        "Second-order GBCRF (Chen et al. 2015: Hessian ``gamma p (1 - p)``),",
        "first-order TreeCRF (Dietterich et al. 2008: unit Hessian) or",
        "LogitBoost (no transitions: XGBoost's ``multi:softprob``).",
        choices=MODES,
    )  # fmt: skip
    hessian_bound: object = _setting(
        "mixing", _choices(GAMMA_METHODS) + " or float",
        "The paper's ``gamma``, the node bound of the GBCRF Hessian: mixing rates",
        "(Theorem 4.1), the length (Corollary 4.1) or the exact smallest value",
        "(quadratic in the length); a positive float fixes it everywhere.",
        choices=GAMMA_METHODS,
    )  # fmt: skip
    step: str = _setting(
        "adaptive", _choices(STEPS),
        "GBCRF's step size: ``\"bound\"`` takes the Hessian ``gamma p (1 - p)``",
        "as it is (monotone); ``\"adaptive\"`` scales it each round to the",
        "curvature measured along the last round's trees, between LogitBoost's",
        "``2 p (1 - p)`` and the bound. Other modes ignore it.",
        choices=STEPS,
    )  # fmt: skip
    transition_solver: str = _setting(
        "lbfgs", "{solvers}",
        "Solver of the transition, start and end scores' step every round:",
        "L-BFGS with curvature pairs carried across rounds, the diagonal",
        "Newton step with the edge bound (Theorem 4.2), or the Jebara &",
        "Choromanska quadratic bound (chains only; a refit before the pass).",
        choices=SOLVERS,
    )  # fmt: skip
    reg_transitions: float = _setting(
        1.0, "float", "L2 penalty on the transition, start and end scores (>= 0)."
    )
    transition_iter: object = _setting(
        None, "int",
        "None (and ``1``): with ``\"lbfgs\"`` or ``\"newton\"``, one step a",
        "round from the round's own forward-backward pass; with",
        "``\"majorize\"``, one majorization step before each round's pass.",
        "Another count: that many refit iterations before every round's pass",
        "(``5`` with ``\"lbfgs\"``: the converged refit); 0 keeps the",
        "transitions fixed.",
    )  # fmt: skip
    hess_floor: float = _setting(
        1e-16, "float", "Smallest Hessian per row and label before weighting (>= 0)."
    )
    allowed_transitions: object = _setting(
        None, "Constraints or (K, K) bool array-like",
        "Moves the model may make (from tag names:",
        ":func:`structboost.allowed_transitions`). Forbidden scores stay at",
        "``-inf``, travel with the model and are never decoded; training",
        "labels must obey them.",
    )  # fmt: skip
    nthread: object = _setting(
        None, "int",
        "Threads of the numba kernels while the objective runs (pass the",
        "engine's ``nthread``); None leaves numba's setting. Small batches",
        "run serially.",
    )  # fmt: skip
    metric: object = _setting(
        "crf-nll", _choices(METRICS) + " or callable",
        "What the objective's metric reports: the CRF negative log-likelihood",
        "per sequence, the token error of the Viterbi path, or a callable",
        "``f(y_true, y_proba[, sample_weight=])`` of the label indices ``(n,)``",
        "and the posterior marginals ``(n, K)`` (lower is better).",
        choices=METRICS,
    )  # fmt: skip
    transitions_from: str = _setting(
        "linear", _choices(TRANSITIONS_FROM),
        "``\"linear\"``: one K x K table shared by every position, refit by the",
        "``transition_solver``. ``\"input\"``: boosted, input-dependent",
        "transitions ``F^v(u, X_t)`` (Dietterich et al. 2008; K times the rows):",
        "modes ``\"gbcrf\"`` and ``\"treecrf\"``, Hessian bound ``\"mixing\"``,",
        "``\"length\"`` or a float; the transition solver's settings must keep",
        "their defaults.",
        choices=TRANSITIONS_FROM,
    )  # fmt: skip

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            choices = f.metadata["choices"]
            if isinstance(value, str) and choices is not None:
                if value not in choices:
                    raise ValueError(f"{f.name} must be one of {choices}; got {value!r}.")
                continue
            if f.name == "hessian_bound":
                value = _real(f.name, value, "a positive float or one of " + str(choices))
                if not value > 0:
                    raise ValueError(f"a fixed hessian_bound must be positive; got {value!r}.")
            elif f.name == "metric":
                if not callable(value):
                    raise ValueError(
                        f"metric must be one of {choices} or a callable f(y_true, y_proba); "
                        f"got {value!r}."
                    )
            elif f.name in ("reg_transitions", "hess_floor"):
                value = _real(f.name, value, "a finite float >= 0")
                if value < 0:
                    raise ValueError(f"{f.name} must be >= 0; got {value!r}.")
            elif f.name == "transition_iter" and value is not None:
                if not is_integer(value) or value < 0:
                    raise ValueError(f"transition_iter must be None or an int >= 0; got {value!r}.")
                value = int(value)
            elif f.name == "nthread":
                value = _config.check_nthread(value)
            elif choices is not None:  # a non-string where only names are allowed
                raise ValueError(f"{f.name} must be one of {choices}; got {value!r}.")
            object.__setattr__(self, f.name, value)
        if self.transitions_from == "input":
            self._check_edge_route()

    def _check_edge_route(self):
        """Refuse what boosted, input-dependent transitions do not take."""
        if self.mode not in EDGE_MODES:
            raise ValueError(
                f'transitions_from="input" supports mode in {EDGE_MODES}; got {self.mode!r} '
                '("logitboost" has no transitions: use transitions_from="linear").'
            )
        if isinstance(self.hessian_bound, str) and self.hessian_bound not in EDGE_BOUNDS:
            raise ValueError(
                f'transitions_from="input" supports hessian_bound in {EDGE_BOUNDS} or a '
                f"float; got {self.hessian_bound!r}."
            )
        for name in ("step", "transition_solver", "reg_transitions", "transition_iter"):
            if getattr(self, name) != DEFAULTS[name]:
                raise ValueError(
                    f'{name}={getattr(self, name)!r} does not apply to transitions_from="input" '
                    "(the trees score the transitions; nothing is refit): leave it at its "
                    f'default {DEFAULTS[name]!r}, or use transitions_from="linear".'
                )

    @classmethod
    def build(cls, spec=None, **params):
        """A spec from ``spec`` (or the defaults) with the fields ``params`` changed.

        Raises
        ------
        ValueError
            A keyword that is no field (old names name their new ones) or an
            invalid value.
        """
        if spec is not None and not isinstance(spec, cls):
            raise ValueError(f"spec must be an ObjectiveSpec; got {type(spec).__name__}.")
        for old, new in RENAMED.items():
            if old in params:
                raise ValueError(
                    f"{old}= is now called {new}= (the objective's {new.replace('_', ' ')}); "
                    f"pass {new}={params[old]!r}."
                )
        unknown = sorted(set(params) - set(DEFAULTS))
        if unknown:
            raise ValueError(
                f"unknown objective parameter(s) {unknown}: the objective takes "
                f"{sorted(DEFAULTS)}."
            )
        if spec is None:
            return cls(**params)
        return dataclasses.replace(spec, **params) if params else spec

    def replace(self, **changes):
        """A copy with ``changes`` applied (validated as by :meth:`build`)."""
        return self.build(self, **changes)

    @property
    def one_pass(self):
        """Whether rounds take their transition step from their own pass (``transition_iter``)."""
        return self.transition_iter in (None, 1) and self.transition_solver in ONE_PASS_SOLVERS

    @property
    def iterations(self):
        """Solver iterations per round: ``transition_iter``, else the solver's default."""
        if self.transition_iter is None:
            return DEFAULT_ITER[self.transition_solver]
        return self.transition_iter

    def check_solver(self, solvers, structure):
        """Raise unless ``transition_solver`` is one of ``solvers`` (of ``structure``)."""
        if self.transition_solver not in solvers:
            raise ValueError(
                f"transition_solver must be one of {solvers} for {structure}; got "
                f"{self.transition_solver!r}."
            )

    def check_route(self, route, factory):
        """Raise unless ``transitions_from`` is ``route`` (what ``factory`` builds)."""
        if self.transitions_from != route:
            other = "edge_crf_objective" if route == "linear" else "crf_objective"
            raise ValueError(
                f'{factory} builds transitions_from="{route}" objectives; got '
                f"transitions_from={self.transitions_from!r}: use {other}."
            )


def metric_name(metric):
    """The name a metric is recorded under: its own, or a callable's ``__name__``."""
    if isinstance(metric, str):
        return metric
    return getattr(metric, "__name__", type(metric).__name__)


def is_integer(value):
    """Whether ``value`` is an integer (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(name, value, what):
    """``value`` as a finite float, else a ``ValueError`` naming ``name``."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be {what}; got {value!r}.")
    return float(value)


#: Defaults of the objective's parameters (also the estimators' and the CLI's).
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ObjectiveSpec)}
#: The fields a linear-transition factory documents (``transitions_from`` picks the factory).
LINEAR_PARAMS = tuple(name for name in DEFAULTS if name != "transitions_from")
#: The fields a tree CRF takes (no constraints: they are for chains).
TREE_PARAMS = tuple(name for name in LINEAR_PARAMS if name != "allowed_transitions")
#: The fields of boosted, input-dependent transitions (the rest keep their defaults).
EDGE_PARAMS = ("mode", "hessian_bound", "hess_floor", "metric", "allowed_transitions", "nthread")


def _entry(f):
    """The numpydoc lines of one field: the head, then the description."""
    default = f.default
    tail = "optional" if default is None else f"default {default!r}".replace("'", '"')
    return (f"{f.name} : {f.metadata['kind']}, {tail}", *f.metadata["doc"])


_DOCS = {f.name: _entry(f) for f in fields(ObjectiveSpec)}


def param_docs(*names, solvers=SOLVERS, indent=4):
    """Numpydoc entries of the named :class:`ObjectiveSpec` fields (none: all), documenting
    ``solvers``, indented ``indent``.
    """
    pad = " " * indent
    lines = []
    for name in names or tuple(_DOCS):
        head, *body = _DOCS[name]
        lines.append(pad + head.replace("{solvers}", _choices(solvers)))
        lines.extend(pad + "    " + line for line in body)
    return "\n".join(lines)


def fill_doc(*names, solvers=SOLVERS, **sections):
    """Decorator filling a docstring's placeholder lines, keeping their indentation.

    ``{objective_params}`` becomes the entries of ``names`` (:func:`param_docs`;
    ``"all"``: every field); ``{key}`` becomes ``sections[key]``. A factory's
    ``**params`` becomes, in its signature, the keyword-only fields ``names``
    with their defaults.
    """
    texts = dict(sections)
    if names:
        chosen = () if names == ("all",) else names
        texts["objective_params"] = param_docs(*chosen, solvers=solvers, indent=0)

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
        if names and inspect.isfunction(obj):
            _declare_keywords(obj, [f.name for f in fields(ObjectiveSpec)] if not chosen else chosen)
        return obj

    return decorate


def _declare_keywords(func, names):
    """Show ``func``'s ``**params`` as the keyword-only spec fields ``names``."""
    signature = inspect.signature(func)
    head = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    if len(head) == len(signature.parameters):
        return
    taken = {p.name for p in head}
    types = {f.name: f.type for f in fields(ObjectiveSpec)}
    keywords = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=DEFAULTS[name], annotation=types[name]
        )
        for name in names
        if name not in taken
    ]
    func.__signature__ = signature.replace(parameters=head + keywords)


fill_doc("all")(ObjectiveSpec)
