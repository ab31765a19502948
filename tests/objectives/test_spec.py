"""The objective's settings: one validated spec, taken by every objective and factory."""

import dataclasses
import math

import numpy as np
import pytest

import structboost as sb
import structboost.xgboost as sbx
from structboost.engines.lightgbm import lgb_crf_objective
from structboost.objectives.chain import CRFObjective
from structboost.objectives.edge import EdgeCRFObjective
from structboost.objectives.params import DEFAULTS, ObjectiveSpec
from structboost.objectives.tree import TreeCRFObjective


@pytest.mark.parametrize(
    "field, value",
    [
        ("mode", "crf"),
        ("mode", 1),
        ("hessian_bound", "tight"),
        ("hessian_bound", 0.0),
        ("hessian_bound", -1.0),
        ("hessian_bound", math.nan),
        ("hessian_bound", math.inf),
        ("hessian_bound", True),
        ("step", "fast"),
        ("transition_solver", "adam"),
        ("transition_solver", None),
        ("reg_transitions", -0.1),
        ("reg_transitions", math.nan),
        ("reg_transitions", "1"),
        ("transition_iter", -1),
        ("transition_iter", 1.5),
        ("hess_floor", -1e-3),
        ("hess_floor", math.inf),
        ("nthread", 0),
        ("metric", "nll"),
        ("metric", 3),
        ("transitions_from", "trees"),
    ],
)
def test_every_bad_setting_raises_naming_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        ObjectiveSpec(**{field: value})


def test_defaults_are_declared_once_and_values_are_normalised():
    spec = ObjectiveSpec()
    assert {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)} == DEFAULTS
    fixed = ObjectiveSpec(hessian_bound=np.float32(2), reg_transitions=3, transition_iter=np.int64(2))
    assert (type(fixed.hessian_bound), type(fixed.reg_transitions)) == (float, float)
    assert fixed.transition_iter == 2 and type(fixed.transition_iter) is int
    assert ObjectiveSpec(transition_solver="newton").iterations == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.mode = "treecrf"


def test_old_and_unknown_keywords_raise_naming_the_new_name():
    with pytest.raises(ValueError, match="hessian_bound="):
        sb.crf_objective(3, gamma=2.0)
    with pytest.raises(ValueError, match="transition_solver="):
        lgb_crf_objective(3, transitions="newton")
    with pytest.raises(ValueError, match="transition_solver="):
        CRFObjective(3, transitions="newton")
    with pytest.raises(ValueError, match="unknown objective parameter"):
        sbx.tree_crf_objective(3, solver="newton")
    with pytest.raises(ValueError, match="ObjectiveSpec"):
        sb.crf_objective(3, {"mode": "gbcrf"})


def test_factories_take_a_spec_or_keywords_alike():
    spec = ObjectiveSpec(mode="treecrf", transition_solver="newton", metric="crf-error")
    for obj in (sb.crf_objective(3, spec), sb.crf_objective(3, **vars(spec))):
        assert vars(obj.spec) == vars(spec)
    assert sb.crf_objective(3, spec, reg_transitions=2.0).spec.reg_transitions == 2.0
    assert spec.reg_transitions == DEFAULTS["reg_transitions"]  # the given spec is unchanged
    assert lgb_crf_objective(3, spec).spec is spec
    assert sbx.tree_crf_objective(3, 2, spec).crf.n_edge_types == 2


def test_a_setting_the_route_does_not_take_raises():
    for name, value in [("step", "bound"), ("transition_solver", "newton"),
                        ("reg_transitions", 3.0), ("transition_iter", 2)]:  # fmt: skip
        with pytest.raises(ValueError, match=f'{name}=.*transitions_from="input"'):
            sbx.edge_crf_objective(3, **{name: value})
    with pytest.raises(ValueError, match="edge_crf_objective"):
        sb.crf_objective(3, transitions_from="input")
    with pytest.raises(ValueError, match="crf_objective"):
        EdgeCRFObjective(3, ObjectiveSpec())
    with pytest.raises(ValueError, match="transition_solver"):
        TreeCRFObjective(3, transition_solver="majorize")
    with pytest.raises(ValueError, match="allowed_transitions"):
        TreeCRFObjective(3, allowed_transitions=np.ones((3, 3), dtype=bool))
    assert sbx.edge_crf_objective(3, hessian_bound=2.0).spec.transitions_from == "input"


def test_a_callable_metric_gets_the_marginals():
    from structboost.objectives.chain import SequenceBatch

    rng = np.random.default_rng(0)
    batch = SequenceBatch.build(rng.integers(0, 3, 9), [4, 5], 3, [1.0, 2.0])
    margins = rng.normal(size=(9, 3))
    seen = {}

    def mean_true(y_true, y_proba, sample_weight=None):
        seen["weight"] = sample_weight
        return float(np.average(y_proba[np.arange(len(y_true)), y_true], weights=sample_weight))

    obj = CRFObjective(3, metric=mean_true)
    name, value = obj.evaluate(margins, batch)
    p = obj.marginals(margins, batch)
    w = np.repeat([1.0, 2.0], [4, 5])
    assert name == "mean_true"
    assert value == pytest.approx(np.average(p[np.arange(9), batch.labels], weights=w))
    np.testing.assert_array_equal(seen["weight"], w)
