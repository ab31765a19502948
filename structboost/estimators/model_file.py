"""The estimators' model file: one JSON document, validated on reading.

``save_model(path)`` writes the engine's model, the CRF state and the labels
(envelope: :mod:`structboost.engines.model_io`); ``load_model(path)`` reads
them back and runs no code. An estimator with a ``base_model`` is saved with
pickle or joblib only.
"""

import os
from typing import Any
from pathlib import Path

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..engines.model_io import (check_json_params, decode_labels, encode_labels, field,
                                read_document, write_document)
from ..engines.predict import DECODINGS
from ..objectives.constraints import from_masks
from ..objectives.constraints import resolve as resolve_constraints
from .inputs import vectorizer_document, vectorizer_from_document

_FILE_FORMAT = "structboost-crf-classifier"
_FILE_VERSION = 2
_FILE_HINT = "write one with the estimator's save_model(path)"


#: Parameters that do not describe the trained model: set after fit, they may be saved.
_NOT_THE_MODEL = ("callbacks", "n_jobs")


def changed_params(estimator):
    """Names of the model's parameters set since the estimator was fitted or loaded (sorted)."""
    before = getattr(estimator, "_params_at_fit_", None)
    if before is None:
        return []
    now = estimator.get_params(deep=False)
    return sorted(name for name in set(before) | set(now) if name not in _NOT_THE_MODEL
                  and not _same(before.get(name), now.get(name)))  # fmt: skip


def _same(a, b):
    """Whether two parameter values are equal (arrays element-wise; uncomparable: not)."""
    if a is b:
        return True
    try:
        return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) else bool(a == b)
    except (TypeError, ValueError):
        return False


