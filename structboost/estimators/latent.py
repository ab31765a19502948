"""Maximum latent conditional likelihood by majorization (Jebara & Choromanska 2012, section 4).

Each class ``y`` has ``m`` hidden states; with ``x~ = [x, 1]``,
``p(y | x) = sum_h exp(theta[y, h] @ x~) / sum_(y', h) exp(theta[y', h] @ x~)``.
The penalised latent log-likelihood ``l(theta)`` is not concave;
:class:`LatentLogLinearClassifier` maximizes it by the paper's monotone bound
update (Jensen below every numerator, Algorithm 1 above every ``log Z_j``), by
L-BFGS, or by generative EM (a Gaussian mixture per class, then conditioned).
"""

import time
import warnings
from numbers import Integral, Real
from typing import Any, TypeVar

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import majorize
from .._typing import ArrayLike, Floats
from .array_file import ArrayModelFile
from .base import keep_params
from .checks import Interval, Options, check_params
from .linear import fit_lbfgs, with_ones

__all__ = ["LatentLogLinearClassifier", "LatentProblem", "SOLVERS"]

SOLVERS = ("bound", "lbfgs", "em")
_SINGULAR_RIDGE = 1e-9  # relative ridge on the bound's curvature when reg = 0
_COVARIANCE_RIDGE = 1e-6  # relative to the mean variance, keeps EM's covariance invertible


class LatentProblem:
    """Penalized negative latent conditional log-likelihood ``f = -l`` and its bounds.

    Parameters
    ----------
    X : ndarray, shape (t, p)
    y : ndarray of int, shape (t,)
        Class indices ``0..C-1``.
    n_classes : int
    n_hidden : int
        ``m``, hidden states per class.
    reg : float
        L2 penalty ``>= 0``.

    Notes
    -----
    ``theta`` is the flattened ``(C, m, p + 1)`` array (last column: the
    biases ``nu``); outcome ``o = y m + h``.
    """

    def __init__(self, X, y, n_classes, n_hidden, reg):
        self.inputs = with_ones(np.asarray(X, dtype=np.float64))
        self.y = np.asarray(y, dtype=np.int64)
        self.n_classes = int(n_classes)
        self.n_hidden = int(n_hidden)
        self.reg = float(reg)
        self.n_outcomes = self.n_classes * self.n_hidden
        self.dim = self.n_outcomes * self.inputs.shape[1]
        # shape (t, m): the outcomes of each sample's own class
        self._own = self.y[:, None] * self.n_hidden + np.arange(self.n_hidden)

    def scores(self, theta):
        """``theta[y, h] @ x~_j`` for every sample and outcome, shape (t, C m)."""
        return self.inputs @ theta.reshape(self.n_outcomes, -1).T

    def _parts(self, theta):
        """Scores ``(t, C m)``, own-class scores ``(t, m)`` and their log-sum-exps ``(t,)``."""
        scores = self.scores(theta)
        own = np.take_along_axis(scores, self._own, axis=1)
        return scores, own, logsumexp(scores, axis=1), logsumexp(own, axis=1)

    def value(self, theta):
        """``f(theta)``: penalized negative latent log-likelihood, a float."""
        _, _, log_z, log_num = self._parts(theta)
        return float(np.sum(log_z - log_num) + 0.5 * self.reg * theta @ theta)

    def value_and_grad(self, theta):
        """``f(theta)`` and its gradient ``sum_j (p_j - eta_j) (x) x~_j + reg theta``, shape (d,)."""
        scores, own, log_z, log_num = self._parts(theta)
        weights = np.exp(scores - log_z[:, None])
        own_weights = np.take_along_axis(weights, self._own, 1) - np.exp(own - log_num[:, None])
        np.put_along_axis(weights, self._own, own_weights, 1)
        grad = (weights.T @ self.inputs).ravel() + self.reg * theta
        return float(np.sum(log_z - log_num) + 0.5 * self.reg * theta @ theta), grad

    def denominator_bound(self, theta):
        """Algorithm 1's QuadraticBound on ``sum_j log Z_j`` at ``theta`` (dense ``(d, d)``)."""
        log_z, prob, weights = majorize.outcome_curvature(self.scores(theta))  # weights (t, n, n)
        curvature = np.einsum("jab,jq,jr->aqbr", weights, self.inputs, self.inputs, optimize=True)
        mu = (prob.T @ self.inputs).ravel()
        return majorize.QuadraticBound(theta, float(log_z.sum()), mu, curvature.reshape(self.dim, self.dim))

    def numerator_bound(self, theta):
        """Jensen's bound ``theta' @ features (d,) + entropy`` on the summed log numerators."""
        _, own, _, log_num = self._parts(theta)
        log_eta = own - log_num[:, None]
        eta = np.exp(log_eta)
        weights = np.zeros((self.inputs.shape[0], self.n_outcomes))
        np.put_along_axis(weights, self._own, eta, 1)
        return (weights.T @ self.inputs).ravel(), float(-np.sum(eta * log_eta))

    def bound_step(self, theta):
        """One monotone update ``(d,)``: the maximizer of the minorizer of ``l`` at ``theta``."""
        features, _ = self.numerator_bound(theta)
        bound = self.denominator_bound(theta)
        if self.reg == 0:
            curvature = bound.curvature
            ridge = _SINGULAR_RIDGE * max(np.trace(curvature) / self.dim, 1e-300)
            curvature[np.diag_indices(self.dim)] += ridge
        return majorize.majorize_step(bound, features, self.reg)


