"""Named presets: parameter dicts for the structural choices that depend on the data.

``XGBCRFClassifier(**preset("dense", max_depth=6))``: a preset is plain
parameters (``get_params``, ``clone`` and the model file see them); a keyword
of :func:`preset` wins over the preset's value. Every preset keeps automatic
early stopping.

``"dense"``
    Dense features and many labels (OCR): one multi-output tree of depth 8
    per round, ``learning_rate=0.1``, the Newton transition step. XGBoost
    only; XGBoost gives no SHAP values for such trees.
``"sparse-text"``
    Sparse lexical features (:class:`structboost.text.lexical.TokenFeatures`)
    with a tag scheme's ``allowed_transitions``: the Newton transition step
    (unconstrained tags are better served by the defaults). Both engines.
``"per-token"``
    Windows that already carry the context (residues, frames):
    ``decode="marginal"``, and automatic early stopping on the NLL. The
    predicted labels need not form an allowed path, so constrained tag
    schemes keep the defaults. Both engines.
"""

from types import MappingProxyType
from typing import Any

#: The presets by name (read-only); :func:`preset` returns a copy to unpack.
PRESETS = MappingProxyType({
    "dense": MappingProxyType({
        "multi_strategy": "multi_output_tree",
        "max_depth": 8,
        "learning_rate": 0.1,
        "transition_solver": "newton",
    }),
    "sparse-text": MappingProxyType({
        "transition_solver": "newton",
    }),
    "per-token": MappingProxyType({
        "decode": "marginal",
    }),
})  # fmt: skip


def preset(name: str, **overrides: Any) -> dict[str, Any]:
    """The parameters of a named preset, with ``overrides`` on top.

    Parameters
    ----------
    name : {"dense", "sparse-text", "per-token"}
        The preset (see :mod:`structboost.presets`).
    **overrides
        Estimator parameters that replace the preset's values or add to them.

    Returns
    -------
    dict
        Keyword arguments for an estimator's constructor or ``set_params``.

    Examples
    --------
    >>> from structboost.presets import preset
    >>> preset("sparse-text")
    {'transition_solver': 'newton'}
    >>> preset("dense", learning_rate=0.3)["learning_rate"]
    0.3
    """
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(
            f"preset {name!r} is not one of {sorted(PRESETS)}: pick one of those, or pass the "
            "parameters themselves."
        )
    return {**PRESETS[name], **overrides}
