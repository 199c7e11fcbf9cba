"""Change rates as Gamma posteriors, with priors learned per group of pages.

A point estimate per page, used as if true, throws away how much the page's neighbours say
about it and how uncertain the estimate is. :class:`GammaRatePosterior` gives every page a
``Gamma(alpha, beta)`` belief about its rate instead (``beta`` in the time unit of the
evidence), from:

* its change/no-change intervals: unchanged time exactly (``beta += tau``), change intervals
  moment-matched (:mod:`estimators.gamma_updates`);
* its Last-Modified dates where they are reliable (:func:`estimators.reliability.
  assess_last_modified`): exact change times, ``alpha += C``, ``beta += T``; they then replace
  the page's change intervals, which see the same changes less precisely (as
  :class:`estimators.estimator_choice.ChangeRateEstimator` does); a page fetched once
  contributes its age ``A = t - d``: ``alpha += 1``, ``beta += A``;
* reliable change notifications (:func:`estimators.notifications.notification_rates`): a
  complete change log, N changes in the span observed, which replaces everything else;
* a prior per group of pages: the population's Gamma, then one level per grouping given (host,
  site section, URL pattern: coarse to fine), each fitted by empirical Bayes and shrunk toward
  the level above when the group has little evidence (:mod:`estimators.group_prior`).

A page without any evidence gets its group's prior. Two passes: the first, under the
population prior, turns each page's evidence into a conjugate message that the group fit
reads; the second updates each page's group prior with the same evidence.

Imports: numpy, scipy, the estimators modules named here. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from estimators.evidence import ChangeIntervals, LastModifiedEvidence
from estimators.gamma_updates import RatePosterior, changed_intervals_update, check_gamma
from estimators.group_prior import GroupLevelPrior, fit_group_levels, fit_population_prior

if TYPE_CHECKING:  # scipy.stats, which notifications imports, takes most of a second
    from estimators.notifications import NotificationRates

__all__ = ["GammaRatePosterior"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]


class GammaRatePosterior:
    """Gamma posterior of each page's change rate, with group priors by empirical Bayes.

    Parameters
    ----------
    prior : (alpha, beta), optional
        The population prior; fitted to the pages by maximum marginal likelihood when None.
    max_pages : int
        Pages sampled to fit the population prior.
    grid_step : float
        Log-rate grid spacing of that fit.
    random_state : int
        Seed of the samples.

    Attributes
    ----------
    alpha_, beta_ : ndarray of float, shape (n_pages,)
        Each page's posterior (``beta_`` in the evidence's time unit).
    mean_, sd_ : ndarray of float, shape (n_pages,)
        ``alpha_ / beta_`` and ``sqrt(alpha_) / beta_``.
    evidence_ : ndarray of int, shape (n_pages,)
        Observations behind each posterior (0: the page's group prior).
    posterior_ : RatePosterior
        The same, as one value to hand on.
    prior_alpha_, prior_beta_ : ndarray of float, shape (n_pages,)
        Each page's prior (its finest group's).
    population_prior_ : (float, float)
        The population's ``(alpha, beta)``.
    group_priors_ : list of GroupLevelPrior
        The fitted priors of each level of grouping, coarse to fine.
    """

    def __init__(
        self,
        *,
        prior: tuple[float, float] | None = None,
        max_pages: int = 5000,
        grid_step: float = 0.1,
        random_state: int = 0,
    ) -> None:
        self.prior = prior
        self.max_pages = max_pages
        self.grid_step = grid_step
        self.random_state = random_state

    def fit(
        self,
        intervals: ChangeIntervals,
        *,
        groups: Sequence[tuple[str, ArrayLike]] | None = None,
        last_modified: LastModifiedEvidence | None = None,
        reliable: ArrayLike | None = None,
        notifications: NotificationRates | None = None,
    ) -> GammaRatePosterior:
        """Fit the priors and every page's posterior; returns self.

        Parameters
        ----------
        intervals : ChangeIntervals
            Change/no-change intervals of all ``n`` pages.
        groups : list of (name, labels), optional
            Levels of grouping, coarse to fine (``[("host", host), ("section", section)]``),
            labels non-negative integers of shape (n,). None: the population prior alone.
        last_modified, reliable : optional, given together
            Last-Modified evidence of the pages, and which pages' dates to believe (bool,
            shape (n,)).
        notifications : NotificationRates, optional
            Pages whose change notifications are reliable.

        Raises
        ------
        ValueError
            On evidence of the wrong shape, negative or not finite, and when no page has any
            evidence and no prior is given.
        """
        n = intervals.n_pages
        c, t, own, evidence = _conjugate_evidence(intervals, last_modified, reliable, notifications)
        if own.all():
            kept = intervals
        else:
            keep = own[intervals.page]
            kept = ChangeIntervals(
                intervals.page[keep], intervals.length[keep], intervals.changed[keep], n
            )
        t = t + kept.unchanged_time
        if self.prior is not None:
            a0, b0 = (float(v) for v in check_gamma(*self.prior))
        else:
            a0, b0 = fit_population_prior(
                kept,
                c,
                t - kept.unchanged_time,
                max_pages=self.max_pages,
                grid_step=self.grid_step,
                random_state=self.random_state,
            )
        page, length = kept.change_intervals
        levels = [(str(name), np.asarray(labels)) for name, labels in (groups or [])]
        if levels:
            # first pass: each page's evidence as a conjugate message, under the population
            a1, b1 = changed_intervals_update(a0 + c, b0 + t, page, length)
            msg_c, msg_t = np.maximum(a1 - a0, 0.0), np.maximum(b1 - b0, 0.0)
            prior_a, prior_b, fitted = fit_group_levels(
                msg_c, msg_t, (a0, b0), levels, random_state=self.random_state
            )
        else:
            prior_a, prior_b, fitted = np.full(n, a0), np.full(n, b0), []
        alpha, beta = changed_intervals_update(prior_a + c, prior_b + t, page, length)
        self.alpha_ = alpha
        self.beta_ = beta
        self.mean_ = alpha / beta
        self.sd_ = np.sqrt(alpha) / beta
        self.evidence_ = evidence
        self.posterior_ = RatePosterior(alpha, beta, evidence)
        self.prior_alpha_ = prior_a
        self.prior_beta_ = prior_b
        self.population_prior_ = (a0, b0)
        self.group_priors_: list[GroupLevelPrior] = fitted
        return self


def _check_nonnegative(name: str, values: ArrayLike, n: int) -> FloatArray:
    """``values`` as floats of shape (n,), finite and >= 0, else a ValueError naming them."""
    out = np.asarray(values, dtype=np.float64)
    if out.shape != (n,):
        raise ValueError(f"{name} must have one value per page ({n}), got shape {out.shape}")
    bad = ~(np.isfinite(out) & (out >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite and >= 0; page {i} has {out[i]}")
    return out


def _conjugate_evidence(
    intervals: ChangeIntervals,
    last_modified: LastModifiedEvidence | None,
    reliable: ArrayLike | None,
    notifications: NotificationRates | None,
) -> tuple[FloatArray, FloatArray, NDArray[np.bool_], IntArray]:
    """Per page: changes seen at known times, change-free time known (both conjugate),
    whether the page's change intervals count, and its evidence count; shapes (n,)."""
    n = intervals.n_pages
    c = np.zeros(n)
    t = np.zeros(n)
    own = np.ones(n, dtype=np.bool_)
    evidence = np.asarray(intervals.n_intervals, dtype=np.intp).copy()
    if (last_modified is None) != (reliable is None):
        raise ValueError("give last_modified and reliable together")
    if last_modified is not None and reliable is not None:
        trust = np.asarray(reliable, dtype=np.bool_)
        if trust.shape != (n,) or last_modified.n_pages != n:
            raise ValueError(f"last_modified and reliable must cover the same {n} pages")
        changes = _check_nonnegative("last_modified.changes", last_modified.changes, n)
        exposure = _check_nonnegative("last_modified.exposure", last_modified.exposure, n)
        dated = trust & (last_modified.intervals > 0)
        c[dated], t[dated] = changes[dated], exposure[dated]
        own &= ~dated
        evidence[dated] = last_modified.intervals[dated]
        if last_modified.single_fetch_age is not None:
            age = np.asarray(last_modified.single_fetch_age, dtype=np.float64)
            single = trust & ~dated & np.isfinite(age) & (age > 0)
            c[single] += last_modified.first_age_changes()[single]
            t[single] += age[single]
            evidence[single] += 1
    if notifications is not None and notifications.page.size:
        pages = np.asarray(notifications.page, dtype=np.intp)
        if pages.min() < 0 or pages.max() >= n:
            raise ValueError(f"notification pages must lie in [0, {n})")
        count = np.asarray(notifications.notifications, dtype=np.float64)
        rate = np.asarray(notifications.rate, dtype=np.float64)
        if not np.all(np.isfinite(rate) & (rate > 0)):
            raise ValueError("notification rates must be finite and > 0")
        c[pages], t[pages] = count, count / rate  # N changes in the span observed
        own[pages] = False
        evidence[pages] = notifications.notifications
    return c, t, own, evidence
