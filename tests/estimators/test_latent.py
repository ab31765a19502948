"""Latent conditional likelihood (structboost.estimators.latent) against brute force and finite differences."""

import doctest
import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import structboost as sb
from structboost.estimators import latent
from structboost.estimators.latent import LatentLogLinearClassifier, LatentProblem
from structboost.majorize import partition_bound

PROPERTY = settings(max_examples=20, deadline=None)
seeds = st.integers(0, 2**32 - 1)


def random_problem(rng, t, p, c, m, reg=0.0):
    X = rng.normal(size=(t, p)) * rng.uniform(0.3, 2.0)
    y = rng.integers(0, c, size=t)
    return LatentProblem(X, y, c, m, reg), rng.normal(size=c * m * (p + 1)) * rng.uniform(0.1, 2.0)


def brute_force(problem, theta):
    """Per-sample log Z_j and log numerator by explicit sums over every (y, h)."""
    c, m = problem.n_classes, problem.n_hidden
    blocks = theta.reshape(c, m, -1)
    log_z, log_num = [], []
    for x, y in zip(problem.inputs, problem.y):
        terms = {(a, h): blocks[a, h] @ x for a, h in itertools.product(range(c), range(m))}
        log_z.append(np.log(sum(np.exp(v) for v in terms.values())))
        log_num.append(np.log(sum(np.exp(terms[y, h]) for h in range(m))))
    return np.array(log_z), np.array(log_num)


@PROPERTY
@given(seed=seeds, c=st.integers(1, 3), m=st.integers(1, 3), p=st.integers(1, 3))
def test_bounds_sandwich_the_latent_likelihood(seed, c, m, p):
    """Denominator bound above log Z and Jensen numerator below, both tight at theta~."""
    rng = np.random.default_rng(seed)
    problem, theta0 = random_problem(rng, 6, p, c, m)
    bound = problem.denominator_bound(theta0)
    features, entropy = problem.numerator_bound(theta0)
    log_z, log_num = brute_force(problem, theta0)
    assert bound.log_z == pytest.approx(log_z.sum(), abs=1e-10)
    assert theta0 @ features + entropy == pytest.approx(log_num.sum(), abs=1e-10)
    assert problem.value(theta0) == pytest.approx(np.sum(log_z - log_num), abs=1e-10)
    for _ in range(60):
        theta = theta0 + rng.normal(size=theta0.size) * rng.choice([1e-3, 0.1, 1.0, 4.0])
        log_z, log_num = brute_force(problem, theta)
        assert bound.value(theta) >= log_z.sum() - 1e-9
        assert theta @ features + entropy <= log_num.sum() + 1e-9


def test_denominator_bound_is_algorithm_1_on_the_explicit_features():
    rng = np.random.default_rng(0)
    c, m, p = 3, 2, 2
    problem, theta = random_problem(rng, 5, p, c, m)
    features = np.zeros((5, c * m, c * m * (p + 1)))
    for o in range(c * m):
        features[:, o, o * (p + 1) : (o + 1) * (p + 1)] = problem.inputs
    log_z, mu, sigma = partition_bound(features, theta)
    bound = problem.denominator_bound(theta)
    assert bound.log_z == pytest.approx(log_z.sum(), abs=1e-12)
    np.testing.assert_allclose(bound.mu, mu.sum(axis=0), atol=1e-12)
    np.testing.assert_allclose(bound.curvature, sigma.sum(axis=0), atol=1e-12)


