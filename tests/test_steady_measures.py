"""Steadier plans: the discovery rates and the measured capacity are smoothed from cycle to
cycle (exact values, noisy synthetic measurements, and the nightly run on a real store)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sqlalchemy import select

from estimators.defaults import SMOOTHING_WEIGHT
from estimators.discovery import (
    DiscoveryRates,
    discovery_rates,
    smoothed,
    smoothed_discovery,
)
from service.nightly import NightlySettings, run_nightly
from store import Database, PlanDraft, PlanPeriodDraft, publish_plan
from store.models import PLANS
from tests.conftest import T0
from tests.test_nightly import DAY, _crawl_history


def test_smoothing_moves_half_way_to_the_new_measurement() -> None:
    assert SMOOTHING_WEIGHT == 0.5
    assert smoothed(10.0, 20.0) == 15.0
    assert smoothed(None, 20.0) == 20.0  # the first plan: the measurement as it is
    assert smoothed(math.nan, 20.0) == 20.0
    assert smoothed(10.0, 20.0, weight=1.0) == 20.0
    with pytest.raises(ValueError, match="weight"):
        smoothed(10.0, 20.0, weight=0.0)


def test_smoothed_discovery_rates() -> None:
    previous = DiscoveryRates(4.68, 0.0, 10.0, "nnls")
    fitted = DiscoveryRates(0.0, 1.0, 20.0, "pooled")
    assert smoothed_discovery(fitted, previous) == DiscoveryRates(
        2.34, 0.5, 15.0, "pooled smoothed"
    )
    assert smoothed_discovery(fitted, None) == fitted
    # A cycle that measured no crawl keeps the previous rates.
    assert smoothed_discovery(DiscoveryRates(0, 0, 0, "none"), previous) == previous
    twice = smoothed_discovery(
        DiscoveryRates(1.0, 1.0, 0.0, "nnls"), smoothed_discovery(fitted, previous)
    )
    assert twice.method == "nnls smoothed"


def _cycles(seed: int, cycles: int, change_at: int) -> tuple[np.ndarray, np.ndarray]:
    """Fitted and smoothed (oldnwt, newnwt) per cycle, shape (cycles, 2): every cycle 24
    hourly bins of old and new crawls at random, and Poisson discoveries of mean
    ``oldnwt * old + 0.5 * new + 3``, oldnwt 0.2 before cycle ``change_at`` and 0.4 from it."""
    rng = np.random.default_rng(seed)
    raw, steady = [], []
    plan: DiscoveryRates | None = None
    for cycle in range(cycles):
        oldnwt = 0.2 if cycle < change_at else 0.4
        old, new = rng.integers(50, 200, 24), rng.integers(0, 100, 24)
        found = rng.poisson(oldnwt * old + 0.5 * new + 3.0)
        fit = discovery_rates(old, new, found, bin_seconds=3600, period_seconds=86400)
        plan = smoothed_discovery(fit, plan)
        raw.append((fit.oldnwt, fit.newnwt))
        steady.append((plan.oldnwt, plan.newnwt))
    return np.array(raw), np.array(steady)


@pytest.mark.parametrize("seed", range(10))
def test_smoothed_rates_hold_steady_and_follow_a_real_change(seed: int) -> None:
    """Constant rates plus noise: consecutive smoothed rates differ by less than 0.08
    (oldnwt 0.2) and 0.15 (newnwt 0.5), and their changes vary at most 0.55 times as much as
    the raw fits' (0.41 in theory). Then oldnwt doubles: four cycles later the smoothed rate
    is within 0.1 of the new value, and stays there."""
    raw, steady = _cycles(seed, cycles=45, change_at=30)
    jumps = np.abs(np.diff(steady[:30], axis=0)).max(axis=0)
    assert jumps[0] < 0.08 and jumps[1] < 0.15, f"seed {seed}: {jumps}"
    ratio = np.diff(steady[:30], axis=0).std(axis=0) / np.diff(raw[:30], axis=0).std(axis=0)
    assert np.all(ratio < 0.55), f"seed {seed}: {ratio}"
    assert np.abs(steady[33:, 0] - 0.4).max() < 0.1, f"seed {seed}: {steady[30:, 0]}"


def _plan_in_force(db: Database, capacity: float, discovery: dict[str, float]) -> None:
    """A published plan of periods of a day, from 2 days before the run, with these inputs."""
    start = T0 + 6 * DAY
    publish_plan(
        db,
        PlanDraft(
            starts_at=start,
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=1,
                    starts_at=start,
                    ends_at=start + DAY,
                    capacity=capacity,
                    new_pages=0,
                    quotas={},
                )
            ],
            inputs={"capacity_crawls": capacity, "discovery": {**discovery, "method": "nnls"}},
            solver={},
        ),
    )


def test_nightly_smooths_the_measured_capacity_and_discovery(db: Database) -> None:
    """The plan in force used 100 crawls a period and oldnwt 4.68; the crawl measured about
    12 crawls a period: the new plan uses half way between, and records both."""
    _crawl_history(db, pages=12, visits=8)
    _plan_in_force(db, 100.0, {"oldnwt": 4.68, "newnwt": 0.0, "nconst": 2.0})
    report = run_nightly(db, NightlySettings(periods=4, capacity=0.0), now=T0 + 8 * DAY)
    assert report.status == "published", report.message
    assert report.reading is not None and report.inputs is not None
    measured = report.reading.measured
    raw_capacity = measured.fetches * 86_400 / measured.window_seconds
    assert raw_capacity == pytest.approx(12.0, rel=1e-3)
    assert report.inputs.capacity_crawls == pytest.approx((100.0 + raw_capacity) / 2, rel=1e-12)
    fitted = report.reading.discovery
    assert report.inputs.discovery.oldnwt == pytest.approx((4.68 + fitted.oldnwt) / 2)
    assert report.inputs.discovery.nconst == pytest.approx((2.0 + fitted.nconst) / 2)
    with db.read() as conn:
        inputs = conn.execute(select(PLANS.c.inputs).where(PLANS.c.id == report.plan)).scalar_one()
    assert inputs["measured"]["capacity_crawls"] == pytest.approx(raw_capacity)
    assert inputs["measured"]["discovery"]["oldnwt"] == fitted.oldnwt
    assert inputs["capacity_crawls"] == pytest.approx((100.0 + raw_capacity) / 2)


def test_a_configured_capacity_is_not_smoothed(db: Database) -> None:
    _crawl_history(db, pages=12, visits=8)
    _plan_in_force(db, 100.0, {"oldnwt": 0.0, "newnwt": 0.0, "nconst": 0.0})
    report = run_nightly(db, NightlySettings(periods=4, capacity=8.0), now=T0 + 8 * DAY)
    assert report.inputs is not None and report.inputs.capacity_crawls == 8.0
