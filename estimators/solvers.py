"""Vectorized one-dimensional solvers in the log rate, one root per page, all pages at once.

All are safeguarded Newton iterations (``rtsafe`` in Numerical Recipes): each page keeps a
bracket ``[lo, hi]`` on which its function changes sign; a Newton step that leaves the bracket
(or a zero or NaN derivative) is replaced by bisection, so every page converges, quadratically
once Newton takes over. Pages that have converged drop out; when fewer than half of the pages
the objective holds are still active, the objective is restricted to them, so later
iterations cost only what the slow pages need.

Pages are solved in blocks of consecutive pages of about :data:`BLOCK_TERMS` array elements
(:func:`page_blocks`), each on views of the objective's arrays: every temporary of an iteration
then fits in the CPU's cache instead of streaming tens of megabytes through memory per step
(measured 30 % faster on 1,000,000 pages than one pass over all of them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from estimators.defaults import LOG_RATE_MAX, LOG_RATE_MIN, SOLVER_MAX_ITER, SOLVER_TOL
from estimators.likelihood import LogRateObjective

__all__ = [
    "BLOCK_TERMS",
    "chi2_level_drop",
    "log_rate_at_level",
    "maximize_log_rate",
    "mode_and_interval",
    "page_blocks",
    "posterior_mean_log_rate",
    "solve_decreasing",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: ``fun(objective, theta, pages) -> (f, df)``: the function whose root is sought and its
#: derivative at ``theta`` (shape (objective.n_pages,)); ``pages`` are the original indices of
#: the objective's pages, to pick per-page constants.
RootFunction = Callable[[LogRateObjective, FloatArray, IntArray], tuple[FloatArray, FloatArray]]

#: Points of the per-page grid on which :func:`posterior_mean_log_rate` integrates.
MEAN_POINTS = 24
#: That grid spans this many times the interval's half-width on either side of the mode.
MEAN_SPAN = 2.5

#: Array elements (change intervals, or one per page) per block of pages solved together:
#: 2 MiB per float64 temporary, a size that stays in a core's cache.
BLOCK_TERMS = 1 << 18


def page_blocks(objective: LogRateObjective, terms: int | None = None) -> list[tuple[int, int]]:
    """Consecutive page ranges ``(start, stop)`` covering the objective's pages, each of
    about ``terms`` array elements (default :data:`BLOCK_TERMS`): a block ends after the page
    whose running total passes the next multiple of ``terms``, so a block holds up to about
    twice that when a large page falls at its start. Only speed depends on the sizes: every
    page is solved on its own."""
    terms = BLOCK_TERMS if terms is None else terms
    n = objective.n_pages
    if n == 0:
        return []
    total = np.cumsum(objective.terms_per_page)
    if int(total[-1]) <= terms:
        return [(0, n)]
    # block k ends before the first page whose running total passes (k + 1) * terms
    ends = np.searchsorted(total, np.arange(terms, int(total[-1]), terms), side="right")
    cuts = np.unique(np.concatenate([[0], np.maximum(ends, 1), [n]]))
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts.tolist()) if b > a]


def solve_decreasing(
    objective: LogRateObjective,
    fun: RootFunction,
    lo: FloatArray,
    hi: FloatArray,
    start: FloatArray,
    *,
    tol: float = SOLVER_TOL,
    max_iter: int = SOLVER_MAX_ITER,
) -> tuple[FloatArray, int]:
    """Root per page of a decreasing function with ``f(lo) >= 0 >= f(hi)``.

    Parameters
    ----------
    objective : LogRateObjective
        Passed to ``fun``, restricted to the active pages as they shrink.
    fun : RootFunction
        The function and its derivative.
    lo, hi : ndarray of float, shape (n_pages,)
        Bracket per page (log rate), finite.
    start : ndarray of float, shape (n_pages,)
        First guess; clipped into the bracket.
    tol : float
        Stop when a step (or the bracket) is below this.
    max_iter : int
        Most iterations; pages not converged by then keep their last iterate.

    Returns
    -------
    theta : ndarray of float, shape (n_pages,)
        The roots.
    n_iter : int
        Iterations done by the slowest block of pages.
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    start = np.asarray(start, dtype=np.float64)
    blocks = page_blocks(objective)
    if len(blocks) <= 1:
        return _solve_block(objective, fun, 0, lo, hi, start, tol=tol, max_iter=max_iter)
    result = np.empty(objective.n_pages)
    n_iter = 0
    for a, b in blocks:
        result[a:b], it = _solve_block(
            objective.block(a, b), fun, a, lo[a:b], hi[a:b], start[a:b], tol=tol, max_iter=max_iter
        )
        n_iter = max(n_iter, it)
    return result, n_iter


