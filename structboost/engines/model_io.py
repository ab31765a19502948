"""Model files that cannot run code: one JSON document per model.

``save_model`` and the tagger's ``save`` write ``{"format": "structboost-...",
"version": 1, ...}`` holding the engine's model, the CRF state
(:func:`structboost.engines.state.state_dict`), the label encoding and, for
the tagger, the vocabulary. Reading validates every field; nothing is
unpickled.
"""

import json
import re
from pathlib import Path

import numpy as np

from .._io import atomic_write_text

# A file of write_document begins with its format: ``{"format": "structboost-...",``.
_FORMAT_FIELD = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"([A-Za-z0-9_.-]{1,100})"')
_HEAD_BYTES = 256


def write_document(path, kind, version, body):
    """Write ``{"format": kind, "version": version, **body}`` as JSON to ``path``, replacing it only
    once complete (``-inf`` as ``-Infinity``).
    """
    doc = {"format": kind, "version": version, **body}
    atomic_write_text(path, json.dumps(doc))


def read_document(path, kind, version, hint):
    """The checked JSON object of a file written by :func:`write_document` with format ``kind`` and
    ``version``; a ``ValueError`` (with ``hint``: how to make such a file) for a missing file, a
    pickle, not JSON, or another format or version.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such model file; {hint}.")
    with path.open("rb") as handle:  # the format first, before a large file is read whole
        head = handle.read(_HEAD_BYTES)
    if head[:1] == b"\x80":  # the PROTO opcode that starts every pickle since protocol 2
        raise ValueError(
            f"{path} is a pickle (the model format of structboost before 0.2). Pickles can run "
            f"code when loaded, so structboost no longer reads them as model files: {hint} "
            "again, which writes JSON."
        )
    found = _FORMAT_FIELD.match(head)
    if found is None:
        raise ValueError(
            f"{path} is not a structboost model file (a JSON object whose first field is "
            f'"format"); {hint}.'
        )
    if found.group(1).decode("utf-8", "replace") != kind:
        raise ValueError(f"{path} is not a {kind} file (format {found.group(1).decode()!r}); {hint}.")
    doc = parse_json(path.read_bytes(), str(path), hint)
    if not isinstance(doc, dict) or doc.get("format") != kind:
        raise ValueError(f"{path} is not a {kind} file: its format field is damaged; {hint}.")
    if doc.get("version") != version:
        raise ValueError(
            f"{path} has {kind} version {doc.get('version')!r}; this structboost reads version "
            f"{version}. Load it with the structboost release that wrote it, or {hint} again."
        )
    return doc


def parse_json(raw, where, fix):
    """The JSON value of ``raw`` (str or UTF-8 bytes), or a ValueError naming ``where`` and ``fix``
    (also for too deep nesting).
    """
    try:
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        detail = "nested too deeply" if isinstance(err, RecursionError) else err
        raise ValueError(f"{where} is damaged: it is not valid JSON ({detail}); {fix}.") from None


def check_json_params(params):
    """Raise a ValueError naming the first parameter JSON cannot hold (``{name: value}``)."""
    for name, value in params.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(
                f"parameter {name}={value!r} cannot be written to a JSON model file: set it "
                "to a number, string, list or dict, or pickle/joblib the estimator."
            ) from None


def field(doc, name, types, where):
    """``doc[name]`` if it is an instance of ``types``, else a ValueError naming it."""
    value = doc.get(name) if isinstance(doc, dict) else None
    if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
        raise ValueError(f"{where} is damaged: field {name!r} is missing or of the wrong type.")
    return value


def encode_labels(labels):
    """JSON-ready ``{"dtype", "values"}`` of a 1-D array of str, int, float or bool labels."""
    labels = np.asarray(labels)
    kind = labels.dtype.kind
    if kind == "O" and all(isinstance(v, str) for v in labels.tolist()):
        kind = "U"
    if kind not in "Uiubf":
        raise ValueError(
            f"labels of dtype {labels.dtype} cannot be saved as JSON: use str, int, float or "
            "bool labels, or pickle/joblib the estimator."
        )
    names = {"U": "str", "i": "int", "u": "int", "b": "bool", "f": "float"}
    return {"dtype": names[kind], "values": labels.tolist()}


def decode_labels(doc, where):
    """Inverse of :func:`encode_labels`, validated: a sorted, distinct 1-D array."""
    dtypes = {"str": str, "int": np.int64, "bool": bool, "float": np.float64}
    dtype = field(doc, "dtype", str, where)
    values = field(doc, "values", list, where)
    kinds = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}
    if dtype not in dtypes or not all(
        isinstance(v, kinds[dtype]) and (dtype in ("bool", "int") or not isinstance(v, bool))
        for v in values
    ):
        raise ValueError(f"{where} is damaged: labels must be a list of {dtype} values.")
    if dtype == "int" and values and max(values) >= 2**63:  # uint64 labels
        if not 0 <= min(values) <= max(values) < 2**64:
            raise ValueError(f"{where} is damaged: an int label is beyond 64 bits.")
        dtypes["int"] = np.uint64
    elif dtype == "int" and values and min(values) < -(2**63):
        raise ValueError(f"{where} is damaged: an int label is beyond 64 bits.")
    labels = np.asarray(values, dtype=dtypes[dtype])
    if labels.size < 2 or not np.array_equal(np.unique(labels), labels):
        raise ValueError(f"{where} is damaged: labels must be at least 2, distinct and sorted.")
    return labels
