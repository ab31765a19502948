"""Multi-label classification with label trees: independent, Chow-Liu and ESS-CRF.

Each example with ``L`` labels becomes a tree instance of ``L`` binary rows
whose features are the example's followed by the one-hot label identity, so
one booster scores every label. Structures: ``"independent"`` (no edges),
``"chow-liu"`` (one maximum spanning tree of the training mutual information)
and ``"ess"`` (evidence-specific trees, Chechetka & Guestrin 2010: pair models
``P(y_i, y_j | x)`` of the ``max_pairs`` pairs of highest mutual information
weigh each input's edges by ``I(y_i; y_j | x)``, the others by ``1e-6`` times
the training one; training structures use out-of-fold predictions). Trees are
rooted at label 0.
"""

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import xgboost as xgb
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted

from .._typing import ArrayLike, Floats, Ints
from ..engines.model_io import field
from ..engines.xgboost import booster_from_json
from ..objectives.params import DEFAULTS, TREE_SOLVERS, fill_doc
from ._docs import VERBOSE
from ._spanning import maximum_spanning_parents
from .base import BoostedCRFClassifier, all_or_nothing, keep_params
from .checks import BOOSTING, Options
from .tree import TreeCRFClassifier

STRUCTURES = ("independent", "chow-liu", "ess")
EDGE_TYPINGS = ("pair", "shared")
PAIRWISE = ("xgboost", "logistic")


# ----------------------------------------------------------------------------- structure


def mutual_information(joint):
    """Mutual information of binary pairs from their joint probabilities.

    Parameters
    ----------
    joint : (..., 4) array-like
        ``P(y_i, y_j)`` in the order ``00, 01, 10, 11`` (rows sum to one).

    Returns
    -------
    (...) float64
    """
    p = np.asarray(joint, dtype=np.float64)
    p = p.reshape(*p.shape[:-1], 2, 2)
    outer = p.sum(-1, keepdims=True) * p.sum(-2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p / outer), 0.0)
    return np.maximum(terms.sum(axis=(-2, -1)), 0.0)


def check_label_matrix(Y):
    """``(n, L)`` int64 0/1 indicators with ``L >= 1``, or a clear error."""
    arr = np.asarray(Y)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise ValueError(f"Y must be an (n_examples, n_labels) 0/1 matrix; got shape {arr.shape}.")
    if not np.isin(arr, (0, 1)).all():
        raise ValueError("Y must hold only 0 and 1 (label absent / present).")
    return arr.astype(np.int64)


def label_pair_joints(Y, alpha=1.0):
    """Joint frequencies ``(L, L, 4)`` (00, 01, 10, 11) of every label pair, ``alpha`` per cell."""
    y = check_label_matrix(Y).astype(np.float64)
    n = y.shape[0]
    n11 = y.T @ y
    n1 = y.sum(axis=0)
    n10 = n1[:, None] - n11
    n01 = n1[None, :] - n11
    n00 = n - n11 - n10 - n01
    counts = np.stack((n00, n01, n10, n11), axis=-1) + alpha
    return counts / (n + 4.0 * alpha)


def label_mutual_information(Y, alpha=1.0):
    """Training mutual information of every label pair, ``(L, L)`` with zero diagonal."""
    mi = mutual_information(label_pair_joints(Y, alpha))
    mi = 0.5 * (mi + mi.T)
    np.fill_diagonal(mi, 0.0)
    return mi


