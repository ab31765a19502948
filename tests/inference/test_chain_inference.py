"""Linear-chain inference checked against the brute-force oracle in ``naive.py``.

Random tiny CRFs (K in 1..4, sequence lengths 1..5, several sequences per
batch) are enumerated exhaustively; the numba kernels behind
``structboost.inference.chain`` must reproduce log Z, node and edge marginals, the
MAP score, the NLL and the exact gamma, and their gamma bounds must dominate
the exact values (Chen et al. 2015, Theorems 4.1 and 4.2). The oracle tests
draw both one shared transition table and per-position tables ``(n, K, K)``
with forbidden moves. The adversarial section checks the log-space fallback
criterion (node scores up to 1e4, transitions up to 1e3, forbidden moves,
100,000 positions).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import naive
from chains import crfs, forbidding_extreme, make_crf, make_forbidding_crf, sequence_ends
from structboost import _config, inference
from structboost.inference import _chain
from structboost.inference import chain as chain_inference


@st.composite
def position_crfs(draw, max_labels=4):
    """Batches with per-position transitions, some moves forbidden (the diagonal never)."""
    num_labels = draw(st.integers(1, max_labels))
    lengths = np.asarray(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)), dtype=np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from((0.3, 1.0, 3.0)))
    n = int(lengths.sum())
    transitions = scale * rng.normal(size=(n, num_labels, num_labels))
    forbid = rng.random(transitions.shape) < draw(st.sampled_from((0.0, 0.3)))
    forbid[:, np.arange(num_labels), np.arange(num_labels)] = False
    transitions[forbid] = -np.inf
    unary = scale * rng.normal(size=(n, num_labels))
    start, end = scale * rng.normal(size=(2, num_labels))
    return unary, lengths, transitions, start, end


def exact_gamma_tolerance(marginals):
    """Absolute error allowed in the exact gamma of every position, shape (n,).

    A message-based exact gamma divides total variations (differences of conditionals
    that are all close to 1) by ``1 - p`` of near-certain labels, so float64 rounding
    grows like ``eps / (1 - p)`` there; the oracle's enumerated, centred covariance
    has no such cancellation (checked against 60-digit arithmetic).
    """
    q = 1.0 - marginals
    considered = marginals * q >= naive.VARIANCE_FLOOR
    return 1e-9 + 1e-13 / np.where(considered, q, 1.0).min(axis=1)


def sequence_starts(lengths):
    return np.cumsum(lengths) - lengths


# ---------------------------------------------------------------------------
# against the oracle


@settings(max_examples=60, deadline=None)
@given(st.one_of(crfs(), position_crfs()))
def test_forward_backward_matches_oracle(crf):
    unary, lengths, transitions, start, end = crf
    expected = naive.batch(*crf)
    log_z, marginals = inference.forward_backward(*crf)
    assert log_z.shape == (len(lengths),)
    assert marginals.shape == unary.shape
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(marginals, expected["marginals"], rtol=0, atol=1e-10)


@settings(max_examples=60, deadline=None)
@given(st.one_of(crfs(), position_crfs()))
def test_edge_marginals_match_oracle(crf):
    unary, lengths, transitions, start, end = crf
    expected = naive.batch(*crf)
    pair = inference.edge_marginals(*crf)
    assert pair.shape == (unary.shape[0], unary.shape[1], unary.shape[1])
    np.testing.assert_allclose(pair, expected["edge_marginals"], rtol=0, atol=1e-10)
    np.testing.assert_array_equal(pair[sequence_ends(lengths)], 0.0)


@settings(max_examples=60, deadline=None)
@given(st.one_of(crfs(), position_crfs()))
def test_viterbi_reaches_map_score(crf):
    unary, lengths, transitions, start, end = crf
    expected = naive.batch(*crf)
    labels = inference.viterbi(*crf)
    assert labels.shape == (unary.shape[0],)
    assert np.issubdtype(labels.dtype, np.integer)
    assert labels.min() >= 0 and labels.max() < unary.shape[1]
    # ties are possible, so compare scores rather than labels
    scores = naive.batch_scores(unary, lengths, labels, transitions, start, end)
    np.testing.assert_allclose(scores, expected["map_score"], rtol=1e-12, atol=1e-10)


@settings(max_examples=60, deadline=None)
@given(st.one_of(crfs(), position_crfs()), st.integers(0, 2**32 - 1))
def test_sequence_nll_matches_oracle(crf, label_seed):
    unary, lengths, transitions, start, end = crf
    labels = np.random.default_rng(label_seed).integers(0, unary.shape[1], size=unary.shape[0])
    nll = inference.sequence_nll(unary, lengths, labels, transitions, start, end)
    assert nll.shape == (len(lengths),)
    expected = naive.batch_nll(unary, lengths, labels, transitions, start, end)
    np.testing.assert_allclose(nll, expected, rtol=1e-10, atol=1e-10)
    assert np.all(nll >= -1e-10)


@settings(max_examples=60, deadline=None)
@given(st.one_of(crfs(scales=(0.3, 1.0, 2.0), sticky=(0.0, 3.0, -3.0)), position_crfs()))
def test_gamma_exact_matches_oracle(crf):
    expected = naive.batch(*crf)
    got = inference.gamma(*crf, "exact")
    assert got.shape == (crf[0].shape[0],)
    assert np.all(np.isfinite(got))
    defined = ~np.isnan(expected["gamma_exact"])  # NaN: every label has H_ii < 1e-12
    error = np.abs(got - expected["gamma_exact"])[defined]
    assert np.all(error <= exact_gamma_tolerance(expected["marginals"])[defined])


@settings(max_examples=60, deadline=None)
@given(st.one_of(crfs(), position_crfs()))
def test_gamma_mixing_is_theorem_4_1(crf):
    """The Eq. 17 recursions reproduce the path-product sum of Theorem 4.1."""
    expected = naive.batch(*crf)["gamma_mixing"]
    got = inference.gamma(*crf, "mixing")
    assert got.shape == (crf[0].shape[0],)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_gamma_length_is_twice_the_length():
    crf = make_crf(0, [3, 1, 4], 3)
    np.testing.assert_array_equal(inference.gamma(*crf, "length"), [6, 6, 6, 2, 8, 8, 8, 8])


@settings(max_examples=150, deadline=None)
@given(crfs(scales=(0.1, 0.5, 1.0, 2.0), sticky=(0.0, 2.0, 5.0, 9.0, -5.0)))
def test_gamma_bounds_are_ordered(crf):
    """length >= mixing >= exact (the true value), including strongly sticky chains."""
    unary, lengths, transitions, start, end = crf
    expected = naive.batch(*crf)
    exact_true = expected["gamma_exact"]
    exact = inference.gamma(*crf, "exact")
    mixing = inference.gamma(*crf, "mixing")
    length = inference.gamma(*crf, "length")
    defined = ~np.isnan(exact_true)
    assert np.all(mixing[defined] >= exact_true[defined] - 1e-9)
    assert np.all(mixing >= exact - exact_gamma_tolerance(expected["marginals"]))
    assert np.all(length >= mixing - 1e-12)
    assert np.all(mixing >= 2.0 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(crfs(scales=(0.1, 0.5, 1.0, 2.0), sticky=(0.0, 2.0, 5.0, 9.0, -5.0)))
def test_edge_gamma_bounds_exact_edge_gamma(crf):
    """Theorem 4.2: gamma^(e) >= max_(k1,k2) sum_j |H_ij| / H_ii over all edge indicators."""
    unary, lengths, transitions, start, end = crf
    expected = naive.batch(*crf)
    got = inference.edge_gamma(*crf)
    assert got.shape == (unary.shape[0],)
    np.testing.assert_array_equal(got[sequence_ends(lengths)], 0.0)
    defined = ~np.isnan(expected["edge_gamma_exact"])
    assert np.all(got[defined] >= expected["edge_gamma_exact"][defined] - 1e-9)
    np.testing.assert_allclose(got, expected["edge_gamma_mixing"], rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.integers(1, 4),
    st.sampled_from([0.3, 1.0, 3.0]),
)
def test_forbidden_moves_match_oracle(seed, lengths, num_labels, scale):
    crf = make_forbidding_crf(seed, lengths, num_labels, scale)
    unary, lengths, transitions, start, end = crf
    expected = naive.batch(*crf)
    log_z, marginals = inference.forward_backward(*crf)
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-10)
    np.testing.assert_allclose(inference.edge_marginals(*crf), expected["edge_marginals"], atol=1e-10)
    scores = naive.batch_scores(unary, lengths, inference.viterbi(*crf), transitions, start, end)
    np.testing.assert_allclose(scores, expected["map_score"], rtol=1e-12, atol=1e-10)
    mixing = inference.gamma(*crf, "mixing")
    defined = ~np.isnan(expected["gamma_exact"])
    error = np.abs(inference.gamma(*crf, "exact") - expected["gamma_exact"])[defined]
    assert np.all(error <= exact_gamma_tolerance(expected["marginals"])[defined])
    assert np.all(mixing[defined] >= expected["gamma_exact"][defined] - 1e-9)
    defined = ~np.isnan(expected["edge_gamma_exact"])
    assert np.all(inference.edge_gamma(*crf)[defined] >= expected["edge_gamma_exact"][defined] - 1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.integers(1, 4),
    st.sampled_from([0.3, 1.0, 3.0]),
)
def test_mixing_gamma_with_forbidden_moves_is_theorem_4_1(seed, lengths, num_labels, scale):
    """alpha_{s,v} takes its minimum over the labels of y_s that have nonzero probability.

    A conditional given an impossible label is undefined; such labels add nothing to the
    total variation in the proof of Theorem 3.1, so they are left out of the minimum.
    """
    crf = make_forbidding_crf(seed, lengths, num_labels, scale)
    expected = naive.batch(*crf)["gamma_mixing"]
    np.testing.assert_allclose(inference.gamma(*crf, "mixing"), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("margin", [10.0, 300.0, 1e4])
@pytest.mark.parametrize("case", ["tie", "end", "dead end"])
def test_forbidden_moves_with_extreme_margins(case, margin):
    """At margin 1e4 scaled messages cannot hold the ratios: the log-space fallback does."""
    crf = forbidding_extreme(case, margin)
    expected = naive.batch(*crf)
    log_z, marginals = inference.forward_backward(*crf)
    np.testing.assert_allclose(log_z, expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(marginals, expected["marginals"], atol=1e-9)
    np.testing.assert_allclose(inference.edge_marginals(*crf), expected["edge_marginals"], atol=1e-9)
    scores = naive.batch_scores(crf[0], crf[1], inference.viterbi(*crf), *crf[2:])
    np.testing.assert_allclose(scores, expected["map_score"], rtol=1e-12)


# ---------------------------------------------------------------------------
# finite differences on the implementation itself


def _central_difference(function, array, eps=1e-5):
    grad = np.zeros_like(array)
    for idx in np.ndindex(array.shape):
        saved = array[idx]
        array[idx] = saved + eps
        up = function()
        array[idx] = saved - eps
        down = function()
        array[idx] = saved
        grad[idx] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("seed", [0, 1])
def test_log_z_gradients_are_marginals(seed):
    crf = make_crf(seed, [3, 1, 4], 3, scale=1.5, sticky=1.0)
    unary, lengths, transitions, start, end = crf

    def total_log_z():
        return inference.forward_backward(unary, lengths, transitions, start, end)[0].sum()

    _, marginals = inference.forward_backward(*crf)
    pair = inference.edge_marginals(*crf)
    first, last = sequence_starts(lengths), sequence_ends(lengths)
    np.testing.assert_allclose(_central_difference(total_log_z, unary), marginals, atol=1e-7)
    np.testing.assert_allclose(_central_difference(total_log_z, transitions), pair.sum(axis=0), atol=1e-7)
    np.testing.assert_allclose(_central_difference(total_log_z, start), marginals[first].sum(axis=0), atol=1e-7)
    np.testing.assert_allclose(_central_difference(total_log_z, end), marginals[last].sum(axis=0), atol=1e-7)


# ---------------------------------------------------------------------------
# properties


@settings(max_examples=60, deadline=None)
@given(crfs(scales=(0.3, 1.0, 3.0, 8.0)))
def test_marginals_are_consistent(crf):
    unary, lengths, transitions, start, end = crf
    _, marginals = inference.forward_backward(*crf)
    pair = inference.edge_marginals(*crf)
    np.testing.assert_allclose(marginals.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(marginals >= 0.0) and np.all(marginals <= 1.0 + 1e-12)
    assert np.all(pair >= 0.0)
    inner = np.setdiff1d(np.arange(unary.shape[0]), sequence_ends(lengths))
    np.testing.assert_allclose(pair[inner].sum(axis=2), marginals[inner], atol=1e-12)
    np.testing.assert_allclose(pair[inner].sum(axis=1), marginals[inner + 1], atol=1e-12)


def _all_outputs(unary, lengths, transitions, start, end, labels):
    log_z, marginals = inference.forward_backward(unary, lengths, transitions, start, end)
    args = (unary, lengths, transitions, start, end)
    return {
        "log_z": log_z,
        "marginals": marginals,
        "edge_marginals": inference.edge_marginals(*args),
        "viterbi": inference.viterbi(*args),
        "gamma_mixing": inference.gamma(*args, "mixing"),
        "gamma_length": inference.gamma(*args, "length"),
        "gamma_exact": inference.gamma(*args, "exact"),
        "edge_gamma": inference.edge_gamma(*args),
        "nll": inference.sequence_nll(unary, lengths, labels, transitions, start, end),
    }


@settings(max_examples=40, deadline=None)
@given(crfs(scales=(0.3, 1.0, 3.0)))
def test_batch_equals_loop_over_sequences(crf):
    unary, lengths, transitions, start, end = crf
    labels = np.arange(unary.shape[0]) % unary.shape[1]
    together = _all_outputs(unary, lengths, transitions, start, end, labels)
    bounds = naive.offsets(lengths)
    singles = [
        _all_outputs(unary[a:b], np.array([b - a]), transitions, start, end, labels[a:b])
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    for name, value in together.items():
        looped = np.concatenate([single[name] for single in singles])
        if name == "viterbi":  # ties could legitimately break differently
            scores = naive.batch_scores(unary, lengths, value, transitions, start, end)
            looped_scores = naive.batch_scores(unary, lengths, looped, transitions, start, end)
            np.testing.assert_allclose(scores, looped_scores, rtol=1e-12, err_msg=name)
        else:
            np.testing.assert_allclose(value, looped, rtol=1e-10, atol=1e-12, err_msg=name)


# ---------------------------------------------------------------------------
# numerics and edge cases


@pytest.mark.parametrize("kind", ["signs", "uniform"])
def test_huge_margins_stay_finite_and_exact(kind):
    rng = np.random.default_rng(7)
    lengths = np.array([4, 1, 3, 2])
    K = 3
    n = int(lengths.sum())
    if kind == "signs":  # exact +-1e4 with many ties
        unary = 1e4 * rng.choice([-1.0, 1.0], size=(n, K))
    else:
        unary = 1e4 * rng.uniform(-1.0, 1.0, size=(n, K))
    transitions, start, end = rng.normal(size=(K, K)), rng.normal(size=K), rng.normal(size=K)
    crf = (unary, lengths, transitions, start, end)
    expected = naive.batch(*crf)
    outputs = _all_outputs(*crf, labels=rng.integers(0, K, size=n))
    for name, value in outputs.items():
        assert np.all(np.isfinite(value)), name
    np.testing.assert_allclose(outputs["log_z"], expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(outputs["marginals"], expected["marginals"], atol=1e-9)
    np.testing.assert_allclose(outputs["edge_marginals"], expected["edge_marginals"], atol=1e-9)
    scores = naive.batch_scores(unary, lengths, outputs["viterbi"], transitions, start, end)
    np.testing.assert_allclose(scores, expected["map_score"], rtol=1e-12)
    assert np.all(outputs["nll"] >= -1e-6)
    assert np.all(outputs["gamma_mixing"] >= 2.0 - 1e-12)
    assert np.all(outputs["gamma_length"] >= outputs["gamma_mixing"] - 1e-12)


def test_large_transitions_stay_finite():
    rng = np.random.default_rng(8)
    crf = make_crf(8, [5, 2], 3)
    unary, lengths, _, start, end = crf
    transitions = 100.0 * rng.uniform(-1.0, 1.0, size=(3, 3))
    outputs = _all_outputs(unary, lengths, transitions, start, end, labels=np.zeros(7, dtype=np.int64))
    for name, value in outputs.items():
        assert np.all(np.isfinite(value)), name
    expected = naive.batch(unary, lengths, transitions, start, end)
    np.testing.assert_allclose(outputs["log_z"], expected["log_z"], rtol=1e-12)
    np.testing.assert_allclose(outputs["marginals"], expected["marginals"], atol=1e-9)


def test_float32_input_matches_float64():
    crf = make_crf(3, [3, 2, 1], 4, scale=2.0)
    crf32 = tuple(np.asarray(a, dtype=np.float32) for a in (crf[0], crf[2], crf[3], crf[4]))
    unary32, transitions32, start32, end32 = crf32
    lengths32 = crf[1].astype(np.int32)
    labels = np.array([0, 1, 2, 3, 0, 1])
    got = _all_outputs(unary32, lengths32, transitions32, start32, end32, labels)
    as64 = tuple(a.astype(np.float64) for a in crf32)
    want = _all_outputs(as64[0], crf[1], as64[1], as64[2], as64[3], labels)
    for name in got:
        if name == "viterbi":
            np.testing.assert_array_equal(got[name], want[name])
        else:
            assert got[name].dtype == np.float64, name
            np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_length_one_sequences():
    rng = np.random.default_rng(4)
    K = 3
    unary = rng.normal(size=(3, K))
    lengths = np.array([1, 1, 1])
    transitions, start, end = rng.normal(size=(K, K)), rng.normal(size=K), rng.normal(size=K)
    crf = (unary, lengths, transitions, start, end)
    scores = unary + start + end
    log_z, marginals = inference.forward_backward(*crf)
    np.testing.assert_allclose(log_z, np.log(np.exp(scores).sum(axis=1)), rtol=1e-12)
    np.testing.assert_allclose(marginals, np.exp(scores - log_z[:, None]), atol=1e-12)
    np.testing.assert_array_equal(inference.viterbi(*crf), scores.argmax(axis=1))
    np.testing.assert_array_equal(inference.edge_marginals(*crf), 0.0)
    np.testing.assert_array_equal(inference.edge_gamma(*crf), 0.0)
    np.testing.assert_allclose(inference.gamma(*crf, "mixing"), 2.0)
    np.testing.assert_allclose(inference.gamma(*crf, "length"), 2.0)
    np.testing.assert_allclose(inference.gamma(*crf, "exact"), 2.0)


def test_single_label():
    rng = np.random.default_rng(5)
    lengths = np.array([3, 1, 2])
    unary = rng.normal(size=(6, 1))
    transitions, start, end = np.array([[0.7]]), np.array([0.2]), np.array([-0.4])
    crf = (unary, lengths, transitions, start, end)
    log_z, marginals = inference.forward_backward(*crf)
    bounds = naive.offsets(lengths)
    expected = [unary[a:b].sum() + 0.2 - 0.4 + 0.7 * (b - a - 1) for a, b in zip(bounds[:-1], bounds[1:])]
    np.testing.assert_allclose(log_z, expected, rtol=1e-12)
    np.testing.assert_array_equal(marginals, 1.0)
    np.testing.assert_array_equal(inference.viterbi(*crf), 0)
    np.testing.assert_allclose(inference.sequence_nll(unary, lengths, np.zeros(6, dtype=np.int64), transitions, start, end), 0.0, atol=1e-12)
    np.testing.assert_allclose(inference.gamma(*crf, "mixing"), 2.0)
    for method in ("exact", "length"):
        assert np.all(np.isfinite(inference.gamma(*crf, method)))
    assert np.all(np.isfinite(inference.edge_gamma(*crf)))
    pair = inference.edge_marginals(*crf)
    np.testing.assert_array_equal(pair[:, 0, 0], [1, 1, 0, 0, 1, 0])


def test_empty_batch():
    K = 3
    args = (np.zeros((0, K)), np.zeros(0, dtype=np.int64), np.zeros((K, K)), np.zeros(K), np.zeros(K))
    outputs = _all_outputs(*args, labels=np.zeros(0, dtype=np.int64))
    for name, value in outputs.items():
        assert value.shape[0] == 0, name
    assert outputs["marginals"].shape == (0, K)


# ---------------------------------------------------------------------------
# bad input


def _call(name, unary, lengths, transitions, start, end, labels=None):
    args = (unary, lengths, transitions, start, end)
    if name == "forward_backward":
        return inference.forward_backward(*args)
    if name == "viterbi":
        return inference.viterbi(*args)
    if name == "edge_marginals":
        return inference.edge_marginals(*args)
    if name == "edge_gamma":
        return inference.edge_gamma(*args)
    if name.startswith("gamma_"):
        return inference.gamma(*args, name.removeprefix("gamma_"))
    if labels is None:
        labels = np.zeros(np.shape(unary)[0], dtype=np.int64)
    return inference.sequence_nll(unary, lengths, labels, transitions, start, end)


FUNCTIONS = [
    "forward_backward",
    "viterbi",
    "edge_marginals",
    "edge_gamma",
    "gamma_mixing",
    "gamma_length",
    "gamma_exact",
    "sequence_nll",
]


def _bad_inputs():
    K, n = 3, 5
    good = dict(
        unary=np.zeros((n, K)),
        lengths=np.array([2, 3]),
        transitions=np.zeros((K, K)),
        start=np.zeros(K),
        end=np.zeros(K),
    )
    nan_unary = np.zeros((n, K))
    nan_unary[2, 1] = np.nan
    inf_unary = np.zeros((n, K))
    inf_unary[4, 0] = np.inf
    cases = {
        "lengths sum too small": dict(lengths=np.array([2, 2])),
        "lengths sum too large": dict(lengths=np.array([3, 3])),
        "zero length": dict(lengths=np.array([2, 0, 3])),
        "negative length": dict(lengths=np.array([6, -1])),
        "lengths 2-D": dict(lengths=np.array([[2, 3]])),
        "unary 1-D": dict(unary=np.zeros(n)),
        "unary 3-D": dict(unary=np.zeros((n, K, 1))),
        "transitions not square": dict(transitions=np.zeros((K, K + 1))),
        "transitions wrong K": dict(transitions=np.zeros((K + 1, K + 1))),
        "transitions 1-D": dict(transitions=np.zeros(K)),
        "start wrong K": dict(start=np.zeros(K + 1)),
        "start 2-D": dict(start=np.zeros((1, K))),
        "end wrong K": dict(end=np.zeros(K - 1)),
        "unary NaN": dict(unary=nan_unary),
        "unary inf": dict(unary=inf_unary),
    }
    return good, cases


_GOOD, _CASES = _bad_inputs()


@pytest.mark.parametrize("function", FUNCTIONS)
def test_good_input_is_accepted(function):
    _call(function, **_GOOD)


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("function", FUNCTIONS)
def test_bad_input_raises_value_error(function, case):
    with pytest.raises(ValueError):
        _call(function, **{**_GOOD, **_CASES[case]})


@pytest.mark.parametrize(
    "labels",
    [np.array([0, 1, 2, 3, 0]), np.array([0, -1, 2, 1, 0]), np.array([0, 1, 2, 1]), np.array([0.0, 1.0, np.nan, 1.0, 0.0])],
    ids=["label K", "label -1", "too few labels", "NaN label"],
)
def test_sequence_nll_rejects_bad_labels(labels):
    with pytest.raises(ValueError):
        _call("sequence_nll", **_GOOD, labels=labels)


def test_gamma_rejects_unknown_method():
    with pytest.raises(ValueError):
        inference.gamma(_GOOD["unary"], _GOOD["lengths"], _GOOD["transitions"], _GOOD["start"], _GOOD["end"], "tight")


# ---------------------------------------------------------------------------
# per-position transition scores (n, K, K)


@settings(max_examples=40, deadline=None)
@given(position_crfs())
def test_position_transitions_edge_gamma_is_theorem_4_2(crf):
    """Per-position tables (the oracle tests above draw them too): the edge bound."""
    expected = naive.batch(*crf)
    np.testing.assert_allclose(inference.edge_gamma(*crf), expected["edge_gamma_mixing"], rtol=1e-9)


def test_position_transitions_equal_to_one_table_give_its_results():
    unary, lengths, transitions, start, end = make_crf(3, [4, 1, 6], 3, scale=2.0)
    tiled = np.broadcast_to(transitions, (unary.shape[0],) + transitions.shape)
    shared = chain_inference.posterior(*chain_inference.check_chain(unary, lengths, transitions, start, end))
    per_row = chain_inference.posterior(*chain_inference.check_chain(unary, lengths, tiled, start, end))
    np.testing.assert_allclose(per_row.log_z, shared.log_z, rtol=1e-13)
    np.testing.assert_allclose(per_row.marginals(), shared.marginals(), atol=1e-14)
    edges = np.array([0, 1, 2, 5, 6, 7, 8])
    weights = np.linspace(0.5, 2.0, edges.size)
    for got, want in zip(per_row.edge_sums(edges, weights, weights), shared.edge_sums(edges, weights, weights)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_edge_sums_are_sums_of_pairwise_marginals():
    """Shared-table edge sums equal the weighted pairwise sums."""
    unary, lengths, transitions, start, end = make_crf(5, [4, 1, 6, 3], 3, scale=2.0)
    post = chain_inference.posterior(*chain_inference.check_chain(unary, lengths, transitions, start, end))
    edges = np.array([0, 1, 2, 5, 6, 7, 9, 11, 12])
    pair = post.edge_marginals()[edges]
    weights = np.linspace(0.5, 2.0, edges.size)
    curvature_weights = weights[::-1] * 3.0
    total, curvature = post.edge_sums(edges, weights, curvature_weights)
    np.testing.assert_allclose(total, np.einsum("e,eab->ab", weights, pair), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        curvature, np.einsum("e,eab->ab", curvature_weights, pair * (1.0 - pair)), rtol=1e-12, atol=1e-14
    )
    alone, none = post.edge_sums(edges, weights)
    assert none is None
    np.testing.assert_allclose(alone, total, rtol=1e-13, atol=1e-15)


@settings(max_examples=80, deadline=None)
@given(
    crfs(scales=(0.3, 2.5, 1e3), max_labels=5), st.booleans(), st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_edge_total_of_the_sweep_matches_oracle(crf, rates, threads, seed):
    """Weighted pairwise marginals summed within the backward sweep, against enumeration.

    Scores of about 1e3 send sequences to the log-space fallback: the sweep
    sums the rest of their chunk again from the stored rows, and the
    posterior adds their edges from their pairwise marginals. Both drivers
    (serial, and ``prange`` with ``SERIAL_ROWS`` 0).
    """
    unary, lengths, transitions, start, end = crf
    weight = np.random.default_rng(seed).uniform(0.1, 3.0, lengths.size)
    before = _config.SERIAL_ROWS
    _config.SERIAL_ROWS = 0 if threads else 1 << 30
    try:
        checked = chain_inference.check_chain(unary, lengths, transitions, start, end)
        post = chain_inference.posterior(*checked, rates=rates, seq_weight=weight)
    finally:
        _config.SERIAL_ROWS = before
    pair = naive.batch(unary, lengths, transitions, start, end)["edge_marginals"]
    want = np.einsum("n,nab->ab", np.repeat(weight, lengths), pair)
    np.testing.assert_allclose(post.edge_total, want, rtol=1e-9, atol=1e-12)


def test_edge_total_needs_its_weights_and_one_table():
    """Without ``seq_weight``, or with per-position tables, the sweep sums no edges."""
    unary, lengths, transitions, start, end = make_crf(4, [3, 2], 3)
    checked = chain_inference.check_chain(unary, lengths, transitions, start, end)
    assert chain_inference.posterior(*checked).edge_total is None
    tiled = np.broadcast_to(transitions, (unary.shape[0],) + transitions.shape)
    checked = chain_inference.check_chain(unary, lengths, tiled, start, end)
    assert chain_inference.posterior(*checked, seq_weight=np.ones(2)).edge_total is None


LEAN_FIELDS = ("log_z", "marg", "right", "left", "beta_scale", "overlap", "edge_total")


def lean_and_kept(checked, weight, threads):
    """The posteriors of one pass with and without ``keep_messages``: their fields by name."""
    before = _config.SERIAL_ROWS
    _config.SERIAL_ROWS = 0 if threads else 1 << 30
    try:
        out = []
        for keep in (True, False):
            post = chain_inference.posterior(
                *checked, rates=True, seq_weight=weight, keep_messages=keep
            )
            out.append((post, {name: np.copy(getattr(post, name)) for name in LEAN_FIELDS}))
        return out
    finally:
        _config.SERIAL_ROWS = before


@settings(max_examples=60, deadline=None)
@given(crfs(scales=(0.3, 2.5, 1e3), max_labels=5), st.booleans(), st.integers(0, 2**32 - 1))
def test_a_pass_without_its_messages_gives_the_same_results(crf, threads, seed):
    """``keep_messages=False``: log Z, marginals, rates and edge sums bit for bit as with them.

    Scores of about 1e3 send sequences to the log-space fallback, whose
    chunks sweep again keeping their rows (to sum their other edges from
    them). Both drivers; the bound of every node and edge follows.
    """
    unary, lengths, transitions, start, end = crf
    weight = np.random.default_rng(seed).uniform(0.1, 3.0, lengths.size)
    checked = chain_inference.check_chain(unary, lengths, transitions, start, end)
    (kept, want), (lean, got) = lean_and_kept(checked, weight, threads)
    assert kept.has_messages and not lean.has_messages
    for name in LEAN_FIELDS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(lean.node_gamma(), kept.node_gamma())
    np.testing.assert_array_equal(lean.edge_gamma(), kept.edge_gamma())


@pytest.mark.parametrize("threads", [False, True])
def test_a_lean_chunk_with_a_lost_sequence_sweeps_again_keeping_its_rows(threads):
    """Issue 15's lost sequence in a chunk of others: the chunk's edges as with the messages kept."""
    lost = [[-4073.2, 2495.6], [-6347.4, 9323.2], [-2071.1, 2362.3]]
    rng = np.random.default_rng(3)
    lengths = np.array([4, 3, 5, 2])
    unary = np.concatenate([rng.normal(size=(4, 2)), lost, rng.normal(size=(7, 2))])
    transitions, start, end = [[2.51, -3.12], [-0.11, -np.inf]], [-2.07, 0.09], [3.57, -0.34]
    checked = chain_inference.check_chain(unary, lengths, transitions, start, end)
    weight = np.array([0.5, 1.0, 2.0, 1.5])
    (kept, want), (lean, got) = lean_and_kept(checked, weight, threads)
    assert lean.log_space is not None and list(lean.log_space.sequences) == [1]
    for name in LEAN_FIELDS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    pair = naive.batch(unary, lengths, transitions, start, end)["edge_marginals"]
    np.testing.assert_allclose(
        got["edge_total"], np.einsum("n,nab->ab", np.repeat(weight, lengths), pair), atol=1e-9
    )


def test_a_posterior_without_its_messages_says_what_needs_them():
    """Whatever reads ``alpha`` and ``r`` after a lean pass raises, naming the fix."""
    unary, lengths, transitions, start, end = make_crf(5, [3, 4], 3)
    checked = chain_inference.check_chain(unary, lengths, transitions, start, end)
    lean = chain_inference.posterior(*checked, seq_weight=np.ones(2), keep_messages=False)
    edges, weights = np.array([0, 1, 3]), np.ones(3)
    for call in (
        lean.edge_marginals,
        lambda: lean.edge_sums(edges, weights),
        lambda: lean.node_gamma("exact"),
        lean.node_gamma,  # swept without the rates: they would come from the messages
    ):
        with pytest.raises(ValueError, match="keep_messages=True"):
            call()
    assert lean.node_gamma("length").shape == (7,)  # reads no messages


def test_position_transitions_shape_is_checked():
    unary, lengths, transitions, start, end = make_crf(0, [2, 3], 3)
    with pytest.raises(ValueError, match="transitions must have shape"):
        inference.forward_backward(unary, lengths, np.zeros((4, 3, 3)), start, end)


# ---------------------------------------------------------------------------
# adversarial scales: the log-space fallback catches every sequence it must


def test_fallback_catches_lost_best_paths():
    """Issue 15's example: the scaled sweep keeps a path 4670 units below the best one."""
    unary = [[-4073.2, 2495.6], [-6347.4, 9323.2], [-2071.1, 2362.3]]
    transitions = [[2.51, -3.12], [-0.11, -np.inf]]
    start, end = [-2.07, 0.09], [3.57, -0.34]
    oracle = naive.ChainOracle(unary, transitions, start, end)
    log_z, marginals = inference.forward_backward(unary, [3], transitions, start, end)
    np.testing.assert_allclose(log_z, [oracle.log_z], rtol=1e-12)
    np.testing.assert_allclose(log_z, [3177.17], rtol=1e-12)
    np.testing.assert_allclose(marginals, oracle.marginals, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(1, 5), min_size=1, max_size=3),
    st.integers(2, 3),
    st.sampled_from((1e2, 1e3, 1e4)),
    st.sampled_from((1.0, 1e2, 1e3)),
    st.sampled_from((0.0, 0.3, 0.5)),
)
def test_adversarial_scales_match_enumeration(seed, lengths, num_labels, node_scale, edge_scale, forbid):
    """Node scores up to 1e4, transitions up to 1e3, random forbidden moves: exact or an error."""
    rng = np.random.default_rng(seed)
    k = num_labels
    unary = np.round(node_scale * rng.uniform(-1, 1, size=(sum(lengths), k)), 1)
    transitions = np.round(edge_scale * rng.uniform(-1, 1, size=(k, k)), 2)
    start, end = np.round(rng.uniform(-edge_scale, edge_scale, size=(2, k)), 2)
    transitions[rng.random((k, k)) < forbid] = -np.inf
    start[rng.random(k) < forbid / 2] = -np.inf
    end[rng.random(k) < forbid / 2] = -np.inf
    crf = (unary, lengths, transitions, start, end)
    if not np.isfinite(transitions).any():
        return
    parts = naive.oracles(*crf)
    if not all(np.isfinite(o.log_z) for o in parts):
        with pytest.raises(ValueError, match="no allowed labelling"):
            inference.forward_backward(*crf)
        return
    log_z, marginals = inference.forward_backward(*crf)
    tolerance = 1e-12 * (node_scale * max(lengths) + edge_scale * (max(lengths) + 1))
    np.testing.assert_allclose(log_z, [o.log_z for o in parts], rtol=0, atol=tolerance)
    # The oracle's probabilities carry exp(rounding of ~1e4-sized sums): ~1e-11.
    np.testing.assert_allclose(marginals, np.concatenate([o.marginals for o in parts]), atol=1e-8)
    pair = inference.edge_marginals(*crf)
    np.testing.assert_allclose(pair, naive.batch(*crf)["edge_marginals"], atol=1e-8)
    assert np.isfinite(inference.gamma(*crf, "mixing")).all()


