"""Capacity accounting per plan period on a real store (SQLite and PostgreSQL): released,
fetched, blocked, pending and idle crawls; the capacity the nightly run measures from them
(a period that kept up with its release never lowers it); ``crawlplan status`` and the
worker API's metrics over HTTP."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
import requests
from sqlalchemy import select, update
from typer.testing import CliRunner

from estimators.capacity import crawl_capacity, saturated_periods
from service.cli.app import app
from service.nightly import NightlySettings, run_nightly
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    publish_plan,
)
from store.due_times import finish_page_schedule
from store.models import HOSTS, PAGES, PERIOD_RELEASES
from store.period_use import ended_periods, plan_period_use
from store.releases import queue_release
from store.types import utcnow
from tests.api_server import ApiServer
from tests.conftest import T0

DAY = timedelta(days=1)
MINUTE = timedelta(minutes=1)
BIG = LeasePolicy(max_urls=1_000, max_urls_per_host=1_000, max_hosts=100)


# -- the estimator, pure -------------------------------------------------------------------


def test_a_period_that_kept_up_is_a_lower_bound_never_a_measurement() -> None:
    # Released 40 a period, all fetched: the crawler kept up; the previous 100 stands.
    kept = crawl_capacity([40, 40, 38], [40, 40, 40], [0, 0, 2], previous=100.0)
    assert (kept.crawls, kept.method, kept.kept_up) == (100.0, "lower bound", 3)
    # ... and a crawler that did more than the previous value raises it.
    assert crawl_capacity([40, 130], [40, 130], [0, 3], previous=100.0).crawls == 130.0
    assert crawl_capacity([40], [40], [0]).crawls == 40.0  # no previous: the bound itself


def test_saturated_periods_measure_the_capacity_up_or_down() -> None:
    found = crawl_capacity([60, 64, 40], [100, 140, 40], [40, 76, 0], previous=100.0)
    assert (found.crawls, found.method, found.saturated, found.kept_up) == (
        62.0,
        "saturated",
        2,
        1,
    )
    assert crawl_capacity([150], [200], [50], previous=100.0).crawls == 150.0
    # Work left waiting with no request made: the crawler was stopped, not slow.
    stopped = crawl_capacity([0, 0], [100, 100], [100, 100], previous=100.0)
    assert stopped.method == "none" and math.isnan(stopped.crawls)
    assert crawl_capacity([], [], []).method == "none"


def test_a_lone_saturated_period_among_kept_up_ones_is_no_measurement() -> None:
    """The live loop's first period: the crawler started late in it, fetched 6 and left
    work waiting; the four after it kept up with up to 22. Not a capacity of 6."""
    fetched, offered, left = [6, 14, 22, 18, 20], [20, 22, 22, 20, 20], [8, 0, 1, 0, 2]
    found = crawl_capacity(fetched, offered, left, previous=20.0)
    assert (found.crawls, found.method, found.saturated, found.kept_up) == (
        22.0,
        "lower bound",
        1,
        4,
    )
    # Two of five saturated (at least a quarter): they measure it.
    found = crawl_capacity([6, 8, 22, 18, 20], offered, [8, 9, 1, 0, 2], previous=20.0)
    assert (found.crawls, found.method) == (7.0, "saturated")


def test_saturation_needs_more_than_a_share_left_waiting() -> None:
    busy = saturated_periods([90, 90, 90], [100, 100, 100], [10, 11, 0], share=0.1)
    assert busy.tolist() == [False, True, False]
    with pytest.raises(ValueError, match="one value per period"):
        saturated_periods([1, 2], [1], [1, 2])
    with pytest.raises(ValueError, match="share"):
        saturated_periods([1], [1], [1], share=1.0)


# -- the store -----------------------------------------------------------------------------


def _pages(db: Database, n: int) -> list[int]:
    """``n`` never-fetched pages on one host, none due (the plan regime); their ids."""
    add_pages(db, [(f"http://a.test/p{k}", "http://a.test") for k in range(n)], now=T0)
    with db.write() as conn:
        conn.execute(update(PAGES).values(next_due_at=None))
        return list(conn.execute(select(PAGES.c.id).order_by(PAGES.c.id)).scalars())


def _plan(db: Database, start: datetime, capacity: float, periods: int) -> int:
    """A plan of one-day periods from ``start`` whose page schedule counts as done."""
    version = publish_plan(
        db,
        PlanDraft(
            starts_at=start,
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=t + 1,
                    starts_at=start + t * DAY,
                    ends_at=start + (t + 1) * DAY,
                    capacity=capacity,
                    new_pages=0,
                    quotas={},
                )
                for t in range(periods)
            ],
            inputs={"capacity_crawls": capacity},
            solver={},
        ),
        now=start - MINUTE,
    )
    finish_page_schedule(db, version, objective="test", pages=0, now=start - MINUTE)
    return version


def _fetch_counts(db: Database, ids: Sequence[int]) -> list[int]:
    with db.read() as conn:
        rows = conn.execute(select(PAGES.c.id, PAGES.c.fetches).where(PAGES.c.id.in_(ids)))
        found = {int(pid): int(count) for pid, count in rows}
    return [found[i] for i in ids]


def _release(db: Database, plan: int, period: int, ids: Sequence[int], now: datetime) -> None:
    done = queue_release(
        db,
        plan,
        period,
        page_ids=ids,
        due_epoch_s=[now.timestamp()] * len(ids),
        fetches=_fetch_counts(db, ids),
        now=now,
    )
    assert done is not None


def _ok(page_id: int, at: datetime) -> FetchResult:
    return FetchResult(page_id, at, "ok", 200, changed=False, duration=0.1)


def test_each_period_released_fetched_blocked_pending_and_idle(db: Database) -> None:
    ids = _pages(db, 11)
    plan = _plan(db, T0 + DAY, capacity=8.0, periods=3)
    queue = LeaseQueue(db, BIG)
    # Period 1: seven new pages released; four answered, one failed, one lost to a crawler
    # failure before its request, one turned away by robots.txt (no observation).
    day1 = T0 + DAY + MINUTE
    _release(db, plan, 1, ids[:7], day1)
    (lease,) = queue.lease("w", now=day1 + MINUTE)
    got = [p.page_id for p in lease.pages]
    assert sorted(got) == ids[:7]
    at = day1 + MINUTE
    results = [_ok(p, at) for p in got[:4]]
    results.append(FetchResult(got[4], at, "error", 500, error="HTTP 500", duration=0.2))
    results.append(FetchResult(got[5], at, "error", error="crawler error: boom"))
    robots = FetchResult(got[6], at, "blocked", error="disallowed", next_due_at=at + 9 * DAY)
    queue.report(lease.lease_id, [robots], now=at)
    queue.report(lease.lease_id, [robots], now=at)  # reported twice, counted once
    queue.finish(lease.lease_id, results, now=at)
    # Period 2: the four others and two fetched ones again; one fetched, five still leased.
    day2 = T0 + 2 * DAY + MINUTE
    _release(db, plan, 2, [*ids[7:], *ids[:2]], day2)
    (lease,) = queue.lease("w", now=day2 + MINUTE)
    assert len(lease.pages) == 6
    queue.report(lease.lease_id, [_ok(lease.pages[0].page_id, day2 + MINUTE)], now=day2 + MINUTE)

    first, second = plan_period_use(db, plan, now=day2 + 2 * MINUTE)
    assert (first.period, first.released, first.new_pages, first.recrawls) == (1, 7, 7, 0)
    assert (first.fetched, first.failed, first.no_request, first.blocked) == (5, 1, 1, 1)
    assert (first.leased, first.waiting, first.carried_over) == (0, 0, 0)
    assert first.ended and first.idle == 3.0  # 8 planned, 5 requests made
    assert (second.released, second.new_pages, second.recrawls) == (6, 4, 2)
    assert (second.fetched, second.leased, second.waiting, second.blocked) == (1, 5, 0, 0)
    assert not second.ended and second.idle is None
    # Once the lease has gone, its pages wait; the third period has not begun.
    queue.release(lease.lease_id, now=day2 + 3 * MINUTE)
    (_, second) = plan_period_use(db, plan, now=day2 + 4 * MINUTE)
    assert (second.leased, second.waiting, second.pending) == (0, 5, 5)


def _days(db: Database, plan: int, ids: Sequence[int], releases: Sequence[int], fetch: int) -> None:
    """Period k of ``plan`` (k = 1, 2, ...): ``releases[k - 1]`` pages released at its start
    (the ones not queued), then ``fetch`` of the queued pages fetched and the rest given back."""
    queue = LeaseQueue(db, BIG)
    start = T0 + DAY
    for k, count in enumerate(releases):
        now = start + k * DAY + MINUTE
        _release(db, plan, k + 1, ids[:count], now)
        leases = queue.lease("w", now=now + MINUTE)
        pages = [p.page_id for lease in leases for p in lease.pages]
        for lease in leases:
            mine = [p.page_id for p in lease.pages if p.page_id in pages[:fetch]]
            queue.finish(lease.lease_id, [_ok(p, now + MINUTE) for p in mine], now=now + MINUTE)


def test_a_release_below_capacity_does_not_lower_the_next_plan(db: Database) -> None:
    """The plan in force planned 10 crawls a period but released 4 a period, and the crawler
    fetched them all: it kept up, so its 4 fetches a period are a lower bound and the next
    plan keeps 10. (Read as a throughput, the window measured 4 and planned 7: a plan that
    released too little measured a lower capacity, and so on, night after night.)"""
    ids = _pages(db, 12)
    plan = _plan(db, T0 + DAY, capacity=10.0, periods=4)
    _days(db, plan, ids, [4, 4, 4, 4], fetch=4)
    periods = ended_periods(db, since=T0, until=T0 + 5 * DAY)
    assert (periods.fetched, periods.offered, periods.left) == ([4] * 4, [4] * 4, [0] * 4)
    report = run_nightly(db, NightlySettings(periods=4, capacity=0.0), now=T0 + 5 * DAY)
    assert report.status == "published", report.message
    assert report.inputs is not None and report.inputs.capacity_crawls == 10.0
    assert report.reading is not None and report.reading.measured.fetches == 16


def test_a_saturated_crawler_measures_its_capacity(db: Database) -> None:
    """Released 10 a period, fetched 6, the rest left waiting: 6 is the capacity measured,
    and the next plan moves half way to it from the plan in force's 10."""
    ids = _pages(db, 12)
    plan = _plan(db, T0 + DAY, capacity=10.0, periods=3)
    _days(db, plan, ids, [10, 10, 10], fetch=6)
    periods = ended_periods(db, since=T0, until=T0 + 4 * DAY)
    assert periods.fetched == [6, 6, 6]
    assert periods.offered == [10, 10, 10] and periods.left == [4, 4, 4]
    report = run_nightly(db, NightlySettings(periods=4, capacity=0.0), now=T0 + 4 * DAY)
    assert report.inputs is not None and report.inputs.capacity_crawls == 8.0