def spanning_tree_parents(weights):
    """Maximum spanning tree of one or many label graphs, as parents rooted at label 0.

    Parameters
    ----------
    weights : (L, L) or (m, L, L) array-like
        Symmetric edge weights (finite or ``-inf``); the diagonal is ignored.

    Returns
    -------
    (L,) or (m, L) int64
        Parent label of every label, ``-1`` for label 0.
    """
    w = np.asarray(weights, dtype=np.float64)
    single = w.ndim == 2
    if single:
        w = w[None]
    if w.ndim != 3 or w.shape[1] != w.shape[2] or w.shape[1] < 1:
        raise ValueError(f"weights must be (L, L) or (m, L, L); got shape {np.shape(weights)}.")
    if np.isnan(w).any() or np.isposinf(w).any():
        raise ValueError("weights contain NaN or +inf; use finite values or -inf.")
    wt = np.swapaxes(w, 1, 2)
    finite = np.isfinite(w)
    if not np.array_equal(finite, np.isfinite(wt)) or not np.allclose(
        w[finite], wt[finite], rtol=1e-12, atol=1e-15
    ):
        raise ValueError("weights must be symmetric: w[i, j] == w[j, i].")
    parents = maximum_spanning_parents(np.ascontiguousarray(np.maximum(w, wt)))
    return parents[0] if single else parents


def label_node_features(X, n_labels):
    """Rows ``(n * L, d + L)`` of the label trees: ``X (n, d)`` then the one-hot label identity.

    Row ``i * L + l`` is example ``i``, label ``l``.
    """
    x = np.asarray(X, dtype=np.float64)
    n = x.shape[0]
    return np.hstack((np.repeat(x, n_labels, axis=0), np.tile(np.eye(n_labels), (n, 1))))


def label_edge_types(parents, typing="pair"):
    """Edge types ``(m, L)``: ``parent * L + child`` for ``"pair"``, 0 for ``"shared"``/roots."""
    if typing not in EDGE_TYPINGS:
        raise ValueError(f"edge_typing must be one of {EDGE_TYPINGS}; got {typing!r}.")
    par = np.asarray(parents)
    n_labels = par.shape[-1]
    if typing == "shared":
        return np.zeros_like(par)
    return np.where(par >= 0, par * n_labels + np.arange(n_labels), 0)


