"""Tests of structboost.majorize against brute-force enumeration and finite differences."""

import doctest
import functools
import itertools

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from majorize_reference import LogLinearTerm, junction_chain_bound
from structboost import majorize
from structboost.majorize import _bound
from structboost.majorize import (
    ChainCRFTerm,
    LowRankCurvature,
    chain_bound,
    chain_features,
    curvature_coefficient,
    fit_majorize,
    linear_chain_bound,
    majorize_step,
    partition_bound,
)

ATOL = 1e-9
PROPERTY = settings(max_examples=25, deadline=None)
seeds = st.integers(0, 2**32 - 1)


# ---------------------------------------------------------------- oracles


def log_partition(features, base_scores, theta):
    """Exact log Z by enumeration, features (n, d)."""
    return logsumexp(base_scores + features @ theta)


def gibbs_moments(features, base_scores, theta):
    """Exact gradient and Hessian of log Z by enumeration."""
    p = np.exp(base_scores + features @ theta - log_partition(features, base_scores, theta))
    mean = p @ features
    centred = features - mean
    return mean, (centred * p[:, None]).T @ centred


def crf_enumeration(unary, num_labels):
    """All labellings of one sequence: features (K^T, K^2 + 2K) and base scores (K^T,)."""
    length = unary.shape[0]
    k = num_labels
    labellings = np.array(list(itertools.product(range(k), repeat=length)), dtype=np.int64)
    features = np.zeros((labellings.shape[0], k * k + 2 * k))
    rows = np.arange(labellings.shape[0])
    for t in range(1, length):
        np.add.at(features, (rows, labellings[:, t - 1] * k + labellings[:, t]), 1.0)
    features[rows, k * k + labellings[:, 0]] += 1.0
    features[rows, k * k + k + labellings[:, -1]] += 1.0
    base = unary[np.arange(length), labellings].sum(axis=1)
    return labellings, features, base


def split(theta, k):
    return theta[: k * k].reshape(k, k), theta[k * k : k * k + k], theta[k * k + k :]


def min_bound_gap(rng, theta0, log_z, mu, sigma, exact_log_z, draws=200):
    """Smallest bound minus log Z over random parameters at several distances."""
    gaps = []
    for _ in range(draws):
        theta = theta0 + rng.normal(size=theta0.size) * rng.choice([1e-3, 0.1, 1.0, 5.0])
        delta = theta - theta0
        gaps.append(log_z + delta @ mu + 0.5 * delta @ sigma @ delta - exact_log_z(theta))
    return min(gaps)


def assert_psd_dominates(upper, lower, rtol=1e-9):
    gap = np.linalg.eigvalsh(upper - lower).min()
    assert gap >= -rtol * max(1.0, np.abs(upper).max())


def random_problem(rng, n, d):
    features = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0)
    base = rng.normal(size=n) * 2.0
    theta = rng.normal(size=d)
    return features, base, theta


LINEAR_CHAINS = dict(
    seed=seeds,
    k=st.integers(1, 3),
    p=st.integers(0, 3),
    lengths=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    curvature=st.sampled_from(["shared", "paper"]),
)


def random_linear_chain(rng, k, p, lengths):
    """Sparse-ish inputs (n, p), coef (p, K), transitions (K^2 + 2K,) and sequence weights."""
    n = sum(lengths)
    X = rng.normal(size=(n, p)) * (rng.random((n, p)) < 0.7)
    return X, rng.normal(size=(p, k)), rng.normal(size=k * k + 2 * k), rng.uniform(0.0, 2.0, size=len(lengths))


def random_chain(rng, k, lengths):
    unary = rng.normal(size=(int(np.sum(lengths)), k)) * 2.0
    theta = rng.normal(size=k * k + 2 * k)
    return unary, theta


# ---------------------------------------------------------------- the coefficient


def test_coefficient_limits_and_symmetry():
    assert curvature_coefficient(0.0) == 0.25
    assert curvature_coefficient(np.inf) == 0.0
    assert curvature_coefficient(-np.inf) == 0.0
    x = np.array([1e-8, 1e-4, 0.5, 3.0, 40.0, 1e5])
    np.testing.assert_array_equal(curvature_coefficient(x), curvature_coefficient(-x))
    np.testing.assert_allclose(curvature_coefficient(x[2:]), np.tanh(x[2:] / 2) / (2 * x[2:]), rtol=1e-15)


