"""XGBoost wiring for tree CRFs: objective, metric, recorder.

A ``DMatrix`` carries instance boundaries (``group=``) but not the tree
structure: that reaches the objective through a registry keyed weakly by
the ``DMatrix`` (:func:`tree_dmatrix`, or :func:`register_tree` /
``obj.register`` on a grouped one). Prediction takes the structure
explicitly. The typed edge potentials live on the booster as the JSON
attribute ``structboost_tree_crf``.
"""

import weakref
from typing import Any

import numpy as np
import xgboost as xgb

from .._typing import ArrayLike
from ..sequences import resolve_lengths
from ..objectives.params import TREE_PARAMS, TREE_SOLVERS, ObjectiveSpec, fill_doc
from ..objectives.tree import TreeCRFObjective, TreeLabelBatch
from ..transitions.tree import TreeTransitionParams
from .xgboost import XGBCRFObjective, dmatrix_lengths

TREE_STATE_KEY = "structboost_tree_crf"
_STRUCTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def register_tree(
    dmat: xgb.DMatrix, parents: ArrayLike, edge_types: ArrayLike | None = None
) -> xgb.DMatrix:
    """Attach tree structure to a grouped DMatrix (``group=`` or sorted ``qid=``); returns ``dmat``.

    Parameters
    ----------
    dmat : xgboost.DMatrix
    parents : (n,) array-like of int
        Parent of each row within its instance, ``-1`` for a root.
    edge_types : (n,) array-like of int, optional
        Type of the edge to each row's parent; all 0 if None.
    """
    n = dmat.num_row()
    parents = np.asarray(parents)
    if parents.shape != (n,):
        raise ValueError(f"parents must have one entry per row ({n}); got shape {parents.shape}.")
    if edge_types is not None and np.shape(edge_types) != (n,):
        raise ValueError(
            f"edge_types must have one entry per row ({n}); got shape {np.shape(edge_types)}."
        )
    dmatrix_lengths(dmat)
    _STRUCTURES[dmat] = (parents.copy(), None if edge_types is None else np.asarray(edge_types))
    return dmat


def tree_dmatrix(X: Any, label: ArrayLike | None = None, lengths: ArrayLike | None = None,
                 parents: ArrayLike | None = None, edge_types: ArrayLike | None = None, *,
                 groups: ArrayLike | None = None, weight: ArrayLike | None = None,
                 **kwargs: Any) -> xgb.DMatrix:
    """Build a DMatrix of tree instances and register its structure.

    Parameters
    ----------
    X : (n, d) array-like
    label : (n,) array-like of int, optional
    lengths : (m,) array-like of int, optional
        Rows per instance (or give ``groups``, a per-row instance id).
    parents : (n,) array-like of int
        Parent of each row within its instance, ``-1`` for a root.
    edge_types : (n,) array-like of int, optional
    weight : (m,) array-like, optional
        One weight per instance.
    **kwargs
        Passed to :class:`xgboost.DMatrix`.

    Returns
    -------
    xgboost.DMatrix
    """
    if parents is None:
        raise ValueError("parents is required: the parent of each row within its instance.")
    n = np.shape(X)[0]
    lens = resolve_lengths(n, groups=groups, lengths=lengths)
    dmat = xgb.DMatrix(X, label=label, group=lens, weight=weight, **kwargs)
    return register_tree(dmat, parents, edge_types)


def tree_structure(dmat):
    """``(parents, edge_types)`` registered for ``dmat``, or a clear error."""
    entry = _STRUCTURES.get(dmat)
    if entry is None:
        raise ValueError(
            "this DMatrix has no tree structure: build it with "
            "structboost.xgboost.tree_dmatrix(X, y, lengths, parents, edge_types) or call "
            "structboost.xgboost.register_tree(dmat, parents, edge_types) first."
        )
    return entry


class XGBTreeCRFObjective(XGBCRFObjective):
    """A tree-CRF objective for ``xgboost.train(obj=...)`` (build with :func:`tree_crf_objective`).

    ``obj(predt, dtrain)`` refits the typed edge potentials and returns
    ``(grad, hess)``, both ``(n, K)``, on any DMatrix whose structure is
    registered.

    Attributes
    ----------
    crf : TreeCRFObjective
    """

    state_key = TREE_STATE_KEY
    param_type = TreeTransitionParams

    @property
    def n_edge_types(self):
        return self.crf.n_edge_types

    def register(self, dmat, parents, edge_types=None):
        """Attach tree structure to ``dmat`` (see :func:`register_tree`)."""
        return register_tree(dmat, parents, edge_types)

    def _build_batch(self, dmat):
        parents, edge_types = tree_structure(dmat)
        return TreeLabelBatch.build(
            dmat.get_label(), dmatrix_lengths(dmat), parents, self.num_labels, self.n_edge_types,
            edge_types, dmat.get_weight()
        )


@fill_doc(*TREE_PARAMS, solvers=TREE_SOLVERS)
def tree_crf_objective(
    num_labels: int, n_edge_types: int = 1, spec: ObjectiveSpec | None = None, **params: Any
) -> XGBTreeCRFObjective:
    """Build a tree-CRF objective for ``xgboost.train``.

    Parameters
    ----------
    num_labels : int
        Number of labels K; the booster needs ``num_target=K``.
    n_edge_types : int
        Edge types, each with its own ``(K, K)`` potential.
    spec : ObjectiveSpec, optional
        Settings the keywords below change.
    {objective_params}

    Returns
    -------
    XGBTreeCRFObjective
    """
    return XGBTreeCRFObjective(TreeCRFObjective(num_labels, n_edge_types, spec, **params))


__all__ = [
    "XGBTreeCRFObjective",
    "register_tree",
    "tree_crf_objective",
    "tree_dmatrix",
    "tree_structure",
]
