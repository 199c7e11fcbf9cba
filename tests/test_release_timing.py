"""Releases on time: the release checks' timing, and releases recorded by a running API server
within 1 % of their periods' start on a real store."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from crawler.worker import CrawlStats
from service.api.app import ApiSettings
from service.cli.progress import with_progress
from service.page_schedule import schedule_pages
from service.pipeline import ReleaseSummary
from service.release_timing import (
    BOUNDARY_MARGIN_SECONDS,
    MIN_WAIT_SECONDS,
    ReleaseTimer,
)
from store import Database, PlanDraft, PlanPeriodDraft, add_pages, publish_plan
from store.models import PAGES, PERIOD_RELEASES
from tests.api_server import TOKEN, ApiServer
from tests.conftest import T0

_S = timedelta(seconds=1)


def _summary(status: str, start: datetime | None = None, seconds: float = 0.0) -> ReleaseSummary:
    if start is None:
        return ReleaseSummary(status)
    return ReleaseSummary(status, plan=1, period=1, starts_at=start, ends_at=start + seconds * _S)


def test_waits_until_the_period_ends_when_that_comes_before_a_poll() -> None:
    timer = ReleaseTimer(max_wait=5.0)
    # A 1000 s period ending in 3 s: the boundary (+ margin) comes before a poll (10 s).
    wait = timer.wait_after(_summary("released", T0, 1000.0), T0 + 997 * _S)
    assert wait == 3.0 + BOUNDARY_MARGIN_SECONDS
    # Earlier in the period: the longest wait, 5 s, and the period is remembered.
    assert timer.wait_after(_summary("already released", T0, 1000.0), T0 + 10 * _S) == 5.0
    assert timer.period_seconds == 1000.0


def test_polls_one_percent_of_a_short_period_bounded_below() -> None:
    timer = ReleaseTimer(max_wait=5.0)
    assert timer.wait_after(_summary("already released", T0, 2.0), T0) == 0.02
    # With no period in the summary, the last one seen sets the poll.
    assert timer.wait_after(_summary("no current period"), T0) == 0.02
    tiny = ReleaseTimer(max_wait=5.0, period_seconds=0.1)
    assert tiny.wait_after(_summary("no plan"), T0) == MIN_WAIT_SECONDS
    # Past the end (a late check): never a negative or zero wait.
    assert timer.wait_after(_summary("released", T0, 2.0), T0 + 9 * _S) == MIN_WAIT_SECONDS


def test_without_a_known_period_checks_every_max_wait() -> None:
    assert ReleaseTimer(max_wait=0.7).wait_after(_summary("no plan"), T0) == 0.7


def test_progress_calls_the_tick_again_after_the_wait_it_returns() -> None:
    ticks: list[float] = []

    def run(stop: threading.Event, stats: CrawlStats) -> CrawlStats:
        while len(ticks) < 5:  # ends once the tick has come five times (0.05 s apart)
            time.sleep(0.01)
        return stats

    def tick() -> float:
        ticks.append(time.monotonic())
        return 0.05

    with_progress(run, tick)  # a fixed 5 s poll would never return before the test's timeout
    assert len(ticks) >= 5


def _plan_of_short_periods(db: Database, period_s: float, periods: int) -> datetime:
    """Pages in bucket 30 and a published, scheduled plan of ``periods`` periods of
    ``period_s`` seconds; the first began just now (as a nightly run's does). Its start."""
    now = datetime.now(UTC)
    start = now - 0.1 * _S
    add_pages(db, [(f"http://h{i % 5}.test/{i}", f"http://h{i % 5}.test") for i in range(40)])
    with db.write() as conn:
        conn.execute(
            update(PAGES).values(
                status="ok", bucket=30, rate=1.0, fetches=2, last_fetch_at=now - 3 * _S * 86_400
            )
        )
    publish_plan(
        db,
        PlanDraft(
            starts_at=start,
            period_days=period_s / 86_400,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=t,
                    starts_at=start + (t - 1) * period_s * _S,
                    ends_at=start + t * period_s * _S,
                    capacity=100.0,
                    new_pages=0,
                    quotas={30: 2},
                )
                for t in range(1, periods + 1)
            ],
            inputs={},
            solver={},
        ),
    )
    schedule_pages(db)
    return start


# A wall-clock check on a shared machine: a clean clone once saw 0.41 s (a load spike).
@pytest.mark.flaky(reruns=2)
def test_api_server_releases_each_period_within_one_percent_of_its_start(db: Database) -> None:
    """Periods of 2 s: the server's releaser records the release of periods 2-4 within 20 ms
    of their start (the default longest wait, 5 s, is longer than a period)."""
    period_s, periods = 2.0, 4
    start = _plan_of_short_periods(db, period_s, periods)
    settings = ApiSettings(tokens=(TOKEN,), release_every=5.0, min_delay_seconds=0.1)
    with ApiServer(db, settings):
        # stopped before the plan's end: past it, its last period repeats (in force)
        end = start + (periods - 0.25) * period_s * _S
        while datetime.now(UTC) < end:
            time.sleep(0.1)
    with db.read() as conn:
        released = dict(
            conn.execute(select(PERIOD_RELEASES.c.period, PERIOD_RELEASES.c.released_at))
            .tuples()
            .all()
        )
    assert sorted(released) == list(range(1, periods + 1))
    for period in range(2, periods + 1):
        at = released[period]
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
        late = (at - (start + (period - 1) * period_s * _S)).total_seconds()
        assert 0 <= late < 0.01 * period_s, f"period {period} released {late:.4f} s late"


def test_api_server_reports_each_release_it_makes(db: Database) -> None:
    """``on_release`` hears of every release the server's releaser made (what ``crawlplan
    demo`` counts), and only of releases: the periods and pages the store recorded."""
    period_s, periods = 1.0, 3
    start = _plan_of_short_periods(db, period_s, periods)
    heard: list[ReleaseSummary] = []
    settings = ApiSettings(
        tokens=(TOKEN,), release_every=5.0, min_delay_seconds=0.1, on_release=heard.append
    )
    with ApiServer(db, settings):
        end = start + (periods - 0.25) * period_s * _S  # before the plan's end (above)
        while datetime.now(UTC) < end:
            time.sleep(0.1)
    with db.read() as conn:
        recorded = dict(
            conn.execute(select(PERIOD_RELEASES.c.period, PERIOD_RELEASES.c.pages)).tuples().all()
        )
    # (a release of period 4, the plan kept in force, may come while the server stops)
    assert sorted(recorded)[:periods] == list(range(1, periods + 1))
    assert {s.period: s.released for s in heard} == recorded
    assert all(s.status == "released" for s in heard)


def test_api_settings_refuse_a_due_share_outside_zero_to_one() -> None:
    for share in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="due_share"):
            ApiSettings(tokens=(TOKEN,), due_share=share)
    assert ApiSettings(tokens=(TOKEN,), due_share=1.0).due_share == 1.0
