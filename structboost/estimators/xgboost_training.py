"""The XGBoost engine run of the XGBoost estimators (the only part of them that needs XGBoost).

Kept apart from :mod:`.base` so that the LightGBM estimators import without
XGBoost installed.
"""

import xgboost as xgb

from ..engines.boost_loop import train_kept_margins
from ..engines.model_io import field
from ..engines.xgboost import booster_from_json, kept_rounds, xgb_params
from .base import evaluate_metrics


class XGBoostTraining:
    """``_train`` on XGBoost and the booster's queries, mixed into a BoostedCRFClassifier.

    The estimator supplies ``_objective(n_classes, spec)`` and
    ``_dmatrix(rows, n_classes)`` (a training DMatrix of LabelledRows).
    """

    def _train(self, train, evals, names, spec, verbose, metrics, stopping):
        """``xgboost.train`` with the CRF objective, metric and transition callback.

        Parameters
        ----------
        train : LabelledRows
        evals : list of LabelledRows
            Evaluation sets, named ``names``; the last drives early stopping.
        names : list of str
        spec : ObjectiveSpec
        verbose : bool or int
            XGBoost's ``verbose_eval``.
        metrics : list of (str, str or callable)
            From :func:`~structboost.estimators.base.eval_metrics`.
        stopping : Stopping

        Returns
        -------
        booster : xgboost.Booster
        evals_result : dict
        """
        n_classes = len(self.classes_)
        obj = self._objective(n_classes, spec)
        params = xgb_params(
            n_classes, eta=self.learning_rate, max_depth=self.max_depth, **self._run_params(train)
        )
        dtrain = self._dmatrix(train, n_classes)
        dvalid = [self._dmatrix(rows, n_classes) for rows in evals]
        evals_result = {}
        options = dict(
            custom_metric=lambda predt, d: evaluate_metrics(obj.crf, metrics, predt, obj.batch(d)),
            evals=list(zip(dvalid, names)),
            early_stopping_rounds=stopping.patience,
            evals_result=evals_result,
            verbose_eval=verbose,
            callbacks=[obj.callback(), *(self.callbacks or ())],
        )
        device_rows = self._device_rows(train)
        if device_rows is None:
            booster = xgb.train(params, dtrain, stopping.rounds, obj=obj, **options)
        else:
            booster = train_kept_margins(params, dtrain, device_rows, stopping.rounds, obj, **options)
        return booster, evals_result

    def _run_params(self, train):
        """The engine parameters of a run on ``train`` (LabelledRows): the user's."""
        return self._engine_params()

    def _device_rows(self, train):
        """The training features on the GPU, where the margins then stay, or None (see
        :func:`~structboost.engines.boost_loop.train_kept_margins`).
        """
        return None

    def _kept_rounds(self):
        return kept_rounds(self.booster_)

    def _engine_document(self):
        return {"xgboost_json": self.booster_.save_raw("json").decode("utf-8")}

    def _engine_columns(self):
        """Columns the engine sees after the input features (the edge route's previous label)."""
        return 0

    def _booster_from_document(self, doc, where, num_features, num_labels, params):
        model = field(doc, "xgboost_json", str, where)
        return booster_from_json(model, where, num_features + self._engine_columns(),
                                 num_labels)  # fmt: skip

    def _gain_importance(self):
        scores = self.booster_.get_score(importance_type="total_gain")
        names = self.booster_.feature_names or [f"f{i}" for i in range(self.n_features_in_)]
        return [scores.get(name, 0.0) for name in names]