@PROPERTY
@given(seed=seeds, c=st.integers(1, 3), m=st.integers(1, 3), reg=st.sampled_from([0.0, 0.5]))
def test_gradient_matches_finite_differences(seed, c, m, reg):
    rng = np.random.default_rng(seed)
    problem, theta = random_problem(rng, 7, 2, c, m, reg)
    _, grad = problem.value_and_grad(theta)
    step = 1e-6
    numeric = np.array(
        [
            (problem.value(theta + step * e) - problem.value(theta - step * e)) / (2 * step)
            for e in np.eye(theta.size)
        ]
    )
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(seed=seeds, m=st.integers(1, 3), reg=st.sampled_from([0.0, 0.1, 2.0]))
def test_bound_iterations_never_decrease_the_latent_likelihood(seed, m, reg):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 2)) * 2.0
    y = (np.sin(X[:, 0]) + X[:, 1] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = LatentLogLinearClassifier(n_hidden=m, reg=reg, max_iter=25, random_state=seed % 1000).fit(X, y)
    history = clf.history_
    assert np.all(np.diff(history) >= -1e-9 * np.maximum(1.0, np.abs(history[1:])))
    assert history[-1] > history[0]


def test_solvers_reach_the_same_optimum_of_a_concave_problem():
    """With one hidden state the objective is concave: bound and L-BFGS agree."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    y = rng.integers(0, 3, size=60)
    fits = {
        solver: LatentLogLinearClassifier(n_hidden=1, solver=solver, reg=1.0, tol=1e-12, max_iter=500).fit(X, y)
        for solver in ("bound", "lbfgs")
    }
    assert fits["bound"].history_[-1] == pytest.approx(fits["lbfgs"].history_[-1], rel=1e-7)
    np.testing.assert_allclose(fits["bound"].predict_proba(X), fits["lbfgs"].predict_proba(X), atol=1e-5)


def test_em_conditions_the_fitted_gaussian_mixture():
    """EM's parameters give the Bayes posterior of its own mixture of Gaussians."""
    rng = np.random.default_rng(2)
    X = np.vstack([rng.normal(loc, 0.7, size=(25, 2)) for loc in ([0, 0], [3, 0], [0, 3], [3, 3])])
    y = np.repeat([0, 1, 1, 0], 25)
    clf = LatentLogLinearClassifier(n_hidden=2, solver="em", max_iter=200, tol=1e-10, random_state=0).fit(X, y)
    # recover the mixture from theta: precision-means and nu; rebuild it by one EM M step instead
    problem = LatentProblem(X, np.searchsorted(clf.classes_, y), 2, 2, 0.0)
    scores = problem.scores(np.concatenate([clf.coef_, clf.intercept_[..., None]], axis=2).ravel())
    responsibility = np.exp(
        np.take_along_axis(scores, problem._own, 1) - logsumexp(np.take_along_axis(scores, problem._own, 1), 1)[:, None]
    )
    weights = np.zeros((X.shape[0], 4))
    np.put_along_axis(weights, problem._own, responsibility, 1)
    means = (weights.T @ X) / weights.sum(axis=0)[:, None]
    centred = X[:, None, :] - means[problem._own]
    covariance = np.einsum("jh,jhp,jhq->pq", responsibility, centred, centred) / X.shape[0]
    prior = weights.sum(axis=0) / X.shape[0]
    joint = np.stack(
        [prior[o] * multivariate_normal(means[o], covariance).pdf(X) for o in range(4)], axis=1
    ).reshape(-1, 2, 2)
    bayes = joint.sum(axis=2) / joint.sum(axis=(1, 2))[:, None]
    np.testing.assert_allclose(clf.predict_proba(X), bayes, atol=1e-3)
    assert clf.score(X, y) > 0.9


def test_hidden_states_fit_the_xor_that_one_state_cannot():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    one = LatentLogLinearClassifier(n_hidden=1, reg=1.0, max_iter=300, random_state=0).fit(X, y)
    two = LatentLogLinearClassifier(n_hidden=2, reg=1.0, max_iter=300, random_state=0).fit(X, y)
    assert one.score(X, y) < 0.7
    assert two.score(X, y) > 0.9
    assert two.log_likelihood(X, y) > one.log_likelihood(X, y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_probabilities_and_log_likelihood_agree():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 3))
    y = np.array(["a", "b", "c", "d"])[rng.integers(0, 4, size=40)]
    clf = LatentLogLinearClassifier(n_hidden=2, reg=0.5, max_iter=20, random_state=0).fit(X, y)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    index = np.searchsorted(clf.classes_, y)
    assert clf.log_likelihood(X, y) == pytest.approx(np.log(proba[np.arange(40), index]).sum())
    assert clf.log_likelihood(X, y) - 0.25 * np.sum(clf.coef_**2) - 0.25 * np.sum(clf.intercept_**2) == (
        pytest.approx(clf.history_[-1])
    )
    assert set(clf.predict(X)) <= set(clf.classes_)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_exported_and_documented():
    assert sb.LatentLogLinearClassifier is LatentLogLinearClassifier
    assert doctest.testmod(latent).failed == 0


@pytest.mark.parametrize(
    "params, message",
    [
        ({"solver": "newton"}, "solver"),
        ({"n_hidden": 0}, "n_hidden"),
        ({"reg": -1.0}, "reg"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"init_scale": 0.0}, "init_scale"),
    ],
)
def test_bad_settings_raise_a_clear_error(params, message):
    with pytest.raises(ValueError, match=message):
        LatentLogLinearClassifier(**params).fit(np.zeros((4, 1)), [0, 1, 0, 1])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_log_likelihood_refuses_unknown_labels():
    clf = LatentLogLinearClassifier(max_iter=2).fit(np.eye(4), [0, 1, 0, 1])
    with pytest.raises(ValueError, match="training class"):
        clf.log_likelihood(np.eye(4), [0, 1, 2, 1])


@parametrize_with_checks([LatentLogLinearClassifier(max_iter=30, random_state=0)])
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
