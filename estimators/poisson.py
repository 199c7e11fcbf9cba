"""Change rates from change/no-change observations at irregular intervals (Xyleme sec. 6.1.1).

A page changes as a Poisson process with rate lambda (changes per day). A fetch only says
whether it changed since the previous fetch, so an interval of length t is a change interval
with probability ``1 - exp(-lambda t)``. The likelihood of a page's intervals is a *product*::

    L(lambda) = prod_c (1 - exp(-lambda t_c)) * exp(-lambda * sum_u t_u)

(the seed text of the paper prints a sum over change intervals; that is not the Poisson
likelihood). Its maximum solves the score equation ``sum_c t_c / (exp(lambda t_c) - 1) =
sum_u t_u``, whose left side falls with lambda from +inf to 0: one root when a page has both
kinds of interval, bracketed by ``C / (U + S/2) <= lambda <= C / U`` (C change intervals of
total length S, U days without change; from ``1 - x/2 <= x / (e^x - 1) <= 1``). For equal
intervals I it is Cho & Garcia-Molina's ``-ln(1 - X/n) / I``.

* :class:`PoissonChangeMLE`: the maximum-likelihood rate with a profile-likelihood interval.
  A page with no change seen gets 0, one with only changes gets +inf: reported as they are.
* :class:`EmpiricalBayesChangeRate`: the posterior mode, or mean of the log rate, under a
  population prior (:class:`~estimators.prior.LogNormalRatePrior`): finite and positive for
  every page with evidence, close to the MLE once the page's own evidence dominates.

Why likelihood-ratio intervals and not Fisher (Wald) ones: with a handful of intervals the
log-likelihood is far from quadratic, so a symmetric interval misstates both ends, and at the
boundary (no change seen) the Fisher information is degenerate and the Wald interval has zero
width. The likelihood-ratio interval ``{lambda: 2 (l(hat) - l(lambda)) <= chi2_1(0.95)}`` is
invariant to reparametrization, stays inside ``[0, inf]``, and is defined at the boundary:
with no change seen in U days it is ``[0, 1.92 / U]``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from estimators.defaults import CONFIDENCE, LOG_RATE_MAX, LOG_RATE_MIN, SOLVER_MAX_ITER, SOLVER_TOL
from estimators.evidence import ChangeIntervals
from estimators.likelihood import ChangeLogLikelihood, LogRateObjective, PenalizedLogLikelihood
from estimators.prior import LogNormalRatePrior
from estimators.solvers import (
    chi2_level_drop,
    maximize_log_rate,
    mode_and_interval,
    posterior_mean_log_rate,
    solve_decreasing,
)

__all__ = ["EmpiricalBayesChangeRate", "PoissonChangeMLE", "mle_bracket"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]


def mle_bracket(intervals: ChangeIntervals) -> tuple[FloatArray, FloatArray]:
    """Log rates ``lo <= hi`` per page with the score >= 0 at ``lo`` and <= 0 at ``hi``.

    ``ln(C / (U + S/2))`` and ``ln(C / U)`` for a page with both kinds of interval; a page
    without change (MLE 0) gets ``LOG_RATE_MIN`` for both, one with only changes (MLE +inf)
    ``ln(2C/S)`` and ``LOG_RATE_MAX``. Shapes (n_pages,).
    """
    changes = intervals.n_changes.astype(np.float64)
    unchanged = intervals.unchanged_time
    changed = intervals.changed_time
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.log(changes / (unchanged + 0.5 * changed))
        hi = np.log(changes / unchanged)
    lo = np.where(changes > 0, lo, LOG_RATE_MIN)
    hi = np.where(changes > 0, np.where(unchanged > 0, hi, LOG_RATE_MAX), LOG_RATE_MIN)
    return np.clip(lo, LOG_RATE_MIN, LOG_RATE_MAX), np.clip(hi, LOG_RATE_MIN, LOG_RATE_MAX)


class PoissonChangeMLE:
    """Maximum-likelihood change rate per page from change/no-change intervals.

    Parameters
    ----------
    confidence : float or None
        Coverage of the profile-likelihood interval; None skips the interval (``rate_low_``
        and ``rate_high_`` are NaN), for callers that need only the rate.
    tol : float
        Newton's method stops at steps below this in ``ln lambda`` (relative accuracy).
    max_iter : int
        Most iterations of each solve.

    Attributes
    ----------
    rate_ : ndarray of float, shape (n_pages,)
        Changes per day: 0 when no change was seen, +inf when every interval changed, NaN for
        a page without intervals.
    rate_low_, rate_high_ : ndarray of float, shape (n_pages,)
        Profile-likelihood interval, changes per day (``[0, 1.92/U]`` with no change seen at
        95 %, ``[low, inf]`` with only changes).
    n_changes_, n_intervals_ : ndarray of int, shape (n_pages,)
        Evidence per page.
    n_iter_ : int
        Newton iterations of the slowest solve.
    """

    def __init__(
        self,
        *,
        confidence: float | None = CONFIDENCE,
        tol: float = SOLVER_TOL,
        max_iter: int = SOLVER_MAX_ITER,
    ) -> None:
        self.confidence = confidence
        self.tol = tol
        self.max_iter = max_iter

    def fit(self, intervals: ChangeIntervals) -> PoissonChangeMLE:
        """Estimate every page of ``intervals``; returns self."""
        with_interval = self.confidence is not None
        drop = chi2_level_drop(self.confidence) if self.confidence is not None else 0.0
        n = intervals.n_pages
        changes = intervals.n_changes
        counts = intervals.n_intervals
        unchanged = intervals.unchanged_time
        rate = np.full(n, np.nan)
        low = np.full(n, np.nan)
        high = np.full(n, np.nan)
        n_iter = 0

        # no change seen: l(lambda) = -lambda U, maximal at 0, falls by `drop` at drop / U
        none = (counts > 0) & (changes == 0)
        rate[none] = 0.0
        if with_interval:
            low[none] = 0.0
            high[none] = drop / unchanged[none]

        lo, hi = mle_bracket(intervals)

        both = (changes > 0) & (unchanged > 0)
        if both.any() and not with_interval:
            theta, n_iter = maximize_log_rate(
                ChangeLogLikelihood.from_intervals(intervals, both),
                lo[both],
                hi[both],
                lo[both],
                tol=self.tol,
                max_iter=self.max_iter,
            )
            rate[both] = np.exp(theta)
        elif both.any() and self.confidence is not None:
            theta, t_low, t_high, n_iter = mode_and_interval(
                ChangeLogLikelihood.from_intervals(intervals, both),
                lo[both],
                hi[both],
                lo[both],
                confidence=self.confidence,
                tol=self.tol,
                max_iter=self.max_iter,
            )
            rate[both], low[both], high[both] = np.exp(theta), np.exp(t_low), np.exp(t_high)

        # only changes: l rises to 0 as lambda -> inf; the interval is [lambda(l = -drop), inf]
        only = (changes > 0) & (unchanged == 0)
        rate[only] = np.inf
        if only.any() and with_interval:
            sub = ChangeLogLikelihood.from_intervals(intervals, only)

            def below_level(
                obj: LogRateObjective, theta: FloatArray, pages: IntArray
            ) -> tuple[FloatArray, FloatArray]:
                value, grad = obj.value_gradient(theta)
                return -(value + drop), -grad

            k = int(np.count_nonzero(only))
            t_low, it = solve_decreasing(
                sub,
                below_level,
                np.full(k, LOG_RATE_MIN),
                np.full(k, LOG_RATE_MAX),
                lo[only],
                tol=self.tol,
                max_iter=self.max_iter,
            )
            n_iter = max(n_iter, it)
            rate[only] = np.inf
            low[only] = np.exp(t_low)
            high[only] = np.inf

        self.rate_ = rate
        self.rate_low_ = low
        self.rate_high_ = high
        self.n_changes_ = changes
        self.n_intervals_ = counts
        self.n_iter_ = n_iter
        return self


class EmpiricalBayesChangeRate:
    """Posterior change rate per page under a population prior fitted to all pages.

    The posterior of ``ln lambda`` is the change/no-change likelihood times the log-normal
    prior; its mode is finite for every page with evidence (no change seen: below the prior
    median, never 0; only changes: above it, never infinite) and tends to the MLE as the page's
    evidence grows. The interval is the likelihood-ratio interval of the posterior (where the
    log posterior is within 1.92 of its mode at 95 %), the same rule as the MLE's.

    ``point = "mean"`` reports ``exp`` of the posterior mean of ``ln lambda``
    (:func:`~estimators.solvers.posterior_mean_log_rate`) instead of the mode. They differ
    where the evidence bounds the rate on one side only. A page seen changing at every fetch
    has a likelihood flat above about one change per interval: its mode sits at that knee
    whatever the prior's upper tail says. On the "mixture, sections" world of
    ``tests/benchmarks/estimated_shares.py`` (1/14, seed 1), such pages had a true median rate
    of 2.2 a period and a mode of 0.49 (a fifth of the truth, and right in the band the
    freshness optimum crawls most); their posterior mean is about 1.6.

    Parameters
    ----------
    prior : LogNormalRatePrior, optional
        Fitted here on the same pages when not fitted yet (default: a new one); used as is when
        it has ``mu_`` (so that chunks of a large population share one prior).
    confidence, tol, max_iter
        As for :class:`PoissonChangeMLE`.
    point : {"mode", "mean"}
        The rate reported: the posterior mode, or the posterior mean of the log rate.

    Attributes
    ----------
    rate_, rate_low_, rate_high_ : ndarray of float, shape (n_pages,)
        Posterior mode (or mean of the log rate, ``point``) and interval, changes per day;
        NaN for a page without intervals.
    prior_ : LogNormalRatePrior
        The prior used.
    n_iter_ : int
        Newton iterations of the slowest solve.
    """

    def __init__(
        self,
        *,
        prior: LogNormalRatePrior | None = None,
        confidence: float = CONFIDENCE,
        tol: float = SOLVER_TOL,
        max_iter: int = SOLVER_MAX_ITER,
        point: str = "mode",
    ) -> None:
        self.prior = prior
        self.confidence = confidence
        self.tol = tol
        self.max_iter = max_iter
        self.point = point

    def fit(self, intervals: ChangeIntervals) -> EmpiricalBayesChangeRate:
        """Fit the prior if needed and estimate every page; returns self."""
        if self.point not in ("mode", "mean"):
            raise ValueError(f"point must be 'mode' or 'mean', got {self.point!r}")
        prior = self.prior if self.prior is not None else LogNormalRatePrior()
        if not hasattr(prior, "mu_"):
            prior = prior.fit(intervals)
        n = intervals.n_pages
        rate = np.full(n, np.nan)
        low = np.full(n, np.nan)
        high = np.full(n, np.nan)
        n_iter = 0
        seen = intervals.n_intervals > 0
        if seen.any():
            objective = PenalizedLogLikelihood(
                ChangeLogLikelihood.from_intervals(intervals, seen),
                prior.mu_,
                prior.sigma_,
            )
            lo, hi = mle_bracket(intervals)
            lo = np.minimum(lo[seen], prior.mu_)
            hi = np.maximum(hi[seen], prior.mu_)
            start = np.clip(prior.mu_, lo, hi)
            theta, t_low, t_high, n_iter = mode_and_interval(
                objective,
                lo,
                hi,
                start,
                confidence=self.confidence,
                tol=self.tol,
                max_iter=self.max_iter,
            )
            if self.point == "mean":
                theta = posterior_mean_log_rate(objective, theta, t_low, t_high)
            rate[seen], low[seen], high[seen] = np.exp(theta), np.exp(t_low), np.exp(t_high)
        self.rate_ = rate
        self.rate_low_ = low
        self.rate_high_ = high
        self.prior_ = prior
        self.n_iter_ = n_iter
        return self
