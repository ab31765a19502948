"""Estimator parameters declared once and checked at ``fit``.

As scikit-learn's ``_parameter_constraints``: each estimator class declares
per parameter the values it accepts (:class:`Interval`, :class:`Options`,
``None``, ``"boolean"``, ``"callable"`` or a type); :func:`check_params`
checks them at ``fit`` and load. The objective checks its own parameters.
"""

import difflib
import functools
import inspect
import math
from numbers import Integral, Real

from ..engines.predict import DECODINGS


class Interval:
    """Numbers of ``kind`` (``Integral`` or ``Real``) between ``low`` and ``high``.

    Parameters
    ----------
    kind : type
        ``numbers.Integral`` or ``numbers.Real`` (which takes integers too).
    low, high : float or None
        Bounds (None: unbounded); NaN is never inside.
    closed : {"both", "left", "right", "neither"}
        Which bounds belong to the interval.
    """

    def __init__(self, kind, low, high, closed="both"):
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def accepts(self, value):
        """Whether ``value`` lies in the interval."""
        if isinstance(value, bool) or not isinstance(value, self.kind):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        closed = self.closed
        low_ok = self.low is None or (value >= self.low if closed in ("both", "left")
                                      else value > self.low)
        high_ok = self.high is None or (value <= self.high if closed in ("both", "right")
                                        else value < self.high)
        return low_ok and high_ok

    def __str__(self):
        name = "an int" if self.kind is Integral else "a finite number"
        parts = []
        if self.low is not None:
            parts.append(f"{'>=' if self.closed in ('both', 'left') else '>'} {self.low}")
        if self.high is not None:
            parts.append(f"{'<=' if self.closed in ('both', 'right') else '<'} {self.high}")
        return f"{name} {' and '.join(parts)}".strip()


class Options:
    """One of a set of strings."""

    def __init__(self, *options):
        self.options = options

    def accepts(self, value):
        """Whether ``value`` is one of the options."""
        return isinstance(value, str) and value in self.options

    def __str__(self):
        return "one of " + ", ".join(repr(o) for o in self.options)


def _accepts(rule, value):
    """Whether ``value`` meets one ``rule``."""
    if rule is None:
        return value is None
    if rule == "boolean":
        return isinstance(value, bool)
    if rule == "callable":
        return callable(value)
    if isinstance(rule, type):
        return isinstance(value, rule)
    return rule.accepts(value)


def _describe(rule):
    """``rule`` in words, for the messages."""
    if rule is None:
        return "None"
    if rule in ("boolean", "callable"):
        return f"a {rule}"
    if isinstance(rule, type):
        return f"a {rule.__name__}"
    return str(rule)


def check_params(estimator, constraints):
    """Raise a ValueError naming the first parameter whose value breaks ``constraints``.

    ``constraints``: parameter name -> accepted rules; names the estimator lacks are skipped.
    """
    params = estimator.get_params(deep=False)
    for name, rules in constraints.items():
        if name not in params:
            continue
        value = params[name]
        if not any(_accepts(rule, value) for rule in rules):
            accepted = " or ".join(_describe(rule) for rule in rules)
            raise ValueError(f"{type(estimator).__name__}: parameter {name} must be {accepted}; "
                             f"got {value!r:.60}.")


# What the boosted estimators share; subclasses add or override entries.
BOOSTING = {
    "n_estimators": [None, Interval(Integral, 1, None)],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "early_stopping": [Options("auto"), "boolean"],
    "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
    "n_iter_no_change": [Interval(Integral, 1, None)],
    "refit": ["boolean"],
    "max_depth": [Interval(Integral, 0, None)],
    "early_stopping_rounds": [None, Interval(Integral, 1, None)],
    "class_weight": [None, Options("balanced"), dict],
    "n_jobs": [None, Interval(Integral, None, None)],
    "sequence_column": [None, str],
    "decode": [Options(*DECODINGS, "auto")],
    "callbacks": [None, list, tuple],
}
# LightGBM: max_depth=-1 is "no limit"; a tree needs two leaves to split.
LIGHTGBM = {
    **BOOSTING,
    "max_depth": [Interval(Integral, -1, None)],
    "num_leaves": [Interval(Integral, 2, None)],
}


