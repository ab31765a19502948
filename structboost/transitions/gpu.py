"""The transition problem with messages on a CUDA GPU (see :mod:`structboost.inference.gpu`)."""

import numpy as np

from ..inference.gpu import DevicePosterior
from .base import PenalisedProblem, identity
from .chain import TransitionParams, TransitionProblem


class DeviceTransitionProblem(PenalisedProblem):
    """:class:`~structboost.transitions.chain.TransitionProblem` with device messages.

    The solvers (L-BFGS and the diagonal Newton step) run on the host over
    ``K^2 + 2K`` parameters; each evaluation runs the message pass and the
    parameter-sized sums on the device and copies back only ``log_z`` and
    those sums.

    Parameters
    ----------
    unary : DeviceUnary
    structure : DeviceStructure
    counts : (K*K + 2K,) float64
    reg : float
    free : (K*K + 2K,) bool ndarray, optional
    allreduce : callable, optional
        Sums over the workers of a distributed fit.
    """

    param_type = TransitionParams
    newton_scale = TransitionProblem.newton_scale

    def __init__(self, unary, structure, counts, reg, free=None, allreduce=identity):
        self.allreduce = allreduce
        self.free = None if free is None or free.all() else free
        self.unary = unary
        self.structure = structure
        self.seq_weight = structure.seq_weight
        self.counts = counts
        self.reg = float(reg)
        self.num_labels = unary.shape[1]

    def _posterior(self, params, rates, edges):  # the device computes both on demand
        return DevicePosterior(self.unary, self.structure, params.transitions, params.start,
                               params.end)

    def expected_counts(self, post, with_curvature=False):
        """As :meth:`TransitionProblem.expected_counts
        <structboost.transitions.chain.TransitionProblem.expected_counts>`.

        Returns
        -------
        expected : (K*K + 2K,) float64
        curvature : (K*K + 2K,) float64 or None
        """
        st = self.structure
        edge_gamma = post.edge_gamma() if with_curvature else st.d_row_weight
        node_gamma = post.node_gamma("mixing") if with_curvature else st.d_row_weight
        trans, trans_curv, ends = post.weighted_sums(edge_gamma, node_gamma, with_curvature)
        part = post.log_space
        if part is not None:
            pair_w = np.repeat(self.seq_weight, np.diff(st.offsets))[part.rows]
            trans += np.einsum("e,eab->ab", pair_w, part.pairwise)
            if with_curvature:
                pair_w = pair_w * edge_gamma.copy_to_host()[part.rows]
                trans_curv += np.einsum("e,eab->ab", pair_w, part.pairwise * (1.0 - part.pairwise))
        expected = np.concatenate((trans.ravel(), ends[0][0], ends[1][0]))
        if not with_curvature:
            return expected, None
        curvature = np.concatenate((np.maximum(trans_curv, 0.0).ravel(), ends[0][1], ends[1][1]))
        return expected, curvature
