"""The Dask chain-CRF estimator: :class:`DaskXGBCRFClassifier`.

As ``xgboost.dask``'s estimators: dask collections in and out, ``client``
picks the cluster, training runs on the workers that hold the partitions, and
the transitions and the metric are global (:mod:`structboost.engines.dask`).
``lightgbm.dask`` cannot sum a custom objective's arrays over the workers, so
there is no LightGBM twin.
"""

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from .. import _config
from ..engines import dask as engine
from ..engines.xgboost import crf_objective, load_state, xgb_params
from ..objectives.params import DEFAULTS, fill_doc
from .base import BoostedCRFClassifier, all_or_nothing, eval_metrics, keep_params
from .chain_base import ChainTransitions
from .xgboost_training import XGBoostTraining


def _distinct(y):
    """The sorted distinct labels ``(k,)`` of a dask Series or Array (one compute)."""
    if isinstance(y, dd.Series):
        return np.sort(y.unique().compute().to_numpy())
    return np.asarray(da.unique(y).compute())


def _map_rows(collection, fn, dtype):
    """``fn`` applied to the values of every partition of a 1-D dask collection."""
    if isinstance(collection, dd.Series):
        return collection.map_partitions(
            lambda part: pd.Series(fn(part.to_numpy()), index=part.index, name=part.name),
            meta=pd.Series(np.zeros(0, dtype=dtype), name=collection.name),
        )
    if isinstance(collection, da.Array) and collection.ndim == 1:
        return collection.map_blocks(fn, dtype=dtype)
    raise ValueError(
        f"labels must be a dask Series or a 1-D dask Array; got {type(collection).__name__}."
    )


