"""Engine models checked before any engine sees them.

XGBoost and LightGBM trust their model files (a bad split index or child
link crashes or hangs the process): every load path hands the engine model
to :func:`check_xgboost_json` or :func:`check_lightgbm_text`, which raise a
``ValueError`` naming the file and field.
"""

import json
import math
import re
import weakref

import numpy as np

_INT32_MAX = 2**31 - 1
# XGBoost's marker of a deleted node's split index and of the root's parent.
_XGB_NO_NODE = _INT32_MAX
# Largest category of a categorical split (float32's exact integer range).
_MAX_CATEGORY = 2**24
# Largest tree (nodes) and feature count accepted: both engines index them
# with 32-bit integers.
_MAX_INDEX = _INT32_MAX - 1


class _Damaged(Exception):
    """A problem found in an engine model; turned into a ValueError naming the file."""


def _damaged(where, engine, err):
    return ValueError(
        f"{where}: {engine} cannot read the model it holds, which is damaged: {err}. Use the "
        "file structboost saved unchanged, or retrain the model."
    )


def check_feature_count(n_data, n_model, where="the data"):
    """Refuse data whose ``n_data`` columns differ from the model's ``n_model`` features (``where``:
    what the data is).
    """
    if int(n_data) != int(n_model):
        raise ValueError(
            f"{where} has {int(n_data)} features but the booster was trained on "
            f"{int(n_model)}: give the same feature columns, in the same order, as in training."
        )


# -- shared helpers ------------------------------------------------------------
def _array(values, name, kind, length=None):
    """``values`` as a 1-D int64 (``kind="int"``) or float64 array of ``length``, all finite."""
    if not isinstance(values, list):
        raise _Damaged(f"{name} must be a list; got {type(values).__name__}")
    if length is not None and len(values) != length:
        raise _Damaged(f"{name} has {len(values)} entries; {length} expected")
    allowed = (int,) if kind == "int" else (int, float)
    if not all(type(v) in allowed for v in values):
        bad = next(v for v in values if type(v) not in allowed)
        raise _Damaged(f"{name} must hold {kind} numbers; it holds {bad!r:.40}")
    if kind == "int":
        if values and not -(2**63) <= min(values) <= max(values) < 2**63:
            raise _Damaged(f"{name} holds an integer out of range")
        return np.asarray(values, dtype=np.int64)
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise _Damaged(f"{name} holds NaN or an infinite value")
    return arr


def _in_range(arr, name, low, high):
    """Raise unless every entry of ``arr`` is in ``[low, high)``."""
    bad = (arr < low) | (arr >= high)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _Damaged(f"{name}[{i}] is {int(arr[i])}; it must be in [{low}, {high})")


def _check_tree_links(left, right, internal, root, name):
    """Raise unless ``left``/``right`` links of ``internal`` nodes make one tree from ``root``; the
    mask of nodes reached.
    """
    n = left.size
    seen = np.zeros(n, dtype=bool)
    seen[root] = True
    frontier = np.array([root])
    while frontier.size:
        inner = frontier[internal[frontier]]
        kids = np.concatenate([left[inner], right[inner]])
        if seen[kids].any() or np.unique(kids).size != kids.size:
            node = int(kids[seen[kids]][0]) if seen[kids].any() else int(kids[0])
            raise _Damaged(
                f"{name}: node {node} is reached twice (a child link makes a cycle or joins "
                "two branches)"
            )
        seen[kids] = True
        frontier = kids
    return seen


# -- XGBoost ------------------------------------------------------------------
def _obj(doc, key, name):
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, dict):
        raise _Damaged(f"{name}{key!r} is missing or not an object")
    return value


