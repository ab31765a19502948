"""L-BFGS whose curvature memory outlives a refit: the ``"lbfgs"`` transition solver.

Each boosting round refits the transition scores on a problem that one
round of trees has barely changed, from the scores the last round ended
at. scipy's L-BFGS-B would start every round with an empty memory: its
first step is a steepest-descent guess with a line search, and it needs
five or six evaluations (each a message pass) to relearn the curvature it
knew a round ago. :class:`LBFGSMemory` keeps the last :data:`MEMORY`
curvature pairs ``(s, y)`` between rounds, so the first quasi-Newton step
of a round is already well scaled and usually accepted at once; a refit
continues while the next step is predicted to gain at least :data:`RTOL`
of what the refit has gained so far (and more than :data:`FTOL` of
``|f|``), so a round that has little to refit costs one or two
evaluations (the first is at the last round's point, whose messages the
objective has already computed). A refit that starts without pairs (the
first round, a fresh or reset memory) runs to :data:`FTOL` or its
iteration limit, as scipy's would; its steps, whose scale is then a
guess, are lengthened as well as shortened by the line search.

:func:`minimize` is monotone (every accepted step satisfies Armijo's
condition) and touches the problem only through ``fun(x) -> (f, grad)``;
every decision depends on those values and the pairs built from them, so
workers whose ``fun`` sums over all of them (``allreduce``) take the same
steps and call ``fun`` equally often.
"""

import numpy as np

#: Curvature pairs kept (the "m" of L-BFGS).
MEMORY = 10
#: A refit stops once the next step is predicted to lower ``f`` by at most this
#: fraction of ``max(|f|, 1)`` (the size of scipy's L-BFGS-B default test,
#: ``factr = 1e7`` times the float64 epsilon, which scipy asks of the
#: decrease a step made).
FTOL = 1e7 * np.finfo(np.float64).eps
#: A refit stops once the next step is predicted to lower ``f`` by at most this
#: fraction of what the refit has lowered it so far (diminishing returns). A
#: tenth left strongly coupled chains about 2% above scipy's NLL every round; a
#: hundredth matches or beats it (benchmarks/README.md, solvers (c)).
RTOL = 0.01
#: Sufficient decrease of Armijo's condition.
ARMIJO = 1e-4
#: Curvature condition of Wolfe, asked of steps without curvature pairs.
WOLFE = 0.9
#: Trial steps of one line search before it gives up.
MAX_LINE_SEARCH = 30


class LBFGSMemory:
    """Curvature pairs of L-BFGS, kept from one refit to the next.

    A refit continues the pairs only where the last refit left off: at the
    point it returned, with the same free entries (:meth:`begin`); anything
    else (another warm start, a changed constraint mask or ``K``) starts
    from an empty memory. A copied or pickled memory starts empty: the
    pairs are training state of one process.

    Parameters
    ----------
    size : int, default MEMORY
        Number of ``(s, y)`` pairs kept.

    Attributes
    ----------
    pairs : list of (s, y) tuples of (d,) float64
        Oldest first; ``s`` a step, ``y`` the change of the gradient along it.
    """

    def __init__(self, size=MEMORY):
        if int(size) != size or size < 1:
            raise ValueError(f"the L-BFGS memory size must be a positive integer; got {size!r}.")
        self.size = int(size)
        self.pairs = []
        self._free = None
        self._end = None

    def __getstate__(self):
        return {"size": self.size}

    def __setstate__(self, state):
        self.__init__(state["size"])

    def clear(self):
        """Forget every pair."""
        self.pairs = []

    def begin(self, x0, free):
        """Start a refit at ``x0 (d,)`` over the entries ``free`` marks (None: all).

        The pairs are kept only when ``x0`` is the point the last refit
        returned and ``free`` is the same mask; otherwise they are cleared.
        """
        same_mask = (free is None and self._free is None) or (
            free is not None and self._free is not None and np.array_equal(free, self._free)
        )
        if not (same_mask and self._end is not None and np.array_equal(self._end, x0)):
            self.clear()
        self._free = None if free is None else np.array(free, dtype=bool)

    def end(self, x):
        """Record ``x (d,)``, the point the refit returned: the next one may continue there."""
        self._end = np.array(x, dtype=np.float64)

    def push(self, s, y):
        """Add the pair ``(s, y)`` if its curvature ``s @ y`` is positive (dropping the oldest)."""
        sy = float(s @ y)
        if not sy > np.finfo(np.float64).eps * float(y @ y):
            return
        self.pairs.append((s, y))
        del self.pairs[: -self.size]

    def direction(self, grad):
        """The quasi-Newton direction ``-H grad (d,)`` by the two-loop recursion.

        ``H`` is the inverse-Hessian estimate of the pairs, with the initial
        scale ``s @ y / y @ y`` of the newest pair; without pairs, ``-grad``
        scaled to unit length.
        """
        if not self.pairs:
            norm = float(np.sqrt(grad @ grad))
            return -grad / norm if norm > 0 else -grad
        q = np.array(grad, dtype=np.float64)
        alphas = []
        for s, y in reversed(self.pairs):
            alpha = (s @ q) / (s @ y)
            q -= alpha * y
            alphas.append(alpha)
        s, y = self.pairs[-1]
        q *= (s @ y) / (y @ y)
        for (s, y), alpha in zip(self.pairs, reversed(alphas)):
            q += (alpha - (y @ q) / (s @ y)) * s
        return -q


