"""The JSON model file of the estimators whose fitted model is a few arrays
(:class:`~structboost.LinearChainCRF`, :class:`~structboost.LatentLogLinearClassifier`).

``save_model(path)`` writes the parameters, fitted arrays and labels as one
JSON document; ``load_model(path)`` checks every array's shape and values
before use and runs no code.
"""

from typing import Any, TypeVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..engines import model_io

_FORMAT = "structboost-array-model"
_VERSION = 1
_HINT = "write one with the estimator's save_model(path)"

_Self = TypeVar("_Self", bound="ArrayModelFile")


class ArrayModelFile:
    """``save_model`` / ``load_model`` of an estimator whose model is float arrays.

    The estimator declares :attr:`_fitted_arrays` (attribute -> dimension
    names such as ``("p", "K")``; equal names, equal sizes) and may override
    :meth:`_arrays` and :meth:`_set_arrays`.
    """

    #: Fitted array attribute -> the names of its dimensions.
    _fitted_arrays: dict[str, tuple[str, ...]] = {}

    def _arrays(self) -> dict[str, np.ndarray]:
        """The fitted arrays by name (:attr:`_fitted_arrays`)."""
        return {name: np.asarray(getattr(self, name)) for name in self._fitted_arrays}

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted attributes from checked arrays."""
        for name, value in arrays.items():
            setattr(self, name, value)

    def save_model(self, path: Any) -> None:
        """Write the fitted estimator to ``path`` as one JSON file (replaced whole or not at all)."""
        check_is_fitted(self)
        params = self.get_params(deep=False)  # type: ignore[attr-defined]
        model_io.check_json_params(params)
        classes = getattr(self, "classes_", None)
        body = {
            "estimator": type(self).__name__,
            "params": params,
            "arrays": {name: value.tolist() for name, value in self._arrays().items()},
            "classes": None if classes is None else model_io.encode_labels(classes),
            "n_iter": int(getattr(self, "n_iter_", 0)),
        }
        model_io.write_document(path, _FORMAT, _VERSION, body)

    def load_model(self: _Self, path: Any) -> _Self:
        """Read a file of :meth:`save_model` into this estimator, checked field by field; returns
        self.

        Raises
        ------
        ValueError
            The file is not such a model of this estimator, or a field is damaged.
        """
        doc = model_io.read_document(path, _FORMAT, _VERSION, _HINT)
        where = f"{path}"
        name = model_io.field(doc, "estimator", str, where)
        if name != type(self).__name__:
            raise ValueError(
                f"{where} holds a {name}, not a {type(self).__name__}: load it with {name}()."
            )
        params = model_io.field(doc, "params", dict, where)
        known = set(self.get_params(deep=False))  # type: ignore[attr-defined]
        if set(params) != known:
            raise ValueError(f"{where} is damaged: its parameters are not {sorted(known)}.")
        stored = model_io.field(doc, "arrays", dict, where)
        arrays = _checked_arrays(stored, self._fitted_arrays, where)
        classes = doc.get("classes")
        # Built on a fresh estimator and swapped in whole once valid: a damaged file
        # leaves this one unchanged.
        staged: Any = type(self)()
        staged.set_params(**params)
        if classes is not None:
            staged.classes_ = model_io.decode_labels(classes, where)
        staged._set_arrays(arrays)
        staged.n_iter_ = model_io.field(doc, "n_iter", int, where)
        self.__dict__.clear()
        self.__dict__.update(staged.__dict__)
        return self


def _checked_arrays(stored, shapes, where):
    """``{name: float64 array}`` of ``stored``, with the dimensions ``shapes`` declares."""
    if set(stored) != set(shapes):
        raise ValueError(f"{where} is damaged: its arrays are not {sorted(shapes)}.")
    sizes: dict[str, int] = {}
    arrays = {}
    for name, dims in shapes.items():
        try:
            value = np.asarray(stored[name], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{where} is damaged: {name!r} is not an array of numbers.") from None
        if value.ndim != len(dims) or not np.isfinite(value).all():
            raise ValueError(
                f"{where} is damaged: {name!r} must be a finite {len(dims)}-d array; got "
                f"shape {value.shape}."
            )
        for dim, size in zip(dims, value.shape):
            if sizes.setdefault(dim, size) != size:
                raise ValueError(
                    f"{where} is damaged: {name!r} has {size} along {dim!r}, other arrays "
                    f"{sizes[dim]}."
                )
        arrays[name] = value
    if sizes.get("K", 2) < 2:
        raise ValueError(f"{where} is damaged: a model needs at least 2 labels.")
    return arrays