@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_long_sequence_agrees_with_log_space(scale):
    """One sequence of 100,000 positions: finite, and equal to the log-space computation."""
    rng = np.random.default_rng(5)
    n, k = 100_000, 3
    unary = scale * rng.uniform(-1, 1, size=(n, k))
    transitions = rng.normal(size=(k, k))
    transitions[1, 1] = -np.inf
    start, end = np.zeros(k), np.zeros(k)
    log_z, marginals = inference.forward_backward(unary, [n], transitions, start, end)
    u, offsets, trans, s, e = chain_inference.check_chain(unary, [n], transitions, start, end)
    want_z, want_marg, _ = _chain.log_space_posterior(u, offsets, np.array([0]), trans[None], s, e)
    assert np.isfinite(log_z).all() and np.isfinite(marginals).all()
    np.testing.assert_allclose(log_z, want_z, rtol=1e-11)
    np.testing.assert_allclose(marginals, want_marg, atol=1e-9)


@pytest.mark.parametrize("rates", [True, False])
def test_sequences_past_the_cached_planes_agree_with_log_space(rates):
    """Sequences longer than the planes a chunk's sweeps keep (``_chain._CACHE_ENTRIES``).

    Past those positions the backward sweep gathers ``alpha`` and ``w``
    again; marginals, log Z and the mixing rates (of the sweep, or of the
    stored messages) equal the log-space computation's.
    """
    rng = np.random.default_rng(11)
    k = 3
    lengths = [1500, 900, 4, 1, 2]
    n = sum(lengths)
    assert lengths[0] > _chain._CACHE_ENTRIES // (k * _chain.CHUNK)
    unary = rng.normal(size=(n, k))
    transitions = rng.normal(size=(k, k))
    transitions[0, 2] = -np.inf
    start, end = rng.normal(size=(2, k))
    u, offsets, trans, s, e = chain_inference.check_chain(unary, lengths, transitions, start, end)
    post = chain_inference.posterior(u, offsets, trans, s, e, rates=rates)
    post.edge_gamma()  # the rates of the stored messages, where the sweep had none
    seqs = np.arange(len(lengths))
    want_z, want_marg, pairwise = _chain.log_space_posterior(u, offsets, seqs, trans[None], s, e)
    want_right, want_left = _chain.pairwise_rates(pairwise, offsets)
    np.testing.assert_allclose(post.log_z, want_z, rtol=1e-12)
    np.testing.assert_allclose(post.marg, want_marg, atol=1e-10)
    np.testing.assert_allclose(post.right, want_right, atol=1e-9)
    np.testing.assert_allclose(post.left, want_left, atol=1e-9)


