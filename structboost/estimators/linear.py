"""A linear-chain CRF whose node scores are linear in the inputs.

``unary[t, k] = x_t @ coef[:, k] + intercept[k]`` and the transition, start
and end scores, ``theta = [[coef; intercept].ravel(), transitions.ravel(),
start, end]`` (``d = (p + 1) K + K^2 + 2K``), fit together on the penalised
NLL ``sum_i w_i (log Z_i - score_i) + reg / 2 ||theta||^2`` by L-BFGS or the
majorization steps of Jebara & Choromanska (2012). Its node scores are a
booster's starting point (``base_model``).
"""

import time
from numbers import Integral, Real
from typing import Any, TypeVar

import numpy as np
import scipy.sparse
from scipy.optimize import minimize
from sklearn.base import BaseEstimator

from .. import inference
from .. import majorize
from .._typing import ArrayLike, Floats, Ints
from ..objectives.chain import SequenceBatch
from ..transitions.chain import TransitionParams, TransitionProblem
from .array_file import ArrayModelFile
from .base import keep_params
from .checks import Interval, Options, check_params

__all__ = ["LINEAR_SOLVERS", "LinearChainCRF", "LinearChainProblem"]

LINEAR_SOLVERS = ("lbfgs", "majorize")
_MAX_BOUND_DIM = 16384  # two d x d float64 matrices of 2 GiB each


def _check_inputs(X):
    """``X`` as float64: a C-contiguous array or a CSR matrix, finite, 2-D."""
    if scipy.sparse.issparse(X):
        X = scipy.sparse.csr_matrix(X, dtype=np.float64)
        values = X.data
    else:
        X = np.ascontiguousarray(X, dtype=np.float64)
        values = X
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (rows, features); got shape {X.shape}.")
    if not np.isfinite(values).all():
        raise ValueError("X contains NaN or inf; impute or drop those values first.")
    return X


def with_ones(X):
    """``[X, 1]``: inputs with a constant column for the intercepts."""
    ones = np.ones((X.shape[0], 1))
    if scipy.sparse.issparse(X):
        return scipy.sparse.hstack([X, ones], format="csr")
    return np.hstack([X, ones])


def fit_lbfgs(problem, theta, max_iter, tol, clock):
    """L-BFGS-B on ``problem.value_and_grad`` from ``theta``.

    Returns
    -------
    result : scipy.optimize.OptimizeResult
    history, seconds : list of float
        ``problem.value`` and the seconds since ``clock`` at the start and after every iteration.
    """
    history, seconds = [problem.value(theta)], [time.perf_counter() - clock]

    def record(x):
        """Note the objective and the seconds after an iteration."""
        history.append(problem.value(x))
        seconds.append(time.perf_counter() - clock)

    result = minimize(problem.value_and_grad, theta, jac=True, method="L-BFGS-B", callback=record,
                      options={"maxiter": int(max_iter), "ftol": tol, "gtol": 0.0})
    return result, history, seconds