def _count(value, name, low=0, high=_MAX_INDEX):
    """A count stored as an int or (XGBoost's parameters) a decimal string."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,12}", value):
        value = int(value)
    if type(value) is not int or not low <= value <= high:
        raise _Damaged(f"{name} must be an integer in [{low}, {high}]; got {value!r:.40}")
    return value


def _xgb_base_score(text, n_outputs):
    """Check XGBoost's ``base_score``: one finite number, or a list of ``n_outputs``."""
    if not isinstance(text, str):
        raise _Damaged("learner_model_param 'base_score' must be a string")
    body = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    number = r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?"
    parts = body.split(",")
    if not all(re.fullmatch(number, p) for p in parts) or not all(
        math.isfinite(float(p)) for p in parts
    ):
        raise _Damaged(f"learner_model_param 'base_score' is not a list of numbers: {text!r:.60}")
    if text.startswith("[") and len(parts) not in (1, n_outputs):
        raise _Damaged(f"'base_score' has {len(parts)} values for {n_outputs} outputs")


def _xgb_categories(tree, name, split_type, internal, n):
    """Check a tree's categorical splits (XGBoost's ``categories*`` arrays)."""
    cats = _array(tree.get("categories"), f"{name} 'categories'", "int")
    nodes = _array(tree.get("categories_nodes"), f"{name} 'categories_nodes'", "int")
    m = nodes.size
    segments = _array(tree.get("categories_segments"), f"{name} 'categories_segments'", "int", m)
    sizes = _array(tree.get("categories_sizes"), f"{name} 'categories_sizes'", "int", m)
    _in_range(cats, f"{name} 'categories'", 0, _MAX_CATEGORY)
    _in_range(nodes, f"{name} 'categories_nodes'", 0, n)
    _in_range(sizes, f"{name} 'categories_sizes'", 0, cats.size + 1)
    _in_range(segments, f"{name} 'categories_segments'", 0, cats.size + 1)
    if (segments + sizes > cats.size).any() or np.unique(nodes).size != m:
        raise _Damaged(f"{name}: categories_segments/sizes/nodes are inconsistent")
    categorical = np.zeros(n, dtype=bool)
    categorical[nodes] = True
    if not np.array_equal(categorical, (split_type == 1) & internal):
        raise _Damaged(f"{name}: 'categories_nodes' are not the nodes whose split_type is 1")


def _xgb_tree(tree, t, num_feature, n_outputs):
    """Check one tree of XGBoost's JSON model (scalar or vector leaves)."""
    name = f"tree {t}"
    if not isinstance(tree, dict):
        raise _Damaged(f"{name} is not an object")
    param = _obj(tree, "tree_param", f"{name} ")
    n = _count(param.get("num_nodes"), f"{name} num_nodes", 1)
    deleted = _count(param.get("num_deleted"), f"{name} num_deleted", 0, n - 1)
    width = _count(param.get("size_leaf_vector"), f"{name} size_leaf_vector", 0, n_outputs)
    if _count(param.get("num_feature"), f"{name} num_feature") != num_feature:
        raise _Damaged(f"{name} num_feature differs from the model's ({num_feature})")
    if tree.get("id") != t:
        raise _Damaged(f"{name} has id {tree.get('id')!r:.20}")
    arr = {}
    for key in ("left_children", "right_children", "parents", "split_indices", "split_type",
                "default_left"):  # fmt: skip
        arr[key] = _array(tree.get(key), f"{name} {key!r}", "int", n)
    for key in ("split_conditions", "loss_changes", "sum_hessian"):
        arr[key] = _array(tree.get(key), f"{name} {key!r}", "float", n)
    left, right = arr["left_children"], arr["right_children"]
    internal = left != -1
    vector = width > 1
    leaves = int((~internal).sum())
    _array(tree.get("base_weights"), f"{name} 'base_weights'", "float", n * max(width, 1))
    if vector:
        _array(tree.get("leaf_weights"), f"{name} 'leaf_weights'", "float", leaves * width)
    _in_range(left[internal], f"{name} 'left_children'", 1, n)
    _in_range(right[internal], f"{name} 'right_children'", 1, n)
    if vector:  # a leaf's right link is its row in leaf_weights
        _in_range(right[~internal], f"{name} 'right_children' of a leaf", 0, leaves)
    elif (right[~internal] != -1).any():
        raise _Damaged(f"{name}: a node has a right child but no left child")
    _in_range(arr["split_type"], f"{name} 'split_type'", 0, 2)
    _in_range(arr["default_left"], f"{name} 'default_left'", 0, 2)
    marked = arr["split_indices"] == _XGB_NO_NODE
    live = ~(marked & ~internal)
    if int((~live).sum()) != deleted:
        raise _Damaged(f"{name} marks {int((~live).sum())} nodes deleted, num_deleted {deleted}")
    _in_range(arr["split_indices"][live], f"{name} 'split_indices'", 0, num_feature)
    seen = _check_tree_links(left, right, internal, 0, name)
    if not np.array_equal(seen, live):
        node = int(np.flatnonzero(seen != live)[0])
        raise _Damaged(f"{name}: node {node} is not reached from the root")
    parents = arr["parents"]
    if parents[0] not in (-1, _XGB_NO_NODE):
        raise _Damaged(f"{name}: the root has parent {int(parents[0])}")
    nodes = np.flatnonzero(internal)
    if not (np.array_equal(parents[left[nodes]], nodes)
            and np.array_equal(parents[right[nodes]], nodes)):  # fmt: skip
        raise _Damaged(f"{name}: 'parents' disagree with the child links")
    _xgb_categories(tree, name, arr["split_type"], internal, n)


