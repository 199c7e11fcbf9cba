"""Bucket edges, assignment and per-bucket aggregates, with exact values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimators import BucketScale, assign_buckets, bucket_aggregates, bucket_edges, bucket_rates
from estimators.defaults import MAX_RATE, MIN_RATE, N_BUCKETS


def test_edges_are_log_spaced_between_the_configured_rates() -> None:
    edges = bucket_edges()
    assert edges.shape == (N_BUCKETS + 1,)
    assert edges[0] == MIN_RATE and edges[-1] == MAX_RATE
    ratio = (MAX_RATE / MIN_RATE) ** (1 / N_BUCKETS)
    np.testing.assert_allclose(edges[1:] / edges[:-1], ratio, rtol=1e-12)
    small = bucket_edges(1.0, 16.0, 4)
    np.testing.assert_allclose(small, [1.0, 2.0, 4.0, 8.0, 16.0], rtol=1e-15)
    np.testing.assert_allclose(
        bucket_rates(small),
        [math.sqrt(2), math.sqrt(8), 4.0 * math.sqrt(2), 8.0 * math.sqrt(2)],
        rtol=1e-15,
    )


def test_assignment_is_half_open_and_saturates() -> None:
    edges = bucket_edges(1.0, 16.0, 4)
    rates = [np.nan, 0.0, 0.5, 1.0, 1.999, 2.0, 15.9, 16.0, 1e9, np.inf]
    assert assign_buckets(rates, edges).tolist() == [0, 1, 1, 1, 1, 2, 4, 4, 4, 4]
    assert assign_buckets(rates, edges).dtype == np.uint8
    default = BucketScale()
    assert default.assign([MIN_RATE, MAX_RATE * 0.9999, np.nan]).tolist() == [1, 255, 0]
    with pytest.raises(ValueError, match=">= 0"):
        assign_buckets([-1.0], edges)


def test_bucket_scale_validates() -> None:
    with pytest.raises(ValueError, match="min_rate"):
        BucketScale(min_rate=2.0, max_rate=1.0)
    with pytest.raises(ValueError, match="n_buckets"):
        BucketScale(n_buckets=256)


def test_aggregates_exact_values() -> None:
    bucket = np.array([0, 1, 1, 3, 3, 3])
    rate = np.array([np.nan, 0.1, 0.3, 1.0, 2.0, 3.0])
    elapsed = np.array([np.nan, 10.0, 0.0, 1.0, 0.5, 2.0])
    agg = bucket_aggregates(bucket, rate, elapsed, period=1.0, n_buckets=4)
    assert agg.pages.tolist() == [1, 2, 0, 3, 0]
    assert np.isnan(agg.mean_rate[0]) and np.isnan(agg.mean_rate[2])
    assert agg.mean_rate[1] == pytest.approx(0.2)
    assert agg.mean_rate[3] == pytest.approx(2.0)
    a1 = ((1 - math.exp(-0.1)) + (1 - math.exp(-0.3))) / 2
    assert agg.change_fraction[1] == pytest.approx(a1)
    a3 = sum(1 - math.exp(-r) for r in (1.0, 2.0, 3.0)) / 3
    assert agg.change_fraction[3] == pytest.approx(a3)
    assert agg.obsolete[1] == pytest.approx(1 - math.exp(-1.0))  # 0.1 x 10 days; 0 days: 0
    y3 = (1 - math.exp(-1.0)) + (1 - math.exp(-1.0)) + (1 - math.exp(-6.0))
    assert agg.obsolete[3] == pytest.approx(y3)
    assert agg.obsolete[2] == 0.0 and np.isnan(agg.obsolete[0])
    full = bucket_aggregates(bucket, rate, elapsed, period=7.0)
    assert full.pages.shape == (256,) and full.period == 7.0


def test_aggregates_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="time since last fetch"):
        bucket_aggregates([1], [0.5], [-1.0], period=1.0)
    with pytest.raises(ValueError, match="period"):
        bucket_aggregates([1], [0.5], [1.0], period=0.0)


def test_default_range_covers_eight_decades_at_32_buckets_a_decade() -> None:
    assert (MIN_RATE, MAX_RATE) == (1e-3, 1e5)
    per_decade = N_BUCKETS / math.log10(MAX_RATE / MIN_RATE)
    assert 31 < per_decade < 32
    # Each bucket 7.49 % wider than the last: 10 ** (8 / 255).
    growth = (MAX_RATE / MIN_RATE) ** (1 / N_BUCKETS)
    assert growth == pytest.approx(1.074911, abs=1e-6)


def test_a_world_of_fast_pages_gets_distinct_buckets_with_the_defaults() -> None:
    """Pages changing 6, 12 and 24 times an hour (144, 288, 576 a day), fetched every 2
    minutes for 2 days: their estimated rates fall in distinct buckets well inside the
    default range (the old default, 1e-3 to 1e2 a day, put every one in bucket 255)."""
    rng = np.random.default_rng(28)
    per_day = np.repeat([144.0, 288.0, 576.0], 200)
    interval = 2 / (24 * 60)  # days
    n = 2 * 24 * 30  # fetches in 2 days
    changed = rng.binomial(n, -np.expm1(-per_day * interval))
    # The maximum-likelihood rate for equal intervals: -ln(1 - X/n) / I (Cho & Garcia-Molina).
    estimate = -np.log1p(-changed / n) / interval
    bucket = BucketScale().assign(estimate).astype(int)
    # The true rates' buckets: 1 + floor(255 log(rate / 1e-3) / log(1e8)).
    assert BucketScale().assign([144.0, 288.0, 576.0]).tolist() == [165, 175, 184]
    groups = [bucket[k * 200 : (k + 1) * 200] for k in range(3)]
    assert [int(np.median(g)) for g in groups] == [165, 174, 184]
    # Each group's buckets lie apart from the next one's; none saturates.
    assert groups[0].max() < groups[1].min() and groups[1].max() < groups[2].min()
    assert bucket.max() < 200
    assert set(BucketScale(1e-3, 1e2).assign(estimate).tolist()) == {255}
