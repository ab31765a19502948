"""Hypothesis properties of the public inference and objective functions.

``tests/test_inference.py`` checks the chain functions against brute-force
enumeration; this suite checks what must hold for any input: invariances
(per-row shifts, label permutations, batching), consistency between the
functions, the objective's gradient against finite differences, and that
bad input of any shape or value gives a ``ValueError`` (never a crash, a
NaN result or another exception). Shapes are tiny and ``max_examples``
modest so the suite stays fast.
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from chains import crfs, sequence_ends

from structboost import inference
from structboost.datasets import read_conll
from structboost.objectives.base import MARGIN_LIMIT, check_margin_values
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.engines.state import parse_state
from structboost.transitions.chain import TransitionParams

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(crfs(), st.integers(0, 2**32 - 1))
def test_row_shifts_move_log_z_only(crf, seed):
    unary, lengths, transitions, start, end = crf
    shift = np.random.default_rng(seed).normal(scale=5.0, size=(unary.shape[0], 1))
    log_z, marg = inference.forward_backward(unary, lengths, transitions, start, end)
    log_z2, marg2 = inference.forward_backward(unary + shift, lengths, transitions, start, end)
    per_seq = np.add.reduceat(shift[:, 0], np.cumsum(lengths) - lengths)
    np.testing.assert_allclose(log_z2, log_z + per_seq, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(marg2, marg, atol=1e-9)


@FAST
@given(crfs(), st.randoms(use_true_random=False))
def test_label_permutation_is_equivariant(crf, rnd):
    unary, lengths, transitions, start, end = crf
    perm = np.array(rnd.sample(range(unary.shape[1]), unary.shape[1]))
    log_z, marg = inference.forward_backward(unary, lengths, transitions, start, end)
    log_z2, marg2 = inference.forward_backward(
        unary[:, perm], lengths, transitions[np.ix_(perm, perm)], start[perm], end[perm]
    )
    np.testing.assert_allclose(log_z2, log_z, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(marg2, marg[:, perm], atol=1e-10)


@FAST
@given(crfs())
def test_a_batch_is_its_sequences(crf):
    unary, lengths, transitions, start, end = crf
    log_z, marg = inference.forward_backward(unary, lengths, transitions, start, end)
    path = inference.viterbi(unary, lengths, transitions, start, end)
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        one = inference.forward_backward(unary[a:b], [b - a], transitions, start, end)
        np.testing.assert_allclose(one[0], log_z[i : i + 1], rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(one[1], marg[a:b], atol=1e-13)
        one_path = inference.viterbi(unary[a:b], [b - a], transitions, start, end)
        np.testing.assert_array_equal(one_path, path[a:b])


@FAST
@given(crfs())
def test_marginals_are_distributions_consistent_with_edge_marginals(crf):
    unary, lengths, transitions, start, end = crf
    _, marg = inference.forward_backward(unary, lengths, transitions, start, end)
    edges = inference.edge_marginals(unary, lengths, transitions, start, end)
    assert np.all(marg >= 0) and np.all(marg <= 1 + 1e-12)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0, atol=1e-12)
    inner = np.setdiff1d(np.arange(unary.shape[0]), sequence_ends(lengths))
    np.testing.assert_allclose(edges[inner].sum(axis=2), marg[inner], atol=1e-10)
    np.testing.assert_allclose(edges[inner].sum(axis=1), marg[inner + 1], atol=1e-10)


@FAST
@given(crfs(), st.integers(0, 2**32 - 1))
def test_viterbi_path_is_at_least_as_likely_as_any_labelling(crf, seed):
    unary, lengths, transitions, start, end = crf
    labels = np.random.default_rng(seed).integers(0, unary.shape[1], unary.shape[0])
    path = inference.viterbi(unary, lengths, transitions, start, end)
    nll = inference.sequence_nll(unary, lengths, labels, transitions, start, end)
    best = inference.sequence_nll(unary, lengths, path, transitions, start, end)
    assert np.all(nll >= -1e-12) and np.all(best <= nll + 1e-9)


@FAST
@given(crfs(scales=(0.3, 1.0)), st.integers(0, 2**32 - 1))
def test_nll_gradient_in_the_node_scores_is_marginals_minus_labels(crf, seed):
    unary, lengths, transitions, start, end = crf
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, unary.shape[1], unary.shape[0])
    _, marg = inference.forward_backward(unary, lengths, transitions, start, end)
    analytic = marg.copy()
    analytic[np.arange(len(labels)), labels] -= 1.0
    row, col = rng.integers(unary.shape[0]), rng.integers(unary.shape[1])
    h = 1e-5
    bump = np.zeros_like(unary)
    bump[row, col] = h

    def total(u):
        return inference.sequence_nll(u, lengths, labels, transitions, start, end).sum()

    numeric = (total(unary + bump) - total(unary - bump)) / (2 * h)
    assert numeric == pytest.approx(analytic[row, col], abs=1e-6)


@FAST
@given(crfs(max_labels=3), st.sampled_from(["gbcrf", "treecrf", "logitboost"]), st.integers(0, 99))
def test_objective_gradient_and_hessian(crf, mode, seed):
    unary, lengths, *_ = crf
    k = unary.shape[1]
    labels = np.random.default_rng(seed).integers(0, k, unary.shape[0])
    weights = np.random.default_rng(seed).uniform(0.5, 2.0, len(lengths))
    obj = CRFObjective(k, mode=mode)
    grad, hess = obj.grad_hess(unary, SequenceBatch.build(labels, lengths, k, weights))
    row_w = np.repeat(weights, lengths)
    np.testing.assert_allclose(grad.sum(axis=1), 0.0, atol=1e-10)
    assert np.all(hess >= obj.spec.hess_floor * row_w[:, None] * (1 - 1e-12))
    if mode != "logitboost":
        p = obj.params
        _, marg = inference.forward_backward(unary, lengths, p.transitions, p.start, p.end)
        expected = marg.copy()
        expected[np.arange(len(labels)), labels] -= 1.0
        np.testing.assert_allclose(grad, expected * row_w[:, None], atol=1e-10)


# ---------------------------------------------------------------------------
# bad input: a ValueError, whatever the shape or value


BAD_VALUES = st.sampled_from([np.nan, np.inf, -np.inf])


@FAST
@given(crfs(), BAD_VALUES, st.sampled_from(["unary", "transitions", "start", "end"]),
       st.integers(0, 10**6))  # fmt: skip
def test_non_finite_inputs_raise_or_are_forbidden_moves(crf, value, where, index):
    arrays = dict(zip(["unary", "lengths", "transitions", "start", "end"], crf))
    target = arrays[where].copy()
    target.flat[index % target.size] = value
    arrays[where] = target
    forbidden_move = value == -np.inf and where != "unary"
    try:
        log_z, marg = inference.forward_backward(**arrays)
    except ValueError as err:
        message = str(err)
        assert forbidden_move == ("no allowed labelling" in message or "forbid" in message)
        return
    assert forbidden_move
    assert np.all(np.isfinite(log_z)) and np.all(np.isfinite(marg))


@FAST
@given(
    st.lists(st.integers(-3, 6), min_size=0, max_size=5),
    st.integers(0, 12),
)
def test_bad_lengths_raise_value_error(lengths, n_rows):
    unary = np.zeros((n_rows, 2))
    ok = len(lengths) > 0 and min(lengths) >= 1 and sum(lengths) == n_rows
    try:
        inference.forward_backward(unary, lengths, np.zeros((2, 2)), np.zeros(2), np.zeros(2))
    except ValueError:
        assert not ok
    else:
        assert ok or n_rows == 0


@FAST
@given(
    st.integers(1, 6),
    st.integers(1, 4),
    st.sampled_from([np.nan, np.inf, -np.inf, 2 * MARGIN_LIMIT, -3e16]),
    st.integers(0, 10**6),
)
def test_margin_check_names_the_first_bad_row(n, k, value, index):
    margins = np.zeros((n, k))
    margins.flat[index % margins.size] = value
    row, label = divmod(index % margins.size, k)
    with pytest.raises(ValueError, match=f"row {row}, label {label} is "):
        check_margin_values(margins, "the margin", "cause")


JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=3)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)
FIELDS = ["version", "num_labels", "mode", "transitions", "start", "end", "rounds"]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES), st.booleans())
def test_any_stored_state_parses_or_raises_value_error(fields, start_valid):
    state = {"version": 1, "num_labels": 2, "mode": "gbcrf", "transitions": [[0.0, 0.0]] * 2}
    if start_valid:
        state.update(start=[0.0, 0.0], end=[0.0, 0.0])
    state.update(fields)
    state = json.loads(json.dumps(state))
    try:
        num_labels, mode, params, _ = parse_state(state)
    except ValueError:
        return
    assert isinstance(params, TransitionParams) and params.start.shape == (num_labels,)
    assert not np.isnan(params.to_vector()).any()


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_read_conll_of_any_bytes_reads_or_raises_value_error(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("conll") / "any.txt"
    path.write_bytes(raw)
    try:
        frame = read_conll(path, columns=("token", "tag"))
    except ValueError:
        return
    assert not frame["token"].str.startswith("\ufeff").any()