def _xgb_cats(cats, num_feature):
    """Check the category encoder XGBoost >= 3.1 stores next to the trees (if any)."""
    if cats is None:
        return
    if not isinstance(cats, dict):
        raise _Damaged("'cats' is not an object")
    enc = cats.get("enc")
    if not isinstance(enc, list) or len(enc) not in (0, num_feature):
        raise _Damaged(f"'cats' 'enc' must be a list of 0 or {num_feature} entries")
    segments = _array(cats.get("feature_segments"), "'cats' 'feature_segments'", "int")
    order = _array(cats.get("sorted_idx"), "'cats' 'sorted_idx'", "int")
    if not enc:
        if segments.size or order.size:
            raise _Damaged("'cats' has segments but no encoder")
        return
    if segments.size != num_feature + 1 or segments[0] != 0 or segments[-1] != order.size:
        raise _Damaged("'cats' 'feature_segments' do not cover 'sorted_idx'")
    if (np.diff(segments) < 0).any():
        raise _Damaged("'cats' 'feature_segments' decrease")
    for f, entry in enumerate(enc):
        if not isinstance(entry, dict):
            raise _Damaged(f"'cats' 'enc'[{f}] is not an object")
        values = _array(entry.get("values"), f"'cats' 'enc'[{f}] 'values'", "float")
        offsets = entry.get("offsets")
        count = values.size
        if offsets is not None:  # string categories: offsets into the code points
            offsets = _array(offsets, f"'cats' 'enc'[{f}] 'offsets'", "int")
            if offsets.size and (offsets[0] != 0 or offsets[-1] != values.size
                                 or (np.diff(offsets) < 0).any()):  # fmt: skip
                raise _Damaged(f"'cats' 'enc'[{f}] 'offsets' do not cover its values")
            _in_range(values.astype(np.int64), f"'cats' 'enc'[{f}] 'values'", 0, 0x110000)
            count = max(offsets.size - 1, 0)
        part = order[segments[f]:segments[f + 1]]
        if part.size != count or not np.array_equal(np.sort(part), np.arange(count)):
            raise _Damaged(f"'cats' 'sorted_idx' of feature {f} is not an ordering of its "
                           "categories")  # fmt: skip


def check_xgboost_json(text, where, num_features=None, num_outputs=None):
    """Check XGBoost's JSON model (``save_raw("json")`` decoded) completely before XGBoost loads it.

    Parameters
    ----------
    text : str
    where : str
        The file it came from, for the messages.
    num_features, num_outputs : int, optional
        The feature count and outputs per row it must have.

    Raises
    ------
    ValueError
        Naming ``where`` and the first damaged field.
    """
    try:
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as err:
            raise _Damaged(f"it is not JSON ({err})") from None
        _check_xgboost(doc, num_features, num_outputs)
    except _Damaged as err:
        raise _damaged(where, "XGBoost", err) from None


