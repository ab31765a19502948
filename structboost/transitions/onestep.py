"""The transition step of a one-pass round: ``O(K^2)`` work on the sums of the round's own pass.

A round's pass at ``(F_r, theta_r)`` yields the node G and H and the summed
expected counts, from which :class:`OneStep` takes the step ``S_r`` that the
*next* round's pass applies first: ``theta_(r+1) = theta_r + S_r``. Trees and
transitions step together from one pass (Algorithm 1 of Chen et al. 2015);
``theta`` lags the node scores by one round.

``"newton"``
    The diagonal bound step of Theorem 4.2 scaled by ``damping`` (no
    halving search). With ``step="bound"`` it never raises the NLL at
    learning rates up to 1, as ``f`` is jointly convex:
    ``f(u + d, t + S) <= (f(u + 2d, t) + f(u, t + 2S)) / 2``.
``"lbfgs"``
    :data:`DAMPING` times the quasi-Newton step of pairs from consecutive
    rounds (``s = S_(r-1)``, ``y`` the change of the penalised gradient,
    kept when the data term curves positively along ``s``), at most
    :data:`GROWTH` times the last step.

The first :data:`WARMUP` rounds refit before their pass (the first from
scratch, a chain's over one sequence per length,
:meth:`~.chain.TransitionProblem.by_length`; the others for
:data:`WARMUP_ITER` iterations). Later an L-BFGS round refits from its own
pass when the NLL rose or the transitions lag (their step predicts more than
:data:`LAG` of the last round's gain), then runs a second pass for G and H
(:meth:`OneStep.finish`): lagging label biases would leave a per-label misfit
the trees take as a shift of whole sequences.

Every round checks the last step with its pass: the penalised NLL must not
rise, nor its change along ``S_(r-1)``, ``(g_(r-1) + g_r) . S_(r-1) / 2``
(trapezoid rule), exceed :data:`LAG` of the NLL's fall. After a rise
Newton's transitions hold a round and ``damping`` halves (doubling back
after good rounds, up to 1); an L-BFGS round refits, clearing its pairs if
the rise was along the step.
"""

import numpy as np

from ..sequences import weighted_total
from .base import CURVATURE, GRADIENT

#: Solvers whose rounds take their step from their own pass (``"majorize"`` needs its own).
ONE_PASS_SOLVERS = ("lbfgs", "newton")
#: Fraction of the L-BFGS step taken.
DAMPING = 0.5
#: An L-BFGS step is at most this many times as long as the last one (a trust radius).
GROWTH = 2.0
#: Rounds that refit before their pass, at the start of training.
WARMUP = 10
#: Iterations of an L-BFGS warm-up refit that has curvature pairs to continue.
WARMUP_ITER = 2
#: The fraction of the last round's gain past which a predicted step or an NLL change along the
#: last step counts as lagging or a rise (see the module notes).
LAG = 0.05