@fill_doc("mode", "hessian_bound", "step", "transition_solver", "reg_transitions")
class DaskXGBCRFClassifier(XGBoostTraining, ChainTransitions, BoostedCRFClassifier):
    """Chain-CRF sequence labeller trained by XGBoost on a Dask cluster.

    Parameters
    ----------
    {objective_params}
    n_estimators : int
        Boosting rounds.
    learning_rate : float
        XGBoost's ``eta``.
    max_depth : int
    early_stopping_rounds : int, optional
        Stop when the metric on the last ``eval_set`` entry has not improved
        for this many rounds (no automatic early stopping here).
    eval_metric : {"crf-nll", "crf-error"}, optional
        The metric recorded in ``evals_result_`` and watched by early
        stopping, summed over the workers (default ``"crf-nll"``).
    decode : {"viterbi", "marginal"}
        What :meth:`predict` returns (see :class:`structboost.XGBCRFClassifier`).
    **kwargs
        Any other XGBoost parameter (``min_child_weight``, ``n_jobs``, ...).

    Attributes
    ----------
    client : distributed.Client
        The cluster to train and predict on; Dask's default client unless set.
    classes_ : ndarray, shape (n_classes,)
    booster_ : xgboost.Booster
        Carries the transitions; :func:`structboost.engines.predict` accepts it.
    best_iteration_ : int
    evals_result_ : dict
        Global CRF metric per round for each ``eval_set`` entry (``validation_i``).
    transitions_ : pandas.DataFrame
    feature_importances_ : ndarray, shape ``(n_features_in_,)``
    n_features_in_ : int

    Notes
    -----
    ``save_model(path)`` / ``load_model(path)`` write and read the JSON file
    of :class:`structboost.XGBCRFClassifier`; the ``client`` is not saved.
    """

    def __init__(self, *, mode=DEFAULTS["mode"], hessian_bound=DEFAULTS["hessian_bound"],
                 step=DEFAULTS["step"], transition_solver=DEFAULTS["transition_solver"],
                 reg_transitions=DEFAULTS["reg_transitions"], n_estimators=100, learning_rate=0.3,
                 max_depth=6, early_stopping_rounds=None, eval_metric=None, decode="viterbi",
                 **kwargs):
        keep_params(self, locals())
        self._client = None

    @property
    def client(self):
        """The Dask client used by :meth:`fit` and :meth:`predict`."""
        if self._client is None:
            from distributed import get_client

            return get_client()
        return self._client

    @client.setter
    def client(self, client):
        self._client = client

    def __getstate__(self):
        """The state without the client (it holds connections)."""
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    def _threads(self):
        """``n_jobs`` as given: None runs the objective on each worker's own threads."""
        n_jobs = self._engine_kwargs().get("n_jobs")
        return None if n_jobs is None else _config.resolve_n_jobs(n_jobs)

    def _dmatrix(self, X, y, groups):
        """The distributed DMatrix of labelled sequences."""
        codes = _map_rows(y, lambda v: self._encode(v, len(v), self.classes_), np.int64)
        return engine.sequence_dmatrix(self.client, X, codes, groups=groups)

    @all_or_nothing
    def fit(self, X, y, *, groups, eval_set=None, verbose=True):
        """Train on labelled sequences held by the cluster.

        Parameters
        ----------
        X : dask DataFrame or dask Array, shape (n, d)
            One row per position; no sequence may span two partitions.
        y : dask Series or dask Array, shape (n,)
            Labels of any hashable type, partitioned like ``X``.
        groups : str, dask Series or dask Array (n,)
            The sequence-id column of ``X`` (dropped from the features) or
            the ids, partitioned like ``X``.
        eval_set : list of (X, y, groups), optional
            Dask collections as for ``X``, ``y``, ``groups``; the global CRF
            metric is recorded in ``evals_result_`` and drives early stopping.
        verbose : bool or int
            XGBoost's ``verbose_eval``.

        Returns
        -------
        self
        """
        self._check_params()
        metrics = eval_metrics(self.eval_metric)
        if len(metrics) > 1 or callable(metrics[0][1]):
            raise ValueError(
                f"eval_metric={self.eval_metric!r}: distributed training records one metric "
                'summed over the workers, "crf-nll" or "crf-error" (a callable would see one '
                "worker's rows only)."
            )
        classes = _distinct(y)
        if len(classes) < 2:
            raise ValueError(f"y has only one class {classes.tolist()}: a classifier needs 2.")
        self.classes_ = classes
        dtrain = self._dmatrix(X, y, groups)
        self.n_features_in_ = dtrain.num_col()

        def evaluated(entry, where):
            """An ``eval_set`` entry as a distributed DMatrix; unseen labels refused."""
            unseen = np.setdiff1d(_distinct(entry["y"]), classes)
            if unseen.size:
                raise ValueError(
                    f"{where} has labels not seen in y, e.g. {unseen[:5].tolist()}; known labels: "
                    f"{classes.tolist()}. Evaluate on labels the model can predict."
                )
            return self._dmatrix(entry["X"], entry["y"], entry["groups"])

        evals = list(zip(*self._eval_set(eval_set, evaluated)))
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs an eval_set to watch.")
        params = xgb_params(len(classes), eta=self.learning_rate, max_depth=self.max_depth,
                            **self._engine_kwargs())
        obj = crf_objective(len(classes), self._objective_spec(metrics))
        out = engine.train(self.client, params, dtrain, obj, self.n_estimators, evals=evals,
                           early_stopping_rounds=self.early_stopping_rounds, verbose_eval=verbose)
        self._set_fitted(out["booster"], out["history"], metrics)
        return self

    def predict(self, X, *, groups, decode=None):
        """Predicted labels (``classes_`` values), a dask collection partitioned like ``X``.

        Parameters
        ----------
        X : dask DataFrame or dask Array, shape (n, d)
        groups : str, dask Series or dask Array (n,)
        decode : {"viterbi", "marginal"}, optional
            None: the estimator's ``decode``.

        Returns
        -------
        dask Series or dask Array, shape (n,)
        """
        check_is_fitted(self)
        decode = self.decode if decode is None else decode
        codes = engine.predict(self.client, self.booster_, X, groups=groups, decode=decode)
        classes = self.classes_
        return _map_rows(codes, lambda c: classes[c], classes.dtype)

    def predict_marginals(self, X, *, groups):
        """Posterior marginals, ``(n, n_classes)``, columns in ``classes_`` order.

        Returns
        -------
        dask DataFrame (columns ``classes_``) or dask Array
        """
        check_is_fitted(self)
        marginals = engine.predict_marginals(self.client, self.booster_, X, groups=groups)
        if isinstance(marginals, dd.DataFrame):
            return marginals.rename(columns=dict(enumerate(self.classes_)))
        return marginals

    def _load_state(self):
        """The booster's CRF state."""
        return load_state(self.booster_)

    def _swap_in(self, staged):
        """Become the loaded ``staged`` estimator, keeping this one's ``client``."""
        client = self._client
        super()._swap_in(staged)
        self._client = client
        return self
