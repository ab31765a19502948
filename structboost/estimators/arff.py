"""Reading MULAN multi-label datasets: ARFF files (dense or sparse, optionally gzipped).

:func:`read_arff_multilabel` returns the features and the ``(n, L)`` 0/1
label matrix that :class:`structboost.estimators.multilabel.ESSTreeCRFClassifier`
takes.
"""

import os
import gzip
import xml.etree.ElementTree as ET

import numpy as np

from .._typing import Floats, Ints


def _open_text(path):
    path = str(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _parse_attribute(line):
    rest = line[len("@attribute") :].strip()
    if rest[0] in "'\"":
        end = rest.index(rest[0], 1)
        name, kind = rest[1:end], rest[end + 1 :].strip()
    else:
        name, kind = (rest.split(None, 1) + [""])[:2]
    if kind.startswith("{"):
        values = [v.strip().strip("'\"") for v in kind.strip("{}").split(",")]
        return name, values
    if kind.lower() not in ("numeric", "real", "integer"):
        raise ValueError(f"ARFF attribute {name!r} has type {kind!r}; only numeric and nominal "
                         "attributes are supported.")
    return name, None


def _value(token, nominal):
    token = token.strip().strip("'\"")
    if token == "?":
        return np.nan
    if nominal is None:
        return float(token)
    try:
        return float(nominal.index(token))
    except ValueError:
        raise ValueError(f"value {token!r} is not one of the nominal values {nominal}.") from None


def _label_names(labels, names):
    if isinstance(labels, (int, np.integer)):
        n_labels = int(labels)
        if not 1 <= n_labels < len(names):
            raise ValueError(
                f"n_labels must be in 1..{len(names) - 1} for {len(names)} attributes; "
                f"got {n_labels}."
            )
        return names[-n_labels:]
    root = ET.parse(str(labels)).getroot()
    wanted = [el.get("name") for el in root.iter() if el.tag.split("}")[-1] == "label"]
    tail = names[-len(wanted) :]
    if not wanted or sorted(wanted) != sorted(tail):
        raise ValueError(
            f"the labels named in {labels} ({wanted[:5]}...) are not the last {len(wanted)} "
            "attributes of the ARFF file; pass the matching XML file or n_labels."
        )
    return tail


def read_arff_multilabel(
    path: str | os.PathLike[str], labels: int | str | os.PathLike[str]
) -> tuple[Floats, Ints, list[str], list[str]]:
    """Read a MULAN multi-label ARFF file (dense or sparse, optionally gzipped).

    Parameters
    ----------
    path : str or path-like
        ``.arff`` or ``.arff.gz``.
    labels : int or str or path-like
        The number of labels (the last attributes) or the MULAN labels XML
        file, whose names must be the last attributes (matched by name; the
        XML order may differ).

    Returns
    -------
    X : (n, d) float64
        Features (nominal ones as their value index, ``?`` as NaN).
    Y : (n, L) int64
        0/1 label indicators, in the ARFF column order.
    feature_names : list of str
    label_names : list of str
    """
    names, nominals, rows = [], [], []
    with _open_text(path) as fh:
        in_data = False
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("%"):
                continue
            if not in_data:
                low = line.lower()
                if low.startswith("@attribute"):
                    name, nominal = _parse_attribute(line)
                    names.append(name)
                    nominals.append(nominal)
                elif low.startswith("@data"):
                    in_data = True
                continue
            rows.append(line)
    if not names:
        raise ValueError(f"{path} has no @attribute lines; is it an ARFF file?")
    label_names = _label_names(labels, names)
    d = len(names)
    data = np.zeros((len(rows), d))
    for r, line in enumerate(rows):
        if line.startswith("{"):
            for item in line.strip("{}").split(","):
                if item.strip():
                    idx, token = item.strip().split(None, 1)
                    data[r, int(idx)] = _value(token, nominals[int(idx)])
        else:
            tokens = line.split(",")
            if len(tokens) != d:
                raise ValueError(
                    f"{path}: data row {r} has {len(tokens)} values but {d} attributes."
                )
            data[r] = [_value(t, nom) for t, nom in zip(tokens, nominals)]
    n_labels = len(label_names)
    Y = data[:, d - n_labels :]
    if not np.isin(Y, (0.0, 1.0)).all():
        raise ValueError(f"{path}: label columns must hold only 0 and 1.")
    return data[:, : d - n_labels], Y.astype(np.int64), names[: d - n_labels], list(label_names)