class PairwiseLabelModels:
    """Conditional models ``P(y_i, y_j | x)`` of label pairs (4 classes each).

    Parameters
    ----------
    pairs : (P, 2) array-like of int
        Label pairs ``(i, j)``, ``i < j``.
    method : {"xgboost", "logistic"}
        XGBoost ``multi:softprob`` on one thread, or logistic regression on
        standardised features.
    n_estimators, max_depth, learning_rate : int, int, float
        XGBoost settings.
    folds : int
        Folds for out-of-fold training predictions (``< 2``: in-sample).
    random_state : int
    """

    def __init__(self, pairs, method="xgboost", n_estimators=30, max_depth=3,
                 learning_rate=0.3, folds=2, random_state=0):  # fmt: skip
        if method not in PAIRWISE:
            raise ValueError(f"pairwise must be one of {PAIRWISE}; got {method!r}.")
        keep_params(self, locals())
        self.pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)

    def _fit_one(self, X, target):
        """One pair's model of the joint state ``target (n,)`` in 0..3."""
        if self.method == "xgboost":
            params = {"objective": "multi:softprob", "num_class": 4, "max_depth": self.max_depth,
                      "eta": self.learning_rate, "tree_method": "hist", "seed": self.random_state,
                      "nthread": 1}  # fmt: skip
            return xgb.train(params, xgb.DMatrix(X, label=target, nthread=1), self.n_estimators)
        if np.unique(target).size < 2:
            return np.bincount(target, minlength=4).astype(np.float64)
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X, target)

    def _predictor_input(self, X):
        """``X`` as the pair models read it."""
        if self.method == "xgboost":
            return xgb.DMatrix(X, nthread=1)
        return X

    @staticmethod
    def _predict_one(model, data, n):
        """Joint probabilities ``(n, 4)`` of one pair model."""
        if isinstance(model, np.ndarray):
            return np.tile(model / model.sum(), (n, 1))
        if hasattr(model, "predict_proba"):
            out = np.zeros((n, 4))
            out[:, model.classes_] = model.predict_proba(data)
            return out
        return model.predict(data).reshape(-1, 4)

    def fit_out_of_fold(self, X, Y):
        """Fit the models; return out-of-fold joint probabilities ``(n, P, 4)``."""
        x = np.asarray(X, dtype=np.float64)
        y = check_label_matrix(Y)
        n = x.shape[0]
        targets = 2 * y[:, self.pairs[:, 0]] + y[:, self.pairs[:, 1]]
        if self.folds >= 2:  # (trained on, predicted) rows of every fold
            fold = np.random.default_rng(self.random_state).permutation(n) % self.folds
            splits = [(fold != f, fold == f) for f in range(self.folds)]
        else:
            splits = [(np.ones(n, dtype=bool),) * 2]  # in-sample
        joint = np.zeros((n, len(self.pairs), 4))
        self.models_ = []
        for keep, held in splits:
            models = [self._fit_one(x[keep], targets[keep, p]) for p in range(len(self.pairs))]
            data = self._predictor_input(x[held])
            for p, model in enumerate(models):
                joint[held, p] = self._predict_one(model, data, int(held.sum()))
            self.models_.append(models)
        return joint

    @staticmethod
    def _model_document(model):
        """One pair model as JSON-ready data."""
        if isinstance(model, np.ndarray):  # a pair seen in one joint state only: its counts
            return {"counts": model.tolist()}
        if hasattr(model, "predict_proba"):
            scaler, logistic = model[0], model[-1]
            return {
                "mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(),
                "classes": logistic.classes_.tolist(), "coef": logistic.coef_.tolist(),
                "intercept": logistic.intercept_.tolist(),
            }  # fmt: skip
        return model.save_raw("json").decode("utf-8")

    def to_document(self):
        """The fitted models, ``[fold][pair]``: XGBoost's JSON or the logistic coefficients."""
        return [[self._model_document(m) for m in models] for models in self.models_]

    def _model_from_document(self, doc, n_features, where):
        """One pair model from :meth:`_model_document`'s data, checked."""
        if self.method == "xgboost":
            if not isinstance(doc, str):
                raise ValueError(f"{where} is damaged: a pair model is not XGBoost's JSON.")
            return booster_from_json(doc, where, n_features, 4)
        if isinstance(doc, dict) and set(doc) == {"counts"}:
            counts = _numbers(doc["counts"], (4,), "counts", where)
            if (counts < 0).any() or counts.sum() <= 0:
                raise ValueError(f"{where} is damaged: pair counts must be >= 0, not all 0.")
            return counts
        keys = {"mean", "scale", "classes", "coef", "intercept"}
        classes = doc.get("classes") if isinstance(doc, dict) and set(doc) == keys else None
        if not (
            isinstance(classes, list)
            and 2 <= len(classes) <= 4
            and all(type(c) is int for c in classes)
            and classes == sorted(set(classes))
            and 0 <= classes[0] and classes[-1] < 4
        ):
            raise ValueError(f"{where} is damaged: a logistic pair model is malformed.")
        rows = 1 if len(classes) == 2 else len(classes)
        scaler, logistic = StandardScaler(), LogisticRegression(max_iter=1000)
        scaler.mean_ = _numbers(doc["mean"], (n_features,), "mean", where)
        scaler.scale_ = _numbers(doc["scale"], (n_features,), "scale", where)
        if (scaler.scale_ <= 0).any():
            raise ValueError(f"{where} is damaged: a logistic pair model has a scale <= 0.")
        scaler.var_ = scaler.scale_**2
        logistic.coef_ = _numbers(doc["coef"], (rows, n_features), "coef", where)
        logistic.intercept_ = _numbers(doc["intercept"], (rows,), "intercept", where)
        logistic.classes_ = np.asarray(classes, dtype=np.int64)
        scaler.n_features_in_ = logistic.n_features_in_ = n_features
        return make_pipeline(scaler, logistic)

    def load_document(self, doc, n_features, where):
        """Set ``models_`` from :meth:`to_document`'s lists, every model checked; returns self."""
        folds = self.folds if self.folds >= 2 else 1
        if not (
            isinstance(doc, list)
            and len(doc) == folds
            and all(isinstance(m, list) and len(m) == len(self.pairs) for m in doc)
        ):
            raise ValueError(
                f"{where} is damaged: pairwise must hold {folds} lists of {len(self.pairs)} "
                "models."
            )
        self.models_ = [[self._model_from_document(d, n_features, where) for d in m] for m in doc]
        return self

    def predict_joint(self, X):
        """Joint probabilities ``(n, P, 4)``, averaged over the fold models."""
        x = np.asarray(X, dtype=np.float64)
        joint = np.zeros((x.shape[0], len(self.pairs), 4))
        data = self._predictor_input(x)
        for models in self.models_:
            for p, model in enumerate(models):
                joint[:, p] += self._predict_one(model, data, x.shape[0])
        return joint / len(self.models_)