_Self = TypeVar("_Self", bound="LatentLogLinearClassifier")


class LatentLogLinearClassifier(ArrayModelFile, ClassifierMixin, BaseEstimator):
    """Latent log-linear classifier (mixture of Gaussian-gated logistic regressions).

    Parameters
    ----------
    n_hidden : int
        ``m``, hidden states per class (``1``: multinomial logistic regression).
    solver : {"bound", "lbfgs", "em"}
        ``"bound"``: the monotone majorization update,
        ``O(t C^2 m^2 p^2 + (C m p)^3)`` per iteration. ``"lbfgs"``: L-BFGS-B.
        ``"em"``: EM on the joint likelihood, then conditioned (ignores ``reg``).
    reg : float
        L2 penalty ``>= 0`` on the summed log-likelihood.
    max_iter : int
    tol : float
        Stop when an iteration changes the objective by at most
        ``tol * max(1, |objective|)``.
    init_scale : float
        Standard deviation of the random start (breaks the symmetry between
        hidden states).
    random_state : int, RandomState or None

    Attributes
    ----------
    classes_ : ndarray, shape (C,)
    coef_ : ndarray, shape (C, m, p)
    intercept_ : ndarray, shape (C, m)
    history_ : ndarray, shape ``(n_iter_ + 1,)``
        Penalized latent log-likelihood at the start and after every iteration.
    history_seconds_ : ndarray, shape ``(n_iter_ + 1,)``
        Seconds since the start of :meth:`fit` at each value.
    n_iter_ : int
    n_features_in_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.preprocessing import scale
    >>> X, y = load_wine(return_X_y=True)
    >>> clf = LatentLogLinearClassifier(n_hidden=2, reg=1.0, random_state=0).fit(scale(X), y)
    >>> bool(clf.score(scale(X), y) > 0.95)
    True
    """

    def __init__(self, n_hidden: int = 2, solver: str = "bound", reg: float = 0.0,
                 max_iter: int = 100, tol: float = 1e-06, init_scale: float = 0.1,
                 random_state: Any = None) -> None:
        keep_params(self, locals())

    _param_checks = {
        "n_hidden": [Interval(Integral, 1, None)], "solver": [Options(*SOLVERS)],
        "reg": [Interval(Real, 0, None)], "max_iter": [Interval(Integral, 1, None)],
        "tol": [Interval(Real, 0, None)], "init_scale": [Interval(Real, 0, None, closed="neither")],
    }  # fmt: skip

    _fitted_arrays = {"coef_": ("C", "m", "p"), "intercept_": ("C", "m")}

    def _set_arrays(self, arrays):
        """Set the fitted attributes from checked arrays."""
        if arrays["coef_"].shape[0] != self.classes_.size:
            raise ValueError(f"the model file is damaged: {arrays['coef_'].shape[0]} classes of "
                             f"coefficients for {self.classes_.size} labels.")
        self.coef_ = np.ascontiguousarray(arrays["coef_"])
        self.intercept_ = arrays["intercept_"]
        self.n_features_in_ = self.coef_.shape[2]

    def fit(self: _Self, X: ArrayLike, y: ArrayLike) -> _Self:
        """Fit by the chosen solver to ``X (t, p)`` and class labels ``y (t,)``; returns self."""
        check_params(self, self._param_checks)
        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        problem = LatentProblem(X, y_index, self.classes_.size, self.n_hidden, self.reg)
        rng = check_random_state(self.random_state)
        clock = time.perf_counter()
        if self.solver == "em":
            theta, history, seconds = _fit_em(X, y_index, problem, self.max_iter, self.tol, rng, clock)
        else:
            theta0 = self.init_scale * rng.standard_normal(problem.dim)
            fit = _fit_bound if self.solver == "bound" else _fit_lbfgs
            theta, history, seconds = fit(problem, theta0, self.max_iter, self.tol, clock)
        theta = theta.reshape(self.classes_.size, int(self.n_hidden), -1)
        self.coef_ = np.ascontiguousarray(theta[:, :, :-1])
        self.intercept_ = theta[:, :, -1].copy()
        self.history_ = np.asarray(history, dtype=np.float64)
        self.history_seconds_ = np.asarray(seconds)
        self.n_iter_ = self.history_.size - 1
        return self

    def _joint_log_proba(self, X):
        """``log p(y, h | x)``, shape (t, C, m)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        scores = np.einsum("tp,chp->tch", X, self.coef_) + self.intercept_
        return scores - logsumexp(scores, axis=(1, 2), keepdims=True)

    def predict_log_proba(self, X: ArrayLike) -> Floats:
        """``log p(y | x)``, shape (t, C), columns in the order of ``classes_``."""
        return logsumexp(self._joint_log_proba(X), axis=2)

    def predict_proba(self, X: ArrayLike) -> Floats:
        """``p(y | x)``, shape (t, C), columns in the order of ``classes_``."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Most probable class of every row, shape (t,)."""
        log_proba = self.predict_log_proba(X)
        return self.classes_[np.argmax(log_proba, axis=1)]

    def log_likelihood(self, X: ArrayLike, y: ArrayLike) -> float:
        """Summed latent log-likelihood ``sum_j log p(y_j | x_j)`` (no penalty), a float.

        Labels unseen in training raise ``ValueError``.
        """
        log_proba = self.predict_log_proba(X)
        y = np.asarray(y)
        index = np.searchsorted(self.classes_, y)
        index = np.minimum(index, self.classes_.size - 1)
        if y.shape != (log_proba.shape[0],) or np.any(self.classes_[index] != y):
            raise ValueError("y must hold one training class label per row of X.")
        return float(log_proba[np.arange(y.size), index].sum())