def _between(lo, f_lo, slope_lo, hi, f_hi):
    """A step in ``(lo, hi)``: the minimiser of the parabola through ``f_lo`` and
    ``slope_lo`` at ``lo`` and ``f_hi`` at ``hi``, kept within the interval's
    ``[0.1, 0.5]`` (its midpoint when ``f_hi`` is NaN or infinite)."""
    width = hi - lo
    curve = f_hi - f_lo - slope_lo * width
    if not np.isfinite(f_hi) or not curve > 0:
        return lo + 0.5 * width
    best = -slope_lo * width * width / (2.0 * curve)
    return lo + min(max(best, 0.1 * width), 0.5 * width)


def _line_search(fun, x, f, slope, d, lengthen):
    """A step along ``d`` from ``x`` (where ``f`` and ``slope = grad @ d < 0``).

    Tries ``1`` first. Steps that break Armijo's condition are shortened;
    with ``lengthen`` (no curvature pairs, so the scale of ``d`` is a guess)
    steps along which ``f`` still falls steeply (Wolfe's curvature condition
    fails) are lengthened too. Returns ``(t, x_new, f_new, grad_new, calls)``
    of the accepted step, or ``t = 0`` when none satisfies Armijo's condition.
    """
    lo, f_lo, slope_lo, at_lo = 0.0, f, slope, None
    hi, f_hi = np.inf, np.inf
    t = 1.0
    for calls in range(1, MAX_LINE_SEARCH + 1):
        x_new = x + t * d
        f_new, grad_new = fun(x_new)
        if not f_new <= f + ARMIJO * t * slope:  # NaN fails too
            hi, f_hi = t, f_new
        else:
            slope_new = float(grad_new @ d)
            if not lengthen or slope_new >= WOLFE * slope:
                return t, x_new, f_new, grad_new, calls
            lo, f_lo, slope_lo, at_lo = t, f_new, slope_new, (x_new, f_new, grad_new)
        if np.isfinite(hi):
            t = _between(lo, f_lo, slope_lo, hi, f_hi)
        else:  # lengthen to where the derivative's secant from 0 crosses zero, 2x to 10x
            grow = slope / (slope - slope_lo) if slope_lo > slope else 10.0
            t = lo * min(max(grow, 2.0), 10.0)
    if at_lo is None:
        return 0.0, x, f, None, MAX_LINE_SEARCH
    return (lo,) + at_lo + (MAX_LINE_SEARCH,)


def minimize(fun, x0, max_iter, memory, ftol=FTOL, rtol=RTOL, last=None):
    """Monotone L-BFGS from ``x0`` that continues and updates ``memory``.

    Parameters
    ----------
    fun : callable
        ``fun(x (d,)) -> (f: float, grad: (d,) float64)`` of a smooth
        function (convex in the transition refits).
    x0 : (d,) float64
        Start.
    max_iter : int
        At most this many iterations (accepted steps); 0 returns ``x0``.
    memory : LBFGSMemory
        Pairs to start from (:meth:`LBFGSMemory.begin` must have been
        called at ``x0``); the new pairs are added and the returned point
        recorded.
    ftol : float, default FTOL
        Stop once the next step is predicted to lower ``f`` by at most
        ``ftol * max(|f|, 1)``. The prediction, ``-grad @ d / 2`` for the
        direction ``d``, is the decrease if ``f`` were the quadratic of the
        pairs; without pairs it is not made and the iterations go on.
    rtol : float, default RTOL
        When ``memory`` starts with pairs (a refit that continues the last
        one), also stop once the next step is predicted to lower ``f`` by at
        most ``rtol`` times what this refit has lowered it so far: the
        problem moved by one round of trees, and the next round continues.
    last : callable, optional
        ``fun`` with more computed on the way (same values), for the line
        search of iteration ``max_iter``, whose point the caller is most
        likely to use next.

    Returns
    -------
    x : (d,) float64
        The last accepted point, ``f(x) <= f(x0)``; ``fun``'s last call was
        at ``x`` unless a line search failed or ran out of trials.
    evaluations : int
        Calls of ``fun``.
    """
    x = np.array(x0, dtype=np.float64)
    f, grad = fun(x)
    f0, evaluations = f, 1
    rtol = rtol if memory.pairs else 0.0  # a refit from scratch runs to ftol or max_iter
    for i in range(int(max_iter)):
        d = memory.direction(grad)
        slope = float(grad @ d)
        if not slope < 0 and memory.pairs:  # rounding made the pairs indefinite: restart
            memory.clear()
            d = memory.direction(grad)
            slope = float(grad @ d)
        predicted = -0.5 * slope  # the decrease of the step if f were the pairs' quadratic
        if not slope < 0 or (
            memory.pairs and predicted <= max(ftol * max(abs(f), 1.0), rtol * (f0 - f))
        ):
            break  # a zero gradient, or no decrease worth a message pass predicted
        search = last if last is not None and i + 1 == max_iter else fun
        t, x_new, f_new, grad_new, calls = _line_search(search, x, f, slope, d, not memory.pairs)
        evaluations += calls
        if t == 0.0:  # no decrease along d: the pairs mislead, drop them
            memory.clear()
            break
        memory.push(x_new - x, grad_new - grad)
        x, f, grad = x_new, f_new, grad_new
    memory.end(x)
    return x, evaluations