def _numbers(value, shape, name, where):
    """``value`` (nested lists of numbers) as a finite float64 array of ``shape``."""
    arr = np.asarray(value, dtype=object) if isinstance(value, list) else None
    if (
        arr is None
        or arr.shape != shape
        or not all(type(v) in (int, float) for v in arr.ravel())
        or not np.isfinite(arr.astype(np.float64)).all()
    ):
        raise ValueError(f"{where} is damaged: {name} must be {shape} finite numbers.")
    return arr.astype(np.float64)


def ess_parents(joint, pairs, n_labels, fallback, eps=1e-6):
    """Per-input maximum spanning trees ``(m, L)`` from conditional pair joints.

    Parameters
    ----------
    joint : (m, P, 4) array-like
        ``P(y_i, y_j | x)`` of the modelled ``pairs (P, 2)``.
    pairs : (P, 2) int
    n_labels : int
    fallback : (L, L) array-like
        Weights of pairs without a model (scaled by ``eps``).

    Returns
    -------
    (m, L) int64
    """
    p = np.clip(np.asarray(joint, dtype=np.float64), eps, None)
    p /= p.sum(axis=-1, keepdims=True)
    cmi = mutual_information(p)
    m = p.shape[0]
    weights = np.broadcast_to(eps * np.asarray(fallback, dtype=np.float64), (m, n_labels, n_labels))
    weights = weights.copy()
    weights[:, pairs[:, 0], pairs[:, 1]] = cmi
    weights[:, pairs[:, 1], pairs[:, 0]] = cmi
    return spanning_tree_parents(weights)


# ----------------------------------------------------------------------------- estimator


_Self = TypeVar("_Self", bound="ESSTreeCRFClassifier")