def test_coefficient_is_continuous_across_the_series_cutoff():
    x = np.linspace(0.5e-2, 2e-2, 301)
    direct = np.tanh(x / 2) / (2 * x)
    np.testing.assert_allclose(curvature_coefficient(x), direct, rtol=1e-13)
    assert np.all(np.diff(curvature_coefficient(x)) < 0)


# ---------------------------------------------------------------- Algorithm 1


@PROPERTY
@given(seed=seeds, n=st.integers(1, 6), d=st.integers(1, 4))
def test_partition_bound_is_tight_and_valid(seed, n, d):
    rng = np.random.default_rng(seed)
    features, base, theta0 = random_problem(rng, n, d)
    log_z, mu, sigma = partition_bound(features, theta0, base)
    exact = functools.partial(log_partition, features, base)
    assert log_z == pytest.approx(exact(theta0), abs=1e-12)
    gradient, hessian = gibbs_moments(features, base, theta0)
    np.testing.assert_allclose(mu, gradient, atol=1e-12)
    step = 1e-5
    finite_difference = [
        (exact(theta0 + step * e) - exact(theta0 - step * e)) / (2 * step) for e in np.eye(d)
    ]
    np.testing.assert_allclose(mu, finite_difference, atol=1e-7)
    np.testing.assert_allclose(sigma, sigma.T, atol=1e-12)
    assert_psd_dominates(sigma, hessian)  # a bound tight at theta~ must curve at least as much
    assert min_bound_gap(rng, theta0, log_z, mu, sigma, exact) >= -ATOL


def paper_algorithm_1(features, theta, base_scores):
    """Algorithm 1 transcribed line by line (z in linear space; moderate scores only)."""
    z, mu, sigma = 0.0, np.zeros(features.shape[1]), np.zeros((features.shape[1],) * 2)
    for f, h in zip(features, np.exp(base_scores)):
        alpha = h * np.exp(theta @ f)
        deviation = f - mu
        if z > 0:
            sigma += curvature_coefficient(np.log(alpha / z)) * np.outer(deviation, deviation)
        mu += alpha / (z + alpha) * deviation
        z += alpha
    return np.log(z), mu, sigma