class LinearChainProblem:
    """Penalised NLL of a linear-chain CRF in all its parameters (a majorization ``BoundTerm``).

    Parameters
    ----------
    X : ndarray or scipy sparse matrix, shape (n, p)
        Inputs of all rows, sequences contiguous.
    labels : array_like of int, shape (n,)
    lengths : array_like of int, shape (m,)
    num_labels : int
    reg : float
        L2 penalty on every parameter.
    weights : array_like, shape (m,), optional

    Attributes
    ----------
    dim : int
        ``d = (p + 1) K + K^2 + 2K``.
    observed_features : ndarray, shape (d,)
    observed_score : float
        0 (no fixed base scores).
    """

    observed_score = 0.0

    def __init__(self, X, labels, lengths, num_labels, reg, weights=None):
        inputs = with_ones(_check_inputs(X))
        if inputs.shape[0] != len(labels):
            raise ValueError(f"X has {inputs.shape[0]} rows but there are {len(labels)} labels; "
                             "they must match.")
        k = int(num_labels)
        batch = SequenceBatch.build(labels, lengths, k, weights)
        if not reg >= 0:
            raise ValueError(f"reg must be >= 0, got {reg!r}.")
        self.inputs = inputs
        self.batch = batch
        self.num_labels = k
        self.reg = float(reg)
        self.dim = inputs.shape[1] * k + k * k + 2 * k
        row_weight = np.repeat(batch.seq_weight, batch.lengths)
        self._rows = np.arange(inputs.shape[0])
        self._row_weight = row_weight
        gold = np.zeros((inputs.shape[0], k))
        gold[self._rows, batch.labels] = row_weight
        self.observed_features = np.concatenate([np.asarray(inputs.T @ gold).ravel(), batch.counts])
        self._last = None

    def split(self, theta):
        """Split ``theta (d,)`` into ``coef (p + 1, K)`` (last row: intercepts) and transitions."""
        k = self.num_labels
        node = self.inputs.shape[1] * k
        return theta[:node].reshape(-1, k), TransitionParams.from_vector(theta[node:], k)

    def unary(self, theta):
        """Node scores ``(n, K)`` at ``theta``."""
        return np.asarray(self.inputs @ self.split(theta)[0])

    def value_and_grad(self, theta):
        """Penalised NLL and its exact gradient ``(d,)``; the last evaluation is cached."""
        theta = np.asarray(theta, dtype=np.float64)
        if self._last is not None and np.array_equal(self._last[0], theta):
            return self._last[1], self._last[2].copy()
        coef, params = self.split(theta)
        unary = np.asarray(self.inputs @ coef)
        b = self.batch
        problem = TransitionProblem(unary, b.offsets, b.seq_weight, b.counts, 0.0)
        transition_value, transition_grad = problem.value_and_grad(params.to_vector())
        residual = problem.posterior(params).marginals() * self._row_weight[:, None]
        residual[self._rows, b.labels] -= self._row_weight
        gold_score = self._row_weight @ unary[self._rows, b.labels]
        value = transition_value - gold_score + 0.5 * self.reg * theta @ theta
        node_grad = np.asarray(self.inputs.T @ residual).ravel()
        grad = np.concatenate([node_grad, transition_grad]) + self.reg * theta
        self._last = (theta.copy(), float(value), grad)
        return float(value), grad.copy()

    def value(self, theta):
        """Penalised NLL at ``theta``."""
        return self.value_and_grad(theta)[0]

    def bound(self, theta, rank=None):
        """Algorithm 3's QuadraticBound on the summed ``log Z`` at ``theta (d,)`` (low ``rank``)."""
        coef, params = self.split(theta)
        b = self.batch
        log_z, mu, curvature = majorize.linear_chain_bound(
            self.inputs, b.lengths, coef, params.transitions, params.start, params.end,
            weights=b.seq_weight, rank=rank,
        )  # fmt: skip
        return majorize.QuadraticBound(theta, float(b.seq_weight @ log_z), mu, curvature)


_Self = TypeVar("_Self", bound="LinearChainCRF")


