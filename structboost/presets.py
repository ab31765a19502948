"""Named presets: the structural choices that the defaults leave alone, one line each.

The estimators' defaults are one setting for every dataset. Three choices
depend on the data and no default serves every kind well, so they come as
presets: parameter dicts to unpack into the constructor (or into
``set_params``), as XGBoost users pass parameter dicts::

    from structboost import XGBCRFClassifier
    from structboost.presets import preset

    clf = XGBCRFClassifier(**preset("dense"))              # OCR-like data
    clf = XGBCRFClassifier(**preset("dense", max_depth=6))  # one value overridden
    search = GridSearchCV(XGBCRFClassifier(**preset("sparse-text")), {...})

A preset is plain parameters: ``get_params``, ``clone``, grid searches and
the model file see them as if typed in by hand, and an explicit keyword
of :func:`preset` wins over the preset's value. Every preset keeps the
automatic early stopping of the defaults (``early_stopping="auto"``,
``n_estimators=None``).

The presets and what they were chosen on (validation parts only, never a
test fold; the numbers are in the project's benchmarks/README.md, section
"Automatic early stopping (issue 30)"):

``"dense"``
    Dense features and many labels (handwritten letters: 128 pixels, 26
    labels). One multi-output tree of depth 8 per round
    (``multi_strategy="multi_output_tree"``) instead of one tree per label:
    every split serves all the labels' scores, which dense pixel features
    share. The Newton transition step and a learning rate of 0.1 (the
    automatic stop's bound of 1000 rounds leaves room for the 2-3x more
    rounds it takes). XGBoost estimators only (LightGBM grows no vector-leaf
    trees), and XGBoost gives no SHAP values (``pred_contribs``) for such
    trees.
``"sparse-text"``
    Sparse lexical features (words, affixes, shapes: tens of thousands of
    one-hot columns, as :class:`structboost.text.lexical.TokenFeatures`
    makes). One tree per label, the engines' default (so the preset does
    not name ``multi_strategy``, which LightGBM does not know): each label
    splits on its own few indicator columns, and vector-leaf trees cost
    several times the time there for no gain. The Newton transition step.
    Both engines. Chosen with the tag scheme's constraints
    (``allowed_transitions``), as for named entities: without them the
    Newton step starts much slower on text (1,000 CoNLL-2003 sentences,
    training NLL per sentence after 20 rounds 4.0 against 0.81 with the
    default L-BFGS step), so unconstrained tags are better served by the
    defaults.
``"per-token"``
    Scored position by position (residues, frames, letters) where the
    features already carry the context, as windows do, and the labels'
    chain adds little: ``predict`` returns each position's most probable
    label under the posterior marginals (``decode="marginal"``) instead of
    the single most probable sequence, and the automatic early stopping
    watches the NLL, which scores those marginals. The Viterbi path of a
    noisy chain commits to long runs and loses per-position accuracy
    (protein secondary structure, 3 splits of the training proteins: the
    validation parts 61.14% against 57.86% for the defaults and 60.44% for
    LogitBoost). The labels of neighbours need not form an allowed path,
    so tag schemes with constraints (IOB2 spans) keep the defaults. Both
    engines.
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
        The preset (see :mod:`structboost.presets` for what each
        sets and the measurements behind it).
    **overrides
        Estimator parameters that replace the preset's values or add to them.

    Returns
    -------
    dict
        Keyword arguments for an estimator's constructor or ``set_params``.

    Raises
    ------
    ValueError
        When ``name`` is not a preset.

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
