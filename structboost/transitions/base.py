"""What every linear-potential refit shares: the penalised problem and its solvers.

:class:`PenalisedProblem` holds the L-BFGS and the monotone diagonal Newton
step over a parameter vector; :mod:`.chain` (transition tables) and
:mod:`.tree` (typed edge potentials) supply the posterior and the expected
counts. ``allreduce`` sums the data terms over workers in a distributed run
(:func:`identity` in one process).

The solvers consume sums only (an :class:`Evaluation`: ``log Z`` per
sequence, the expected counts and their curvature bound), so a structure
may compute them block by block without ever holding the messages of the
whole batch (:class:`~structboost.transitions.chain.TransitionProblem`
does).
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
        ``log Z`` of every sequence.
    expected : (d,) float64 or None
        Weighted expected counts (from level :data:`GRADIENT` on).
    curvature : (d,) float64 or None
        Their curvature bound (level :data:`CURVATURE`).
    posterior : object or None
        The messages of the whole batch when it is one block (valid until
        the problem's next pass); None when the sums were taken block by
        block.
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

    For parameters ``vec`` with fixed node potentials the objective is::

        f(vec) = seq_weight @ log_z(vec) - counts @ vec + reg / 2 * ||vec||^2

    (the penalised NLL up to the constant node-score term), with gradient
    ``expected - counts + reg * vec``. A subclass sets ``seq_weight``,
    ``counts``, ``reg``, ``num_labels`` and ``param_type`` (with
    ``from_vector(vec, num_labels)`` and ``to_vector()``), and implements
    ``_posterior(params, rates, edges)`` (messages with ``log_z``; ``rates``
    and ``edges`` say that the mixing-rate bounds and the expected counts
    without their curvature will be asked for, so that a structure that can
    computes them within its sweep) and
    ``expected_counts(post, with_curvature)``. ``newton_scale`` multiplies the
    curvature bound of the Newton step (2 when two parameter groups are
    bounded separately and updated together). A structure that splits its
    batch into blocks overrides :meth:`_evaluate` and :meth:`blocks`.

    A subclass may also set ``free``, a bool mask over ``vec``: the other
    entries are fixed at ``-inf`` (forbidden moves, see
    :mod:`structboost.objectives.constraints`) and every solver works on the free
    entries only, so the fixed ones carry no penalty and no gradient and
    are never refit. :meth:`value` and :meth:`value_and_grad` take the free
    entries.

    ``allreduce`` sums a float64 array over all workers of a distributed
    training run (``xgboost.collective.allreduce`` with ``Op.SUM``; see
    :mod:`structboost.engines.dask`); the default is :func:`identity`. Every
    data-dependent quantity a solver uses (the data term of ``f``, its
    gradient, the Newton curvature, the majorization bound and the observed
    counts) goes through it, once per evaluation, before the penalty is
    added: every worker then sees the global values, takes the same steps
    and calls it equally often, an empty partition included.
    """

    newton_scale = 1.0
    free = None
    _last = None
    _tapped = None  # the parameter vector of the last pass that was tapped whole
    allreduce = staticmethod(identity)

    def by_length(self):
        """A cheaper equivalent problem and each sequence's index into it, or None (here).

        See :meth:`~.chain.TransitionProblem.by_length`, which finds one when
        every row's node potentials are equal (the first round's).
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
        """The sums at ``params`` up to level ``need``, reusing the last evaluation.

        Parameters
        ----------
        params
            Of ``param_type``.
        need : {VALUE, GRADIENT, CURVATURE}
        rates : bool
            The mixing-rate bounds will be asked for at ``params`` (a hint
            for :meth:`_posterior`; :data:`CURVATURE` implies it).
        tap : callable, optional
            ``tap(rows, sequences, posterior)`` of every block of a pass
            taken here over a batch in several blocks (see :meth:`lbfgs`).

        Returns
        -------
        Evaluation
            Cached until the next parameter vector: an evaluation that holds
            the posterior adds higher levels from it without another pass
            (unless its pass left out what they need: then they take one).
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
        """Messages of the whole batch at ``params``, reusing the last evaluation when it matches.

        ``rates``: the mixing-rate bounds will be asked for (a hint, see the
        class notes; a reused posterior computes them when asked); ``need``:
        the sums the pass takes on the way (:meth:`evaluate`). Only for a
        batch that is one block; see :meth:`blocks`.
        """
        post = self.evaluate(params, need, rates).posterior
        if post is None:
            raise ValueError(
                "this problem passes its batch in several blocks and keeps no posterior of "
                "the whole batch: iterate over blocks(params) instead."
            )
        return post

    def blocks(self, params, rates=False, need=VALUE):
        """The posterior at ``params`` block by block.

        ``need``: the level of sums (:meth:`evaluate`) the pass takes on the
        way, so that :meth:`evaluate` at ``params`` up to it afterwards
        costs no pass (here the posterior of the whole batch is kept, from
        which they follow).

        Yields
        ------
        rows, sequences : slice
            The block's rows and sequences within the batch.
        posterior
            Its messages, valid until the next block (here one block: the
            whole batch, reusing the last evaluation when it matches).
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
        """Penalised NLL (up to the constant node-score term) and its gradient in ``x``.

        ``rates`` and ``tap`` as for :meth:`evaluate`.
        """
        local, ev = self._local_value(x, GRADIENT, rates, tap)
        summed = self.allreduce(
            np.concatenate(([local], self._free_part(ev.expected - self.counts)))
        )
        return summed[0] + 0.5 * self.reg * x @ x, summed[1:] + self.reg * x

    def newton_step(self, params, max_halvings=30):
        """One diagonal-bound Newton step (Theorem 4.2), halved until it descends.

        The bound of Lemma 2.1 holds to second order only, so a full step
        taken far from the optimum (where some ``p (1 - p)`` are tiny) can
        overshoot; the step is halved until the penalised NLL does not rise.
        The accepted point's evaluation stays cached for the caller. Both
        message passes (at ``params`` and at the candidate) compute the
        mixing rates within their sweeps: the edge bound needs them at
        ``params``, and the caller's node bound at the accepted point.
        """
        x = self._free_part(params.to_vector())
        ev = self.evaluate(params, CURVATURE, rates=True)
        f0 = self.value(x)
        grad, curvature = np.split(
            self.allreduce(
                np.concatenate(
                    (self._free_part(ev.expected - self.counts), self._free_part(ev.curvature))
                )
            ),
            2,
        )
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
        """Warm-started L-BFGS on the free entries, at most ``max_iter`` iterations.

        Parameters
        ----------
        params
            Start (the last round's parameters, of ``param_type``).
        max_iter : int
        memory : LBFGSMemory, optional
            Curvature pairs to continue (kept when the last refit with it
            returned ``params`` over the same free entries) and to update;
            an objective keeps one across rounds. A fresh one when None.
        rates : bool
            The caller asks for the mixing-rate bounds at the result: the
            passes of the last iteration, whose point a refit that runs all
            ``max_iter`` iterations returns, compute them within their sweeps
            (instead of a pass of their own afterwards).
        tap : callable, optional
            ``tap(rows, sequences, posterior)``, called with every block of
            the last iteration's passes where a batch in several blocks keeps
            no posterior (:meth:`blocks`; ``rates`` as asked): the caller's
            G and H at the result without a pass of their own, when
            :meth:`tapped` says the last tapped pass was at the result.

        Returns
        -------
        ``param_type``
            Never scores worse than ``params``; unless a line search failed,
            its messages are the cached ones.
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