# XGBoost boosters already checked, with the number of rounds they had then.
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def mark_checked(booster):
    """Record an XGBoost booster built from a checked model (or trained here) as checked."""
    _CHECKED[booster] = booster.num_boosted_rounds()


def check_xgboost_booster(booster):
    """Check an XGBoost booster's model (:func:`check_xgboost_json`) before it predicts, once per
    booster and round count.
    """
    rounds = booster.num_boosted_rounds()
    if _CHECKED.get(booster) != rounds:
        check_xgboost_json(booster.save_raw("json").decode("utf-8"), "the booster")
        _CHECKED[booster] = rounds


def _check_xgboost(doc, num_features, num_outputs):
    if not isinstance(doc, dict) or not isinstance(doc.get("version"), list):
        raise _Damaged("it has no 'version' list")
    learner = _obj(doc, "learner", "")
    param = _obj(learner, "learner_model_param", "learner ")
    num_feature = _count(param.get("num_feature"), "num_feature", 1)
    num_target = _count(param.get("num_target"), "num_target", 1, 2**16)
    num_class = _count(param.get("num_class"), "num_class", 0, 2**16)
    n_outputs = max(num_target, num_class, 1)
    if num_target > 1 and num_class > 0:
        raise _Damaged(f"num_target {num_target} and num_class {num_class} are both set")
    if num_features is not None and num_feature != num_features:
        raise _Damaged(f"num_feature is {num_feature}, but the file's estimator has "
                       f"{num_features} features")  # fmt: skip
    if num_outputs is not None and n_outputs != num_outputs:
        raise _Damaged(f"the model has {n_outputs} outputs (num_target / num_class), but "
                       f"the file's estimator has {num_outputs} labels")  # fmt: skip
    _xgb_base_score(param.get("base_score"), n_outputs)
    attrs = learner.get("attributes", {})
    if not isinstance(attrs, dict) or not all(isinstance(v, str) for v in attrs.values()):
        raise _Damaged("learner 'attributes' must map names to strings")
    for key in ("feature_names", "feature_types"):
        names = learner.get(key, [])
        if (not isinstance(names, list) or len(names) not in (0, num_feature)
                or not all(isinstance(s, str) for s in names)):  # fmt: skip
            raise _Damaged(f"learner {key!r} must be 0 or {num_feature} strings")
    objective = _obj(learner, "objective", "learner ")
    if not isinstance(objective.get("name"), str):
        raise _Damaged("the objective has no name")
    booster = _obj(learner, "gradient_booster", "learner ")
    kind = booster.get("name")
    if kind == "dart":
        weights = _array(booster.get("weight_drop"), "'weight_drop'", "float")
        booster = _obj(booster, "gbtree", "dart ")
    elif kind != "gbtree":
        raise _Damaged(f"gradient_booster {kind!r:.40} is not a tree booster (gbtree or dart)")
    model = _obj(booster, "model", "gbtree ")
    trees = model.get("trees")
    if not isinstance(trees, list):
        raise _Damaged("'trees' must be a list")
    gparam = _obj(model, "gbtree_model_param", "")
    if _count(gparam.get("num_trees"), "num_trees") != len(trees):
        raise _Damaged(f"num_trees is {gparam.get('num_trees')!r:.20} for {len(trees)} trees")
    _count(gparam.get("num_parallel_tree"), "num_parallel_tree", 1)
    if kind == "dart" and weights.size != len(trees):
        raise _Damaged(f"'weight_drop' has {weights.size} entries for {len(trees)} trees")
    info = _array(model.get("tree_info"), "'tree_info'", "int", len(trees))
    _in_range(info, "'tree_info'", 0, n_outputs)
    indptr = _array(model.get("iteration_indptr"), "'iteration_indptr'", "int")
    if (indptr.size == 0 or indptr[0] != 0 or indptr[-1] != len(trees)
            or (np.diff(indptr) < 0).any()):  # fmt: skip
        raise _Damaged("'iteration_indptr' must rise from 0 to the number of trees")
    _xgb_cats(model.get("cats"), num_feature)
    for t, tree in enumerate(trees):
        _xgb_tree(tree, t, num_feature, n_outputs)


