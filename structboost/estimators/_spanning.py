"""Numba kernel: maximum spanning trees of many small dense graphs (Prim's algorithm)."""

import numpy as np

from .._config import CACHE, njit


@njit(cache=CACHE)
def maximum_spanning_parents(weights):
    """Maximum spanning tree of each graph, as parents rooted at node 0.

    Parameters
    ----------
    weights : (m, L, L) float64
        Symmetric edge weights of ``m`` complete graphs on ``L`` nodes
        (``-inf`` allowed; the diagonal is ignored).

    Returns
    -------
    (m, L) int64
        ``parents[i, v]`` is ``v``'s parent in graph ``i``'s tree, ``-1``
        for node 0. Ties go to the lowest node index.
    """
    m, n_nodes, _ = weights.shape
    parents = np.empty((m, n_nodes), dtype=np.int64)
    in_tree = np.zeros(n_nodes, dtype=np.bool_)
    best = np.empty(n_nodes)
    link = np.empty(n_nodes, dtype=np.int64)
    for i in range(m):
        in_tree[:] = False
        in_tree[0] = True
        parents[i, 0] = -1
        for v in range(1, n_nodes):
            best[v] = weights[i, 0, v]
            link[v] = 0
        for _ in range(n_nodes - 1):
            pick = -1
            for v in range(1, n_nodes):
                if not in_tree[v] and (pick < 0 or best[v] > best[pick]):
                    pick = v
            in_tree[pick] = True
            parents[i, pick] = link[pick]
            for v in range(1, n_nodes):
                if not in_tree[v] and weights[i, pick, v] > best[v]:
                    best[v] = weights[i, pick, v]
                    link[v] = pick
    return parents
