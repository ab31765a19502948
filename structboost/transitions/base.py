"""What every linear-potential refit shares: the penalised problem and its solvers.

:class:`PenalisedProblem` holds L-BFGS and the monotone diagonal Newton step
over a parameter vector; :mod:`.chain` and :mod:`.tree` supply the posterior
and the expected counts. The solvers consume sums only (an
:class:`Evaluation`), so a structure may compute them block by block.
"""

import functools
from dataclasses import dataclass

import numpy as np

from ..sequences import weighted_total
from .lbfgs import LBFGSMemory, minimize

#: What an evaluation computes; each level includes the ones before it.
VALUE, GRADIENT, CURVATURE = 0, 1, 2


def identity(values):
    """The allreduce of a single process: ``values`` unchanged."""
    return values


@dataclass
class Evaluation:
    """What the solvers use at one parameter vector, summed over this worker's batch.

    Attributes
    ----------
    log_z : (m,) float64
    expected : (d,) float64 or None
        Weighted expected counts (from level :data:`GRADIENT` on).
    curvature : (d,) float64 or None
        Their curvature bound (level :data:`CURVATURE`).
    posterior : object or None
        The whole batch's messages when it is one block (valid until the next
        pass); None when summed block by block.
    """

    log_z: np.ndarray
    expected: np.ndarray | None = None
    curvature: np.ndarray | None = None
    posterior: object = None

    @property
    def level(self):
        """The highest of :data:`VALUE`, :data:`GRADIENT`, :data:`CURVATURE` it holds."""
        if self.expected is None:
            return VALUE
        return GRADIENT if self.curvature is None else CURVATURE


