"""One change rate per page: the best estimator for the page's evidence, recorded with it.

By default (``shrink="always"``) every page with evidence gets its posterior mode under the
population prior, from its Last-Modified dates where they are reliable, else from its
change/no-change intervals:

==================== ================================================================
``none``             no interval yet (fetched at most once) and no usable single-fetch
                     Last-Modified (below): rate NaN, bucket 0
``last_modified_eb`` Last-Modified judged reliable: the posterior mode of the exposure
                     likelihood ``lambda^C exp(-lambda T)`` (and the first fetch's age)
                     under the population prior. Also a page fetched exactly once, at
                     ``t``, with a Last-Modified ``d`` judged reliable: one change seen in
                     exposure ``A = t - d`` (the backward recurrence time,
                     ``lambda exp(-lambda A)``)
``poisson_eb``       change/no-change intervals: the posterior mode (``point="mode"``,
                     the default) or the posterior mean of the log rate (``point="mean"``)
                     of their likelihood under the population prior
==================== ================================================================

Why ``point="mean"`` exists, and why it is not the default: a page whose every fetch saw a
change only says its rate is above about one change per interval, so its posterior mode sits
at that knee whatever the prior says of the faster rates. On ``tests/benchmarks/
estimated_shares.py``'s "mixture, sections" world (1/14, seed 1) such pages, two fifths of
the pages, had a true median rate of 2.2 a period and a mode of 0.49, and the plan spent a
third of its crawls on them; with true rates for those pages alone the planner kept 84 % of
the optimum's gain instead of 19 %. Their posterior mean is about 1.6. Over the benchmark's
7 worlds x 5 budgets x 2 seeds the mean raised "mixture, sections" from 26/25/30 % to
30/35/40 % at 1/28, 1/20, 1/14, but lowered the large budgets: "box, dates mixed" 1/7 59 ->
46 %, 1/3 86 -> 77 %; "no dates" 1/7 29 -> 25 %, 1/3 65 -> 60 %; "mixture, sections" 1/7 and
1/3 -3 points. It also doubles this estimator's time (200,000 pages x 10 intervals: 2.5 ->
4.5 s).

With ``shrink="thin"`` a page whose own evidence is rich skips the prior:

==================== ================================================================
``last_modified``    Last-Modified judged reliable and at least ``min_last_modified_changes``
                     changes seen through it: Cho & Garcia-Molina's bias-corrected estimator
``poisson_mle``      change/no-change intervals with at least ``min_changes`` change and
                     ``min_unchanged`` no-change intervals: the irregular-interval MLE
==================== ================================================================

Why shrinking every page is the default: a switch at a count of changes seen selects pages
by their luck. A slow page that happened to change twice in its few fetches leaves the prior
for an unshrunk estimate, and a fast page seen changing at every fetch gets Cho's
``(X - 1) / T``, two thirds of ``C / T`` at three changes. On the demo's web (rates spread
log-uniformly over 2.3 decades, 4 fetches a page) the pages given ``last_modified`` were
``e^1.95`` times too fast in the slowest band and ``e^-0.35`` too slow in the fastest, and the
freshness-optimal schedule on the estimates kept 38 % of the optimum's gain over uniform;
with every page shrunk, 48 % (docs/benchmarks.md, "Estimators"). The posterior mode tends to
the MLE as a page's evidence grows, so rich pages lose nothing but the selection.

A single fetch's Last-Modified is reliable when ``assess_last_modified`` says so, which for a
page with one fetch means exactly: the date is present, passes the per-fetch checks (not within
the clock tolerance of the fetch time, not after it: ``A > tolerance``; the interval checks
need two fetches) and the page's host is not judged unreliable (the rate-consistency test needs
intervals and does not apply). The page also needs ``A > tolerance`` in its evidence
(:attr:`~estimators.evidence.LastModifiedEvidence.single_fetch_age`, NaN otherwise), no
interval of either kind, a population prior (given, or fitted here: to the pages'
intervals, and, while fewer than ``LogNormalRatePrior.min_interval_pages`` (100) pages have
one, to the single fetches' ages too, so that a store in cold start gets a prior and
estimates), and ``shrink`` other than ``"never"`` (one change is too little for the unshrunk
estimator: Cho's returns 0 for one change in one interval); otherwise it stays ``none``.
Pages with two or more fetches are estimated as if the single-fetch step did not exist.

Last-Modified comes first because it says when the page last changed, not only whether it did
(Xyleme sec. 6.1: "we use last date of change when available unless ... unreliable"). With
``shrink="thin"`` the thresholds decide when a page's own evidence is enough to drop the
prior: below them the MLE is 0 or infinite, or swings by a bucket decade on one more fetch.
``shrink="always"`` uses the posterior everywhere (it tends to the MLE as evidence grows, and
is monotone in the changes seen); ``shrink="never"`` never does (MLE 0 and +inf are then
reported as they are). When no page has a change/no-change interval there is no prior to
shrink toward, and reliable Last-Modified pages get Cho's estimator whatever ``shrink`` says.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from estimators.defaults import (
    CONFIDENCE,
    MIN_CHANGES,
    MIN_LAST_MODIFIED_CHANGES,
    MIN_UNCHANGED,
    SOLVER_MAX_ITER,
    SOLVER_TOL,
)
from estimators.evidence import ChangeIntervals, LastModifiedEvidence
from estimators.last_modified import ChoLastModifiedRate, EmpiricalBayesLastModifiedRate
from estimators.poisson import EmpiricalBayesChangeRate, PoissonChangeMLE
from estimators.prior import LogNormalRatePrior

__all__ = ["ESTIMATORS", "ChangeRateEstimator"]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


class _FittedRate(Protocol):
    """What every fitted estimator gives: rates and interval bounds, changes per day."""

    rate_: FloatArray
    rate_low_: FloatArray
    rate_high_: FloatArray


#: Names recorded per page (at most 32 characters: the store's ``pages.estimator``).
ESTIMATORS = ("none", "last_modified", "last_modified_eb", "poisson_mle", "poisson_eb")
_CODE = {name: np.int8(i) for i, name in enumerate(ESTIMATORS)}


class ChangeRateEstimator:
    """Change rate, interval and estimator name per page, from all the evidence there is.

    Parameters
    ----------
    confidence : float
        Coverage of the per-page intervals.
    shrink : {"always", "thin", "never"}
        When to use the population prior: always (default), for pages with thin evidence
        only, or never.
    min_changes, min_unchanged : int
        Change and no-change intervals a page needs for its plain MLE (``shrink="thin"``).
    min_last_modified_changes : int
        Changes seen through Last-Modified for the unshrunk Last-Modified estimator.
    point : {"mode", "mean"}
        What ``poisson_eb`` pages report of their posterior: the mode (default) or the mean
        of the log rate (see the module docstring).
    prior : LogNormalRatePrior, optional
        The population prior; fitted to these pages' change/no-change intervals when not
        fitted yet (and to the single fetches' Last-Modified ages while few pages have
        intervals: :class:`~estimators.prior.LogNormalRatePrior`). Pass a fitted one to
        give every chunk of a large population the same prior.
    tol, max_iter
        Of the Newton solves.

    Attributes
    ----------
    rate_ : ndarray of float, shape (n_pages,)
        Changes per day; NaN for estimator "none".
    rate_low_, rate_high_ : ndarray of float, shape (n_pages,)
        Interval of the chosen estimator, changes per day.
    estimator_ : pandas.Categorical, length n_pages
        Name of the estimator chosen per page, from :data:`ESTIMATORS`.
    estimator_code_ : ndarray of int8, shape (n_pages,)
        Its index in :data:`ESTIMATORS`.
    prior_ : LogNormalRatePrior or None
        The prior (None when no page has any interval or reliable single-fetch age).
    n_changes_, n_intervals_ : ndarray of int, shape (n_pages,)
        Change/no-change evidence per page.
    """

    def __init__(
        self,
        *,
        confidence: float = CONFIDENCE,
        shrink: Literal["thin", "always", "never"] = "always",
        min_changes: int = MIN_CHANGES,
        min_unchanged: int = MIN_UNCHANGED,
        min_last_modified_changes: int = MIN_LAST_MODIFIED_CHANGES,
        prior: LogNormalRatePrior | None = None,
        tol: float = SOLVER_TOL,
        max_iter: int = SOLVER_MAX_ITER,
        point: Literal["mode", "mean"] = "mode",
    ) -> None:
        self.point = point
        self.confidence = confidence
        self.shrink = shrink
        self.min_changes = min_changes
        self.min_unchanged = min_unchanged
        self.min_last_modified_changes = min_last_modified_changes
        self.prior = prior
        self.tol = tol
        self.max_iter = max_iter

    def fit(
        self,
        intervals: ChangeIntervals,
        last_modified: LastModifiedEvidence | None = None,
        last_modified_reliable: BoolArray | None = None,
    ) -> ChangeRateEstimator:
        """Choose and run an estimator for every page; returns self.

        Parameters
        ----------
        intervals : ChangeIntervals
            Change/no-change evidence of all pages.
        last_modified : LastModifiedEvidence, optional
            Last-Modified evidence of the same pages; its ``single_fetch_age`` (when not
            None) estimates pages fetched once (see the module docstring).
        last_modified_reliable : ndarray of bool, shape (n_pages,), optional
            Which pages' Last-Modified may be used (``assess_last_modified(...).reliable``).
            Required with ``last_modified``: unchecked dates are never used.
        """
        if self.shrink not in ("thin", "always", "never"):
            raise ValueError(f"shrink must be 'thin', 'always' or 'never', got {self.shrink!r}")
        n = intervals.n_pages
        if (last_modified is None) != (last_modified_reliable is None):
            raise ValueError("give last_modified and last_modified_reliable together")
        reliable = None
        if last_modified is not None and last_modified_reliable is not None:
            if last_modified.n_pages != n or np.shape(last_modified_reliable) != (n,):
                raise ValueError(f"Last-Modified evidence must cover the same {n} pages")
            reliable = np.asarray(last_modified_reliable, dtype=np.bool_)

        code = self._choose(intervals, last_modified, reliable)
        single = self._single_fetches(intervals, last_modified, reliable)
        prior = self._prior(intervals, last_modified, code, single)
        if prior is not None:
            code[single] = _CODE["last_modified_eb"]
        else:
            single[:] = False  # no prior to shrink one change towards: no estimate

        rate = np.full(n, np.nan)
        low = np.full(n, np.nan)
        high = np.full(n, np.nan)
        for name, fitted in self._fits(intervals, last_modified, code, single, prior):
            mask = code == _CODE[name]
            rate[mask], low[mask], high[mask] = fitted.rate_, fitted.rate_low_, fitted.rate_high_

        self.rate_ = rate
        self.rate_low_ = low
        self.rate_high_ = high
        self.estimator_code_ = code
        self.estimator_ = pd.Categorical.from_codes(code, categories=pd.Index(ESTIMATORS))
        self.prior_ = prior
        self.n_changes_ = intervals.n_changes
        self.n_intervals_ = intervals.n_intervals
        return self

    def _choose(
        self,
        intervals: ChangeIntervals,
        last_modified: LastModifiedEvidence | None,
        reliable: BoolArray | None,
    ) -> NDArray[np.int8]:
        """Each page's estimator code (:data:`ESTIMATORS`), by the rules of the module
        docstring, before pages fetched once are considered."""
        n = intervals.n_pages
        changes = intervals.n_changes
        counts = intervals.n_intervals
        code = np.full(n, _CODE["none"], dtype=np.int8)
        has_intervals = counts > 0
        use_lm = np.zeros(n, dtype=np.bool_)
        if last_modified is not None and reliable is not None:
            use_lm = reliable & (last_modified.intervals > 0)
            lm_rich = self._rich(last_modified.changes >= self.min_last_modified_changes)
            code[use_lm & lm_rich] = _CODE["last_modified"]
            code[use_lm & ~lm_rich] = _CODE["last_modified_eb"]
        rich = self._rich((changes >= self.min_changes) & (counts - changes >= self.min_unchanged))
        observed = has_intervals & ~use_lm
        code[observed & rich] = _CODE["poisson_mle"]
        code[observed & ~rich] = _CODE["poisson_eb"]
        if last_modified is not None and not has_intervals.any():
            # no change/no-change interval anywhere to fit a prior to: no shrinkage possible
            code[code == _CODE["last_modified_eb"]] = _CODE["last_modified"]
        return code

    def _rich(self, enough: BoolArray) -> BoolArray:
        """Which pages have evidence enough to skip shrinkage, as ``shrink`` rules."""
        if self.shrink == "always":
            return np.zeros_like(enough)
        if self.shrink == "never":
            return np.ones_like(enough)
        return enough

    def _single_fetches(
        self,
        intervals: ChangeIntervals,
        last_modified: LastModifiedEvidence | None,
        reliable: BoolArray | None,
    ) -> BoolArray:
        """Pages fetched once with a reliable Last-Modified: one change in exposure A."""
        n = intervals.n_pages
        if (
            last_modified is None
            or reliable is None
            or last_modified.single_fetch_age is None
            or self.shrink == "never"
        ):
            return np.zeros(n, dtype=np.bool_)
        age = last_modified.single_fetch_age
        if np.shape(age) != (n,):
            raise ValueError(f"single_fetch_age must cover the same {n} pages")
        # NaN (not fetched once, or a date within the tolerance) compares False
        single = reliable & (age > 0)
        return single & (intervals.n_intervals == 0) & (last_modified.intervals == 0)

    def _prior(
        self,
        intervals: ChangeIntervals,
        last_modified: LastModifiedEvidence | None,
        code: NDArray[np.int8],
        single: BoolArray,
    ) -> LogNormalRatePrior | None:
        """The population prior: the one given (fitted here if it is not yet), or one fitted
        when some page needs shrinking; None when nothing can be fitted or nothing needs it."""
        needs_prior = (
            single.any() or np.isin(code, [_CODE["poisson_eb"], _CODE["last_modified_eb"]]).any()
        )
        # pages fetched once join the prior's fit through one change in exposure A (the prior
        # uses them only while few pages have intervals: LogNormalRatePrior.min_interval_pages)
        exposure = None
        if single.any():
            assert last_modified is not None and last_modified.single_fetch_age is not None
            # a new page's creation date is no change: it stays out of the prior's fit
            dated_change = single & (last_modified.first_age_changes() > 0)
            exposure = np.where(dated_change, last_modified.single_fetch_age, np.nan)
        # pages on a Last-Modified estimator join it through their dates' evidence, in place
        # of their intervals (issue 27: a prior fitted to intervals minutes long alone put
        # pages whose dates were weeks old at days' worth of changes)
        dated = None
        on_dates = np.isin(code, [_CODE["last_modified"], _CODE["last_modified_eb"]])
        if last_modified is not None and on_dates.any():
            changes, exposure_days = _with_first_fetch_age(last_modified, on_dates)
            dated = (
                np.where(on_dates, changes, np.nan),
                np.where(on_dates, exposure_days, np.nan),
            )
        can_fit = bool((intervals.n_intervals > 0).any() or single.any())
        prior = self.prior
        if prior is not None and not hasattr(prior, "mu_"):
            return _fit_prior(prior, intervals, exposure, dated) if can_fit else None
        if prior is None and can_fit and needs_prior:
            return _fit_prior(LogNormalRatePrior(), intervals, exposure, dated)
        return prior

    def _fits(
        self,
        intervals: ChangeIntervals,
        last_modified: LastModifiedEvidence | None,
        code: NDArray[np.int8],
        single: BoolArray,
        prior: LogNormalRatePrior | None,
    ) -> Iterator[tuple[str, _FittedRate]]:
        """Each chosen estimator fitted on its pages, as (estimator name, fitted)."""
        for name in ("poisson_mle", "poisson_eb"):
            pages = np.flatnonzero(code == _CODE[name])
            if pages.size == 0:
                continue
            subset = intervals.take(pages)
            if name == "poisson_mle":
                yield (
                    name,
                    PoissonChangeMLE(
                        confidence=self.confidence, tol=self.tol, max_iter=self.max_iter
                    ).fit(subset),
                )
            else:
                yield (
                    name,
                    EmpiricalBayesChangeRate(
                        prior=prior,
                        confidence=self.confidence,
                        tol=self.tol,
                        max_iter=self.max_iter,
                        point=self.point,
                    ).fit(subset),
                )
        if last_modified is None:
            return
        for name in ("last_modified", "last_modified_eb"):
            mask = code == _CODE[name]
            if not mask.any():
                continue
            evidence = LastModifiedEvidence(
                last_modified.intervals[mask],
                last_modified.changes[mask],
                last_modified.exposure[mask],
                last_modified.age_sum[mask],
            )
            if name == "last_modified":
                yield name, ChoLastModifiedRate(confidence=self.confidence).fit(evidence)
                continue
            counted = last_modified.first_age_changes()[mask]
            if single.any():
                assert last_modified.single_fetch_age is not None  # single is all False
                _add_single_fetches(
                    evidence, single[mask], last_modified.single_fetch_age[mask], counted
                )
            if last_modified.first_fetch_age is not None:
                # the date at the first fetch: unchanged for A days before the intervals
                _add_first_fetch_ages(evidence, last_modified.first_fetch_age[mask], counted)
            assert prior is not None  # ensured by _prior
            yield (
                name,
                EmpiricalBayesLastModifiedRate(
                    prior=prior, confidence=self.confidence, tol=self.tol, max_iter=self.max_iter
                ).fit(evidence),
            )


def _fit_prior(
    prior: LogNormalRatePrior,
    intervals: ChangeIntervals,
    exposure: FloatArray | None,
    dated: tuple[FloatArray, FloatArray] | None = None,
) -> LogNormalRatePrior:
    """``prior`` fitted to ``intervals`` and, when given, one change in ``exposure`` days
    (shape (n_pages,), NaN for none) of each page fetched once, and the ``dated`` evidence
    (C, T) of pages on a Last-Modified estimator."""
    changes = None if exposure is None else np.ones(exposure.shape[0])
    dated_changes, dated_exposure = dated if dated is not None else (None, None)
    return prior.fit(
        intervals,
        changes,
        exposure,
        dated_changes=dated_changes,
        dated_exposure=dated_exposure,
    )


def _with_first_fetch_age(
    evidence: LastModifiedEvidence, pages: BoolArray
) -> tuple[FloatArray, FloatArray]:
    """C and T of ``evidence`` with, for the ``pages`` that have one, the first fetch's age
    A counted as one change seen in A days (see ``LastModifiedEvidence.first_fetch_age``)."""
    changes = evidence.changes.astype(np.float64)
    exposure = evidence.exposure.astype(np.float64)
    if evidence.first_fetch_age is not None:
        age = np.where(pages, evidence.first_fetch_age, np.nan)
        known = ~np.isnan(age)
        changes[known] += evidence.first_age_changes()[known]
        exposure[known] += age[known]
    return changes, exposure


def _add_single_fetches(
    evidence: LastModifiedEvidence, single: BoolArray, age: FloatArray, counted: FloatArray
) -> None:
    """Write one change seen in exposure ``age`` (shape (n_pages,) of ``evidence``) into
    ``evidence``, whose arrays are its own, for the pages where ``single``: the likelihood
    ``lambda exp(-lambda A)`` of a page seen once, so that
    :class:`EmpiricalBayesLastModifiedRate` takes them with the other thin pages; no change
    where ``counted`` is 0 (the date is the page's creation: ``exp(-lambda A)``)."""
    evidence.intervals[single] = 1
    evidence.changes[single] = counted[single].astype(evidence.changes.dtype)
    evidence.exposure[single] = age[single]
    evidence.age_sum[single] = age[single]


def _add_first_fetch_ages(
    evidence: LastModifiedEvidence, age: FloatArray, counted: FloatArray
) -> None:
    """Add ``counted`` changes (1, or 0 for a date that is the page's creation) seen in
    exposure ``age`` (shape (n_pages,) of ``evidence``, NaN for none) to ``evidence``, whose
    arrays are its own: the first fetch's date, before the intervals
    (``LastModifiedEvidence.first_fetch_age``)."""
    known = ~np.isnan(age)
    evidence.changes[known] += counted[known].astype(evidence.changes.dtype)
    evidence.exposure[known] += age[known]
    evidence.age_sum[known] += age[known]
