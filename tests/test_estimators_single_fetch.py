"""Pages fetched once: their Last-Modified, when reliable, is one change seen in exposure A.

A fetch at ``t`` reporting Last-Modified ``d`` says the page last changed at ``d`` and not in
``(d, t]``; the backward recurrence time ``A = t - d`` of a Poisson process is exponential,
likelihood ``lambda exp(-lambda A)``. The estimate is the posterior mode under the population
prior (``last_modified_eb``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import (
    ChangeIntervals,
    ChangeRateEstimator,
    EmpiricalBayesLastModifiedRate,
    LastModifiedEvidence,
    LogNormalRatePrior,
    assess_last_modified,
    change_intervals_from_fetches,
    last_modified_evidence_from_fetches,
)
from estimators.defaults import CLOCK_TOLERANCE_DAYS, PRIOR_MIN_INTERVAL_PAGES
from estimators.fetch_table import FetchArrayEstimate, estimate_fetch_arrays

#: With mu = -1/2, sigma = 1 and A = 1/2 day, the posterior mode of ln(lambda) solves
#: 1 - A lambda - (ln lambda - mu) / sigma^2 = 0 (one change: d/dtheta of theta - A e^theta,
#: minus the prior's pull), and lambda = 1 does: 1 - 1/2 - (0 + 1/2) = 0.
PRIOR = LogNormalRatePrior.fixed(-0.5, 1.0)


def _one_fetch(age: float, *, prior: LogNormalRatePrior = PRIOR) -> FetchArrayEstimate:
    """A page fetched once at day 10 with Last-Modified ``10 - age``, through the store path."""
    return estimate_fetch_arrays(
        [7],
        [10.0],
        [np.nan],
        [10.0 - age],
        None,
        estimator=ChangeRateEstimator(prior=prior),
    )


def test_one_fetch_gets_the_posterior_mode_of_one_change_in_its_age() -> None:
    result = _one_fetch(0.5)
    assert result.estimator.tolist() == ["last_modified_eb"]
    assert result.rate[0] == pytest.approx(1.0, rel=1e-9)
    assert result.bucket[0] > 0
    # the interval is that of the other thin Last-Modified pages: one change in 1/2 day
    thin = EmpiricalBayesLastModifiedRate(prior=PRIOR).fit(
        LastModifiedEvidence(np.array([1]), np.array([1]), np.array([0.5]), np.array([0.5]))
    )
    assert result.rate_low[0] == thin.rate_low_[0] < 1.0 < thin.rate_high_[0] == result.rate_high[0]


@pytest.mark.parametrize(
    "age",
    [0.0, 0.5 * CLOCK_TOLERANCE_DAYS, -0.5 * CLOCK_TOLERANCE_DAYS, -3.0],
    ids=["equal", "within_tolerance", "just_after", "future"],
)
def test_last_modified_at_or_after_the_fetch_time_gives_no_estimate(age: float) -> None:
    result = _one_fetch(age)
    assert result.estimator.tolist() == ["none"]
    assert math.isnan(result.rate[0]) and result.bucket[0] == 0


def test_one_fetch_on_an_unreliable_host_gives_no_estimate() -> None:
    # host 0: five pages fetched three times whose Last-Modified is the fetch time (15 checked
    # fetches, all failing), and one page fetched once with a plausible date; host 1: the same
    # single page alone (no repeated dates: verified); host 2: the same single page beside
    # three pages with one first date (repeated: suspect) that moved with each of their
    # changes (verified)
    page, at, changed, modified, host = [], [], [], [], []
    for p in range(5):
        for k in range(3):
            page.append(p)
            at.append(1.0 + k)
            changed.append(np.nan if k == 0 else 1.0)
            modified.append(1.0 + k)
            host.append(0)
    for p in range(7, 10):
        for k in range(2):
            page.append(p)
            at.append(1.0 + k)
            changed.append(np.nan if k == 0 else 1.0)
            modified.append(0.5 + k)
            host.append(2)
    for p, h in ((5, 0), (6, 1), (10, 2)):
        page.append(p)
        at.append(10.0)
        changed.append(np.nan)
        modified.append(8.0)
        host.append(h)
    order = np.lexsort((at, page))
    page, at, changed, modified, host = (
        np.asarray(v)[order] for v in (page, at, changed, modified, host)
    )
    result = estimate_fetch_arrays(
        page, at, changed, modified, host, estimator=ChangeRateEstimator(prior=PRIOR)
    )
    by_page = dict(zip(result.page.tolist(), range(result.page.size), strict=True))
    assert result.estimator[by_page[5]] == "none" and result.bucket[by_page[5]] == 0
    assert result.estimator[by_page[6]] == "last_modified_eb" and result.bucket[by_page[6]] > 0
    assert result.estimator[by_page[10]] == "last_modified_eb" and result.bucket[by_page[10]] > 0
    hosts = np.array([0] * 7 + [2] * 4)
    hosts[6] = 1
    reliability = assess_last_modified(page, at, changed, modified, host=hosts)
    assert reliability.reason[5] == "host" and reliability.reason[6] == "ok"
    assert reliability.reason[10] == "ok"
    assert reliability.verified.tolist() == [False] * 6 + [True] * 5


def test_one_fixed_date_for_changing_pages_is_not_believed_on_one_fetch() -> None:
    # A server that sends one template date, 30 days old, for pages that change every day:
    # on one fetch per page every page looks unchanged for 30 days. Its pages share their
    # date, so until its dates have been seen to move with its pages' changes, those pages
    # get no estimate (planned as unknown, fetched again) and no first-fetch age: two
    # fetches of three pages, each changed and the date still, leave the host unverified
    # and those pages on their own change/no-change evidence.
    n_twice, n_once = 3, 20
    page, at, changed, modified = [], [], [], []
    for p in range(n_twice):
        page += [p, p]
        at += [10.0, 11.0]
        changed += [np.nan, 1.0]
        modified += [-20.0, -20.0]
    for p in range(n_twice, n_twice + n_once):
        page.append(p)
        at.append(10.5)
        changed.append(np.nan)
        modified.append(-20.0)
    n = n_twice + n_once
    reliability = assess_last_modified(page, at, changed, modified, host=np.zeros(n, np.intp))
    assert not reliability.verified.any()
    assert (
        reliability.reason.tolist() == ["static_while_changed"] * n_twice + ["unverified"] * n_once
    )
    result = estimate_fetch_arrays(
        page, at, changed, modified, [0] * len(page), estimator=ChangeRateEstimator(prior=PRIOR)
    )
    assert result.estimator.tolist() == ["poisson_eb"] * n_twice + ["none"] * n_once
    # the same dates honest (each page's date moved with its change) verify the host
    moving = [10.5 if k % 2 and k < 2 * n_twice else d for k, d in enumerate(modified)]
    honest = assess_last_modified(page, at, changed, moving, host=np.zeros(n, np.intp))
    assert honest.verified.all() and honest.reliable.all()


def test_no_prior_or_shrink_never_gives_no_estimate() -> None:
    evidence = LastModifiedEvidence(
        np.array([0]), np.array([0]), np.zeros(1), np.zeros(1), np.array([0.5])
    )
    empty = ChangeIntervals.from_lists([[]], [[]])
    # no interval anywhere and no single fetch (evidence summed by hand): nothing to fit a
    # prior to, and none given
    hand = replace(evidence, single_fetch_age=None)
    fit = ChangeRateEstimator(prior=LogNormalRatePrior()).fit(empty, hand, np.array([True]))
    assert fit.estimator_.tolist() == ["none"] and fit.prior_ is None
    # the single fetch's date not judged reliable: neither estimated nor fitted to
    fit = ChangeRateEstimator().fit(empty, evidence, np.array([False]))
    assert fit.estimator_.tolist() == ["none"] and fit.prior_ is None
    fit = ChangeRateEstimator(prior=PRIOR, shrink="never").fit(empty, evidence, np.array([True]))
    assert fit.estimator_.tolist() == ["none"]


def test_one_fetch_alone_fits_its_own_prior() -> None:
    # no interval anywhere: the page's own age is the prior's evidence (as one page's
    # intervals would be), so the page is estimated, near 1 / A
    result = _one_fetch(0.5, prior=LogNormalRatePrior())
    assert result.estimator.tolist() == ["last_modified_eb"]
    prior = result.fitted.prior_
    assert prior is not None and prior.n_pages_ == prior.n_exposure_pages_ == 1
    assert 0.5 < result.rate[0] < 4.0


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1e-3, 1e3),
    st.floats(1.01, 100.0),
    st.floats(-6.0, 2.0),
    st.floats(0.25, 5.0),
)
def test_single_fetch_rate_falls_as_the_age_grows(
    age: float, factor: float, mu: float, sigma: float
) -> None:
    ages = np.array([age, age * factor])
    evidence = LastModifiedEvidence(
        np.zeros(2, np.intp), np.zeros(2, np.intp), np.zeros(2), np.zeros(2), ages
    )
    empty = ChangeIntervals.from_lists([[], []], [[], []])
    fit = ChangeRateEstimator(prior=LogNormalRatePrior.fixed(mu, sigma)).fit(
        empty, evidence, np.ones(2, bool)
    )
    assert fit.estimator_.tolist() == ["last_modified_eb"] * 2
    assert 0 < fit.rate_[1] < fit.rate_[0]
    assert np.all(fit.rate_low_ <= fit.rate_) and np.all(fit.rate_ <= fit.rate_high_)


def _mixed_log(seed: int) -> tuple[np.ndarray, ...]:
    """Pages fetched 1 to 5 times with honest dates (a Poisson process per page), a few
    missing dates, and hosts that stamp the fetch time."""
    rng = np.random.default_rng(seed)
    n = 3000
    fetches = rng.integers(1, 6, n)
    rate = np.exp(rng.normal(math.log(0.2), 1.5, n))
    page = np.repeat(np.arange(n), fetches)
    gaps = rng.exponential(3.0, page.size)
    at = np.cumsum(gaps)
    changed = np.full(page.size, np.nan)
    modified = np.empty(page.size)
    for i in range(page.size):  # small: a plain loop keeps the simulation obvious
        lam = rate[page[i]]
        if i == 0 or page[i] != page[i - 1]:
            modified[i] = at[i] - rng.exponential(1.0 / lam)
            continue
        changed[i] = float(rng.random() < -math.expm1(-lam * gaps[i]))
        # after a change, the last one is a truncated exponential back from the fetch
        since = -math.log1p(-rng.random() * -math.expm1(-lam * gaps[i])) / lam
        modified[i] = at[i] - since if changed[i] else modified[i - 1]
    modified[rng.random(page.size) < 0.02] = np.nan
    host = np.arange(n) // 10
    lying = (rng.random(host.max() + 1) < 0.2)[host][page]
    modified[lying] = at[lying]
    return page, at, changed, modified, host, fetches


@pytest.mark.parametrize("shrink", ["thin", "always"])
@pytest.mark.parametrize("fitted_prior", [False, True])
def test_pages_fetched_twice_or_more_keep_their_estimates(
    shrink: Literal["thin", "always"], fitted_prior: bool
) -> None:
    page, at, changed, modified, host, fetches = _mixed_log(11)
    n = fetches.size
    intervals = change_intervals_from_fetches(page, at, changed, n_pages=n)
    evidence = last_modified_evidence_from_fetches(page, at, modified, n_pages=n)
    reliable = assess_last_modified(page, at, changed, modified, n_pages=n, host=host).reliable

    def fit(lm: LastModifiedEvidence) -> ChangeRateEstimator:
        prior = PRIOR if fitted_prior else None
        return ChangeRateEstimator(prior=prior, shrink=shrink).fit(intervals, lm, reliable)

    with_step = fit(evidence)
    without = fit(replace(evidence, single_fetch_age=None))
    # 2,400 pages with intervals: the prior is theirs alone, exactly
    assert (with_step.n_intervals_ > 0).sum() >= PRIOR_MIN_INTERVAL_PAGES
    assert with_step.prior_ is not None and without.prior_ is not None
    assert (with_step.prior_.mu_, with_step.prior_.sigma_) == (
        without.prior_.mu_,
        without.prior_.sigma_,
    )
    assert with_step.prior_.n_exposure_pages_ == 0
    many = fetches >= 2
    for name in ("rate_", "rate_low_", "rate_high_", "estimator_code_"):
        np.testing.assert_array_equal(getattr(with_step, name)[many], getattr(without, name)[many])
    # the step did something: single fetches with an honest date on an honest host
    single = ~many & (with_step.estimator_code_ != without.estimator_code_)
    assert single.sum() > 100
    assert set(with_step.estimator_[single]) == {"last_modified_eb"}
    assert set(without.estimator_[single]) == {"none"}


def test_single_fetch_age_is_the_age_of_pages_fetched_once() -> None:
    # page 0 fetched once (the log's first fetch), 1 twice, 2 once with no date, 3 once, 4
    # never, 5 once (the log's last fetch) with a date within the tolerance
    page = [0, 1, 1, 2, 3, 5]
    at = [5.0, 1.0, 2.0, 3.0, 9.0, 4.0]
    modified = [4.0, 0.5, 1.5, np.nan, 6.5, 4.0 - 0.5 * CLOCK_TOLERANCE_DAYS]
    evidence = last_modified_evidence_from_fetches(page, at, modified, n_pages=6)
    assert evidence.single_fetch_age is not None
    np.testing.assert_array_equal(
        evidence.single_fetch_age, [1.0, np.nan, np.nan, 2.5, np.nan, np.nan]
    )
    np.testing.assert_array_equal(evidence.intervals, [0, 1, 0, 0, 0, 0])


def _cold_start_log(seed: int, mu: float, sigma: float, n: int = 5000) -> tuple[np.ndarray, ...]:
    """Every page fetched once, at a random time, with an honest Last-Modified: the age
    ``A = t - d`` is exponential with the page's rate, the rates log-normal(mu, sigma). Ages
    start one clock tolerance (a minute) after the fetch time so that every date passes."""
    rng = np.random.default_rng(seed)
    rate = np.exp(rng.normal(mu, sigma, n))
    at = rng.uniform(100.0, 130.0, n)
    age = CLOCK_TOLERANCE_DAYS + rng.exponential(1.0 / rate)
    return rate, at, at - age, age


@pytest.mark.parametrize(
    ("seed", "mu", "sigma"), [(3, math.log(0.05), 1.5), (4, math.log(0.2), 1.0)]
)
def test_cold_start_prior_is_fitted_to_single_fetch_ages(
    seed: int, mu: float, sigma: float
) -> None:
    rate, at, modified, age = _cold_start_log(seed, mu, sigma)
    n = rate.size
    result = estimate_fetch_arrays(
        np.arange(n), at, np.full(n, np.nan), modified, np.arange(n) // 20
    )
    prior = result.fitted.prior_
    assert prior is not None
    assert prior.n_pages_ == prior.n_exposure_pages_ == n
    # measured over seeds 0-5: within 0.07 of mu, 0.04 of sigma; the naive moments of
    # ln(1 / A) are off by Euler's 0.58 in mu and by 0.4-0.6 in sigma (ln A of an exponential
    # has variance pi^2 / 6), so the tolerance tells the likelihood from a shortcut
    assert prior.mu_ == pytest.approx(mu, abs=0.12)
    assert prior.sigma_ == pytest.approx(sigma, abs=0.12)
    naive = np.log(1.0 / age)
    assert abs(naive.mean() - mu) > 0.4 and abs(naive.std() - sigma) > 0.3
    # every page estimated, the estimate falling with the age
    assert set(result.estimator.tolist()) == {"last_modified_eb"}
    assert np.all(np.isfinite(result.rate) & (result.rate > 0)) and np.all(result.bucket > 0)
    order = np.argsort(age[result.page])
    assert np.all(np.diff(result.rate[order]) <= 0)


def test_exposure_evidence_joins_the_prior_only_below_min_interval_pages() -> None:
    rng = np.random.default_rng(5)
    n = 3000
    rate = np.exp(rng.normal(math.log(0.2), 1.0, n))
    lengths = [list(rng.exponential(3.0, 4)) if p < 150 else [] for p in range(n)]
    flags = [
        list(rng.random(len(t)) < -np.expm1(-rate[p] * np.array(t))) for p, t in enumerate(lengths)
    ]
    intervals = ChangeIntervals.from_lists(lengths, flags)
    age = np.where(np.arange(n) >= 150, rng.exponential(1.0 / rate), np.nan)
    changes = np.ones(n)

    # 150 pages with intervals: the exposure is ignored, the fit is exactly the one without
    alone = LogNormalRatePrior().fit(intervals)
    given_exposure = LogNormalRatePrior().fit(intervals, changes, age)
    assert (given_exposure.mu_, given_exposure.sigma_, given_exposure.n_pages_) == (
        alone.mu_,
        alone.sigma_,
        alone.n_pages_,
    )
    assert given_exposure.log_marginal_likelihood_ == alone.log_marginal_likelihood_
    assert given_exposure.n_exposure_pages_ == 0

    # below the threshold, all the interval pages and a sample of the others
    both = LogNormalRatePrior(min_interval_pages=151).fit(intervals, changes, age)
    assert both.n_pages_ == n and both.n_exposure_pages_ == n - 150
    assert both.mu_ == pytest.approx(math.log(0.2), abs=0.12)
    assert both.sigma_ == pytest.approx(1.0, abs=0.12)
    sampled = LogNormalRatePrior(min_interval_pages=151, max_pages=1000)
    sampled.fit(intervals, changes, age)
    assert sampled.n_pages_ == 1000 and sampled.n_exposure_pages_ == 1000 - 150

    # the same through the estimator: pages fetched once stay out of a fit of 150 pages
    # with intervals, and join it below the threshold
    evidence = LastModifiedEvidence(
        np.zeros(n, np.intp), np.zeros(n, np.intp), np.zeros(n), np.zeros(n), age
    )
    reliable = np.ones(n, bool)
    fit = ChangeRateEstimator().fit(intervals, evidence, reliable)
    assert fit.prior_ is not None and fit.prior_.mu_ == alone.mu_
    assert fit.prior_.n_exposure_pages_ == 0
    assert set(fit.estimator_[150:]) == {"last_modified_eb"}
    few = ChangeRateEstimator(prior=LogNormalRatePrior(min_interval_pages=151))
    fit = few.fit(intervals, evidence, reliable)
    assert fit.prior_ is not None and fit.prior_.n_exposure_pages_ == n - 150


def test_prior_exposure_arguments_are_checked() -> None:
    intervals = ChangeIntervals.from_lists([[], []], [[], []])
    with pytest.raises(ValueError, match="together"):
        LogNormalRatePrior().fit(intervals, np.ones(2))
    with pytest.raises(ValueError, match="same 2 pages"):
        LogNormalRatePrior().fit(intervals, np.ones(3), np.ones(3))
    # NaN, 0 and negative exposures are no evidence
    with pytest.raises(ValueError, match="no page has"):
        LogNormalRatePrior().fit(intervals, np.ones(2), np.array([np.nan, 0.0]))