@pytest.mark.parametrize("n", [1, 2, 7, 255, 256, 257, 600])
def test_partition_bound_is_the_sequential_algorithm(n):
    rng = np.random.default_rng(n)
    features, base, theta = random_problem(rng, n, 3)
    for got, want in zip(partition_bound(features, theta, base), paper_algorithm_1(features, theta, base)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_partition_bound_of_two_outcomes_is_jaakkola_jordan():
    # log(e^0 + e^x) at x~ = 2: curvature tanh(1) / 4
    _, mu, sigma = partition_bound(np.array([[0.0], [1.0]]), np.array([2.0]))
    assert mu[0] == pytest.approx(1 / (1 + np.exp(-2.0)))
    assert sigma[0, 0] == pytest.approx(np.tanh(1.0) / 4.0)


@pytest.mark.parametrize("n, where", [(5, [0, 2, 5]), (300, [0] * 300 + [150, 300])])
def test_zero_weight_outcomes_drop_out(n, where):
    rng = np.random.default_rng(3)
    features, base, theta = random_problem(rng, n, 3)
    padded_features = np.insert(features, where, rng.normal(size=(len(where), 3)), axis=0)
    padded_base = np.insert(base, where, -np.inf)
    padded = partition_bound(padded_features, theta, padded_base)
    for got, want in zip(padded, partition_bound(features, theta, base)):
        np.testing.assert_allclose(got, want, atol=1e-13)


def test_extreme_scores_stay_finite_and_valid():
    rng = np.random.default_rng(4)
    features = rng.normal(size=(6, 2))
    base = np.array([800.0, -800.0, 0.0, 799.0, 1e-14, -1e-14])
    theta0 = np.zeros(2)
    log_z, mu, sigma = partition_bound(features, theta0, base)
    assert np.isfinite(log_z) and np.all(np.isfinite(mu)) and np.all(np.isfinite(sigma))
    exact = functools.partial(log_partition, features, base)
    assert min_bound_gap(rng, theta0, log_z, mu, sigma, exact) >= -1e-9


def test_batched_partition_bound_equals_single_problems():
    rng = np.random.default_rng(5)
    features = rng.normal(size=(4, 5, 3))
    base = rng.normal(size=(4, 5))
    theta = rng.normal(size=3)
    log_z, mu, sigma = partition_bound(features, theta, base)
    for j in range(4):
        single = partition_bound(features[j], theta, base[j])
        assert log_z[j] == pytest.approx(single[0])
        np.testing.assert_allclose(mu[j], single[1], atol=1e-14)
        np.testing.assert_allclose(sigma[j], single[2], atol=1e-14)


def test_docstring_examples():
    result = doctest.testmod(majorize.partition, extraglobs={"np": np})
    assert result.attempted and not result.failed


# ---------------------------------------------------------------- Algorithm 3


@PROPERTY
@given(seed=seeds, k=st.integers(1, 3), length=st.integers(1, 4))
def test_junction_chain_matches_enumeration(seed, k, length):
    rng = np.random.default_rng(seed)
    d = 3
    node_features = rng.normal(size=(length, k, d))
    edge_features = rng.normal(size=(length - 1, k, k, d))
    node_scores = rng.normal(size=(length, k))
    edge_scores = rng.normal(size=(length - 1, k, k))
    theta0 = rng.normal(size=d)
    labellings = np.array(list(itertools.product(range(k), repeat=length)))
    positions = np.arange(length)
    features = np.array(
        [
            node_features[positions, y].sum(0) + edge_features[positions[:-1], y[:-1], y[1:]].sum(0)
            for y in labellings
        ]
    )
    base = np.array(
        [
            node_scores[positions, y].sum() + edge_scores[positions[:-1], y[:-1], y[1:]].sum()
            for y in labellings
        ]
    )
    exact = functools.partial(log_partition, features, base)
    enumerated = partition_bound(features, theta0, base)
    _, hessian = gibbs_moments(features, base, theta0)
    sigmas = {}
    for curvature in ("shared", "paper"):
        log_z, mu, sigma = junction_chain_bound(
            node_features, edge_features, theta0, node_scores, edge_scores, curvature
        )
        assert log_z == pytest.approx(enumerated[0], abs=1e-11)
        np.testing.assert_allclose(mu, enumerated[1], atol=1e-11)
        assert_psd_dominates(sigma, hessian)
        assert min_bound_gap(rng, theta0, log_z, mu, sigma, exact, draws=100) >= -ATOL
        sigmas[curvature] = sigma
    assert_psd_dominates(sigmas["paper"], sigmas["shared"])


@PROPERTY
@given(seed=seeds, k=st.integers(1, 3), lengths=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_chain_bound_matches_enumeration(seed, k, lengths):
    rng = np.random.default_rng(seed)
    unary, theta0 = random_chain(rng, k, lengths)
    weights = rng.uniform(0.0, 2.0, size=len(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    problems = [crf_enumeration(unary[a:b], k)[1:] for a, b in zip(offsets[:-1], offsets[1:])]

    def exact(theta):
        return sum(w * log_partition(f, h, theta) for w, (f, h) in zip(weights, problems))

    moments = [gibbs_moments(f, h, theta0) for f, h in problems]
    gradient = sum(w * g for w, (g, _) in zip(weights, moments))
    hessian = sum(w * h for w, (_, h) in zip(weights, moments))
    sigmas = {}
    for curvature in ("shared", "paper"):
        log_z, mu, sigma = chain_bound(
            unary, lengths, *split(theta0, k), weights=weights, curvature=curvature
        )
        np.testing.assert_allclose(log_z, [log_partition(f, h, theta0) for f, h in problems], atol=1e-11)
        np.testing.assert_allclose(mu, gradient, atol=1e-10)
        assert_psd_dominates(sigma, hessian)
        assert min_bound_gap(rng, theta0, weights @ log_z, mu, sigma, exact, draws=100) >= -ATOL
        sigmas[curvature] = sigma
    assert_psd_dominates(sigmas["paper"], sigmas["shared"])
    for rank in (1, 3):  # Algorithm 4: streamed at low rank, still above the dense curvature and log Z
        log_z, mu, low = chain_bound(unary, lengths, *split(theta0, k), weights=weights, rank=rank)
        assert low.basis.shape[0] <= rank
        assert_psd_dominates(low.to_dense(), sigmas["shared"])
        assert min_bound_gap(rng, theta0, weights @ log_z, mu, low.to_dense(), exact, draws=100) >= -ATOL


@PROPERTY
@given(
    seed=seeds,
    k=st.integers(1, 3),
    length=st.integers(1, 4),
    curvature=st.sampled_from(["shared", "paper"]),
)
def test_chain_bound_is_junction_chain_bound_with_indicator_features(seed, k, length, curvature):
    rng = np.random.default_rng(seed)
    unary, theta = random_chain(rng, k, [length])
    d = k * k + 2 * k
    node_features = np.zeros((length, k, d))
    node_features[0, np.arange(k), k * k + np.arange(k)] = 1.0
    node_features[-1, np.arange(k), k * k + k + np.arange(k)] += 1.0
    edge_features = np.zeros((length - 1, k, k, d))
    edge_features[:, np.arange(k)[:, None], np.arange(k)[None, :], np.arange(k * k).reshape(k, k)] = 1.0
    general = junction_chain_bound(node_features, edge_features, theta, unary, curvature=curvature)
    special = chain_bound(unary, [length], *split(theta, k), curvature=curvature)
    assert special[0][0] == pytest.approx(general[0], abs=1e-12)
    np.testing.assert_allclose(special[1], general[1], atol=1e-12)
    np.testing.assert_allclose(special[2], general[2], atol=1e-10, rtol=1e-12)


def indicator_features(inputs, k):
    """Dense node and edge features of a linear-chain CRF in linear_chain_bound's layout."""
    length, p = inputs.shape
    d = p * k + k * k + 2 * k
    labels = np.arange(k)
    node = np.zeros((length, k, d))
    node[:, labels[None, :], np.arange(p)[:, None] * k + labels] = inputs[:, :, None]
    node[0, labels, p * k + k * k + labels] += 1.0
    node[-1, labels, p * k + k * k + k + labels] += 1.0
    edge = np.zeros((length - 1, k, k, d))
    edge[:, labels[:, None], labels[None, :], p * k + np.arange(k * k).reshape(k, k)] = 1.0
    return node, edge


@PROPERTY
@given(**LINEAR_CHAINS)
def test_linear_chain_bound_is_the_junction_tree_bound(seed, k, p, lengths, curvature):
    rng = np.random.default_rng(seed)
    X, coef, trans, weights = random_linear_chain(rng, k, p, lengths)
    theta = np.concatenate([coef.ravel(), trans])
    log_z, mu, sigma = linear_chain_bound(X, lengths, coef, *split(trans, k), weights=weights, curvature=curvature)
    want_mu, want_sigma = 0.0, 0.0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for j, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        single = junction_chain_bound(*indicator_features(X[a:b], k), theta, curvature=curvature)
        assert log_z[j] == pytest.approx(single[0], abs=1e-11)
        want_mu = want_mu + weights[j] * single[1]
        want_sigma = want_sigma + weights[j] * single[2]
    np.testing.assert_allclose(mu, want_mu, atol=1e-10)
    np.testing.assert_allclose(sigma, want_sigma, atol=1e-9, rtol=1e-11)
    sparse = linear_chain_bound(
        scipy.sparse.csr_matrix(X), lengths, coef, *split(trans, k), weights=weights, curvature=curvature
    )
    for got, want in zip(sparse, (log_z, mu, sigma)):
        np.testing.assert_allclose(got, want, atol=1e-12)


@PROPERTY
@given(**LINEAR_CHAINS)
def test_streamed_low_rank_bound_at_full_rank_is_the_dense_bound(seed, k, p, lengths, curvature):
    rng = np.random.default_rng(seed)
    X, coef, trans, weights = random_linear_chain(rng, k, p, lengths)
    trans[rng.random(trans.size) < 0.2] = -np.inf  # forbidden moves
    trans[k * k : k * k + k][np.all(trans[k * k : k * k + k] == -np.inf)] = 0.0  # some start allowed
    trans[k * k + k :][np.all(trans[k * k + k :] == -np.inf)] = 0.0
    dense = linear_chain_bound(X, lengths, coef, *split(trans, k), weights=weights, curvature=curvature)
    d = dense[2].shape[0]
    log_z, mu, low = linear_chain_bound(
        X, lengths, coef, *split(trans, k), weights=weights, curvature=curvature, rank=d, batch_size=2
    )
    np.testing.assert_allclose(log_z, dense[0], atol=1e-12)
    np.testing.assert_allclose(mu, dense[1], atol=1e-12)
    assert isinstance(low, LowRankCurvature) and low.basis.shape[0] <= d
    np.testing.assert_allclose(low.to_dense(), dense[2], atol=1e-9 * max(1.0, np.abs(dense[2]).max()))


def test_streamed_low_rank_linear_chain_bound_majorizes_and_keeps_memory_low():
    rng = np.random.default_rng(4)
    k, p, lengths = 3, 6, [3, 5, 2, 4]
    X = rng.normal(size=(sum(lengths), p))
    theta0 = rng.normal(size=p * k + k * k + 2 * k)

    def parts(theta):
        return theta[: p * k].reshape(p, k), *split(theta[p * k :], k)

    def exact(theta):
        return linear_chain_bound(X, lengths, *parts(theta))[0].sum()

    _, _, dense = linear_chain_bound(X, lengths, *parts(theta0))
    log_z, mu, low = linear_chain_bound(X, lengths, *parts(theta0), rank=5)
    assert low.basis.shape == (5, theta0.size) and low.diagonal.shape == (theta0.size,)
    assert_psd_dominates(low.to_dense(), dense)
    assert min_bound_gap(rng, theta0, log_z.sum(), mu, low.to_dense(), exact) >= -ATOL


def test_low_rank_curvature_take_is_the_principal_submatrix():
    rng = np.random.default_rng(2)
    curvature = LowRankCurvature(6, 2)
    curvature.add_factors(rng.normal(size=(5, 6)))
    keep = np.array([True, False, True, True, False, True])
    part = curvature.take(keep)
    np.testing.assert_allclose(part.to_dense(), curvature.to_dense()[np.ix_(keep, keep)], atol=1e-12)
    x = rng.normal(size=4)
    np.testing.assert_allclose(part.solve(part.matvec(x), 0.5), x - 0.5 * part.solve(x, 0.5), atol=1e-10)


def test_default_rank_switches_at_the_documented_threshold():
    assert majorize.default_rank(majorize.LOW_RANK_DIM, 1.0) is None
    assert majorize.default_rank(majorize.LOW_RANK_DIM + 1, 1.0) == majorize.DEFAULT_RANK
    assert majorize.default_rank(majorize.LOW_RANK_DIM + 1, 0.0) is None


@PROPERTY
@given(seed=seeds, n=st.integers(1, 7), scale=st.sampled_from([0.1, 3.0, 300.0]), absent=st.floats(0.0, 0.6))
def test_curvature_kernel_is_the_running_mean_product(seed, n, scale, absent):
    rng = np.random.default_rng(seed)
    log_alpha = rng.normal(size=(3, 2, n)) * scale
    log_alpha[rng.random(log_alpha.shape) < absent] = -np.inf
    log_alpha[..., rng.integers(n)] = rng.normal()  # every problem keeps an outcome
    weights = rng.uniform(0.5, 2.0, size=3)
    log_z, prob = np.empty((3, 2)), np.empty((3, 2, n))
    blocks, block_sum = np.empty((3, n, 2, n)), np.empty((3, n, n))
    _bound.running_curvature(log_alpha, weights, log_z, prob, blocks, block_sum)
    want_log_z, want_prob, want = majorize.outcome_curvature(log_alpha)
    want = weights[:, None, None, None] * want
    np.testing.assert_allclose(log_z, want_log_z, rtol=1e-14)
    np.testing.assert_allclose(prob, want_prob, atol=1e-15)
    np.testing.assert_allclose(blocks.transpose(0, 2, 1, 3), want.transpose(0, 1, 3, 2), atol=1e-13)
    np.testing.assert_allclose(block_sum, blocks.sum(axis=2), atol=1e-13)


@pytest.mark.parametrize("scale", [1e2, 1e4])
def test_chain_bound_with_huge_scores(scale):
    rng = np.random.default_rng(12)
    k, lengths = 3, [4, 1, 3]
    unary, theta0 = random_chain(rng, k, lengths)
    unary *= scale
    theta0 *= scale / 10
    log_z, mu, sigma = chain_bound(unary, lengths, *split(theta0, k))
    assert np.all(np.isfinite(log_z)) and np.all(np.isfinite(mu)) and np.all(np.isfinite(sigma))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    problems = [crf_enumeration(unary[a:b], k)[1:] for a, b in zip(offsets[:-1], offsets[1:])]
    np.testing.assert_allclose(log_z, [log_partition(f, h, theta0) for f, h in problems], rtol=1e-12)
    np.testing.assert_allclose(mu, sum(gibbs_moments(f, h, theta0)[0] for f, h in problems), atol=1e-9)

    def exact(theta):
        return sum(log_partition(f, h, theta) for f, h in problems)

    assert min_bound_gap(rng, theta0, log_z.sum(), mu, sigma, exact) >= -1e-9 * scale


def test_chain_bound_ignores_batching_and_order():
    rng = np.random.default_rng(6)
    k, lengths = 3, np.array([3, 1, 4, 3, 2, 4, 3])
    unary, theta = random_chain(rng, k, lengths)
    reference = chain_bound(unary, lengths, *split(theta, k))
    small_batches = chain_bound(unary, lengths, *split(theta, k), batch_size=2)
    order = rng.permutation(lengths.size)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    shuffled_unary = np.concatenate([unary[offsets[j] : offsets[j + 1]] for j in order])
    shuffled = chain_bound(shuffled_unary, lengths[order], *split(theta, k))
    for other, permutation in ((small_batches, np.arange(lengths.size)), (shuffled, order)):
        np.testing.assert_allclose(other[0], reference[0][permutation], atol=1e-12)
        np.testing.assert_allclose(other[1], reference[1], atol=1e-11)
        np.testing.assert_allclose(other[2], reference[2], atol=1e-10)


def test_paper_curvature_grows_with_length_and_shared_does_not_explode():
    rng = np.random.default_rng(7)
    k = 4
    traces = {"shared": [], "paper": []}
    for length in (2, 4, 6):
        unary, theta = random_chain(rng, k, [length])
        for curvature in traces:
            sigma = chain_bound(unary, [length], *split(theta, k), curvature=curvature)[2]
            traces[curvature].append(np.trace(sigma))
    assert traces["paper"][-1] > k**3 * traces["paper"][0]
    assert traces["shared"][-1] < 10 * traces["shared"][0]


def test_chain_features_count_the_enumerated_features():
    rng = np.random.default_rng(8)
    k, lengths = 3, [2, 1, 4]
    labels = rng.integers(0, k, size=sum(lengths))
    weights = np.array([0.5, 2.0, 1.5])
    want = np.zeros(k * k + 2 * k)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for w, a, b in zip(weights, offsets[:-1], offsets[1:]):
        labellings, features, _ = crf_enumeration(np.zeros((b - a, k)), k)
        want += w * features[np.flatnonzero((labellings == labels[a:b]).all(axis=1))[0]]
    np.testing.assert_allclose(chain_features(labels, lengths, k, weights), want)


# ---------------------------------------------------------------- Algorithm 4


@PROPERTY
@given(seed=seeds, d=st.integers(1, 8), count=st.integers(1, 30), rank=st.integers(1, 5))
def test_low_rank_curvature_is_an_upper_bound(seed, d, count, rank):
    rng = np.random.default_rng(seed)
    factors = rng.normal(size=(count, d)) * rng.uniform(0.1, 2.0, size=(count, 1))
    curvature = LowRankCurvature(d, rank)
    curvature.add_factors(factors)
    exact = factors.T @ factors
    dense = curvature.to_dense()
    assert curvature.basis.shape[0] <= rank
    assert_psd_dominates(dense, exact)
    if min(count, d) <= rank:
        np.testing.assert_allclose(dense, exact, atol=1e-10)
    gram = curvature.basis @ curvature.basis.T
    np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=1e-10)
    rhs = rng.normal(size=d)
    want = np.linalg.solve(dense + 0.7 * np.eye(d), rhs)
    np.testing.assert_allclose(curvature.solve(rhs, 0.7), want, rtol=1e-8)
    compressed = LowRankCurvature.from_dense(exact, rank)
    assert_psd_dominates(compressed.to_dense(), exact)


def test_low_rank_from_a_large_dense_curvature_uses_its_top_directions():
    rng = np.random.default_rng(13)
    factors = rng.normal(size=(40, 600)) * rng.uniform(0.1, 3.0, size=(40, 1))
    sigma = factors.T @ factors
    compressed = LowRankCurvature.from_dense(sigma, 5)  # Lanczos: d > 512, rank < d / 4
    np.testing.assert_allclose(compressed.scales, np.linalg.eigvalsh(sigma)[::-1][:5], rtol=1e-8)
    assert_psd_dominates(compressed.to_dense(), sigma)


def test_low_rank_add_merges_two_curvatures():
    rng = np.random.default_rng(9)
    first, second = LowRankCurvature(6, 3), LowRankCurvature(6, 3)
    a, b = rng.normal(size=(5, 6)), rng.normal(size=(4, 6))
    first.add_factors(a)
    second.add_factors(b)
    first.add(second)
    assert_psd_dominates(first.to_dense(), a.T @ a + b.T @ b)


# ---------------------------------------------------------------- majorization


def logistic_term(rng, problems, classes, inputs, base=False):
    x = rng.normal(size=(problems, inputs))
    features = np.einsum("cy,ti->tyci", np.eye(classes), x).reshape(problems, classes, classes * inputs)
    observed = rng.integers(0, classes, size=problems)
    base_scores = rng.normal(size=(problems, classes)) if base else None
    return LogLinearTerm(features, observed, base_scores, weights=rng.uniform(0.5, 1.5, size=problems))


def nll(term, theta, lam):
    """Exact penalized NLL of a LogLinearTerm by enumeration."""
    log_z = logsumexp(term.base_scores + term.features @ theta, axis=1)
    observed = theta @ term.observed_features + term.observed_score
    return term.weights @ log_z - observed + 0.5 * lam * theta @ theta


def assert_monotone(history):
    assert np.all(np.diff(history) <= 1e-10 * np.maximum(1.0, np.abs(history[1:])))


@settings(max_examples=15, deadline=None)
@given(seed=seeds, rank=st.sampled_from([None, 1, 3]), lam=st.sampled_from([1e-2, 1.0]))
def test_majorization_is_monotone_and_reaches_the_optimum(seed, rank, lam):
    rng = np.random.default_rng(seed)
    terms = [logistic_term(rng, 12, 3, 2, base=True), logistic_term(rng, 5, 3, 2)]
    d = terms[0].dim
    theta0 = rng.normal(size=d)

    def objective(theta):
        return nll(terms[0], theta, lam) + nll(terms[1], theta, 0.0)

    max_iter = 200 if rank is None else 20
    theta, history = fit_majorize(terms, theta0, lam, max_iter=max_iter, tol=1e-13, rank=rank)
    assert history[0] == pytest.approx(objective(theta0))
    assert history[-1] == pytest.approx(objective(theta))
    assert_monotone(history)
    assert history[-1] < history[0]
    if rank is None:
        best = scipy.optimize.minimize(objective, theta0, method="BFGS", options={"gtol": 1e-10})
        assert history[-1] <= best.fun + 1e-6 * max(1.0, abs(best.fun))


@PROPERTY
@given(
    seed=seeds,
    lengths=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    rank=st.sampled_from([None, 2]),
)
def test_crf_majorization_is_monotone(seed, lengths, rank):
    rng = np.random.default_rng(seed)
    k = 3
    unary, theta0 = random_chain(rng, k, lengths)
    labels = rng.integers(0, k, size=unary.shape[0])
    weights = rng.uniform(0.5, 2.0, size=len(lengths))
    term = ChainCRFTerm(unary, lengths, labels, weights)
    lam = 0.1
    offsets = np.concatenate([[0], np.cumsum(lengths)])

    def objective(theta):
        total = 0.5 * lam * theta @ theta
        for w, a, b in zip(weights, offsets[:-1], offsets[1:]):
            labellings, features, base = crf_enumeration(unary[a:b], k)
            gold = np.flatnonzero((labellings == labels[a:b]).all(axis=1))[0]
            total += w * (log_partition(features, base, theta) - features[gold] @ theta - base[gold])
        return total

    theta, history = fit_majorize([term], theta0, lam, max_iter=25, tol=0.0, rank=rank)
    assert history[0] == pytest.approx(objective(theta0))
    assert history[-1] == pytest.approx(objective(theta))
    assert_monotone(history)
    assert history[-1] < history[0] or np.isclose(history[0], history[-1])


def test_crf_majorization_converges_to_the_penalized_optimum():
    rng = np.random.default_rng(10)
    k, lengths = 3, [4, 2, 3, 5, 1]
    unary, _ = random_chain(rng, k, lengths)
    labels = rng.integers(0, k, size=unary.shape[0])
    term = ChainCRFTerm(unary, lengths, labels)
    lam = 0.5

    def objective_and_gradient(theta):
        bound = term.bound(theta)
        value = bound.log_z - theta @ term.observed_features - term.observed_score + 0.5 * lam * theta @ theta
        return value, bound.mu - term.observed_features + lam * theta

    theta, history = fit_majorize([term], np.zeros(term.dim), lam, max_iter=500, tol=1e-14)
    best = scipy.optimize.minimize(
        objective_and_gradient, np.zeros(term.dim), jac=True, method="L-BFGS-B", options={"gtol": 1e-10}
    )
    assert history[-1] == pytest.approx(best.fun, rel=1e-8)
    assert np.linalg.norm(objective_and_gradient(theta)[1]) < 1e-4


@PROPERTY
@given(seed=seeds, scale=st.sampled_from([0.1, 3.0, 30.0]))
def test_single_step_never_increases_the_objective(seed, scale):
    rng = np.random.default_rng(seed)
    term = logistic_term(rng, 8, 4, 3, base=True)
    theta = rng.normal(size=term.dim) * scale
    for lam in (0.0, 0.3):
        for rank in (None, 2):
            if rank is not None and lam == 0.0:
                continue
            bound = term.bound(theta, rank)
            new = majorize_step(bound, term.observed_features, lam)
            assert nll(term, new, lam) <= nll(term, theta, lam) + 1e-10 * max(1.0, abs(nll(term, theta, lam)))


def test_bound_value_matches_the_components():
    rng = np.random.default_rng(11)
    term = logistic_term(rng, 6, 3, 2)
    theta0 = rng.normal(size=term.dim)
    theta = theta0 + rng.normal(size=term.dim)
    dense, low = term.bound(theta0), term.bound(theta0, rank=2)
    exact = nll(term, theta, 0.0) + theta @ term.observed_features + term.observed_score
    assert dense.value(theta0) == pytest.approx(dense.log_z)
    assert dense.value(theta) >= exact - 1e-10
    assert low.value(theta) >= dense.value(theta) - 1e-10


# ---------------------------------------------------------------- input validation


def zero_chain(rows, lengths, k=2, **options):
    return chain_bound(np.zeros((rows, k)), lengths, np.zeros((k, k)), np.zeros(k), np.zeros(k), **options)


def tiny_term():
    return LogLinearTerm(np.zeros((1, 2, 1)), [0])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: partition_bound(np.zeros((0, 2)), np.zeros(2)), "n >= 1"),
        (lambda: partition_bound(np.zeros((3, 2)), np.zeros(3)), "theta has 3 entries"),
        (lambda: partition_bound(np.full((3, 2), np.nan), np.zeros(2)), "NaN"),
        (lambda: partition_bound(np.zeros((2, 1)), np.zeros(1), [-np.inf, -np.inf]), "every outcome"),
        (lambda: zero_chain(4, [2, 1]), "sum to 3"),
        (lambda: zero_chain(2, [2, 0]), "empty"),
        (lambda: chain_bound(np.zeros((2, 2)), [2], np.zeros((3, 3)), np.zeros(2), np.zeros(2)), "K = 2"),
        (lambda: zero_chain(2, [2], curvature="x"), "curvature"),
        (lambda: zero_chain(2, [2], weights=[-1.0]), "non-negative"),
        (lambda: zero_chain(300, [300], k=26, curvature="paper"), "overflows"),
        (lambda: zero_chain(2, [2], batch_size=0), "batch_size"),
        (lambda: linear_chain_bound(np.zeros((2, 3)), [2], np.zeros((2, 2)), *split(np.zeros(8), 2)), "coef has 2"),
        (lambda: linear_chain_bound(np.full((2, 1), np.inf), [2], np.zeros((1, 2)), *split(np.zeros(8), 2)), "X holds"),
        (lambda: chain_features([0, 2], [2], 2), "0..1"),
        (lambda: chain_features([0, 1], [3], 2), "2 labels"),
        (lambda: LogLinearTerm(np.zeros((2, 3, 1)), [0, 3]), "0..2"),
        (lambda: LogLinearTerm(np.zeros((1, 2, 1)), [1], [[0.0, -np.inf]]), "observed outcome"),
        (lambda: LowRankCurvature(3, 0), "rank"),
        (lambda: fit_majorize([], np.zeros(1), 1.0), "empty"),
        (lambda: fit_majorize([tiny_term()], np.zeros(1), 0.0, rank=1), "lam > 0"),
        (lambda: fit_majorize([tiny_term()], np.zeros(2), 1.0), "dimension"),
        (lambda: majorize_step(tiny_term().bound(np.zeros(1)), np.zeros(1), -1.0), "lam must be >= 0"),
    ],
)
def test_bad_input_raises_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
