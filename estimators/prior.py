"""The population prior of change rates, fitted to the pages themselves (empirical Bayes).

A page fetched twice that did not change has a maximum-likelihood rate of 0; one that changed
both times has an infinite one. Plugged into an optimal refresh schedule, the first is never
fetched again and its estimate never recovers (REFERENCE.md sec. 8). Shrinking each page
toward what the rest of the population says keeps such pages in a middle bucket until their
own evidence speaks.

The prior is log-normal: ``ln lambda ~ N(mu, sigma^2)``, lambda in changes per day. Why this
family: rates spread over orders of magnitude, so a prior on the log rate is the natural
scale (the buckets are log-spaced too); its log density is concave in ``ln lambda``, so each
page's posterior has a single mode that the vectorized Newton solver finds (a Gamma prior with
shape < 1, which a population spread over decades gives, has its mode at 0 and would put the
unchanged pages right back at the rate 0). A two-cluster population fits a wide log-normal;
that is what we want from a prior that only has to matter for pages with little evidence.

``mu`` and ``sigma`` maximize the marginal likelihood ``prod_i int L_i(lambda) p(lambda) dlambda``
of a random sample of pages, the integral taken on a fixed grid of log rates. ``L_i`` is the
page's change/no-change likelihood; for a page without any interval it may instead be an
*exposure* likelihood ``lambda^C exp(-lambda T)``: C changes seen in T change-free days, given
to :meth:`LogNormalRatePrior.fit`. The one used is a page fetched once with a reliable
Last-Modified ``d`` at ``t``: one change in ``A = t - d`` (the backward recurrence time of a
Poisson process is exponential). That is what lets a store in cold start, every page fetched
at most once, have a prior, and so estimates (``last_modified_eb``).

``sigma`` needs pages that say more than whether they changed: one interval a page, all about
as long (what a first round robin gives), fits only the share of pages that changed, which a
ridge of ``(mu, sigma)`` pairs fits equally well; the fit slid along it to the smallest sigma
allowed and shrank every page onto one rate, whatever its Last-Modified dates said. So while
fewer than ``min_interval_pages`` pages have two or more intervals or dates (or single-fetch
ages), ``sigma`` is held at ``unidentified_sigma`` (a spread of rates over decades,
:data:`estimators.defaults.PRIOR_UNIDENTIFIED_SIGMA`) and ``mu`` alone is fitted.

Exposure evidence joins the fit only while fewer than ``min_interval_pages`` (default 100)
pages have an interval; from there on the fit is the intervals' alone, exactly as without it.
Why not always: the interval evidence rests on content comparisons, a single date only on the
server's word, and a server whose Last-Modified never moves passes every check a single fetch
allows (it gives a large A, a slow page); and a prior that changes whenever a new page is first
fetched would change every thin page's estimate with it. Below the threshold the intervals
are too few to fit two parameters well (a page with one interval says only changed or not),
while thousands of single fetches, each an exponential draw of ``1 / lambda``, fit them well.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize

from estimators.defaults import (
    PRIOR_MAX_PAGES,
    PRIOR_MIN_INTERVAL_PAGES,
    PRIOR_UNIDENTIFIED_SIGMA,
)
from estimators.evidence import ChangeIntervals

__all__ = ["LogNormalRatePrior", "exposure_loglik_on_grid", "interval_loglik_on_grid"]

FloatArray = NDArray[np.float64]


class LogNormalRatePrior:
    """Log-normal prior of change rates, fitted by maximum marginal likelihood.

    Parameters
    ----------
    max_pages : int
        Pages with evidence sampled for the fit (all when fewer).
    grid_step : float
        Spacing of the log-rate grid on which the marginal likelihood is integrated.
    rate_range : tuple of float
        Rates (per day) spanned by that grid; also bounds ``exp(mu)``.
    sigma_range : tuple of float
        Bounds of ``sigma`` (natural-log units). The lower bound keeps one dominant cluster
        from collapsing the prior onto a point; the upper keeps it proper.
    random_state : int
        Seed of the page sample.
    min_interval_pages : int
        From this many pages with a change/no-change interval on, :meth:`fit` ignores the
        exposure evidence it is given and fits the intervals alone (see the module docstring).
        Also the pages with more than a changed-or-not to say (two or more intervals, or
        dates) that ``sigma`` needs to be fitted.
    unidentified_sigma : float
        ``sigma`` while fewer pages than that can fit it: ``mu`` is then fitted alone.

    Attributes
    ----------
    mu_ : float
        Mean of ``ln lambda`` (lambda per day).
    sigma_ : float
        Standard deviation of ``ln lambda``.
    sigma_fitted_ : bool
        Whether ``sigma_`` was fitted (False: ``unidentified_sigma``).
    n_pages_ : int
        Pages used in the fit.
    n_exposure_pages_ : int
        Of those, pages fitted by their exposure evidence (no interval).
    log_marginal_likelihood_ : float
        Of the sampled pages, at the fitted prior (with the grid's quadrature).
    """

    def __init__(
        self,
        *,
        max_pages: int = PRIOR_MAX_PAGES,
        grid_step: float = 0.05,
        rate_range: tuple[float, float] = (1e-6, 1e4),
        sigma_range: tuple[float, float] = (0.25, 5.0),
        random_state: int = 0,
        min_interval_pages: int = PRIOR_MIN_INTERVAL_PAGES,
        unidentified_sigma: float = PRIOR_UNIDENTIFIED_SIGMA,
    ) -> None:
        self.max_pages = max_pages
        self.unidentified_sigma = unidentified_sigma
        self.grid_step = grid_step
        self.rate_range = rate_range
        self.sigma_range = sigma_range
        self.random_state = random_state
        self.min_interval_pages = min_interval_pages

    @classmethod
    def fixed(cls, mu: float, sigma: float) -> LogNormalRatePrior:
        """A prior given by its parameters, not fitted (for tests and what-if runs)."""
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        prior = cls()
        prior.mu_ = float(mu)
        prior.sigma_ = float(sigma)
        prior.n_pages_ = 0
        prior.n_exposure_pages_ = 0
        prior.sigma_fitted_ = False
        prior.log_marginal_likelihood_ = math.nan
        return prior

    def _grid(self) -> FloatArray:
        low, high = (math.log(r) for r in self.rate_range)
        n = math.ceil((high - low) / self.grid_step) + 1
        return np.linspace(low, high, n)

    def fit(
        self,
        intervals: ChangeIntervals,
        changes: ArrayLike | None = None,
        exposure: ArrayLike | None = None,
        *,
        dated_changes: ArrayLike | None = None,
        dated_exposure: ArrayLike | None = None,
    ) -> LogNormalRatePrior:
        """Fit ``mu_`` and ``sigma_`` to the pages' evidence.

        Parameters
        ----------
        intervals : ChangeIntervals
            Every page with an interval is a candidate for the sample.
        changes, exposure : array_like, shape (n_pages,), optional
            Exposure evidence, given together: C changes seen in T days known change-free,
            likelihood ``lambda^C exp(-lambda T)`` (for a page fetched once with a reliable
            Last-Modified, C = 1 and T = A = t - d). Used for the pages without an interval
            whose T is finite and > 0 (NaN: none), and only while fewer than
            ``min_interval_pages`` pages have an interval; otherwise ignored, and the fit is
            exactly the one without it.
        dated_changes, dated_exposure : array_like, shape (n_pages,), optional
            Last-Modified evidence of the pages whose dates were judged reliable over two or
            more fetches (NaN: none), given together: C moves of the date in T change-free
            days. Always used, in place of those pages' intervals (the dates cover the same
            time and more: a page unchanged between two fetches minutes apart whose date is
            weeks old has been unchanged for weeks, which its interval alone cannot say).

        Raises
        ------
        ValueError
            When no page has usable evidence: there is nothing to learn a prior from.
        """
        has_intervals = intervals.n_intervals > 0
        dated, dated_c, dated_t = _dated_pages(intervals.n_pages, dated_changes, dated_exposure)
        with_evidence = np.flatnonzero(has_intervals | dated)
        extra, c, t = self._exposure_pages(
            intervals, int(np.count_nonzero(has_intervals)), changes, exposure
        )
        if with_evidence.size == 0 and extra.size == 0:
            raise ValueError(
                "no page has a change/no-change interval (or exposure evidence) to fit a prior to"
            )
        rng = np.random.default_rng(self.random_state)
        if with_evidence.size > self.max_pages:
            with_evidence = np.sort(rng.choice(with_evidence, self.max_pages, replace=False))
        room = max(0, self.max_pages - with_evidence.size)
        if extra.size > room:
            # the few interval pages all stay; exposure pages fill the rest of the sample
            keep = np.sort(rng.choice(extra.size, room, replace=False))
            c, t = c[keep], t[keep]
        on_dates = with_evidence[dated[with_evidence]]
        sample = intervals.take(with_evidence[~dated[with_evidence]])
        grid = self._grid()
        loglik = interval_loglik_on_grid(sample, grid)  # (n, G)
        # start from the moments of the pages' naive log rates, then polish
        rates = (sample.n_changes + 0.5) / (sample.total_time + 1e-12)
        if on_dates.size:
            cd, td = dated_c[on_dates], dated_t[on_dates]
            loglik = np.concatenate([loglik, exposure_loglik_on_grid(cd, td, grid)])
            rates = np.concatenate([rates, (cd + 0.5) / td])
        if c.size:
            loglik = np.concatenate([loglik, exposure_loglik_on_grid(c, t, grid)])
            rates = np.concatenate([rates, (c + 0.5) / t])
        peak = loglik.max(axis=1, keepdims=True)
        scaled = np.exp(loglik - peak)  # (n, G), each row's maximum is 1
        offset = float(peak.sum())
        lo_mu, hi_mu = grid[0], grid[-1]
        lo_s, hi_s = (math.log(s) for s in self.sigma_range)

        def negative_log_marginal(params: FloatArray) -> float:
            mu, log_sigma = float(params[0]), float(params[1])
            sigma = math.exp(log_sigma)
            z = (grid - mu) / sigma
            weights = np.exp(-0.5 * z * z) * (self.grid_step / (sigma * math.sqrt(2 * math.pi)))
            marginal = scaled @ weights
            return -float(np.sum(np.log(np.maximum(marginal, 1e-300)))) - offset

        # Pages whose evidence says more than changed or not: two or more intervals, dates.
        identified = (
            int(np.count_nonzero(sample.n_intervals >= 2)) + on_dates.size + c.size
            >= self.min_interval_pages
        )
        if identified:
            start = np.array(
                [
                    float(np.clip(np.median(np.log(rates)), lo_mu, hi_mu)),
                    float(np.clip(math.log(max(float(np.std(np.log(rates))), 0.5)), lo_s, hi_s)),
                ]
            )
            result = optimize.minimize(
                negative_log_marginal,
                start,
                method="L-BFGS-B",
                bounds=[(lo_mu, hi_mu), (lo_s, hi_s)],
            )
            mu, log_sigma, value = float(result.x[0]), float(result.x[1]), float(result.fun)
        else:  # sigma fixed at unidentified_sigma, mu fitted alone
            log_sigma = float(np.clip(math.log(self.unidentified_sigma), lo_s, hi_s))
            best = optimize.minimize_scalar(
                lambda m: negative_log_marginal(np.array([m, log_sigma])),
                bounds=(lo_mu, hi_mu),
                method="bounded",
            )
            mu, value = float(best.x), float(best.fun)
        self.mu_ = mu
        self.sigma_ = float(math.exp(log_sigma))
        self.sigma_fitted_ = identified
        self.n_pages_ = int(sample.n_pages + on_dates.size + c.size)
        self.n_exposure_pages_ = int(c.size)
        self.log_marginal_likelihood_ = -value
        return self

    def _exposure_pages(
        self,
        intervals: ChangeIntervals,
        n_interval_pages: int,
        changes: ArrayLike | None,
        exposure: ArrayLike | None,
    ) -> tuple[NDArray[np.intp], FloatArray, FloatArray]:
        """Pages (in ``intervals``' numbering) whose exposure evidence joins the fit, and their
        C and T; empty unless given and fewer than ``min_interval_pages`` pages have intervals."""
        if (changes is None) != (exposure is None):
            raise ValueError("give changes and exposure together")
        none = np.zeros(0, dtype=np.intp)
        if changes is None or exposure is None or n_interval_pages >= self.min_interval_pages:
            return none, np.zeros(0), np.zeros(0)
        c = np.asarray(changes, dtype=np.float64)
        t = np.asarray(exposure, dtype=np.float64)
        n = intervals.n_pages
        if c.shape != (n,) or t.shape != (n,):
            raise ValueError(f"changes and exposure must cover the same {n} pages")
        # NaN exposure compares False
        usable = (t > 0) & np.isfinite(t) & (c >= 0) & np.isfinite(c)
        usable &= intervals.n_intervals == 0
        pages = np.flatnonzero(usable)
        return pages, c[pages], t[pages]


def _dated_pages(
    n: int, changes: ArrayLike | None, exposure: ArrayLike | None
) -> tuple[NDArray[np.bool_], FloatArray, FloatArray]:
    """Which of ``n`` pages have usable dated evidence (T finite and > 0), and C and T."""
    if (changes is None) != (exposure is None):
        raise ValueError("give dated_changes and dated_exposure together")
    if changes is None or exposure is None:
        return np.zeros(n, dtype=np.bool_), np.zeros(n), np.zeros(n)
    c = np.asarray(changes, dtype=np.float64)
    t = np.asarray(exposure, dtype=np.float64)
    if c.shape != (n,) or t.shape != (n,):
        raise ValueError(f"dated_changes and dated_exposure must cover the same {n} pages")
    with np.errstate(invalid="ignore"):
        usable = (t > 0) & np.isfinite(t) & (c >= 0) & np.isfinite(c)
    return usable, c, t


def exposure_loglik_on_grid(
    changes: FloatArray, exposure: FloatArray, grid: FloatArray
) -> FloatArray:
    """``C theta - T e^theta`` (``lambda^C exp(-lambda T)``) of each page at each log rate
    ``theta``, shape (n_pages, G)."""
    return changes[:, None] * grid[None, :] - exposure[:, None] * np.exp(grid)[None, :]


def interval_loglik_on_grid(intervals: ChangeIntervals, grid: FloatArray) -> FloatArray:
    """Change/no-change log-likelihood of each page at each log rate, shape (n_pages, G)."""
    changed = intervals.changed
    page = intervals.page[changed]
    length = intervals.length[changed]
    unchanged = intervals.unchanged_time
    out = np.empty((intervals.n_pages, grid.size))
    with np.errstate(divide="ignore"):
        for g, theta in enumerate(grid):
            rate = math.exp(theta)
            terms = np.log(-np.expm1(-rate * length))
            out[:, g] = (
                np.bincount(page, weights=terms, minlength=intervals.n_pages) - rate * unchanged
            )
    return out