def _converged(history, tol):
    """Whether the last step changed the objective by at most ``tol`` relative."""
    return abs(history[-1] - history[-2]) <= tol * max(1.0, abs(history[-1]))


def _fit_bound(problem, theta, max_iter, tol, clock):
    """Monotone bound updates: ``(theta, history, seconds)``."""
    history, seconds = [-problem.value(theta)], [time.perf_counter() - clock]
    for _ in range(max_iter):
        theta = problem.bound_step(theta)
        history.append(-problem.value(theta))
        seconds.append(time.perf_counter() - clock)
        if _converged(history, tol):
            break
    else:
        warnings.warn(f"the bound did not converge in max_iter = {max_iter} updates.", ConvergenceWarning)
    return theta, history, seconds


def _fit_lbfgs(problem, theta, max_iter, tol, clock):
    """L-BFGS-B: ``(theta, history, seconds)``."""
    result, history, seconds = fit_lbfgs(problem, theta, max_iter, tol, clock)
    if result.nit >= max_iter:
        warnings.warn(f"L-BFGS did not converge in max_iter = {max_iter} iterations.", ConvergenceWarning)
    return result.x, [-value for value in history], seconds


def _fit_em(X, y, problem, max_iter, tol, rng, clock):
    """EM for a Gaussian mixture per class, shared covariance: ``(theta, history, seconds)``."""
    t, p = X.shape
    c, m = problem.n_classes, problem.n_hidden
    responsibility = rng.dirichlet(np.ones(m), size=t)  # p(h | x_j, y_j)
    ridge = _COVARIANCE_RIDGE * max(float(np.mean(np.var(X, axis=0))), 1e-12) * np.eye(p)
    history, seconds, joint = [], [], []
    for _ in range(max_iter + 1):
        weights = np.zeros((t, c * m))
        np.put_along_axis(weights, problem._own, responsibility, 1)
        mass = weights.sum(axis=0)  # shape (C m,)
        means = (weights.T @ X) / np.maximum(mass, 1e-300)[:, None]
        centred = X[:, None, :] - means[problem._own]  # shape (t, m, p)
        covariance = np.einsum("jh,jhp,jhq->pq", responsibility, centred, centred) / t + ridge
        precision_means = np.linalg.solve(covariance, means.T).T  # shape (C m, p)
        with np.errstate(divide="ignore"):
            log_prior = np.log(mass / t)
        nu = log_prior - 0.5 * np.einsum("op,op->o", means, precision_means)
        theta = np.hstack([precision_means, nu[:, None]]).ravel()
        history.append(-problem.value(theta))
        seconds.append(time.perf_counter() - clock)
        # E step: log p(x_j, y_j, h) up to the shared Gaussian normalizer and x' S^-1 x / 2
        own_scores = np.take_along_axis(problem.scores(theta), problem._own, axis=1)
        quadratic = 0.5 * np.einsum("jp,jp->j", X, np.linalg.solve(covariance, X.T).T)
        _, log_det = np.linalg.slogdet(covariance)
        log_joint = logsumexp(own_scores, axis=1) - quadratic - 0.5 * log_det
        joint.append(float(log_joint.sum()))
        responsibility = np.exp(own_scores - logsumexp(own_scores, axis=1, keepdims=True))
        if len(joint) > 1 and _converged(joint, tol):
            break
    else:
        warnings.warn(f"EM did not converge in max_iter = {max_iter} steps.", ConvergenceWarning)
    return theta, history, seconds
