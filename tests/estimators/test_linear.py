"""LinearChainCRF against enumeration, finite differences and each of its solvers."""

import naive
import numpy as np
import pytest
import scipy.sparse
import xgboost as xgb

import structboost as sb
from structboost import majorize
from structboost.datasets import make_hmm_sequences
from structboost.estimators.linear import LinearChainCRF, LinearChainProblem

K = 3


def tiny(seed=0, n_seq=5, max_len=4, p=2, k=K):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=n_seq)
    n = int(lengths.sum())
    X = rng.normal(size=(n, p))
    X[rng.random(X.shape) < 0.4] = 0.0
    y = rng.integers(0, k, size=n)
    weights = rng.uniform(0.5, 2.0, size=n_seq)
    return X, y, lengths, weights


@pytest.fixture(scope="module")
def hmm():
    """Sticky-HMM data and a linear CRF fit on it."""
    X, y, lengths = make_hmm_sequences(n_sequences=30, length=(4, 9), stay=0.85, random_state=3)
    return X, y, lengths, LinearChainCRF(reg=1.0, max_iter=15).fit(X, y, lengths)


def brute_force_nll(X, y, lengths, weights, theta, reg, k=K):
    coef = theta[: (X.shape[1] + 1) * k].reshape(-1, k)
    trans = theta[(X.shape[1] + 1) * k :]
    unary = X @ coef[:-1] + coef[-1]
    transitions = trans[: k * k].reshape(k, k)
    start, end = trans[k * k : k * k + k], trans[k * k + k :]
    nll = naive.batch_nll(unary, lengths, y, transitions, start, end)
    return weights @ nll + 0.5 * reg * theta @ theta


def test_value_is_the_enumerated_nll_and_gradient_matches_finite_differences():
    X, y, lengths, weights = tiny()
    reg = 0.3
    problem = LinearChainProblem(X, y, lengths, K, reg, weights)
    theta = np.random.default_rng(1).normal(size=problem.dim)
    value, grad = problem.value_and_grad(theta)
    assert value == pytest.approx(brute_force_nll(X, y, lengths, weights, theta, reg), rel=1e-12)
    eps = 1e-6
    for direction in np.random.default_rng(2).normal(size=(4, problem.dim)):
        up, down = problem.value(theta + eps * direction), problem.value(theta - eps * direction)
        fd = (up - down) / (2 * eps)
        assert grad @ direction == pytest.approx(fd, abs=1e-6)


def test_bound_touches_and_majorizes_the_objective():
    X, y, lengths, weights = tiny(2)
    reg = 0.5
    problem = LinearChainProblem(X, y, lengths, K, reg, weights)
    rng = np.random.default_rng(3)
    theta0 = rng.normal(size=problem.dim)
    bound = problem.bound(theta0)
    value0, grad0 = problem.value_and_grad(theta0)

    def surrogate(theta):
        return bound.value(theta) - theta @ problem.observed_features + 0.5 * reg * theta @ theta

    assert surrogate(theta0) == pytest.approx(value0, rel=1e-12)
    bound_grad = bound.mu - problem.observed_features + reg * theta0
    np.testing.assert_allclose(bound_grad, grad0, atol=1e-10)
    for scale in (0.01, 0.3, 2.0):
        theta = theta0 + rng.normal(size=problem.dim) * scale
        assert surrogate(theta) >= problem.value(theta) - 1e-9


def test_solvers_reach_the_same_optimum_and_majorization_is_monotone():
    X, y, lengths, weights = tiny(4, n_seq=8)
    fits = {
        name: LinearChainCRF(solver=solver, reg=0.5, max_iter=max_iter, tol=1e-13, rank=rank).fit(
            X, y, lengths, weights
        )
        for name, solver, rank, max_iter in [
            ("lbfgs", "lbfgs", None, 200),
            ("majorize", "majorize", None, 300),
            ("low", "majorize", 4, 30),
        ]
    }
    best = fits["lbfgs"].history_[-1]
    assert fits["majorize"].history_[-1] == pytest.approx(best, rel=1e-9)
    np.testing.assert_allclose(fits["majorize"].coef_, fits["lbfgs"].coef_, atol=1e-3)
    np.testing.assert_allclose(
        fits["majorize"].transitions_.to_vector(), fits["lbfgs"].transitions_.to_vector(), atol=1e-3
    )
    for name in ("majorize", "low"):
        history = fits[name].history_
        assert np.all(np.diff(history) <= 1e-10 * np.abs(history[1:]))
        assert history[-1] < history[0]
        assert fits[name].history_seconds_.shape == history.shape


def test_majorize_streams_a_low_rank_bound_above_the_threshold(monkeypatch):
    X, y, lengths, weights = tiny(6)
    dense = LinearChainCRF(solver="majorize", reg=0.5, max_iter=5, tol=0.0).fit(X, y, lengths, weights)
    assert dense.rank_ is None
    monkeypatch.setattr(majorize.curvature, "LOW_RANK_DIM", dense.coef_.size)
    monkeypatch.setattr(majorize.curvature, "DEFAULT_RANK", 3)
    low = LinearChainCRF(solver="majorize", reg=0.5, max_iter=5, tol=0.0).fit(X, y, lengths, weights)
    assert low.rank_ == 3
    assert np.all(np.diff(low.history_) <= 1e-10 * np.abs(low.history_[1:]))
    assert low.history_[-1] < low.history_[0]
    assert low.history_[0] == pytest.approx(dense.history_[0])