def test_parallel_kernels_equal_serial_ones():
    """A batch above ``SERIAL_ROWS`` (prange kernels) equals its parts below it (serial ones)."""
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 9, size=2400)
    n, k = int(lengths.sum()), 4
    assert n >= _config.SERIAL_ROWS
    unary = 2.0 * rng.normal(size=(n, k))
    transitions = rng.normal(size=(n, k, k))
    transitions[:, 0, 1] = -np.inf
    start, end = rng.normal(size=(2, k))
    cut = len(lengths) // 2
    rows = int(lengths[:cut].sum())
    for name in ("forward_backward", "viterbi", "gamma", "edge_gamma", "edge_marginals"):
        fn = getattr(inference, name)
        whole = fn(unary, lengths, transitions, start, end)
        parts = [
            fn(unary[:rows], lengths[:cut], transitions[:rows], start, end),
            fn(unary[rows:], lengths[cut:], transitions[rows:], start, end),
        ]
        if name == "forward_backward":
            for i in range(2):
                np.testing.assert_allclose(whole[i], np.concatenate([p[i] for p in parts]), rtol=1e-13)
        else:
            np.testing.assert_allclose(whole, np.concatenate(parts), rtol=1e-13)


def test_log_z_exact_when_normalisers_are_tiny():
    """Scaled sweeps whose per-position normalisers fall below 1e-100 keep log Z exact.

    The sweep sums the logarithm of a running product of the normalisers;
    with node and transition scores ~1e3 apart a normaliser reaches ~1e-200
    (a product of two such would underflow) in the second sequence, which
    the scaled sweeps hold (the first goes to the log-space fallback).
    """
    rng = np.random.default_rng(2)
    k, lengths = 2, [5, 3]
    unary = np.round(1e3 * rng.uniform(-1, 1, size=(sum(lengths), k)), 1)
    transitions = np.round(1e3 * rng.uniform(-1, 1, size=(k, k)), 2)
    start, end = np.round(rng.uniform(-1e3, 1e3, size=(2, k)), 2)
    u, offsets, trans, s, e = chain_inference.check_chain(unary, lengths, transitions, start, end)
    post = chain_inference.posterior(u, offsets, trans, s, e)
    assert post.log_space.sequences.tolist() == [0]
    parts = naive.oracles(unary, lengths, transitions, start, end)
    np.testing.assert_allclose(post.log_z, [o.log_z for o in parts], rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        post.marginals(), np.concatenate([o.marginals for o in parts]), atol=1e-8
    )