class PenalisedProblem:
    """Solver machinery shared by every linear-potential refit.

    With fixed node potentials the objective is::

        f(vec) = seq_weight @ log_z(vec) - counts @ vec + reg / 2 * ||vec||^2

    with gradient ``expected - counts + reg * vec``. A subclass sets
    ``seq_weight``, ``counts``, ``reg``, ``num_labels`` and ``param_type``,
    and implements ``_posterior(params, rates, edges)`` and
    ``expected_counts(post, with_curvature)``; one passing its batch in blocks
    overrides :meth:`_evaluate` and :meth:`blocks`. ``newton_scale``
    multiplies the Newton curvature. ``free``, a bool mask over ``vec``, fixes
    the other entries at ``-inf``; :meth:`value` and :meth:`value_and_grad`
    take the free entries. ``allreduce`` sums a float64 array over the
    workers, once per evaluation, before the penalty.
    """

    newton_scale = 1.0
    free = None
    _last = None
    _tapped = None  # the parameter vector of the last pass that was tapped whole
    allreduce = staticmethod(identity)

    def by_length(self):
        """A cheaper equivalent problem and each sequence's index into it, or None (see
        :meth:`~.chain.TransitionProblem.by_length`).
        """
        return None

    def _free_part(self, vec):
        """The free entries of a full parameter vector."""
        return vec if self.free is None else vec[self.free]

    def _full(self, x):
        """The full parameter vector with free entries ``x`` (fixed ones ``-inf``)."""
        if self.free is None:
            return x
        vec = np.full(self.free.shape, -np.inf)
        vec[self.free] = x
        return vec

    def evaluate(self, params, need=VALUE, rates=False, tap=None):
        """The :class:`Evaluation` at ``params`` up to level ``need``, cached until the next vector.

        ``rates``: the mixing rates will be asked for; ``tap(rows, sequences,
        posterior)`` receives every block of a pass over a batch in blocks.
        """
        vec = params.to_vector()
        last = self._last
        if last is not None and np.array_equal(last[0], vec):
            ev = last[1]
            if ev.level >= need:
                return ev
            if ev.posterior is not None and self._sums_from(ev.posterior, need):
                ev.expected, ev.curvature = self.expected_counts(ev.posterior, need >= CURVATURE)
                return ev
        ev = self._evaluate(params, need, rates, tap)
        self._last = (vec, ev)
        return ev

    def _sums_from(self, post, need):
        """Whether the kept posterior ``post`` gives the sums up to ``need`` without another pass."""
        return True

    def _evaluate(self, params, need, rates, tap=None):
        """One message pass over the whole batch, and the sums asked for (no ``tap``: one block)."""
        post = self._posterior(params, rates or need >= CURVATURE, need == GRADIENT)
        ev = Evaluation(post.log_z, posterior=post)
        if need >= GRADIENT:
            ev.expected, ev.curvature = self.expected_counts(post, need >= CURVATURE)
        return ev

    def posterior(self, params, rates=False, need=VALUE):
        """Messages of a one-block batch at ``params``, reusing the last evaluation; ``rates`` and
        ``need`` as :meth:`evaluate`.
        """
        post = self.evaluate(params, need, rates).posterior
        if post is None:
            raise ValueError(
                "this problem passes its batch in several blocks and keeps no posterior of "
                "the whole batch: iterate over blocks(params) instead."
            )
        return post

    def blocks(self, params, rates=False, need=VALUE):
        """``(rows, sequences, posterior)`` of each block at ``params`` (the posterior valid until the
        next block), taking the sums up to ``need`` on the way.
        """
        yield slice(None), slice(None), self.posterior(params, rates, need)

    def _params(self, x):
        """Parameters of ``param_type`` with free entries ``x``."""
        return self.param_type.from_vector(self._full(x), self.num_labels)

    def _local_value(self, x, need=VALUE, rates=False, tap=None):
        """This worker's data term of ``f`` at free parameters ``x`` (no penalty), and its sums."""
        ev = self.evaluate(self._params(x), need, rates, tap)
        return weighted_total(self.seq_weight, ev.log_z) - self._free_part(self.counts) @ x, ev

    def value(self, x):
        """Penalised NLL at free parameters ``x``, up to the constant node-score term."""
        data = self.allreduce(np.array([self._local_value(x)[0]]))[0]
        return data + 0.5 * self.reg * x @ x

    def value_and_grad(self, x, rates=False, tap=None):
        """Penalised NLL (up to the constant node-score term) and its gradient in ``x``; ``rates``,
        ``tap`` as :meth:`evaluate`.
        """
        local, ev = self._local_value(x, GRADIENT, rates, tap)
        summed = self.allreduce(np.concatenate(([local], self._free_part(ev.expected - self.counts))))
        return summed[0] + 0.5 * self.reg * x @ x, summed[1:] + self.reg * x

    def newton_step(self, params, max_halvings=30):
        """One diagonal-bound Newton step (Theorem 4.2), halved until the penalised NLL does not
        rise; the accepted point's evaluation stays cached.
        """
        x = self._free_part(params.to_vector())
        ev = self.evaluate(params, CURVATURE, rates=True)
        f0 = self.value(x)
        local = (self._free_part(ev.expected - self.counts), self._free_part(ev.curvature))
        grad, curvature = np.split(self.allreduce(np.concatenate(local)), 2)
        step = (grad + self.reg * x) / (self.newton_scale * curvature + self.reg + 1e-12)
        for _ in range(max_halvings):
            cand = x - step
            candidate = self._params(cand)
            self.evaluate(candidate, rates=True)
            if self.value(cand) <= f0:
                return candidate
            step *= 0.5
        self.evaluate(params, rates=True)
        return params

    def lbfgs(self, params, max_iter, memory=None, rates=False, tap=None):
        """Warm-started L-BFGS on the free entries from ``params``, at most ``max_iter`` iterations;
        never scores worse than ``params``.

        ``memory``: curvature pairs to continue and update; ``rates``, ``tap``:
        as :meth:`evaluate`, for the last iteration's passes.
        """
        memory = LBFGSMemory() if memory is None else memory
        x0 = self._free_part(params.to_vector())
        memory.begin(x0, self.free)
        last = None
        if rates or tap is not None:
            last = functools.partial(self.value_and_grad, rates=rates, tap=tap)
        x, _ = minimize(self.value_and_grad, x0, max_iter, memory, last=last)
        return self.param_type.from_vector(self._full(x), self.num_labels)

    def tapped(self, params):
        """Whether a tapped pass (:meth:`lbfgs`) handed its caller every block at ``params``."""
        return self._tapped is not None and np.array_equal(self._tapped, params.to_vector())