# -- LightGBM -----------------------------------------------------------------
_LGB_INT = r"-?[0-9]+"
_LGB_FLOAT = r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?"
# A whole line of space-separated numbers of one kind.
_LINES = {p: re.compile(f"{p}(?: {p})*") for p in (_LGB_INT, _LGB_FLOAT)}
_LGB_HEADER_KEYS = {
    "version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx",
    "feature_names", "feature_infos", "tree_sizes", "monotone_constraints",
}  # fmt: skip
# Arrays of a tree with ``num_leaves - 1`` entries (internal nodes) and ``num_leaves``.
_LGB_INTERNAL = {
    "split_feature": _LGB_INT, "split_gain": _LGB_FLOAT, "threshold": _LGB_FLOAT,
    "decision_type": _LGB_INT, "left_child": _LGB_INT, "right_child": _LGB_INT,
    "internal_value": _LGB_FLOAT, "internal_weight": _LGB_FLOAT, "internal_count": _LGB_INT,
}  # fmt: skip
_LGB_LEAF = {"leaf_value": _LGB_FLOAT, "leaf_weight": _LGB_FLOAT, "leaf_count": _LGB_INT}
_LGB_SCALAR = {"num_leaves": _LGB_INT, "num_cat": _LGB_INT, "is_linear": _LGB_INT,
               "shrinkage": _LGB_FLOAT}  # fmt: skip
_LGB_CATEGORICAL = {"cat_boundaries": _LGB_INT, "cat_threshold": _LGB_INT}
# A linear tree's leaf models (``linear_tree=True``): per leaf a constant, a feature count,
# then every leaf's features and coefficients, each leaf's list closed by an extra space.
_LGB_LINEAR = {"leaf_const": _LGB_FLOAT, "num_features": _LGB_INT,
               "leaf_features": _LGB_INT, "leaf_coeff": _LGB_FLOAT}  # fmt: skip


def _lgb_numbers(text, name, pattern, length):
    """The space-separated numbers of ``text``: ``length`` of them, each matching ``pattern``."""
    parts = text.split(" ") if text else []
    if length is not None and len(parts) != length:
        raise _Damaged(f"{name} has {len(parts)} entries; {length} expected")
    if text and not _LINES[pattern].fullmatch(text):
        bad = next(p for p in parts if not re.fullmatch(pattern, p))
        raise _Damaged(f"{name} holds {bad!r:.40}, not a number of the expected kind")
    if pattern is _LGB_INT:
        if any(len(p) > 11 for p in parts):
            raise _Damaged(f"{name} holds an integer out of range")
        values = np.asarray(parts, dtype=np.int64)
        if values.size and not (-(2**31) <= values.min() and values.max() <= 2**32 - 1):
            raise _Damaged(f"{name} holds an integer out of range")
        return values
    values = np.asarray(parts, dtype=np.float64)
    if not np.isfinite(values).all():
        raise _Damaged(f"{name} holds a number too large for a double")
    return values


def _lgb_pairs(lines, name, bare=()):
    """``key=value`` lines as a dict (``bare`` keys may stand alone); no key twice."""
    pairs = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep and key in bare:
            value = ""
        elif not sep or not re.fullmatch(r"[a-z_]+", key):
            raise _Damaged(f"{name} has a line that is not key=value: {line!r:.60}")
        if key in pairs:
            raise _Damaged(f"{name} sets {key!r} twice")
        pairs[key] = value
    return pairs