def _label_score_inputs(seed=0, n_seq=5000, length=10, k=4):
    rng = np.random.default_rng(seed)
    lengths = np.full(n_seq, length, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    unary = rng.normal(size=(n_seq * length, k)).astype(np.float32)
    labels = rng.integers(0, k, size=unary.shape[0])
    transitions, start, end = rng.normal(size=(k, k)), rng.normal(size=k), rng.normal(size=k)
    return unary, lengths, offsets, labels, transitions, start, end


@pytest.mark.parametrize("layout", ["float32", "fortran"])
def test_path_scores_read_the_engines_margins_as_given(layout):
    unary, lengths, offsets, labels, transitions, start, end = _label_score_inputs(n_seq=40, length=4, k=3)
    given_u = unary if layout == "float32" else np.asfortranarray(unary, dtype=np.float64)
    wide = unary.astype(np.float64)
    expected = naive.batch_scores(wide, lengths, labels, transitions, start, end)
    got = chain_inference.path_scores(given_u, offsets, labels, transitions, start, end)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-10)
    node = np.add.reduceat(wide[np.arange(wide.shape[0]), labels], offsets[:-1])
    np.testing.assert_allclose(
        chain_inference.label_node_scores(given_u, offsets, labels), node, rtol=1e-12
    )


@pytest.mark.parametrize("which", ["path", "node"])
def test_label_scores_make_no_row_sized_temporaries(which):
    """A training-set metric and the adaptive step sum label scores of every row each round:
    a (n,) gather, an arange and edge indices per call were ~60 bytes a row (600 MB at
    10 million rows). Only the (m,) result may be allocated now."""
    import tracemalloc

    unary, _, offsets, labels, transitions, start, end = _label_score_inputs()
    call = {
        "path": lambda: chain_inference.path_scores(unary, offsets, labels, transitions, start, end),
        "node": lambda: chain_inference.label_node_scores(unary, offsets, labels),
    }[which]
    call()  # compiled before measuring
    tracemalloc.start()
    try:
        call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    m = offsets.shape[0] - 1
    assert peak < 8 * m + 16_384, (peak, unary.shape[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("k", [1, 3, 10, 26])
def test_node_softmax_is_the_rows_softmax(monkeypatch, dtype, order, k):
    """The edge-free marginals, read in place in any dtype and layout, against NumPy's softmax.

    Both drivers: serial, and ``prange`` (``SERIAL_ROWS`` 0) on two threads.
    """
    rng = np.random.default_rng(k)
    unary = np.asarray(rng.normal(0.0, 30.0, size=(257, k)), dtype=dtype, order=order)
    unary[0] = 700.0  # a row of equal huge scores
    unary[1, 0] = -700.0
    wide = unary.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    for serial_rows in (1 << 30, 0):
        monkeypatch.setattr(_config, "SERIAL_ROWS", serial_rows)
        with _config.threads(2):
            got = chain_inference.node_softmax(unary)
        assert got.dtype == np.float64 and got.shape == unary.shape
        np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-300)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-14)