class LinearChainCRF(ArrayModelFile, BaseEstimator):
    """Linear-chain CRF with linear node scores, fit by L-BFGS or majorization.

    Parameters
    ----------
    solver : {"lbfgs", "majorize"}
        ``"lbfgs"``: scipy's L-BFGS-B on the exact NLL and gradient.
        ``"majorize"``: Jebara & Choromanska (2012) bound steps, monotone;
        ``d^2`` memory, low rank (``structboost.majorize.DEFAULT_RANK``) above
        ``structboost.majorize.LOW_RANK_DIM`` parameters with ``reg > 0``.
    reg : float
        L2 penalty on every parameter, on the summed NLL; ``> 0`` with ``rank``.
    max_iter : int
    tol : float
        Stop when an iteration lowers the objective by at most
        ``tol * max(1, |f|)``.
    rank : int, optional
        ``solver="majorize"`` only: the bound's curvature at this rank plus a
        diagonal (Algorithm 4), ``O(d rank)`` memory, a looser bound.
    num_labels : int, optional
        ``K``; by default one more than the largest training label.

    Attributes
    ----------
    coef_ : ndarray, shape (p, K)
    intercept_ : ndarray, shape (K,)
    transitions_ : TransitionParams
    num_labels_ : int
    history_ : ndarray, shape ``(n_iter_ + 1,)``
        Penalised NLL at the start and after every iteration.
    history_seconds_ : ndarray, shape ``(n_iter_ + 1,)``
        Seconds since the start of :meth:`fit` at each value.
    n_iter_ : int
    rank_ : int or None
        Rank of the curvature of ``solver="majorize"``.

    Notes
    -----
    ``save_model(path)`` / ``load_model(path)`` write and read the fitted
    model as JSON (without the history). Sparse inputs stay sparse.
    ``XGBCRFClassifier(base_model=LinearChainCRF(...))`` boosts from it.
    """

    def __init__(self, solver: str = "lbfgs", reg: float = 1.0, max_iter: int = 100,
                 tol: float = 1e-07, rank: int | None = None,
                 num_labels: int | None = None) -> None:
        keep_params(self, locals())

    _fitted_arrays = {
        "coef_": ("p", "K"), "intercept_": ("K",),
        "transitions": ("K", "K"), "start": ("K",), "end": ("K",),
    }  # fmt: skip

    def _arrays(self):
        """The fitted arrays by name."""
        p = self.transitions_
        return {"coef_": self.coef_, "intercept_": self.intercept_,
                "transitions": p.transitions, "start": p.start, "end": p.end}  # fmt: skip

    def _set_arrays(self, arrays):
        """Set the fitted attributes from checked arrays."""
        self.coef_ = np.ascontiguousarray(arrays["coef_"])
        self.intercept_ = arrays["intercept_"]
        self.transitions_ = TransitionParams(arrays["transitions"], arrays["start"], arrays["end"])
        self.num_labels_ = self.intercept_.shape[0]

    _param_checks = {
        "solver": [Options(*LINEAR_SOLVERS)], "reg": [Interval(Real, 0, None)],
        "max_iter": [Interval(Integral, 1, None)], "rank": [None, Interval(Integral, 1, None)],
    }  # fmt: skip

    def fit(self: _Self, X: Any, y: ArrayLike, lengths: ArrayLike,
            sample_weight: ArrayLike | None = None) -> _Self:
        """Fit all parameters to ``X (n, p)`` (array or sparse), labels ``y (n,)`` in 0..K-1 and
        ``lengths (m,)``, with one ``sample_weight`` per sequence.
        """
        check_params(self, self._param_checks)
        if self.rank is not None and self.solver != "majorize":
            raise ValueError('rank only applies to solver="majorize"; leave it None for L-BFGS.')
        if self.rank is not None and not self.reg > 0:
            raise ValueError("a low-rank curvature needs reg > 0; pass a positive reg or rank=None.")
        y = np.asarray(y)
        if self.num_labels is not None:
            k = int(self.num_labels)
        elif y.size and y.dtype.kind in "iu":
            k = int(y.max()) + 1
        else:
            raise ValueError("y must hold integer labels 0..K-1 (or pass num_labels).")
        problem = LinearChainProblem(X, y, lengths, k, self.reg, sample_weight)
        rank = None
        if self.solver == "majorize":
            rank = self.rank if self.rank is not None else majorize.default_rank(problem.dim, self.reg)
        if self.solver == "majorize" and rank is None and problem.dim > _MAX_BOUND_DIM:
            raise ValueError(
                f"the dense majorization bound keeps d x d matrices and d = {problem.dim} parameters "
                f"here (more than {_MAX_BOUND_DIM}); pass reg > 0 (low-rank bound) or use solver='lbfgs'."
            )
        theta0 = np.zeros(problem.dim)
        clock = time.perf_counter()
        seconds = []

        def record(*_):
            """Note the seconds since the start."""
            seconds.append(time.perf_counter() - clock)

        if self.solver == "majorize":
            theta, history = majorize.fit_majorize([problem], theta0, self.reg, self.max_iter,
                                                   self.tol, rank, record)
        else:
            result, history, seconds = fit_lbfgs(problem, theta0, self.max_iter, self.tol, clock)
            theta = result.x
        coef, params = problem.split(theta)
        self.coef_ = np.ascontiguousarray(coef[:-1])
        self.intercept_ = coef[-1].copy()
        self.transitions_ = params
        self.num_labels_ = k
        self.history_ = np.asarray(history, dtype=np.float64)
        self.history_seconds_ = np.asarray(seconds)
        self.n_iter_ = self.history_.size - 1
        self.rank_ = rank
        return self

    def _check_fitted(self, X):
        """``X`` checked against the fitted model."""
        if not hasattr(self, "coef_"):
            raise ValueError("this LinearChainCRF is not fitted yet; call fit first.")
        X = _check_inputs(X)
        if X.shape[1] != self.coef_.shape[0]:
            raise ValueError(
                f"X has {X.shape[1]} features but the model was fit on {self.coef_.shape[0]}."
            )
        return X

    def decision_function(self, X: Any) -> Floats:
        """Node scores ``X @ coef_ + intercept_``, shape (n, K): a booster's ``base_margin``."""
        X = self._check_fitted(X)
        return np.asarray(X @ self.coef_) + self.intercept_

    def predict(self, X: Any, lengths: ArrayLike) -> Ints:
        """Viterbi labels ``(n,)`` of every sequence."""
        unary = self.decision_function(X)
        p = self.transitions_
        return inference.viterbi(unary, lengths, p.transitions, p.start, p.end)

    def predict_marginals(self, X: Any, lengths: ArrayLike) -> Floats:
        """Posterior marginals ``P(y_t = k | x)``, shape (n, K)."""
        unary = self.decision_function(X)
        p = self.transitions_
        return inference.forward_backward(unary, lengths, p.transitions, p.start, p.end)[1]