def test_pages_waiting_on_backed_off_hosts_are_not_the_crawlers_backlog(db: Database) -> None:
    ids = _pages(db, 12)
    plan = _plan(db, T0 + DAY, capacity=10.0, periods=2)
    _days(db, plan, ids, [10], fetch=6)
    with db.write() as conn:  # the host answered 503: its pages wait for it, not the crawler
        conn.execute(update(HOSTS).values(backoff_until=T0 + 3 * DAY))
    _days_from = T0 + 2 * DAY + MINUTE
    _release(db, plan, 2, ids[:10], _days_from)
    with db.read() as conn:
        row = conn.execute(select(PERIOD_RELEASES).where(PERIOD_RELEASES.c.period == 2)).one()
    assert (row.carried_over, row.carried_backed_off, row.pages) == (4, 4, 6)
    periods = ended_periods(db, since=T0, until=T0 + 3 * DAY)
    assert periods.left[0] == 0  # period 1 kept up, as far as the crawler could tell


# -- the CLI and the metrics ---------------------------------------------------------------


def _served_store(db: Database) -> int:
    """A plan whose first one-day period ended a minute ago: 5 new pages released, 3
    fetched, 1 turned away by robots.txt, 1 given back; the second period runs, not
    released."""
    ids = _pages(db, 6)
    start = utcnow() - DAY - MINUTE
    plan = _plan(db, start, capacity=8.0, periods=3)
    queue = LeaseQueue(db, BIG)
    now = start + MINUTE
    _release(db, plan, 1, ids[:5], now)
    (lease,) = queue.lease("w", now=now)
    results = [_ok(p.page_id, now) for p in lease.pages[:3]]
    results.append(FetchResult(lease.pages[3].page_id, now, "blocked", next_due_at=now + DAY))
    queue.finish(lease.lease_id, results, now=now)
    return plan