def _lgb_linear(pairs, name, leaves, n_features):
    """Check a linear tree's leaf models (none unless ``is_linear=1``)."""
    linear = pairs.get("is_linear", "0")
    if linear not in ("0", "1"):
        raise _Damaged(f"{name} has is_linear={linear!r:.20}")
    given = set(_LGB_LINEAR) & set(pairs)
    if linear == "0" or not given:
        if given or linear == "1":
            raise _Damaged(f"{name} has is_linear={linear} but leaf models {sorted(given)}")
        return
    if given != set(_LGB_LINEAR):
        raise _Damaged(f"{name} is linear without {sorted(set(_LGB_LINEAR) - given)[0]!r}")
    _lgb_numbers(pairs["leaf_const"], f"{name} leaf_const", _LGB_FLOAT, leaves)
    counts = _lgb_numbers(pairs["num_features"], f"{name} num_features", _LGB_INT, leaves)
    _in_range(counts, f"{name} num_features", 0, n_features + 1)
    total = int(counts.sum())
    for key in ("leaf_features", "leaf_coeff"):  # lists of all leaves, spaces between
        values = _lgb_numbers(" ".join(pairs[key].split()), f"{name} {key}", _LGB_LINEAR[key],
                              total)  # fmt: skip
        if key == "leaf_features":
            _in_range(values, f"{name} leaf_features", 0, n_features)


def _lgb_tree(block, t, n_features):
    """Check one ``Tree=t`` block of LightGBM's model text."""
    name = f"Tree={t}"
    lines = block.split("\n")
    if lines[0] != name:
        raise _Damaged(f"tree {t} does not start with {name!r} (tree_sizes are off)")
    if lines[-3:] != ["", "", ""]:
        raise _Damaged(f"{name} does not end with a blank line (tree_sizes are off)")
    pairs = _lgb_pairs(lines[1:-3], name)
    known = {**_LGB_SCALAR, **_LGB_INTERNAL, **_LGB_LEAF, **_LGB_CATEGORICAL, **_LGB_LINEAR}
    unknown = set(pairs) - set(known)
    if unknown:
        raise _Damaged(f"{name} has the unknown field {sorted(unknown)[0]!r}")
    for key in ("num_leaves", "num_cat", "leaf_value", "shrinkage"):
        if key not in pairs:
            raise _Damaged(f"{name} has no {key!r}")
    leaves = int(_lgb_numbers(pairs["num_leaves"], f"{name} num_leaves", _LGB_INT, 1)[0])
    num_cat = int(_lgb_numbers(pairs["num_cat"], f"{name} num_cat", _LGB_INT, 1)[0])
    if not 1 <= leaves <= 2**24 or not 0 <= num_cat < max(leaves, 1):
        raise _Damaged(f"{name} has num_leaves {leaves} and num_cat {num_cat}")
    _lgb_numbers(pairs["shrinkage"], f"{name} shrinkage", _LGB_FLOAT, 1)
    _lgb_linear(pairs, name, leaves, n_features)
    values = {}
    for fields, length in ((_LGB_LEAF, leaves), (_LGB_INTERNAL, leaves - 1)):
        for key, pattern in fields.items():
            if key in pairs:
                # LightGBM writes a one-leaf tree's weights and counts empty.
                empty_ok = leaves == 1 and key in ("leaf_weight", "leaf_count")
                size = None if empty_ok and not pairs[key] else length
                values[key] = _lgb_numbers(pairs[key], f"{name} {key}", pattern, size)
            elif leaves > 1 and key != "leaf_weight" and key != "internal_weight":
                raise _Damaged(f"{name} has no {key!r}")
    if leaves == 1:
        if num_cat:
            raise _Damaged(f"{name} has one leaf and categorical splits")
        return
    inner = leaves - 1
    _in_range(values["split_feature"], f"{name} split_feature", 0, n_features)
    decision = values["decision_type"]
    _in_range(decision, f"{name} decision_type", 0, 16)
    if ((decision >> 2) & 3 == 3).any():
        raise _Damaged(f"{name} decision_type holds an unknown missing-value type")
    left, right = values["left_child"], values["right_child"]
    for key, links in (("left_child", left), ("right_child", right)):
        _in_range(links, f"{name} {key}", -leaves, inner)
    # Nodes: internal 0..inner-1, then leaf l as inner + l (LightGBM writes it ~l);
    # leaves have no children (padding).
    pad = np.zeros(leaves, dtype=np.int64)
    left_ids, right_ids = (
        np.concatenate([np.where(links >= 0, links, inner + ~links), pad]) for links in (left, right)
    )
    is_inner = np.arange(inner + leaves) < inner
    seen = _check_tree_links(left_ids, right_ids, is_inner, 0, name)
    if not seen.all():
        node = int(np.flatnonzero(~seen)[0])
        what = f"node {node}" if node < inner else f"leaf {node - inner}"
        raise _Damaged(f"{name}: {what} is not reached from the root")
    categorical = (decision & 1).astype(bool)
    if num_cat != int(categorical.sum()):
        raise _Damaged(f"{name} has num_cat {num_cat} but {int(categorical.sum())} "
                       "categorical splits")  # fmt: skip
    if num_cat:
        bounds = _lgb_numbers(pairs.get("cat_boundaries", ""), f"{name} cat_boundaries",
                              _LGB_INT, num_cat + 1)  # fmt: skip
        words = _lgb_numbers(pairs.get("cat_threshold", ""), f"{name} cat_threshold",
                             _LGB_INT, None)  # fmt: skip
        if bounds[0] != 0 or bounds[-1] != words.size or (np.diff(bounds) < 0).any():
            raise _Damaged(f"{name} cat_boundaries do not cover cat_threshold")
        _in_range(words, f"{name} cat_threshold", 0, 2**32)
        index = values["threshold"][categorical]
        if not np.array_equal(index, np.round(index)) or ((index < 0) | (index >= num_cat)).any():
            raise _Damaged(f"{name}: a categorical threshold is not a category set index")
    elif "cat_boundaries" in pairs or "cat_threshold" in pairs:
        raise _Damaged(f"{name} has category sets but num_cat 0")


