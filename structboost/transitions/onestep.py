"""The transition step of a one-pass round: ``O(K^2)`` work on the sums of the round's own pass.

A boosting round runs the forward-backward pass over its margins once. The
pass is at ``(F_r, theta_r)``: this round's node scores and the transitions
the last round's step led to. It yields the node gradient and Hessian the
engine fits this round's trees to, and the summed expected counts (for
Newton also their curvature bound), from which :class:`OneStep` takes the
step ``S_r`` that the *next* round's pass applies first:
``theta_(r+1) = theta_r + S_r``. The transitions and the trees thus step
together from the same pass, as in Algorithm 1 of Chen et al. (2015), and
``theta`` lags the node scores by one round; no converged refit is needed
every round, as the node scores move again the next round anyway.

``"newton"``
    The diagonal bound step of Theorem 4.2 (as
    :meth:`~.base.PenalisedProblem.newton_step`) without its halving
    search, which needs passes: scaled by ``damping`` instead. With
    ``step="bound"`` such rounds never raise the NLL at learning rates up to
    1: the NLL is jointly convex in the node scores and the transitions, so
    ``f(u + d, t + S) <= (f(u + 2d, t) + f(u, t + 2S)) / 2``, and twice either
    bound step does not raise ``f``.
``"lbfgs"``
    :data:`DAMPING` times the quasi-Newton step of the curvature pairs,
    at most :data:`GROWTH` times as long as the last step. Its pairs come
    from consecutive rounds, ``s = S_(r-1)`` and ``y`` the change of the
    penalised gradient between the two passes (kept only when the data
    term's share of it has positive curvature along ``s``). A round left
    without pairs runs the refit (:meth:`~.base.PenalisedProblem.lbfgs`)
    from its pass and takes :data:`DAMPING` times its step.

Some rounds refit instead (the objective's refit round, as with
``transition_iter`` of 2 or more): the first :data:`WARMUP` rounds refit
before their pass, where the transitions move most. The first of them refits
from scratch (``refit_iter`` iterations; a chain's over one sequence of each
length, as its margins are equal at every row:
:meth:`~.chain.TransitionProblem.by_length`); the others continue its
transitions and curvature pairs for :data:`WARMUP_ITER` L-BFGS iterations
(Newton's take one bound step). After the warm-up an L-BFGS round refits
*from its own pass* when that pass shows a rise of the NLL or lagging
transitions (their step predicted to gain more than :data:`LAG` of what the
last round gained), and runs a second pass for the G and H it hands the
engine (:meth:`OneStep.finish` says so): the transitions include a label
bias, so while they lag the pass's gradient keeps a per-label misfit
``sum_t G[t, k] = E[N_k] - N_k``, which the trees would take as a shift of
whole sequences and overshoot (benchmarks/README.md, "One pass a round").

Every round checks the last round's steps with the pass it runs anyway.
The penalised NLL must not have risen. Nor may its change along
``S_(r-1)``, which the trapezoid rule (exact for a quadratic in ``theta``)
gives as ``(g_(r-1) + g_r) . S_(r-1) / 2`` with ``g`` the penalised
gradients of the two passes, exceed :data:`LAG` of the round's fall of the
NLL: the rule leaves out the cross term of the node and the transition
steps, and a smaller positive change is within that error. After a rise
Newton's transitions hold for a round (so that the adaptive step's next
secant is at fixed transitions) and its ``damping`` halves (it doubles
back after each good round, up to 1); an L-BFGS round refits from its
pass, and a rise along the transition step clears its pairs first.
"""

import numpy as np

from ..sequences import weighted_total
from .base import CURVATURE, GRADIENT

#: Solvers whose rounds can take their step from their own pass
#: (``"majorize"`` needs a pass of its own to build its bound).
ONE_PASS_SOLVERS = ("lbfgs", "newton")
#: Fraction of the L-BFGS step taken (see the module notes).
DAMPING = 0.5
#: An L-BFGS step is at most this many times as long as the last one (a
#: trust radius: pairs of consecutive rounds also see the node step's effect).
GROWTH = 2.0
#: Rounds that refit before their pass, at the start of training, where the
#: transitions move most and steps from a lagging pass overshoot.
WARMUP = 10
#: Iterations of an L-BFGS warm-up refit that has curvature pairs to continue
#: (every warm-up round after the first; see the module notes).
WARMUP_ITER = 2
#: An L-BFGS round refits from its pass when that pass predicts its transition
#: step to gain more than this fraction of what the last round gained; a
#: change of the NLL along the last transition step counts as a rise past
#: this fraction of the round's fall (see the module notes).
LAG = 0.05


