"""Self-tests of the brute-force oracle in ``naive.py``.

The oracle is checked against independent second references (a log-space
forward algorithm and a max-product recursion written here in plain numpy),
against closed forms (independent positions), and against the identities of
Chen et al. 2015 (Lemma 3.1, Lemma 3.2, Lemma 3.3, Theorems 4.1 and 4.2).
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from naive import ChainOracle, batch, batch_nll, batch_scores


def random_chain(seed, length, num_labels, scale=2.0, sticky=0.0):
    rng = np.random.default_rng(seed)
    unary = scale * rng.normal(size=(length, num_labels))
    transitions = scale * rng.normal(size=(num_labels, num_labels)) + sticky * np.eye(num_labels)
    start = scale * rng.normal(size=num_labels)
    end = scale * rng.normal(size=num_labels)
    return unary, transitions, start, end


def log_forward(unary, transitions, start, end):
    """Log-space forward algorithm: the textbook recursion, independent of enumeration."""
    alpha = start + unary[0]
    for t in range(1, len(unary)):
        alpha = np.logaddexp.reduce(alpha[:, None] + transitions, axis=0) + unary[t]
    return float(np.logaddexp.reduce(alpha + end))


def max_product(unary, transitions, start, end):
    """Best score by the max-product recursion."""
    best = start + unary[0]
    for t in range(1, len(unary)):
        best = np.max(best[:, None] + transitions, axis=0) + unary[t]
    return float(np.max(best + end))


chains = st.tuples(
    st.integers(0, 2**32 - 1),  # seed
    st.integers(1, 5),  # length
    st.integers(1, 4),  # num_labels
    st.sampled_from([0.3, 1.0, 2.5]),  # scale
    st.sampled_from([0.0, 3.0, 6.0]),  # sticky diagonal
)


@settings(max_examples=40, deadline=None)
@given(chains)
def test_log_z_and_map_match_recursions(chain):
    seed, length, num_labels, scale, sticky = chain
    unary, transitions, start, end = random_chain(seed, length, num_labels, scale, sticky)
    oracle = ChainOracle(unary, transitions, start, end)
    assert np.isclose(oracle.log_z, log_forward(unary, transitions, start, end), rtol=1e-12, atol=1e-12)
    assert np.isclose(oracle.map_score, max_product(unary, transitions, start, end), rtol=1e-12, atol=1e-12)
    assert np.isclose(oracle.score(oracle.map_labelling), oracle.map_score)
    assert oracle.nll(oracle.map_labelling) >= 0.0


def test_score_by_hand():
    unary = np.array([[1.0, 2.0], [3.0, 5.0], [7.0, 11.0]])
    transitions = np.array([[0.1, 0.2], [0.3, 0.4]])
    start = np.array([0.01, 0.02])
    end = np.array([0.001, 0.002])
    oracle = ChainOracle(unary, transitions, start, end)
    # y = (1, 0, 1): unary 2 + 3 + 11, start 0.02, transitions 0.3 + 0.2, end 0.002
    assert np.isclose(oracle.score([1, 0, 1]), 16.522)
    assert len(oracle.labellings) == 8


def test_independent_positions_closed_form():
    rng = np.random.default_rng(0)
    unary = rng.normal(size=(4, 3))
    start, end = rng.normal(size=3), rng.normal(size=3)
    oracle = ChainOracle(unary, np.zeros((3, 3)), start, end)
    effective = unary.copy()
    effective[0] += start
    effective[-1] += end
    softmax = np.exp(effective) / np.exp(effective).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(oracle.marginals, softmax, rtol=1e-12)
    np.testing.assert_allclose(oracle.log_z, np.log(np.exp(effective).sum(axis=1)).sum(), rtol=1e-12)
    # no coupling: only the same-position block of H is nonzero and gamma is 2 (Lemma 3.3)
    np.testing.assert_allclose(oracle.exact_node_gamma, 2.0, rtol=1e-10)
    np.testing.assert_allclose(oracle.mixing_node_gamma, 2.0, atol=1e-12)
    np.testing.assert_allclose(oracle.edge_marginals, softmax[:-1, :, None] * softmax[1:, None, :], atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(chains)
def test_marginals_consistent(chain):
    seed, length, num_labels, scale, sticky = chain
    oracle = ChainOracle(*random_chain(seed, length, num_labels, scale, sticky))
    np.testing.assert_allclose(oracle.marginals.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(oracle.edge_marginals.sum(axis=2), oracle.marginals[:-1], atol=1e-13)
    np.testing.assert_allclose(oracle.edge_marginals.sum(axis=1), oracle.marginals[1:], atol=1e-13)


@settings(max_examples=40, deadline=None)
@given(chains)
def test_node_covariance_rows(chain):
    seed, length, num_labels, scale, sticky = chain
    oracle = ChainOracle(*random_chain(seed, length, num_labels, scale, sticky))
    H = oracle.node_covariance
    p = oracle.marginals.ravel()
    L, K = length, num_labels
    np.testing.assert_allclose(H, H.T, atol=1e-15)
    np.testing.assert_allclose(np.diag(H), p * (1 - p), atol=1e-13)
    # labels of one position sum to one, so each row of H sums to zero within every position block
    np.testing.assert_allclose(H.reshape(L * K, L, K).sum(axis=2), 0.0, atol=1e-13)
    assert np.linalg.eigvalsh(H).min() > -1e-12
    # H_ij = P(y_t = k, y_s = l) - p_i p_j, pairs counted directly
    for t in range(L):
        for s in range(L):
            joint = np.zeros((K, K))
            for y, w in zip(oracle.labellings, oracle.probs):
                joint[y[t], y[s]] += w
            block = H[t * K : (t + 1) * K, s * K : (s + 1) * K]
            np.testing.assert_allclose(block, joint - np.outer(p[t * K : (t + 1) * K], p[s * K : (s + 1) * K]), atol=1e-13)


@settings(max_examples=40, deadline=None)
@given(chains)
def test_lemma_3_1_and_3_3(chain):
    seed, length, num_labels, scale, sticky = chain
    oracle = ChainOracle(*random_chain(seed, length, num_labels, scale, sticky))
    H = oracle.node_covariance
    p = oracle.marginals
    K = num_labels
    for t in range(length):
        for k in range(K):
            i = t * K + k
            tv = 0.5 * np.abs(oracle.conditional(t, k) - p).sum(axis=1)  # (L,)
            assert np.isclose(np.abs(H[i]).sum(), 2 * p[t, k] * tv.sum(), rtol=1e-9, atol=1e-13)
            # Lemma 3.3: the same-position block contributes 2 p_i (1 - p_i)
            block = np.abs(H[i, t * K : (t + 1) * K]).sum()
            assert np.isclose(block, 2 * p[t, k] * (1 - p[t, k]), rtol=1e-9, atol=1e-13)


@settings(max_examples=30, deadline=None)
@given(chains)
def test_lemma_3_2(chain):
    seed, length, num_labels, scale, sticky = chain
    oracle = ChainOracle(*random_chain(seed, length, num_labels, scale, sticky))
    K = num_labels
    H = oracle.edge_covariance
    pair = oracle.edge_marginals
    for i in range(H.shape[0]):
        t, rest = divmod(i, K * K)
        a, b = divmod(rest, K)
        keep = (oracle.labellings[:, t] == a) & (oracle.labellings[:, t + 1] == b)
        weights = oracle.probs[keep] / oracle.probs[keep].sum()
        conditional = (weights @ oracle.edge_indicators[keep]).reshape(length - 1, K, K)
        tv = 0.5 * np.abs(conditional - pair).sum(axis=(1, 2))
        assert np.isclose(np.abs(H[i]).sum(), 2 * pair[t, a, b] * tv.sum(), rtol=1e-9, atol=1e-13)


@settings(max_examples=60, deadline=None)
@given(chains)
def test_theorems_4_1_and_4_2_hold_on_oracle(chain):
    """The mixing bounds dominate the exact values; both computed by brute force."""
    seed, length, num_labels, scale, sticky = chain
    oracle = ChainOracle(*random_chain(seed, length, num_labels, scale, sticky))
    exact = oracle.exact_node_gamma
    mixing = oracle.mixing_node_gamma
    ok = ~np.isnan(exact)
    assert np.all(mixing[ok] >= exact[ok] - 1e-9)
    assert np.all(exact[ok] >= 2.0 - 1e-9)
    assert np.all(mixing <= 2.0 * length + 1e-12)
    exact_edge = oracle.exact_edge_gamma
    ok = ~np.isnan(exact_edge)
    assert np.all(oracle.mixing_edge_gamma[ok] >= exact_edge[ok] - 1e-9)


def test_mixing_gamma_by_hand():
    """Two positions: gamma = 2 (1 + alpha) with alpha from the pairwise conditional."""
    unary = np.zeros((2, 2))
    transitions = np.array([[2.0, 0.0], [0.0, 2.0]])
    oracle = ChainOracle(unary, transitions, np.zeros(2), np.zeros(2))
    # P(y_1 = j | y_0 = i) = e^2 / (e^2 + 1) on the diagonal: alpha = 1 - 2 / (e^2 + 1)
    alpha = 1.0 - 2.0 / (np.exp(2.0) + 1.0)
    np.testing.assert_allclose(oracle.mixing_node_gamma, 2.0 * (1.0 + alpha))
    np.testing.assert_allclose(oracle.mixing_edge_gamma, [6.0])
    # symmetric two-label chain: |H| row of (0, k) sums to 2 p(1-p) (1 + |corr|), corr = tanh(1)
    np.testing.assert_allclose(oracle.exact_node_gamma, 2.0 * (1.0 + np.tanh(1.0)))


def test_batch_shapes_and_padding():
    rng = np.random.default_rng(1)
    lengths = np.array([3, 1, 2])
    K = 3
    unary = rng.normal(size=(6, K))
    transitions, start, end = rng.normal(size=(K, K)), rng.normal(size=K), rng.normal(size=K)
    out = batch(unary, lengths, transitions, start, end)
    assert out["log_z"].shape == (3,)
    assert out["marginals"].shape == (6, K)
    assert out["edge_marginals"].shape == (6, K, K)
    last = np.cumsum(lengths) - 1
    np.testing.assert_array_equal(out["edge_marginals"][last], 0.0)
    np.testing.assert_array_equal(out["edge_gamma_exact"][last], 0.0)
    np.testing.assert_array_equal(out["gamma_length"], [6, 6, 6, 2, 4, 4])
    single = ChainOracle(unary[3:4], transitions, start, end)
    assert np.isclose(out["log_z"][1], single.log_z)
    scores = batch_scores(unary, lengths, out["map_labels"], transitions, start, end)
    np.testing.assert_allclose(scores, out["map_score"])
    np.testing.assert_allclose(batch_nll(unary, lengths, out["map_labels"], transitions, start, end), out["log_z"] - scores)


def test_finite_differences_on_oracle():
    unary, transitions, start, end = random_chain(3, 4, 3)
    oracle = ChainOracle(unary, transitions, start, end)
    eps = 1e-6

    def log_z(u=unary, tr=transitions, s=start, e=end):
        return ChainOracle(u, tr, s, e).log_z

    grad_unary = np.zeros_like(unary)
    for idx in np.ndindex(unary.shape):
        step = np.zeros_like(unary)
        step[idx] = eps
        grad_unary[idx] = (log_z(u=unary + step) - log_z(u=unary - step)) / (2 * eps)
    np.testing.assert_allclose(grad_unary, oracle.marginals, atol=1e-7)
    grad_trans = np.zeros_like(transitions)
    for idx in np.ndindex(transitions.shape):
        step = np.zeros_like(transitions)
        step[idx] = eps
        grad_trans[idx] = (log_z(tr=transitions + step) - log_z(tr=transitions - step)) / (2 * eps)
    np.testing.assert_allclose(grad_trans, oracle.edge_marginals.sum(axis=0), atol=1e-7)


def test_forbidden_labellings_get_zero_probability():
    unary, transitions, start, end = random_chain(11, 4, 3)
    transitions[0, 1] = transitions[2, 2] = -np.inf
    start[1] = -np.inf
    oracle = ChainOracle(unary, transitions, start, end)
    forbidden = oracle.labellings[:, 0] == 1
    for t in range(3):
        pairs = oracle.labellings[:, t : t + 2]
        forbidden |= ((pairs[:, 0] == 0) & (pairs[:, 1] == 1)) | ((pairs[:, 0] == 2) & (pairs[:, 1] == 2))
    np.testing.assert_array_equal(oracle.probs[forbidden], 0.0)
    assert np.isclose(oracle.probs.sum(), 1.0)
    assert np.isclose(oracle.log_z, log_forward(unary, transitions, start, end), rtol=1e-12)
    np.testing.assert_array_equal(oracle.edge_marginals[:, 0, 1], 0.0)
    # mixing rates stay defined: the minimum skips labels of zero probability
    assert np.all(np.isfinite(oracle.mixing_node_gamma))
    ok = ~np.isnan(oracle.exact_node_gamma)
    assert np.all(oracle.mixing_node_gamma[ok] >= oracle.exact_node_gamma[ok] - 1e-9)
