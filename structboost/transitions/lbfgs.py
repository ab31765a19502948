"""L-BFGS whose curvature memory outlives a refit: the ``"lbfgs"`` transition solver.

:class:`LBFGSMemory` keeps the last :data:`MEMORY` pairs ``(s, y)`` between
rounds, so a round's first quasi-Newton step is already well scaled; a refit
continues while the next step is predicted to gain at least :data:`RTOL` of
what it gained so far (and more than :data:`FTOL` of ``|f|``).
:func:`minimize` is monotone (Armijo) and sees the problem only through
``fun(x) -> (f, grad)``.
"""

import numpy as np

#: Curvature pairs kept (the "m" of L-BFGS).
MEMORY = 10
#: A refit stops once the next step is predicted to lower ``f`` by at most this
#: fraction of ``max(|f|, 1)`` (scipy's L-BFGS-B default ``factr`` times eps).
FTOL = 1e7 * np.finfo(np.float64).eps
#: A refit stops once the next step is predicted to lower ``f`` by at most this
#: fraction of what the refit has lowered it so far.
RTOL = 0.01
#: Sufficient decrease of Armijo's condition.
ARMIJO = 1e-4
#: Curvature condition of Wolfe, asked of steps without curvature pairs.
WOLFE = 0.9
#: Trial steps of one line search before it gives up.
MAX_LINE_SEARCH = 30


class LBFGSMemory:
    """Curvature pairs of L-BFGS, kept from one refit to the next.

    Pairs continue only from the point the last refit returned, over the same
    free entries (:meth:`begin`); a copied or pickled memory starts empty.

    Parameters
    ----------
    size : int, default MEMORY
        Number of ``(s, y)`` pairs kept.

    Attributes
    ----------
    pairs : list of (s, y) tuples of (d,) float64
        Oldest first.
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
        """Start a refit at ``x0 (d,)`` over the entries ``free`` marks (None: all), clearing the
        pairs unless it continues the last.
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
        """The quasi-Newton direction ``-H grad (d,)`` by the two-loop recursion (without pairs:
        ``-grad`` at unit length).
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
    """A step along ``d`` from ``x`` (``slope = grad @ d < 0``): ``(t, x_new, f_new, grad_new,
    calls)``, ``t = 0`` if none is Armijo.

    Tries ``1`` first and shortens; with ``lengthen`` also lengthens steps
    along which ``f`` still falls steeply.
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
        ``fun(x (d,)) -> (f: float, grad: (d,) float64)``.
    x0 : (d,) float64
    max_iter : int
        At most this many accepted steps; 0 returns ``x0``.
    memory : LBFGSMemory
        Begun at ``x0``.
    ftol, rtol : float
        Stop once the next step is predicted to lower ``f`` by at most
        ``ftol * max(|f|, 1)`` or (with pairs at the start) ``rtol`` times the
        decrease so far.
    last : callable, optional
        ``fun`` computing more on the way, for the last iteration's line search.

    Returns
    -------
    x : (d,) float64
        The last accepted point, ``f(x) <= f(x0)``.
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