def _lgb_parameters(text):
    """Check the trailing ``parameters:`` section: ``[name: value]`` lines only."""
    for line in text.strip("\n").split("\n"):
        if not re.fullmatch(r"\[[a-z_0-9]+: [^\[\]\"\\\n]*\]", line):
            raise _Damaged(f"the parameters section has the line {line!r:.60}")
        key, value = line[1:-1].split(": ", 1)
        if key == "num_threads" and not (re.fullmatch(r"-?[0-9]{1,6}", value)):
            raise _Damaged(f"parameter num_threads is {value!r:.20}")


def check_lightgbm_text(text, where, num_features=None, num_labels=None):
    """Parse LightGBM's model text (``booster.model_to_string()``) completely before LightGBM loads
    it: header, every tree and the trailing sections; arguments and errors as
    :func:`check_xgboost_json` (``num_labels``: the ``num_class`` it must have).
    """
    try:
        _check_lightgbm(text, num_features, num_labels)
    except _Damaged as err:
        raise _damaged(where, "LightGBM", err) from None


def _check_lightgbm(text, num_features, num_labels):
    if not isinstance(text, str) or not text.startswith("tree\n"):
        raise _Damaged("it does not start with the line 'tree'")
    if "\r" in text or "\x00" in text:
        raise _Damaged("it holds a carriage return or NUL byte")
    start = text.find("\nTree=")
    end = text.find("\nend of trees\n")
    if start < 0 or end < start:
        raise _Damaged("it has no 'Tree=' blocks followed by 'end of trees'")
    header = _lgb_pairs(text[5:start].split("\n")[:-1], "the header", bare=("average_output",))
    if text[start - 1] != "\n":
        raise _Damaged("the header does not end with a blank line")
    unknown = set(header) - _LGB_HEADER_KEYS - {"average_output"}
    if unknown:
        raise _Damaged(f"the header has the unknown or unsupported key {sorted(unknown)[0]!r}")
    for key in ("version", "num_class", "num_tree_per_iteration", "label_index",
                "max_feature_idx", "tree_sizes"):  # fmt: skip
        if key not in header:
            raise _Damaged(f"the header has no {key!r}")
    if header["version"] not in ("v2", "v3", "v4"):
        raise _Damaged(f"version {header['version']!r:.20} is not one LightGBM writes")
    num_class, per_iter, label_index, max_feature = (
        int(_lgb_numbers(header[k], k, _LGB_INT, 1)[0])
        for k in ("num_class", "num_tree_per_iteration", "label_index", "max_feature_idx")
    )
    if not 1 <= num_class <= 2**16 or per_iter != num_class:
        raise _Damaged(f"num_class {num_class} and num_tree_per_iteration {per_iter} differ "
                       "or are out of range")  # fmt: skip
    if num_labels is not None and num_class != num_labels:
        raise _Damaged(f"num_class is {num_class}, but the CRF has {num_labels} labels")
    if label_index != 0:
        raise _Damaged(f"label_index is {label_index}")
    n_features = max_feature + 1
    if not 1 <= n_features <= _MAX_INDEX:
        raise _Damaged(f"max_feature_idx {max_feature} is out of range")
    if num_features is not None and n_features != num_features:
        raise _Damaged(f"max_feature_idx + 1 is {n_features}, but the file's estimator has "
                       f"{num_features} features")  # fmt: skip
    for key in ("feature_names", "feature_infos", "monotone_constraints"):
        if key in header and header[key] and len(header[key].split(" ")) != n_features:
            raise _Damaged(f"{key} does not have {n_features} entries")
    sizes = _lgb_numbers(header["tree_sizes"], "tree_sizes", _LGB_INT, None)
    if sizes.size % num_class:
        raise _Damaged(f"tree_sizes lists {sizes.size} trees, not a multiple of {num_class}")
    body = text[start + 1 : end + 1].encode("utf-8")
    if int(sizes.sum()) != len(body) or (sizes < 1).any():
        raise _Damaged(f"tree_sizes add up to {int(sizes.sum())} bytes, but the trees take "
                       f"{len(body)}")  # fmt: skip
    offset = 0
    for t, size in enumerate(sizes.tolist()):
        try:
            block = body[offset : offset + size].decode("utf-8")
        except UnicodeDecodeError:
            raise _Damaged(f"tree_sizes[{t}] does not end on a tree boundary") from None
        _lgb_tree(block, t, n_features)
        offset += size
    _lgb_tail(text[end + len("\nend of trees\n") :])