class OneStep:
    """The lagging transition step, carried from round to round.

    Parameters
    ----------
    solver : {"lbfgs", "newton"}
    refit_iter : int
        Iterations of a full refit (:meth:`refit_iterations`; with
        ``"lbfgs"`` also of a round of one pass left without pairs).
    memory : LBFGSMemory
        The L-BFGS pairs (the objective's).

    Attributes
    ----------
    damping : float
        Newton's step multiplier, in ``(0, 1]``.
    refits : int
        Rounds whose step came from a refit, with passes of their own.
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
        """This worker's ``counts . S`` of the pending step ``S`` (0 without one).

        The labels' transition scores rise by it: the weighted NLL changes by
        minus this besides the change of ``seq_weight @ log_z`` and of the
        labels' node scores.
        """
        return float(problem._free_part(problem.counts) @ self._step) if self.moved else 0.0

    def explained(self, summed):
        """``(g_(r-1) + g_r) . S / 2``: the data NLL change the pending step ``S`` explains.

        By the trapezoid rule with the data term's gradients ``g`` of the
        two passes (``summed``: :meth:`local_sums` of this round's, summed
        over the workers); exact for a quadratic, up to the cross term of
        the node and the transition steps. 0 without a step.
        """
        if not self.moved or self._grad is None:
            return 0.0
        grad = summed[1 : 1 + self._step.shape[0]]
        return 0.5 * float((self._grad + grad) @ self._step)

    def params(self, problem, current):
        """The parameters of this round's pass, or None when the round must refit first.

        ``current`` (of ``problem.param_type``) must be the base the last
        round recorded, over the same free entries; the pending step is
        then applied to it.
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
        """Iterations of this round's refit: ``refit_iter``, or :data:`WARMUP_ITER` in the warm-up.

        ``lagging``: the parameters of the round's own pass when it refits
        from that pass (see :meth:`finish`), None when it refits before its
        pass. A warm-up refit of ``"lbfgs"`` with curvature pairs to continue
        takes :data:`WARMUP_ITER`; every other refit (the first round's, one
        whose pairs were cleared, a lagging round's) takes ``refit_iter``.
        """
        if lagging is not None or not self.memory.pairs or self.solver != "lbfgs":
            return self.refit_iter
        return min(WARMUP_ITER, self.refit_iter)

    def local_sums(self, problem, params, node_score):
        """This worker's sums of the round's pass: ``[nll, expected - counts, curvature]``.

        Its weighted NLL (``node_score``: the weighted sum of the labels'
        node scores; None, as on every worker, leaves the NLL unchecked),
        the data term's gradient in the free entries (and, for Newton, their
        curvature bound), read from the problem's cached evaluation at
        ``params`` (no pass).
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
        """Take the next step from the round's sums; record it for the next round.

        Parameters
        ----------
        problem : PenalisedProblem
            This round's (its cached evaluation is at ``params``).
        params
            The parameters of this round's pass (of ``problem.param_type``).
        summed : (1 + d,) or (1 + 2d,) float64
            :meth:`local_sums`, summed over the workers.

        Returns
        -------
        bool
            Whether the round must refit from its pass instead (``"lbfgs"``:
            the NLL rose, or the transitions lag; see the module notes),
            then run a second pass for the G and H it hands the engine and
            :meth:`start` from that pass. The pairs continue from ``params``.
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
        """Record a refit round: the next pass is at ``params``, whose sums are ``summed``.

        ``summed`` as for :meth:`finish`, of the round's pass at ``params``
        (the refit's result), so that the next round checks its NLL and
        pairs its gradient.
        """
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
        """Keep ``params`` as the next round's base, with its pending ``step`` of the free entries.

        Without ``step`` (a refit round) the next round's pass is at
        ``params``; ``grad`` is the summed data gradient there, if known.
        """
        self._base = params.to_vector()
        self.rounds += 1
        self._free = None if free is None else np.array(free, dtype=bool)
        self._step = step
        self._grad = grad
