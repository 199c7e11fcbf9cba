"""Reference estimators: naive, Cho & Garcia-Molina's improved and Last-Modified estimators."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from estimators import (
    ChangeIntervals,
    ChoLastModifiedRate,
    EmpiricalBayesLastModifiedRate,
    ImprovedRegularRate,
    LastModifiedEvidence,
    LogNormalRatePrior,
    NaiveRate,
    XylemeLastModifiedRate,
    last_modified_evidence_from_fetches,
)
from estimators.last_modified import cho_last_modified_rate, garwood_interval
from estimators.regular import improved_regular_rate

SEED = 7


def test_improved_estimator_hand_computed_values() -> None:
    # -ln((n - X + 0.5) / (n + 0.5)) / I
    assert improved_regular_rate(np.array([10]), np.array([3]), np.array([1.0]))[0] == (
        pytest.approx(-math.log(7.5 / 10.5))  # 0.336472...
    )
    assert improved_regular_rate(np.array([4]), np.array([4]), np.array([2.0]))[0] == (
        pytest.approx(math.log(9) / 2)  # saturates at ln(2n + 1) / I = 1.098612...
    )
    assert improved_regular_rate(np.array([5]), np.array([0]), np.array([1.0]))[0] == 0.0
    assert improved_regular_rate(np.array([10]), np.array([3]), np.array([1.0]))[0] == (
        pytest.approx(0.33647223662121295, rel=1e-14)
    )


def test_naive_and_improved_on_intervals() -> None:
    evidence = ChangeIntervals.from_lists([[1.0, 1.0, 2.0, 4.0], []], [[1, 0, 1, 0], []])
    naive = NaiveRate().fit(evidence)
    improved = ImprovedRegularRate().fit(evidence)
    assert naive.rate_[0] == pytest.approx(2 / 8)
    assert improved.rate_[0] == pytest.approx(-math.log(2.5 / 4.5) / 2.0)  # I = T / n = 2
    assert improved.rate_low_[0] < improved.rate_[0] < improved.rate_high_[0]
    assert np.isnan(naive.rate_[1]) and np.isnan(improved.rate_[1])


def test_last_modified_evidence_from_fetches() -> None:
    # page 0 fetched at 0, 10, 20, 30; Last-Modified -5, 7, 7, 28
    page = np.array([0, 0, 0, 0, 1])
    fetched = np.array([0.0, 10.0, 20.0, 30.0, 3.0])
    modified = np.array([-5.0, 7.0, 7.0, 28.0, np.nan])
    ev = last_modified_evidence_from_fetches(page, fetched, modified)
    np.testing.assert_array_equal(ev.intervals, [3, 0])
    np.testing.assert_array_equal(ev.changes, [2, 0])
    np.testing.assert_allclose(ev.age_sum, [3.0 + 2.0, 0.0])
    np.testing.assert_allclose(ev.exposure, [3.0 + 10.0 + 2.0, 0.0])


def test_last_modified_estimators_hand_computed() -> None:
    ev = LastModifiedEvidence(
        intervals=np.array([3, 4, 2, 0]),
        changes=np.array([2, 4, 0, 0]),
        exposure=np.array([15.0, 8.0, 20.0, 0.0]),
        age_sum=np.array([5.0, 8.0, 0.0, 0.0]),
    )
    xy = XylemeLastModifiedRate().fit(ev)
    np.testing.assert_allclose(xy.rate_[:3], [2 / 5, 4 / 8, 0.0])
    cho = ChoLastModifiedRate().fit(ev)
    expected0 = ((2 - 1) - 2 / (3 * math.log(1 - 2 / 3))) / 15.0
    assert cho.rate_[0] == pytest.approx(expected0)
    assert cho.rate_[1] == pytest.approx(3 / 8)  # X = n: (X - 1) / T
    assert cho.rate_[2] == 0.0
    assert np.isnan(cho.rate_[3])
    assert np.all(cho.rate_low_[:3] <= cho.rate_[:3])
    assert np.all(cho.rate_[:3] <= cho.rate_high_[:3])


def test_cho_last_modified_is_unbiased_where_xyleme_is_not() -> None:
    # simulation: regular access every day, lambda = 0.5 per day, 20 intervals
    rng = np.random.default_rng(SEED)
    reps, n, lam, interval = 20000, 20, 0.5, 1.0
    changed = rng.random((reps, n)) < -np.expm1(-lam * interval)
    u = rng.random((reps, n))
    age = -np.log1p(-u * -np.expm1(-lam * interval)) / lam  # time since the last change
    age = np.where(changed, age, 0.0)
    x = changed.sum(axis=1)
    exposure = np.where(changed, age, interval).sum(axis=1)
    cho = cho_last_modified_rate(np.full(reps, n), x, exposure)
    assert np.mean(cho) / lam == pytest.approx(1.0, abs=0.02), f"seed {SEED}"
    xyleme = x[x > 0] / age.sum(axis=1)[x > 0]
    assert np.mean(xyleme) / lam > 1.5  # leaves out the no-change intervals


def test_empirical_bayes_last_modified_shrinks_thin_pages() -> None:
    prior = LogNormalRatePrior.fixed(math.log(0.1), 1.0)
    ev = LastModifiedEvidence(
        intervals=np.array([2, 2, 0]),
        changes=np.array([0, 1, 0]),
        exposure=np.array([10.0, 3.0, 0.0]),
        age_sum=np.array([0.0, 1.0, 0.0]),
    )
    eb = EmpiricalBayesLastModifiedRate(prior=prior).fit(ev)
    assert 0 < eb.rate_[0] < 0.1
    # mode of theta - lambda T - (theta - mu)^2 / 2: 1 - 3 lambda - (theta - mu) = 0
    theta = math.log(eb.rate_[1])
    assert 1 - 3 * math.exp(theta) - (theta - math.log(0.1)) == pytest.approx(0, abs=1e-9)
    assert eb.rate_low_[1] < eb.rate_[1] < eb.rate_high_[1]
    assert np.isnan(eb.rate_[2])


def test_garwood_lookup_equals_the_quantiles_per_page() -> None:
    # many pages with small counts take the per-count lookup; compare with scipy per page
    rng = np.random.default_rng(SEED)
    c = rng.integers(0, 12, 500).astype(np.float64)
    t = rng.uniform(0.5, 30.0, 500)
    low, high = garwood_interval(c, t, 0.95)
    want_low = np.where(c > 0, stats.chi2.ppf(0.025, 2 * c) / (2 * t), 0.0)
    want_high = stats.chi2.ppf(0.975, 2 * c + 2) / (2 * t)
    np.testing.assert_allclose(low, want_low, rtol=1e-14)
    np.testing.assert_allclose(high, want_high, rtol=1e-14)
    # Garwood's interval for 0 events in 1 day at 95 %: [0, -ln(0.025)]
    assert garwood_interval(np.zeros(1), np.ones(1), 0.95)[1][0] == pytest.approx(-math.log(0.025))


def test_grouped_intervals_sum_and_take_as_the_general_path_does() -> None:
    rng = np.random.default_rng(SEED)
    counts = rng.integers(0, 5, 40)
    page = np.repeat(np.arange(40), counts)
    ivs = ChangeIntervals(page, rng.uniform(0.1, 3, page.size), rng.random(page.size) < 0.4, 40)
    shuffled = ChangeIntervals(
        page[::-1].copy(), ivs.length[::-1].copy(), ivs.changed[::-1].copy(), 40
    )
    _ = ivs.unchanged_time, ivs.n_changes  # cached sums carry over to the subset
    chosen = np.sort(rng.choice(40, 15, replace=False))
    fast, general = ivs.take(chosen), shuffled.take(chosen)
    assert ivs.grouped and not shuffled.grouped
    # per-run sums of grouped intervals (pages without any included) equal the bincounts
    for name in ("n_intervals", "n_changes", "total_time", "changed_time", "unchanged_time"):
        np.testing.assert_allclose(getattr(ivs, name), getattr(shuffled, name), rtol=1e-12)
    np.testing.assert_array_equal(ivs.change_intervals[0], shuffled.change_intervals[0])
    for name in ("n_intervals", "n_changes", "total_time", "changed_time", "unchanged_time"):
        np.testing.assert_allclose(getattr(fast, name), getattr(general, name), rtol=1e-12)
    order = np.lexsort((general.length, general.page))
    np.testing.assert_array_equal(fast.page, general.page[order])
    np.testing.assert_array_equal(np.sort(fast.length), np.sort(general.length))
    with pytest.raises(IndexError):
        ivs.take([3, 40])
