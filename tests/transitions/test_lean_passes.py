"""Passes that keep no messages (``TransitionProblem.keep_messages`` False).

A pass that takes the mixing rates and the expected counts within its
sweep then stores no ``alpha`` and ``r``; whatever needs them later at the
same parameters (the Newton curvature) takes a pass of its own, with the
same sums as from a pass that kept them.
"""

import numpy as np

from structboost.objectives.chain import SequenceBatch
from structboost.transitions.base import CURVATURE, GRADIENT
from structboost.transitions.chain import TransitionParams, TransitionProblem

K = 3


def problem_and_params(seed, keep):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 8, size=25)
    n = int(lengths.sum())
    batch = SequenceBatch.build(rng.integers(0, K, size=n), lengths, K, rng.uniform(0.3, 2.0, 25))
    problem = TransitionProblem(rng.normal(size=(n, K)), batch.offsets, batch.seq_weight,
                                batch.counts, 0.1)  # fmt: skip
    problem.keep_messages = keep
    params = TransitionParams(rng.normal(size=(K, K)), rng.normal(size=K), rng.normal(size=K))
    return problem, params


def test_curvature_after_a_lean_pass_takes_a_pass_of_its_own(chain_passes):
    kept = chain_passes
    results = {}
    for keep in (True, False):
        problem, params = problem_and_params(4, keep)
        gradient = problem.evaluate(params, GRADIENT, rates=True)
        expected = gradient.expected.copy()
        curvature = problem.evaluate(params, CURVATURE)
        results[keep] = (expected, curvature.expected, curvature.curvature, curvature.log_z)
    # kept: one pass, the curvature from its messages; lean: a second pass that keeps them
    assert kept == [True, False, True]
    for want, got in zip(results[True], results[False]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_lean_problem_keeps_the_messages_its_other_passes_need(chain_passes):
    """Passes without the rates, or without the expected counts, keep their messages."""
    kept = chain_passes
    problem, params = problem_and_params(5, keep=False)
    problem.evaluate(params)  # the value alone: a later gradient reads the messages
    problem.evaluate(params, GRADIENT)  # from the kept messages, no pass
    shifted = TransitionParams(params.transitions + 0.5, params.start, params.end)
    problem.evaluate(shifted, GRADIENT)  # no rates: a later bound computes them from the messages
    problem.posterior(shifted).node_gamma()
    assert kept == [True, True]