def test_status_prints_capacity_use_per_period(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _served_store(db)
    monkeypatch.setenv("CRAWLPLAN_DB_URL", str(db.url))
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert "capacity use by period of plan 1" in result.output
    table = result.output.split("capacity use by period of plan 1")[1]
    rows = [line.replace("│", " ").split() for line in table.splitlines()]
    (cells,) = [row for row in rows if row[:1] == ["1"]]
    assert "blocked" in table
    assert [row[-1] for row in rows if row[:1] == ["2"]] == ["running"], result.output
    # period, capacity, released, re-crawls, new, fetched, failed, blocked, pending, idle
    assert cells == ["1", "8", "5", "0", "5", "3", "0", "1", "1", "5"], result.output


def test_metrics_report_capacity_use_over_http(db: Database) -> None:
    _served_store(db)
    with ApiServer(db) as api:
        text = requests.get(api.url + "/metrics", timeout=10).text
    assert 'crawlplan_period_released_crawls{kind="new",period="last"} 5.0' in text
    assert 'crawlplan_period_fetched_crawls{outcome="answered",period="last"} 3.0' in text
    assert 'crawlplan_period_blocked_crawls{period="last"} 1.0' in text
    assert 'crawlplan_period_no_request_crawls{period="last"} 0.0' in text
    assert 'crawlplan_period_pending_crawls{period="last",state="waiting"} 1.0' in text
    assert 'crawlplan_period_idle_crawls{period="last"} 5.0' in text
    assert 'crawlplan_period_capacity_crawls{period="last"} 8.0' in text
