"""The XGBoost training loop of the XGBoost estimators (the only part of them that needs XGBoost).

Kept apart from :mod:`.base` so that the LightGBM estimators import without
XGBoost installed.
"""

import xgboost as xgb

from ..engines.model_io import field
from ..engines.xgboost import booster_from_json, kept_rounds
from .base import evaluate_metrics


class XGBoostTraining:
    """The XGBoost training loop and booster queries of the XGBoost estimators.

    Mixed into a :class:`BoostedCRFClassifier` with ``n_estimators``,
    ``learning_rate``, ``max_depth``, ``early_stopping_rounds`` and ``callbacks``.
    """

    def _xgb_train(self, params, obj, dtrain, dvalid, verbose, names, metrics, stopping):
        """``xgboost.train`` with the CRF objective, metric and transition callback.

        Parameters
        ----------
        params : dict
            From :func:`structboost.xgb_params`.
        obj : XGBCRFObjective or XGBTreeCRFObjective
        dtrain : xgboost.DMatrix
        dvalid : list of xgboost.DMatrix
            Evaluation sets; the last drives early stopping.
        verbose : bool or int
            XGBoost's ``verbose_eval``.
        names : list of str
            Names of the evaluation sets in ``evals_result``.
        metrics : list of (str, str or callable)
            From :func:`eval_metrics`; the last drives early stopping.
        stopping : Stopping
            Rounds and patience (from :meth:`BoostedCRFClassifier._stopping`).

        Returns
        -------
        booster : xgboost.Booster
        evals_result : dict
        """
        evals_result = {}
        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=stopping.rounds,
            obj=obj,
            custom_metric=lambda predt, d: evaluate_metrics(obj.crf, metrics, predt, obj.batch(d)),
            evals=list(zip(dvalid, names)),
            early_stopping_rounds=stopping.patience,
            evals_result=evals_result,
            verbose_eval=verbose,
            callbacks=[obj.callback(), *(self.callbacks or ())],
        )
        return booster, evals_result

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
