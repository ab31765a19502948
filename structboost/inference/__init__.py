"""Exact CRF inference, numpy in and out (the contract of DESIGN.md).

Chains (:mod:`.chain`) and trees (:mod:`.tree`) are two structures of one
design: each public wrapper validates its arrays and hands C-contiguous
float64 to the numba kernels beside it (``_chain``, ``_chain_viterbi``, ``_tree``), which import
nothing of the engines.
"""

from .chain import (
    GAMMA_METHODS,
    edge_gamma,
    edge_marginals,
    forward_backward,
    gamma,
    sequence_nll,
    viterbi,
)
from .tree import (
    tree_edge_gamma,
    tree_edge_marginals,
    tree_forward_backward,
    tree_gamma,
    tree_nll,
    tree_viterbi,
)

__all__ = [
    "GAMMA_METHODS",
    "edge_gamma",
    "edge_marginals",
    "forward_backward",
    "gamma",
    "sequence_nll",
    "tree_edge_gamma",
    "tree_edge_marginals",
    "tree_forward_backward",
    "tree_gamma",
    "tree_nll",
    "tree_viterbi",
    "viterbi",
]