class ModelFile:
    """``save_model`` / ``load_model`` and their dicts, part of every boosted estimator.

    The estimator supplies ``_engine_document()``, ``_booster_from_document(doc,
    where, num_features, num_labels, params)``, ``_load_state()`` and
    ``_kept_rounds()``; ``_state_loaded(state)`` may set what the CRF state
    determines.
    """

    def _json_params(self):
        """The parameters as JSON values; a ValueError names one that has none."""
        params = self.get_params(deep=False)
        if params.get("base_model") is not None:
            raise ValueError(
                "an estimator with a base_model cannot be written by save_model: pickle or "
                "joblib it instead (and load only files you trust)."
            )
        allowed = params.get("allowed_transitions")
        if allowed is not None and not isinstance(allowed, str):
            masks = self.constraints_
            params["allowed_transitions"] = {k: v.tolist() for k, v in masks._asdict().items()}
        if isinstance(params.get("class_weight"), dict):  # JSON keys are strings: keep the labels
            params["class_weight"] = [
                [k.item() if isinstance(k, np.generic) else k, v]
                for k, v in params["class_weight"].items()
            ]
        check_json_params(params)
        changed = changed_params(self)
        if changed:
            raise ValueError(
                f"the parameters {changed} were set after fit: the model was not trained with "
                "them, so the file would describe another model. Fit again, or set them back "
                "before saving."
            )
        return params

    def to_document(self: Any) -> dict[str, Any]:
        """The fitted estimator as a JSON-ready dict (what :meth:`save_model` writes): the class
        name, parameters, labels, fitted attributes and ``engine`` (model and CRF state).
        """
        check_is_fitted(self)
        names = getattr(self, "feature_names_in_", None)
        vectorizer = getattr(self, "vectorizer_", None)
        best_score = getattr(self, "best_score_", None)
        return {
            "estimator": type(self).__name__,
            "params": self._json_params(),
            "classes": encode_labels(self.classes_),
            "n_features_in": int(self.n_features_in_),
            "feature_names_in": None if names is None else [str(n) for n in names],
            "evals_result": self.evals_result_,
            "best_iteration": int(self.best_iteration_),
            "best_score": None if best_score is None else float(best_score),
            "vectorizer": None if vectorizer is None else vectorizer_document(vectorizer),
            "validation_sequences": self.validation_sequences_.tolist(),
            "validation_best_iteration": self.validation_best_iteration_,
            "decode": getattr(self, "decode_", None),
            "boundaries": getattr(self, "boundaries_", "sequences"),
            "id_column": getattr(self, "id_column_", None),
            "engine": self._engine_document(),
        }

    def save_model(self: Any, path: str | os.PathLike[str]) -> None:
        """Write the fitted estimator to ``path`` (ending in ``.json``) as JSON."""
        suffix = Path(path).suffix
        if suffix.lower() != ".json":
            raise ValueError(
                f"{type(self).__name__}.save_model writes JSON (the engine's model with the CRF "
                f"state and the labels), but {str(path)!r} ends in {suffix or 'no extension'!r}: "
                "name the file *.json (XGBoost's UBJSON and binary formats cannot hold the "
                "CRF state), or pickle/joblib the estimator."
            )
        write_document(path, _FILE_FORMAT, _FILE_VERSION, self.to_document())

    def load_model(self: Any, path: str | os.PathLike[str]) -> Any:
        """Replace this estimator by the one saved in ``path``, validated; runs no code. Self."""
        doc = read_document(path, _FILE_FORMAT, _FILE_VERSION, _FILE_HINT)
        return self.from_document(doc, str(path))

    def _state_loaded(self, state):
        """Set what the loaded CRF ``state`` ``(num_labels, mode, params)`` determines."""

    def _document_params(self, doc, where):
        """The saved parameters of a document written by this estimator class, checked."""
        name = field(doc, "estimator", str, where)
        if name != type(self).__name__:
            raise ValueError(f"{where} holds a {name}: load it with {name}().load_model(path).")
        return self._checked_params(dict(field(doc, "params", dict, where)), where)

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
        weights = params.get("class_weight")
        if isinstance(weights, list):
            if not all(isinstance(p, list) and len(p) == 2 for p in weights):
                raise ValueError(f"{where} is damaged: class_weight must be [label, weight] pairs.")
            params["class_weight"] = {label: weight for label, weight in weights}
        return params

    def from_document(self: Any, doc: dict[str, Any], where: str = "the model document") -> Any:
        """Set this estimator from :meth:`to_document`'s dict, validated (errors name ``where``)."""
        params = self._document_params(doc, where)
        classes = decode_labels(field(doc, "classes", dict, where), where)
        n_features = field(doc, "n_features_in", int, where)
        if n_features < 1:
            raise ValueError(f"{where} is damaged: n_features_in is {n_features}.")
        names = doc.get("feature_names_in")
        if names is not None and (not isinstance(names, list) or len(names) != n_features
                                  or not all(isinstance(n, str) for n in names)):
            raise ValueError(f"{where} is damaged: feature_names_in must be {n_features} names.")
        evals_result = field(doc, "evals_result", dict, where)
        vectorizer = doc.get("vectorizer")
        if vectorizer is not None:
            vectorizer = vectorizer_from_document(vectorizer, n_features, where)
        boundaries = doc.get("boundaries", "sequences")
        id_column = doc.get("id_column")
        if boundaries not in ("sequences", "rows") or not isinstance(id_column, (str, type(None))):
            raise ValueError(f"{where} is damaged: boundaries or id_column are malformed.")
        held_out = doc.get("validation_sequences", [])
        if not isinstance(held_out, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**63 for i in held_out
        ):
            raise ValueError(
                f"{where} is damaged: validation_sequences must be a list of sequence positions."
            )
        chosen = doc.get("validation_best_iteration")
        if chosen is not None and (type(chosen) is not int or chosen < 0 or not held_out):
            raise ValueError(
                f"{where} is damaged: validation_best_iteration must be null, or a round "
                "number (>= 0) when validation_sequences lists the held-out sequences."
            )
        decode = doc.get("decode")
        if decode not in (None, *DECODINGS):
            raise ValueError(f"{where} is damaged: decode must be one of {DECODINGS} or null.")
        best_score = doc.get("best_score")
        if best_score is not None and (type(best_score) not in (int, float)
                                       or not np.isfinite(best_score)):
            raise ValueError(f"{where} is damaged: best_score must be a finite number or null.")
        # Built on a fresh estimator and swapped in whole once valid: nothing an earlier
        # fit or load left survives, and a damaged file leaves this estimator unchanged.
        staged = type(self)()
        staged.set_params(**params)
        try:
            staged._check_params()
            staged.booster_ = staged._booster_from_document(
                field(doc, "engine", dict, where), where,
                num_features=n_features, num_labels=len(classes), params=params,
            )  # fmt: skip
            state = staged._load_state()
            staged._state_loaded(state)
        except ValueError as err:
            if where in str(err):
                raise
            raise ValueError(f"{where}: {err}") from None
        if state[0] != len(classes):
            raise ValueError(
                f"{where} is damaged: its CRF has {state[0]} labels for {len(classes)} classes."
            )
        staged._set_best_iteration()
        if doc.get("best_iteration", staged.best_iteration_) != staged.best_iteration_:
            raise ValueError(
                f"{where} is damaged: best_iteration is {doc.get('best_iteration')!r:.20} but "
                f"the model keeps {staged.best_iteration_ + 1} rounds."
            )
        staged.classes_ = classes
        if "allowed_transitions" in staged._get_param_names():
            try:
                staged.constraints_ = resolve_constraints(staged.allowed_transitions, len(classes),
                                                          labels=classes)
            except ValueError as err:
                raise ValueError(f"{where} is damaged: {err}") from None
        staged.n_features_in_ = n_features
        if names is not None:
            staged.feature_names_in_ = np.asarray(names, dtype=object)
        staged.evals_result_ = evals_result
        staged.validation_sequences_ = np.asarray(held_out, dtype=np.int64)
        staged.validation_best_iteration_ = chosen
        staged.boundaries_ = boundaries
        staged.id_column_ = id_column
        staged.vectorizer_ = vectorizer
        if "base_model" in staged._get_param_names():
            staged.base_model_ = None
        if best_score is not None:
            staged.best_score_ = float(best_score)
        if "decode" in staged._get_param_names():  # (files without it: decoded as configured)
            staged.decode_ = decode or ("viterbi" if staged.decode == "auto" else staged.decode)
        return self._swap_in(staged)

    def _swap_in(self, staged):
        """Become ``staged``, a fresh estimator set from a valid document (as loaded); self."""
        staged._params_at_fit_ = staged.get_params(deep=False)
        self.__dict__.clear()
        self.__dict__.update(staged.__dict__)
        return self