@fill_doc("mode", "hessian_bound", "step", "transition_solver", "reg_transitions", solvers=TREE_SOLVERS)
class ESSTreeCRFClassifier(BoostedCRFClassifier):
    """Multi-label classifier: a boosted CRF over a tree of labels.

    Parameters
    ----------
    structure : {"ess", "chow-liu", "independent"}
        See :mod:`structboost.estimators.multilabel`.
    {objective_params}
    n_estimators, learning_rate, max_depth : int or None, float, int
        Boosting of the node potentials (one booster for every label);
        ``n_estimators=None``: 1000 rounds at most when automatic early
        stopping ends the fit, 100 otherwise.
    early_stopping_rounds : int, optional
        Stop when the last ``eval_metric`` on the last ``eval_set`` entry
        has not improved for this many rounds.
    early_stopping, validation_fraction, n_iter_no_change, refit
        Automatic early stopping on held-out inputs, as in
        :class:`structboost.TreeCRFClassifier` (the threshold counts label
        nodes: inputs times labels); the structure learner sees every input.
    edge_typing : {"pair", "shared"}
        One ``2 x 2`` potential per ordered label pair, or one for all edges.
    pairwise : {"xgboost", "logistic"}
        Conditional pair models of ``"ess"``.
    max_pairs : int or None
        Pairs (by training mutual information) that get a conditional model;
        None for all.
    pairwise_estimators, pairwise_depth : int
        XGBoost rounds and depth of each pair model (``learning_rate`` shared).
    folds : int
        Out-of-fold predictions for the training structures.
    random_state : int
        Seed of the pair models and of the CRF booster.
    eval_metric : str, callable or list of them, optional
        As in :class:`structboost.TreeCRFClassifier`, on the label nodes
        (``y_true`` ``(n * L,)`` 0/1, ``y_proba`` ``(n * L, 2)``).
    **kwargs
        Any other XGBoost parameter of the CRF booster (``n_jobs``,
        ``min_child_weight``, ...).

    Attributes
    ----------
    n_labels_ : int
    mutual_information_ : (L, L) ndarray
        Training mutual information of the label pairs.
    tree_ : (L,) ndarray
        Chow-Liu parents (``"chow-liu"`` only).
    pairs_ : (P, 2) ndarray
        The label pairs (``"ess"`` only).
    pairwise_ : PairwiseLabelModels
        The pairwise models (``"ess"`` only).
    crf_ : TreeCRFClassifier
    booster_ : xgboost.Booster
        The CRF's booster (``crf_.booster_``).
    best_iteration_ : int
        0-based index of the last round the model uses.
    evals_result_ : dict
        CRF metric per round for each ``eval_set`` entry (``validation_i``),
        or for the held-out inputs (``"validation"``).
    validation_sequences_, validation_best_iteration_ : (v,) int64 ndarray, int or None
        Rows of ``X`` held out by automatic early stopping (empty when none)
        and the round they chose (None), as in :class:`structboost.TreeCRFClassifier`.
    feature_importances_ : ``(n_features_in_,)`` ndarray
        Total gain of the CRF's splits on each input feature.

    Notes
    -----
    ``save_model(path)`` / ``load_model(path)`` write and read the fitted
    estimator as one JSON file, validated.
    """

    def __init__(self, *, structure: str = "ess", mode: str = DEFAULTS["mode"],
                 hessian_bound: str | float = DEFAULTS["hessian_bound"],
                 step: str = DEFAULTS["step"],
                 transition_solver: str = DEFAULTS["transition_solver"],
                 reg_transitions: float = DEFAULTS["reg_transitions"],
                 n_estimators: int | None = None, learning_rate: float = 0.3, max_depth: int = 4,
                 early_stopping_rounds: int | None = None, early_stopping: str | bool = "auto",
                 validation_fraction: float = 0.1, n_iter_no_change: int = 30, refit: bool = True,
                 edge_typing: str = "pair", pairwise: str = "xgboost", max_pairs: int = 45,
                 pairwise_estimators: int = 30, pairwise_depth: int = 3, folds: int = 2,
                 random_state: Any = 0, eval_metric: Any = None, **kwargs: Any) -> None:
        keep_params(self, locals())

    _param_checks = {**BOOSTING, "structure": [Options(*STRUCTURES)],
                     "edge_typing": [Options(*EDGE_TYPINGS)]}  # fmt: skip

    def _set_structure(self, n_labels, mutual_information):
        """Set the label count, the mutual information and what the structure learner derives
        from it (``tree_``; ``pairs_`` and the unfitted ``pairwise_``).
        """
        self.n_labels_, self.mutual_information_ = n_labels, mutual_information
        if self.structure == "chow-liu":
            self.tree_ = spanning_tree_parents(mutual_information)
        elif self.structure == "ess":
            i, j = np.triu_indices(n_labels, k=1)
            order = np.argsort(-mutual_information[i, j], kind="stable")
            if self.max_pairs is not None:
                order = order[: int(self.max_pairs)]
            self.pairs_ = np.column_stack((i[order], j[order]))
            self.pairwise_ = PairwiseLabelModels(
                self.pairs_, method=self.pairwise, n_estimators=self.pairwise_estimators,
                max_depth=self.pairwise_depth, learning_rate=self.learning_rate, folds=self.folds,
                random_state=self.random_state,
            )  # fmt: skip

    def _crf_estimator(self):
        """The unfitted tree CRF over the label trees."""
        shared = set(TreeCRFClassifier._get_param_names()) & set(self._get_param_names())
        return TreeCRFClassifier(
            n_edge_types=self.n_labels_**2 if self.edge_typing == "pair" else 1,
            **{name: getattr(self, name) for name in sorted(shared)},
            **{"seed": self.random_state, **self._engine_params()},
        )

    def _adopt_crf(self, crf):
        """Take the fitted tree CRF and its fitted attributes."""
        self.crf_ = crf
        self.booster_ = crf.booster_
        for name in ("evals_result_", "best_iteration_", "validation_sequences_",
                     "validation_best_iteration_"):
            setattr(self, name, getattr(crf, name))

    def structures(self, X: Any, joint: ArrayLike | None = None) -> Ints:
        """Parents ``(n, L)`` of every input's label tree (``-1`` for roots)."""
        check_is_fitted(self, "n_labels_")
        n = np.shape(X)[0]
        if self.structure == "independent":
            return np.full((n, self.n_labels_), -1, dtype=np.int64)
        if self.structure == "chow-liu":
            return np.tile(self.tree_, (n, 1))
        if joint is None:
            joint = self.pairwise_.predict_joint(X)
        return ess_parents(joint, self.pairs_, self.n_labels_, self.mutual_information_)

    def _tree_args(self, X, parents):
        """The tree CRF's ``parents``, ``edge_types`` and ``lengths`` of ``parents (n, L)``."""
        types = label_edge_types(parents, self.edge_typing)
        return {"parents": parents.ravel(), "edge_types": types.ravel(),
                "lengths": np.full(np.shape(X)[0], self.n_labels_)}  # fmt: skip

    @all_or_nothing
    @fill_doc(verbose=VERBOSE)
    def fit(self: _Self, X: Any, Y: Any, *, eval_set: Sequence[Any] | None = None,
            verbose: bool | int | None = None) -> _Self:
        """Fit the structure learner and the boosted CRF.

        Parameters
        ----------
        X : (n, d) array-like
        Y : (n, L) array-like of 0/1
        eval_set : list of (X, Y) tuples or dicts, optional
            Evaluation sets (dicts: keys ``"X"``, ``"y"`` and optionally
            ``"name"``, its key in ``evals_result_``); the CRF metric is
            recorded in ``evals_result_`` and the last one drives early
            stopping.
        {verbose}

        Returns
        -------
        self
        """
        self._check_params()
        x = np.asarray(X, dtype=np.float64)
        y = check_label_matrix(Y)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"X has {x.shape[0]} rows but Y has {y.shape[0]}.")
        if np.unique(y).size < 2:
            raise ValueError("Y must contain both 0 and 1 somewhere to train a classifier.")
        self._set_structure(y.shape[1], label_mutual_information(y))
        joint = self.pairwise_.fit_out_of_fold(x, y) if self.structure == "ess" else None
        self.n_features_in_ = x.shape[1]
        parents = self.structures(x, joint)
        crf = self._crf_estimator()

        def convert(entry, where):
            """An ``eval_set`` entry as the tree CRF's dict."""
            extra = ("groups", "lengths", "sample_weight", "base_X")
            given = [k for k in extra if entry[k] is not None]
            if given:
                raise ValueError(
                    f"{where} must be an (X, Y) tuple or a dict with keys 'X', 'y' and "
                    f"optionally 'name'; it has {given}."
                )
            rows, args = self._node_inputs(entry["X"])
            labels = check_label_matrix(entry["y"]).ravel()
            return {"X": rows, "y": labels, "name": entry["name"], **args}

        evals = self._eval_set(eval_set, convert)[0]
        crf.fit(label_node_features(x, self.n_labels_), y.ravel(), eval_set=evals, verbose=verbose,
                **self._tree_args(x, parents))
        self._adopt_crf(crf)
        return self

    def to_document(self) -> dict[str, Any]:
        """The fitted estimator as a JSON-ready dict (what :meth:`save_model` writes).

        Keys: ``estimator``, ``params``, ``n_labels``, ``n_features_in``,
        ``mutual_information`` ``(L, L)`` (the structures follow from it),
        ``pairwise`` (``[fold][pair]`` models, or None) and ``crf``.
        """
        check_is_fitted(self, "crf_")
        return {
            "estimator": type(self).__name__,
            "params": self._json_params(),
            "n_labels": int(self.n_labels_),
            "n_features_in": int(self.n_features_in_),
            "mutual_information": self.mutual_information_.tolist(),
            "pairwise": self.pairwise_.to_document() if self.structure == "ess" else None,
            "crf": self.crf_.to_document(),
        }

    def from_document(self: _Self, doc: dict[str, Any], where: str = "the model document") -> _Self:
        """Set this estimator from :meth:`to_document`'s dict (a damaged one: ValueError)."""
        staged = type(self)()
        staged.set_params(**self._document_params(doc, where))
        try:
            staged._check_params()
        except ValueError as err:
            raise ValueError(f"{where} is damaged: {err}") from None
        n_labels = field(doc, "n_labels", int, where)
        n_features = field(doc, "n_features_in", int, where)
        info = doc.get("mutual_information")
        if (
            n_labels < 1
            or n_features < 1
            or not isinstance(info, list)
            or len(info) != n_labels
            or not all(isinstance(r, list) and len(r) == n_labels for r in info)
            or not all(type(v) in (int, float) and np.isfinite(v) for r in info for v in r)
        ):
            raise ValueError(
                f"{where} is damaged: n_labels and n_features_in must be positive and "
                "mutual_information a square matrix of finite numbers, one row per label."
            )
        staged.n_features_in_ = n_features
        staged._set_structure(n_labels, np.asarray(info, dtype=np.float64))
        if staged.structure == "ess":
            staged.pairwise_.load_document(doc.get("pairwise"), n_features, where)
        crf = TreeCRFClassifier().from_document(field(doc, "crf", dict, where), where)
        if (
            crf.get_params() != staged._crf_estimator().get_params()
            or crf.classes_.tolist() != [0, 1]
            or crf.n_features_in_ != n_features + n_labels
        ):
            raise ValueError(
                f"{where} is damaged: its tree CRF does not match the estimator's parameters, "
                f"its labels 0/1 and its {n_features} + {n_labels} node features."
            )
        staged._adopt_crf(crf)
        return self._swap_in(staged)

    def _gain_importance(self):
        """The CRF's split gain on the input features (not the label identity)."""
        return self.crf_.feature_importances_[: self.n_features_in_]

    def _node_inputs(self, X):
        """The label-tree rows of ``X`` and the tree CRF's structure arguments."""
        check_is_fitted(self, "n_labels_")
        x = np.asarray(X, dtype=np.float64)
        return label_node_features(x, self.n_labels_), self._tree_args(x, self.structures(x))

    def predict(self, X: Any) -> Any:
        """Most probable label set of every input (MAP on its tree), ``(n, L)`` 0/1."""
        rows, args = self._node_inputs(X)
        return self.crf_.predict(rows, **args).reshape(-1, self.n_labels_)

    def predict_proba(self, X: Any) -> Any:
        """Marginal probability of every label, ``(n, L)``."""
        rows, args = self._node_inputs(X)
        marg = self.crf_.predict_marginals(rows, **args)
        return marg[:, list(self.crf_.classes_).index(1)].reshape(-1, self.n_labels_)

    def predict_log_likelihood(self, X: Any, Y: Any) -> Floats:
        """``log P(Y | X)`` of every input's label set, ``(n,)``."""
        rows, args = self._node_inputs(X)
        return self.crf_.predict_log_likelihood(rows, check_label_matrix(Y).ravel(), **args)
