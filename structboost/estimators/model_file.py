"""The chain estimators' model file: one JSON document, validated on reading.

``save_model(path)`` writes a fitted estimator as one JSON file (the
engine's model, the CRF state, the labels; see
:mod:`structboost.engines.model_io` for the envelope) and
``load_model(path)`` reads one back into an estimator, as XGBoost's
estimators do; loading runs no code, unlike pickle and joblib, which keep
working for Python objects. An estimator with a ``base_model`` is saved
with pickle or joblib only.
"""

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..engines.model_io import decode_labels, encode_labels, field, read_document, write_document
from ..objectives.constraints import from_masks
from ..objectives.constraints import resolve as resolve_constraints

_FILE_FORMAT = "structboost-crf-classifier"
# Version 2: the parameters hessian_bound and transition_solver (were gamma and
# transitions); version-1 files are refused with the message of read_document.
_FILE_VERSION = 2
_FILE_HINT = "write one with the estimator's save_model(path)"


_Self = TypeVar("_Self", bound="ModelFile")


class ModelFile:
    """``save_model`` / ``load_model`` and their dicts, mixed into the chain estimators.

    The estimator supplies ``_engine_document()`` (its booster as a JSON
    dict), ``_booster_from_document(doc, where)``, ``_load_state()`` and
    ``_kept_rounds()``.
    """

    # Supplied by the estimator (declared for the type checker).
    allowed_transitions: Any
    _load_state: Callable[[], Any]
    _kept_rounds: Callable[[], int]
    _engine_document: Callable[[], dict[str, Any]]
    _booster_from_document: Callable[[Any, str], Any]
    set_params: Callable[..., Any]

    def _json_params(self):
        """The parameters as JSON values; a ValueError names one that has none."""
        params = self.get_params(deep=False)
        if params["base_model"] is not None:
            raise ValueError(
                "an estimator with a base_model cannot be written by save_model: pickle or "
                "joblib it instead (and load only files you trust)."
            )
        allowed = params["allowed_transitions"]
        if allowed is not None and not isinstance(allowed, str):
            masks = self.constraints_
            params["allowed_transitions"] = {k: v.tolist() for k, v in masks._asdict().items()}
        for name, value in params.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError(
                    f"parameter {name}={value!r} cannot be written to a JSON model file: set it "
                    "to a number, string, list or dict, or pickle/joblib the estimator."
                ) from None
        return params

    def to_document(self) -> dict[str, Any]:
        """The fitted estimator as a JSON-ready dict (what :meth:`save_model` writes).

        Returns
        -------
        dict
            ``estimator`` (class name), ``params``, ``classes``,
            ``n_features_in``, ``feature_names_in``, ``evals_result`` and
            ``engine`` (the engine's model and the CRF state).
        """
        check_is_fitted(self)
        if getattr(self, "vectorizer_", None) is not None:
            raise ValueError(
                "an estimator fitted on lists of feature dicts keeps a DictVectorizer, which "
                "save_model cannot write: pickle or joblib it instead (and load only files "
                "you trust), or vectorise the dicts before fit."
            )
        names = getattr(self, "feature_names_in_", None)
        return {
            "estimator": type(self).__name__,
            "params": self._json_params(),
            "classes": encode_labels(self.classes_),
            "n_features_in": int(self.n_features_in_),
            "feature_names_in": None if names is None else [str(n) for n in names],
            "evals_result": self.evals_result_,
            "boundaries": getattr(self, "boundaries_", "sequences"),
            "id_column": getattr(self, "id_column_", None),
            "engine": self._engine_document(),
        }

    def save_model(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted estimator to ``path`` as JSON; read it with :meth:`load_model`.

        Parameters
        ----------
        path : str or os.PathLike
        """
        write_document(path, _FILE_FORMAT, _FILE_VERSION, self.to_document())

    def load_model(self: _Self, path: str | os.PathLike[str]) -> _Self:
        """Replace this estimator by the one saved in ``path`` (see :meth:`save_model`).

        Reading parses and validates JSON; it runs no code.

        Parameters
        ----------
        path : str or os.PathLike

        Returns
        -------
        self
        """
        doc = read_document(path, _FILE_FORMAT, _FILE_VERSION, _FILE_HINT)
        return self.from_document(doc, str(path))

    def _checked_params(self, params, where):
        """Saved parameters, with names an estimator can take and constraints rebuilt."""
        named = set(self._get_param_names())
        for name in params:
            odd = name.startswith("_") or name.endswith("_") or not name.isidentifier()
            if name not in named and (odd or hasattr(type(self), name)):
                raise ValueError(f"{where} is damaged: it sets a parameter named {name!r}.")
        allowed = params.get("allowed_transitions")
        if isinstance(allowed, dict):
            if set(allowed) != {"transitions", "start", "end"}:
                raise ValueError(
                    f"{where} is damaged: allowed_transitions has keys {sorted(allowed)}."
                )
            params["allowed_transitions"] = from_masks(**allowed)
        return params

    def from_document(
        self: _Self, doc: dict[str, Any], where: str = "the model document"
    ) -> _Self:
        """Set this estimator from :meth:`to_document`'s dict, validated.

        Parameters
        ----------
        doc : dict
        where : str
            Where the dict came from, for the messages.

        Returns
        -------
        self
        """
        name = field(doc, "estimator", str, where)
        if name != type(self).__name__:
            raise ValueError(f"{where} holds a {name}: load it with {name}().load_model(path).")
        params = self._checked_params(dict(field(doc, "params", dict, where)), where)
        classes = decode_labels(field(doc, "classes", dict, where), where)
        n_features = field(doc, "n_features_in", int, where)
        names = doc.get("feature_names_in")
        if names is not None and (
            not isinstance(names, list)
            or len(names) != n_features
            or not all(isinstance(n, str) for n in names)
        ):
            raise ValueError(f"{where} is damaged: feature_names_in must be {n_features} names.")
        evals_result = field(doc, "evals_result", dict, where)
        booster = self._booster_from_document(field(doc, "engine", dict, where), where)
        self.set_params(**params)
        self.booster_ = booster
        num_labels = self._load_state()[0]
        if num_labels != len(classes) or n_features < 1:
            del self.booster_
            raise ValueError(
                f"{where} is damaged: its CRF has {num_labels} labels for {len(classes)} "
                f"classes and {n_features} input features."
            )
        self.classes_ = classes
        self.constraints_ = resolve_constraints(
            self.allowed_transitions, len(classes), labels=classes
        )
        self.n_features_in_ = n_features
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.evals_result_ = evals_result
        self.boundaries_ = doc.get("boundaries", "sequences")
        self.id_column_ = doc.get("id_column")
        if self.boundaries_ not in ("sequences", "rows") or not isinstance(
            self.id_column_, (str, type(None))
        ):
            raise ValueError(f"{where} is damaged: boundaries or id_column are malformed.")
        self.vectorizer_ = None
        self.base_model_ = None
        self.best_iteration_ = self._kept_rounds() - 1
        return self