# XGBoost's booster parameters (native names and aliases) beyond the
# signature of its scikit-learn wrapper (doc/parameter.rst, XGBoost 3.x).
_XGBOOST_NATIVE = (
    "alpha", "disable_default_eval_metric", "eta", "extmem_single_page", "feature_selector",
    "lambda", "max_cached_hist_node", "min_split_loss", "nthread", "normalize_type",
    "num_class", "num_feature", "num_target", "one_drop", "process_type", "rate_drop",
    "refresh_leaf", "sample_type", "seed", "seed_per_iteration", "skip_drop", "top_k",
    "updater", "use_rmm",
)
#: Keywords that no engine reads from an estimator and where they belong.
MISPLACED = {"verbose": "an argument of fit, not a parameter: fit(X, y, ..., verbose=False)"}
#: The engines' thread settings: the estimators take one, ``n_jobs``.
THREADS = ("nthread", "num_threads", "n_threads", "num_thread", "nthreads")
#: XGBoost's spellings of what the estimators' own parameters set.
_XGBOOST_ALIASES = {"eta": "learning_rate", "num_boost_round": "n_estimators"}


@functools.cache
def engine_parameters(engine):
    """Every parameter name (aliases included) ``engine`` takes from an estimator, a frozenset."""
    if engine == "xgboost":
        import xgboost as xgb

        names = set(inspect.signature(xgb.XGBModel.__init__).parameters) | set(_XGBOOST_NATIVE)
    else:
        import lightgbm as lgb
        from lightgbm.basic import _ConfigAliases

        names = set(inspect.signature(lgb.LGBMModel.__init__).parameters)
        for name, aliases in _ConfigAliases._get_all_param_aliases().items():
            names |= {name, *aliases}
    return frozenset(names - {"self", "kwargs"})


def _aliases(engine, names):
    """``{alias: name}`` of the engine's other spellings of the parameters ``names``."""
    if engine == "xgboost":
        return {a: n for a, n in _XGBOOST_ALIASES.items() if n in names}
    from lightgbm.basic import _ConfigAliases

    found = {}
    for name, aliases in _ConfigAliases._get_all_param_aliases().items():
        own = [n for n in (name, *aliases) if n in names]
        found.update({a: own[0] for a in (name, *aliases) if own and a != own[0]})
    return found


def check_keywords(estimator, keywords, engine, objective_keywords, named):
    """A ValueError naming the first keyword that no part of the fit would read as given.

    Parameters
    ----------
    estimator : BaseEstimator
    keywords : iterable of str
        The keyword arguments outside the estimator's signature.
    engine : {"xgboost", "lightgbm"}
    objective_keywords : iterable of str
        The objective's settings the estimator takes as keywords.
    named : iterable of str
        The estimator's own parameters (an engine's alias of one is refused).
    """
    known = engine_parameters(engine) | set(objective_keywords)
    shadowed = _aliases(engine, set(named))
    for name in keywords:
        if name in THREADS:
            raise ValueError(
                f"{type(estimator).__name__} takes its thread count as n_jobs; got {name!r}: "
                f"pass n_jobs= instead."
            )
        if name in shadowed:
            raise ValueError(
                f"{type(estimator).__name__} got {name!r}, {engine}'s name for its own "
                f"parameter {shadowed[name]!r}: use {shadowed[name]}= instead."
            )
        if name in known:
            continue
        where = MISPLACED.get(name)
        if where is None:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            where = f"did you mean {close[0]!r}?" if close else "remove it"
        raise ValueError(
            f"{type(estimator).__name__} got an unknown parameter {name!r}: {where}. "
            f"It is neither a parameter of the estimator, of the CRF objective nor of {engine}."
        )