class OneStep:
    """The lagging transition step, carried from round to round.

    Parameters
    ----------
    solver : {"lbfgs", "newton"}
    refit_iter : int
        Iterations of a full refit.
    memory : LBFGSMemory
        The objective's L-BFGS pairs.

    Attributes
    ----------
    damping : float
        Newton's step multiplier, in ``(0, 1]``.
    refits : int
        Rounds whose step came from a refit.
    """

    def __init__(self, solver, refit_iter, memory):
        if solver not in ONE_PASS_SOLVERS:
            raise ValueError(f"one-pass rounds take {ONE_PASS_SOLVERS}; got {solver!r}.")
        self.solver = solver
        self.refit_iter = int(refit_iter)
        self.memory = memory
        self.damping = 1.0
        self.refits = 0
        self.rounds = 0
        self._base = None  # full parameter vector the pending step applies to
        self._free = None  # its free mask
        self._step = None  # (d,) pending step of the free entries
        self._grad = None  # (d,) summed gradient of the data term at the base
        self._nll = None  # the penalised NLL the last round's pass saw

    def __getstate__(self):
        state = self.__dict__.copy()
        for key in ("_base", "_free", "_step", "_grad", "_nll"):
            state[key] = None  # a copy starts with a refit round
        return state

    @property
    def need(self):
        """What the round's pass must sum (:data:`~.base.GRADIENT` or :data:`~.base.CURVATURE`)."""
        return CURVATURE if self.solver == "newton" else GRADIENT

    @property
    def moved(self):
        """Whether this round's pass is at other transitions than the last round's."""
        return self._step is not None and bool(self._step.any())

    def path_change(self, problem):
        """This worker's ``counts . S`` of the pending step ``S`` (0 without one): the labels'
        transition score rise.
        """
        return float(problem._free_part(problem.counts) @ self._step) if self.moved else 0.0

    def explained(self, summed):
        """``(g_(r-1) + g_r) . S / 2``: the data NLL change the pending step explains (``summed``
        from :meth:`local_sums`; 0 without a step).
        """
        if not self.moved or self._grad is None:
            return 0.0
        grad = summed[1 : 1 + self._step.shape[0]]
        return 0.5 * float((self._grad + grad) @ self._step)

    def params(self, problem, current):
        """The parameters of this round's pass (the recorded base plus the pending step), or None
        when the round must refit first.
        """
        free = problem.free
        if self.rounds < WARMUP or self._base is None:
            return None
        if not np.array_equal(current.to_vector(), self._base):
            return None
        if (free is None) != (self._free is None) or (
            free is not None and not np.array_equal(free, self._free)
        ):
            return None
        if self._step is None:
            return current
        return problem._params(problem._free_part(self._base) + self._step)

    def refit_iterations(self, lagging):
        """Iterations of this round's refit: :data:`WARMUP_ITER` for a warm-up L-BFGS refit with
        pairs, else ``refit_iter``.
        """
        if lagging is not None or not self.memory.pairs or self.solver != "lbfgs":
            return self.refit_iter
        return min(WARMUP_ITER, self.refit_iter)

    def local_sums(self, problem, params, node_score):
        """This worker's ``[nll, expected - counts, curvature]`` at ``params``, from the cached
        evaluation (``node_score`` None: NLL unchecked).
        """
        ev = problem.evaluate(params, self.need)
        x = problem._free_part(params.to_vector())
        nll = np.nan
        if node_score is not None:
            path = problem._free_part(problem.counts) @ x
            nll = weighted_total(problem.seq_weight, ev.log_z) - path - node_score
        parts = [[nll], problem._free_part(ev.expected - problem.counts)]
        if self.need >= CURVATURE:
            parts.append(problem._free_part(ev.curvature))
        return np.concatenate(parts)

    def finish(self, problem, params, summed):
        """Take the next step from the round's ``summed (1 + d,)`` or ``(1 + 2d,)``
        :meth:`local_sums` (over the workers) at ``params``; record it for the next round.

        Returns
        -------
        bool
            Whether the round must refit from its pass (``"lbfgs"``: the NLL rose
            or the transitions lag), then :meth:`start` from a second pass.
        """
        x = problem._free_part(params.to_vector())
        d = x.shape[0]
        nll, summed = float(summed[0]) + 0.5 * problem.reg * float(x @ x), summed[1:]
        data_grad = summed[:d]
        grad = data_grad + problem.reg * x
        # the last round's steps raised the penalised NLL, or the trapezoid rule
        # says the transitions' did, by more than LAG of the round's gain
        gain = self._nll - nll if self._nll is not None else np.nan
        rose = gain < 0.0  # (NaN: unchecked)
        if self.moved:
            old = self._grad + problem.reg * (x - self._step)
            if 0.5 * float((old + grad) @ self._step) > (LAG * gain if gain > 0.0 else 0.0):
                rose = True  # the transitions' own doing
                self.memory.clear()
        self._nll = nll
        if rose:  # hold the transitions a round: the next secant is at fixed transitions
            self.damping *= 0.5
            step = np.zeros_like(x)
        elif self.solver == "newton":
            self.damping = min(1.0, 2.0 * self.damping)
            bound = problem.newton_scale * summed[d:] + problem.reg + 1e-12
            step = -self.damping * grad / bound
        else:
            step = self._lbfgs_step(problem, params, x, grad, data_grad)
        self.record(params, problem.free, step, data_grad)
        if self.solver != "lbfgs":
            return False
        # refit now after a rise, or when the transitions lag: their step predicts
        # more than LAG of the round's gain
        predicted = -0.5 * float(grad @ step)
        if rose or (gain == gain and predicted > LAG * gain):  # (NaN: unchecked)
            self.memory.end(x)  # the refit starts at params, continuing the pairs
            return True
        return False

    def start(self, problem, params, summed):
        """Record a refit round: the next pass is at ``params``, whose summed sums are ``summed``."""
        x = problem._free_part(params.to_vector())
        self.record(params, problem.free, None, summed[1 : 1 + x.shape[0]])
        self._nll = float(summed[0]) + 0.5 * problem.reg * float(x @ x)
        self.refits += 1

    def _lbfgs_step(self, problem, params, x, grad, data_grad):
        """The ``"lbfgs"`` step ``(d,)`` of :meth:`finish`."""
        memory = self.memory
        moved = self.moved
        if moved and float(self._step @ (data_grad - self._grad)) > 0.0:
            # (the data term is convex in theta: a pair without positive curvature
            # there is the node step's doing)
            memory.push(self._step, data_grad - self._grad + problem.reg * self._step)
        step = memory.direction(grad) if memory.pairs else None
        if step is not None and not float(grad @ step) < 0.0:
            memory.clear()
            step = None
        if step is None and grad.any():  # no pairs: the converged refit, from this pass
            new = problem.lbfgs(params, self.refit_iter, memory)
            step = DAMPING * (problem._free_part(new.to_vector()) - x)
            self.refits += 1
        elif step is None:
            step = np.zeros_like(x)
        else:
            step *= DAMPING
            norm = float(np.linalg.norm(step))
            radius = GROWTH * float(np.linalg.norm(self._step)) if moved else np.inf
            if norm > radius:
                step *= radius / norm
        memory.end(x + step)
        return step

    def record(self, params, free, step=None, grad=None):
        """Keep ``params`` as the next round's base, with its pending free ``step`` (None: a refit)
        and summed data gradient ``grad``.
        """
        self._base = params.to_vector()
        self.rounds += 1
        self._free = None if free is None else np.array(free, dtype=bool)
        self._step = step
        self._grad = grad