def _lgb_tail(tail):
    """Check what follows ``end of trees``: importances, parameters, pandas_categorical."""
    rest = tail.lstrip("\n")
    if rest.startswith("feature_importances:\n"):
        block, _, rest = rest.partition("\n\n")
        for line in block.split("\n")[1:]:
            if not re.fullmatch(r"[^=\n]+=[0-9]+", line):
                raise _Damaged(f"feature_importances has the line {line!r:.60}")
        rest = rest.lstrip("\n")
    if rest.startswith("parameters:\n"):
        block, sep, rest = rest[len("parameters:\n") :].partition("\nend of parameters\n")
        if not sep:
            raise _Damaged("the parameters section has no 'end of parameters'")
        if block:
            _lgb_parameters(block)
        rest = rest.lstrip("\n")
    if rest == "":
        return
    line = rest[: -1] if rest.endswith("\n") else rest
    value = None
    if line.startswith("pandas_categorical:") and "\n" not in line:
        try:
            value = json.loads(line[len("pandas_categorical:") :])
        except (json.JSONDecodeError, RecursionError):
            pass
    ok = value is None or (isinstance(value, list) and all(
        isinstance(cats, list) and all(
            type(c) is str or (type(c) in (int, float) and math.isfinite(c)) for c in cats
        ) for cats in value
    ))  # fmt: skip
    if not ok or (value is None and line != "pandas_categorical:null"):
        raise _Damaged(f"it ends with {rest[:60]!r}, not a pandas_categorical line of "
                       "lists of categories")  # fmt: skip