def test_history_is_the_objective_of_the_iterates():
    X, y, lengths, weights = tiny(5)
    model = LinearChainCRF(solver="majorize", reg=1.0, max_iter=3, tol=0.0)
    model.fit(X, y, lengths, weights)
    problem = LinearChainProblem(X, y, lengths, K, 1.0, weights)
    theta = np.concatenate(
        [np.vstack([model.coef_, model.intercept_]).ravel(), model.transitions_.to_vector()]
    )
    assert model.n_iter_ == 3
    assert model.history_[-1] == pytest.approx(problem.value(theta), rel=1e-12)
    assert model.history_[0] == pytest.approx(problem.value(np.zeros(problem.dim)), rel=1e-12)


@pytest.mark.parametrize("solver", ["lbfgs", "majorize"])
def test_sparse_inputs_give_the_dense_fit(solver):
    X, y, lengths, weights = tiny(6)
    dense = LinearChainCRF(solver=solver, max_iter=6).fit(X, y, lengths, weights)
    sparse = LinearChainCRF(solver=solver, max_iter=6)
    sparse.fit(scipy.sparse.csr_matrix(X), y, lengths, weights)
    np.testing.assert_allclose(sparse.history_, dense.history_, rtol=1e-10)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-9)
    np.testing.assert_allclose(
        sparse.decision_function(scipy.sparse.csc_matrix(X)), dense.decision_function(X), atol=1e-9
    )


def test_predictions_use_the_fitted_chain(hmm):
    X, y, lengths, model = hmm
    unary = model.decision_function(X)
    assert unary.shape == (X.shape[0], K)
    p = model.transitions_
    want_path = sb.inference.viterbi(unary, lengths, p.transitions, p.start, p.end)
    np.testing.assert_array_equal(model.predict(X, lengths), want_path)
    marginals = model.predict_marginals(X, lengths)
    np.testing.assert_allclose(marginals.sum(axis=1), 1.0)
    assert (model.predict(X, lengths) == y).mean() > 0.6


def test_decision_function_is_a_base_margin_for_boosting(hmm):
    X, y, lengths, model = hmm
    margin = model.decision_function(X)
    dtrain = xgb.DMatrix(X, label=y, group=lengths, base_margin=margin)
    obj = sb.crf_objective(K)
    obj.crf.params = model.transitions_.copy()
    seen = []

    def first_margins(predt, dmat):
        if not seen:
            seen.append(np.array(predt))
        return obj(predt, dmat)

    log = {}
    xgb.train(
        sb.xgb_params(K, max_depth=2, eta=0.3),
        dtrain,
        num_boost_round=2,
        obj=first_margins,
        custom_metric=obj.metric,
        evals=[(dtrain, "train")],
        evals_result=log,
        verbose_eval=False,
        callbacks=[obj.callback()],
    )
    np.testing.assert_allclose(seen[0], margin, atol=1e-5)
    linear_nll = model.history_[-1] / lengths.size
    nll = log["train"]["crf-nll"]
    assert nll[-1] < nll[0] < linear_nll + 0.5


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"solver": "newton"}, "solver"),
        ({"reg": -1.0}, "reg"),
        ({"max_iter": 0}, "max_iter"),
        ({"rank": 3}, "rank only applies"),
        ({"solver": "majorize", "rank": 0}, "rank"),
        ({"solver": "majorize", "rank": 2, "reg": 0.0}, "reg > 0"),
    ],
)
def test_bad_settings_raise(settings, match):
    X, y, lengths, _ = tiny()
    with pytest.raises(ValueError, match=match):
        LinearChainCRF(**settings).fit(X, y, lengths)


def test_bad_data_raise():
    X, y, lengths, _ = tiny()
    with pytest.raises(ValueError, match="rows"):
        LinearChainCRF().fit(X[:-1], y, lengths)
    with pytest.raises(ValueError, match="NaN"):
        LinearChainCRF().fit(np.full_like(X, np.nan), y, lengths)
    with pytest.raises(ValueError, match="integer labels"):
        LinearChainCRF().fit(X, y.astype(float), lengths)
    wide = np.zeros((X.shape[0], 700))
    with pytest.raises(ValueError, match="solver='lbfgs'"):
        LinearChainCRF(solver="majorize", reg=0.0, num_labels=24).fit(wide, y, lengths)
    with pytest.raises(ValueError, match="not fitted"):
        LinearChainCRF().predict(X, lengths)
    model = LinearChainCRF(max_iter=2).fit(X, y, lengths)
    with pytest.raises(ValueError, match="features"):
        model.decision_function(X[:, :1])