def _solve_block(
    objective: LogRateObjective,
    fun: RootFunction,
    first: int,
    lo: FloatArray,
    hi: FloatArray,
    start: FloatArray,
    *,
    tol: float,
    max_iter: int,
) -> tuple[FloatArray, int]:
    """:func:`solve_decreasing` on one block of pages, the first of which is page ``first``
    of the caller's objective (``fun`` is given the caller's page indices)."""
    lo = np.array(lo, dtype=np.float64)
    hi = np.array(hi, dtype=np.float64)
    result = np.clip(np.asarray(start, dtype=np.float64), lo, hi)
    # The iteration works on arrays of obj's pages, contiguous, with no gather or scatter per
    # step: a page that has converged stays in them, unmoved, until the next restriction
    # drops it and writes its result back.
    obj = objective
    pages = np.arange(first, first + result.shape[0], dtype=np.intp)  # caller's page index
    theta = result.copy()
    last_step = hi - lo  # rtsafe: a Newton step must at least halve the step before last
    active = np.ones(theta.shape[0], dtype=np.bool_)
    n_iter = 0
    while n_iter < max_iter and pages.size:
        n_iter += 1
        f, df = fun(obj, theta, pages)
        lo = np.where(f > 0, theta, lo)
        hi = np.where(f < 0, theta, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = -f / df
        new = theta + step
        size = np.abs(step)
        tiny = size <= tol
        # NaN steps fail both tests; a step onto the bracket's end can cycle, so demand the
        # open bracket (or a converged step) and a step at most half the one before last
        newton = (tiny | ((new > lo) & (new < hi))) & (size <= 0.5 * last_step)
        new = np.where(newton, new, 0.5 * (lo + hi))
        root = f == 0
        new = np.where(root | ~active, theta, new)  # a page that has converged stays put
        active &= ~(root | (newton & tiny) | (hi - lo <= tol))
        last_step = np.abs(new - theta)
        theta = new
        n_left = int(np.count_nonzero(active))
        if n_left == 0:
            break
        if n_left < pages.size // 2:
            done = ~active
            result[pages[done] - first] = theta[done]
            obj = obj.restrict(active)
            pages = pages[active]
            theta, lo, hi, last_step = (a[active] for a in (theta, lo, hi, last_step))
            active = np.ones(pages.size, dtype=np.bool_)
    result[pages - first] = theta
    return result, n_iter


def _gradient_root(
    obj: LogRateObjective, theta: FloatArray, pages: IntArray
) -> tuple[FloatArray, FloatArray]:
    return obj.gradient_hessian(theta)


def maximize_log_rate(
    objective: LogRateObjective,
    lo: FloatArray,
    hi: FloatArray,
    start: FloatArray,
    *,
    tol: float = SOLVER_TOL,
    max_iter: int = SOLVER_MAX_ITER,
) -> tuple[FloatArray, int]:
    """Maximizer per page of a concave objective, given a bracket with ``h'(lo) >= 0 >= h'(hi)``.

    Returns the log rates, shape (n_pages,), and the number of iterations.
    """
    return solve_decreasing(objective, _gradient_root, lo, hi, start, tol=tol, max_iter=max_iter)


def log_rate_at_level(
    objective: LogRateObjective,
    mode: FloatArray,
    level: FloatArray,
    *,
    side: int,
    bound: float,
    tol: float = SOLVER_TOL,
    max_iter: int = SOLVER_MAX_ITER,
    mode_value: FloatArray | None = None,
    mode_hessian: FloatArray | None = None,
) -> tuple[FloatArray, int]:
    """Where a concave objective falls to ``level`` on one side of its maximum, per page.

    Parameters
    ----------
    objective : LogRateObjective
        Concave in theta, maximal at ``mode``.
    mode : ndarray of float, shape (n_pages,)
        Finite maximizer per page.
    level : ndarray of float, shape (n_pages,)
        Target value, below the maximum.
    side : {-1, +1}
        Search below (-1) or above (+1) the mode.
    bound : float
        Farthest log rate searched on that side.
    mode_value, mode_hessian : ndarray of float, shape (n_pages,), optional
        The objective and its second derivative at ``mode``, when the caller has them (both
        sides of an interval share them); evaluated here otherwise.

    Returns
    -------
    theta : ndarray of float, shape (n_pages,)
        The crossing; ``bound`` where the objective stays above ``level`` up to ``bound``.
    n_iter : int
        Iterations done.
    """
    if side not in (-1, 1):
        raise ValueError("side must be -1 or +1")
    n = mode.shape[0]
    edge = np.full(n, float(bound))
    # Start at the end point of the quadratic (Wald) approximation taken in the cube root of
    # the rate, where Poisson log-likelihoods are nearly quadratic (Anscombe), so the start
    # falls close to the skewed interval's end (one Newton step fewer on each side than the
    # Wald end in ln rate); Newton on a concave function converges from there (from outside
    # monotonically, from inside after one step out).
    if mode_hessian is None:
        mode_hessian = objective.gradient_hessian(mode)[1]
    if mode_value is None:
        mode_value = objective.value(mode)
    with np.errstate(divide="ignore", invalid="ignore"):
        drop = mode_value - level
        half_width = np.sqrt(2.0 * drop / np.maximum(-mode_hessian, 1e-300))
    width = np.where(np.isfinite(half_width), half_width, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cube = 3.0 * np.log1p(side * width / 3.0)  # theta of (rate^(1/3) +- its half-width)^3
    start = mode + np.where(np.isfinite(cube), cube, side * width)

    def crossing(
        obj: LogRateObjective, theta: FloatArray, pages: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        value, grad = obj.value_gradient(theta)
        # on the right the objective decreases through the level; on the left, negate it
        return side * (value - level[pages]), side * grad

    if side > 0:
        lo, hi = mode, np.maximum(edge, mode)
    else:
        lo, hi = np.minimum(edge, mode), mode
    theta, n_iter = solve_decreasing(objective, crossing, lo, hi, start, tol=tol, max_iter=max_iter)
    # where the objective stays above the level up to the bound, the bracket has closed on the
    # bound: only those pages need the objective at the bound to tell
    near = np.flatnonzero(np.abs(theta - bound) <= 2 * tol)
    if near.size:
        keep = np.zeros(n, dtype=np.bool_)
        keep[near] = True
        above = objective.restrict(keep).value(edge[near]) > level[near]
        theta[near[above]] = bound
    return theta, n_iter


def chi2_level_drop(confidence: float) -> float:
    """Drop of a log-likelihood from its maximum that bounds a ``confidence`` interval.

    Wilks: ``2 (l(theta_hat) - l(theta))`` is asymptotically chi-squared with one degree of
    freedom, so the interval is where the drop is at most half its ``confidence`` quantile
    (1.92 for 95 %).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 0.5 * float(stats.chi2.ppf(confidence, 1))


def mode_and_interval(
    objective: LogRateObjective,
    lo: FloatArray,
    hi: FloatArray,
    start: FloatArray,
    *,
    confidence: float,
    tol: float = SOLVER_TOL,
    max_iter: int = SOLVER_MAX_ITER,
) -> tuple[FloatArray, FloatArray, FloatArray, int]:
    """Maximizer of a concave objective and the likelihood-ratio interval around it, per page.

    Parameters
    ----------
    objective : LogRateObjective
        Concave in the log rate, with a finite maximizer in ``[lo, hi]`` for every page.
    lo, hi, start : ndarray of float, shape (n_pages,)
        Bracket of the maximizer (``h'(lo) >= 0 >= h'(hi)``) and first guess.
    confidence : float
        The interval is where the objective is within :func:`chi2_level_drop` of its maximum.

    Returns
    -------
    theta, theta_low, theta_high : ndarray of float, shape (n_pages,)
        Log rates; an end that would pass the search range is ``-inf`` or ``+inf``.
    n_iter : int
        Iterations of the slowest of the three solves.
    """
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    start = np.asarray(start, dtype=np.float64)
    blocks = page_blocks(objective)
    if len(blocks) <= 1:
        return _mode_and_interval_block(
            objective, lo, hi, start, confidence=confidence, tol=tol, max_iter=max_iter
        )
    # block by block, so that a block's arrays stay cached through its three solves
    n = objective.n_pages
    theta, low, high = np.empty(n), np.empty(n), np.empty(n)
    n_iter = 0
    for a, b in blocks:
        theta[a:b], low[a:b], high[a:b], it = _mode_and_interval_block(
            objective.block(a, b),
            lo[a:b],
            hi[a:b],
            start[a:b],
            confidence=confidence,
            tol=tol,
            max_iter=max_iter,
        )
        n_iter = max(n_iter, it)
    return theta, low, high, n_iter


def _mode_and_interval_block(
    objective: LogRateObjective,
    lo: FloatArray,
    hi: FloatArray,
    start: FloatArray,
    *,
    confidence: float,
    tol: float,
    max_iter: int,
) -> tuple[FloatArray, FloatArray, FloatArray, int]:
    """:func:`mode_and_interval` on one block of pages."""
    theta, it_mode = maximize_log_rate(objective, lo, hi, start, tol=tol, max_iter=max_iter)
    top = objective.value(theta)
    curvature = objective.gradient_hessian(theta)[1]
    level = top - chi2_level_drop(confidence)
    ends = {
        side: log_rate_at_level(
            objective,
            theta,
            level,
            side=side,
            bound=bound,
            tol=tol,
            max_iter=max_iter,
            mode_value=top,
            mode_hessian=curvature,
        )
        for side, bound in ((-1, LOG_RATE_MIN), (+1, LOG_RATE_MAX))
    }
    (low, it_low), (high, it_high) = ends[-1], ends[+1]
    low[low <= LOG_RATE_MIN] = -np.inf
    high[high >= LOG_RATE_MAX] = np.inf
    return theta, low, high, max(it_mode, it_low, it_high)


def posterior_mean_log_rate(
    objective: LogRateObjective,
    theta: FloatArray,
    low: FloatArray,
    high: FloatArray,
    *,
    points: int = MEAN_POINTS,
    span: float = MEAN_SPAN,
) -> FloatArray:
    """Mean of the log rate under the density ``exp(objective)`` (a log posterior), per page.

    A concave log density has one mode; the mean is integrated by the trapezoid rule on a
    grid of ``points`` log rates per page, from the mode out to ``span`` times the distance
    to each end of the interval ``[low, high]`` (the likelihood-ratio interval from
    :func:`mode_and_interval`; an infinite end is replaced by 1.96 sd of the curvature at
    the mode). For evidence that bounds the rate on one side only (every interval changed,
    or none did) the posterior is one-sided and its mode sits at the edge of what the evidence
    allows; its mean does not.

    Parameters
    ----------
    objective : LogRateObjective
        The log posterior (up to a constant) of ``objective.n_pages`` pages.
    theta, low, high : ndarray of float, shape (n_pages,)
        Its maximizer and the interval around it.
    points, span
        The grid.
    """
    theta = np.asarray(theta, dtype=np.float64)
    if theta.size == 0:
        return theta.copy()
    curvature = objective.gradient_hessian(theta)[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        fallback = 1.96 / np.sqrt(np.maximum(-curvature, 1e-12))
    below = np.where(np.isfinite(low), theta - low, fallback)
    above = np.where(np.isfinite(high), high - theta, fallback)
    u = np.linspace(-span, span, points)[:, None]
    grid = theta[None, :] + np.where(u < 0, u * below[None, :], u * above[None, :])
    grid = np.clip(grid, LOG_RATE_MIN, LOG_RATE_MAX)
    top = objective.value(theta)
    log_density = np.stack([objective.value(g) for g in grid]) - top[None, :]
    step = np.diff(grid, axis=0)
    weight = np.zeros_like(grid)
    weight[:-1] += 0.5 * step
    weight[1:] += 0.5 * step
    mass = np.exp(np.minimum(log_density, 0.0)) * weight
    total = mass.sum(axis=0)
    mean = (mass * grid).sum(axis=0) / np.where(total > 0, total, 1.0)
    return np.where(total > 0, mean, theta)
