"""Sequences that no label path may take: every inference entry point says so (issue 28).

With ``-inf`` transition / start / end scores (forbidden moves) a sequence can
have no allowed labelling at all. Viterbi used to return a path through a
forbidden move there while ``forward_backward`` raised; now Viterbi, the
marginals, the log-likelihood and the engines' predict all raise a
``ValueError`` naming the first such sequence, and agree with the
brute-force oracle on which sequences those are.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naive import ChainOracle, offsets
from chains import make_crf
from structboost import inference

INF = np.inf


@st.composite
def forbidding_crfs(draw):
    """Chains with random forbidden moves and no guarantee that any path is allowed."""
    num_labels = draw(st.integers(1, 3))
    lengths = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    seed = draw(st.integers(0, 2**32 - 1))
    unary, lengths, transitions, start, end = make_crf(seed, lengths, num_labels)
    rng = np.random.default_rng(seed + 1)
    rate = draw(st.sampled_from([0.2, 0.5, 0.8]))
    transitions[rng.random(transitions.shape) < rate] = -INF
    start[rng.random(num_labels) < rate / 2] = -INF
    end[rng.random(num_labels) < rate / 2] = -INF
    # check_chain refuses tables that forbid everything: keep one move, start and end.
    transitions.flat[rng.integers(transitions.size)] = 0.0
    start[rng.integers(num_labels)] = end[rng.integers(num_labels)] = 0.0
    return unary, lengths, transitions, start, end


@settings(max_examples=150, deadline=None)
@given(forbidding_crfs())
def test_viterbi_marginals_and_likelihood_agree_with_the_oracle_on_impossible_sequences(crf):
    unary, lengths, transitions, start, end = crf
    bounds = offsets(lengths)
    best = [
        ChainOracle(unary[a:b], transitions, start, end).map_score
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    impossible = [i for i, score in enumerate(best) if score == -INF]
    labels = np.zeros(unary.shape[0], dtype=np.int64)
    calls = {
        "viterbi": lambda: inference.viterbi(unary, lengths, transitions, start, end),
        "forward_backward": lambda: inference.forward_backward(
            unary, lengths, transitions, start, end),
        "sequence_nll": lambda: inference.sequence_nll(
            unary, lengths, labels, transitions, start, end),
    }  # fmt: skip
    if impossible:
        first = impossible[0]
        for name, call in calls.items():
            with pytest.raises(ValueError, match=f"sequence {first} .*no allowed labelling"):
                call()
        return
    path = calls["viterbi"]()
    for seq, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        oracle = ChainOracle(unary[a:b], transitions, start, end)
        assert np.isfinite(oracle.score(path[a:b]))  # no forbidden move taken
        np.testing.assert_allclose(oracle.score(path[a:b]), best[seq], rtol=1e-10, atol=1e-10)
    _, marginals = calls["forward_backward"]()
    np.testing.assert_allclose(marginals.sum(axis=1), 1.0)


def test_the_issue_example_raises_instead_of_a_forbidden_path():
    # Alternating labels with label 1 forbidden first and last: no path of even length.
    args = ([[-INF, 0], [0, -INF]], [0, -INF], [0, -INF])
    with pytest.raises(ValueError, match="sequence 1 \\(length 4\\) has no allowed labelling"):
        inference.viterbi(np.zeros((7, 2)), [3, 4], *args)
    np.testing.assert_array_equal(inference.viterbi(np.zeros((3, 2)), [3], *args), [0, 1, 0])


def test_engine_predict_agrees():
    """The engines' predict (both decodings) and log-likelihood raise on the same sequence."""
    import structboost as sb
    from structboost.datasets import make_hmm_sequences
    from structboost.objectives.constraints import from_masks

    X, y, L = make_hmm_sequences(20, length=(3, 6), random_state=0)
    k = int(y.max()) + 1
    assert k == 3
    booster = sb.XGBCRFClassifier(n_estimators=2, max_depth=2, n_jobs=1).fit(
        X, y, lengths=L).booster_  # fmt: skip
    # Moves 0 -> 1 -> 2 -> 0 only, starting and ending on 0: lengths 1, 4, 7, ... only.
    cycle = np.zeros((k, k), dtype=bool)
    cycle[0, 1] = cycle[1, 2] = cycle[2, 0] = True
    only_0 = np.array([True, False, False])
    allowed = from_masks(transitions=cycle, start=only_0, end=only_0)
    data, lengths = X[:6], np.array([1, 4, 1])
    np.testing.assert_array_equal(
        sb.predict(booster, data, lengths=lengths, allowed_transitions=allowed), [0, 0, 1, 2, 0, 0])
    bad = np.array([1, 2, 3])
    for call in (
        lambda: sb.predict(booster, data, lengths=bad, allowed_transitions=allowed),
        lambda: sb.predict(booster, data, lengths=bad, decode="marginal",
                           allowed_transitions=allowed),
        lambda: sb.predict_marginals(booster, data, lengths=bad, allowed_transitions=allowed),
        lambda: sb.sequence_log_likelihood(booster, data, np.zeros(6, dtype=np.int64),
                                           lengths=bad, allowed_transitions=allowed),
    ):  # fmt: skip
        with pytest.raises(ValueError, match="sequence 1 \\(length 2\\) has no allowed"):
            call()
