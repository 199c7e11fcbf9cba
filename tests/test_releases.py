"""Due-URL selection on the store (SQLite and PostgreSQL): period releases and the report path."""

from __future__ import annotations

import random
import threading
from collections import Counter
from contextlib import ExitStack
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from planner.cycle.due_urls import HOST_CAPACITY, NEW_PAGES, NOT_ENOUGH_DUE, RECRAWLS
from service.pipeline import POOLED_READ, ReleaseSummary, release_period
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    publish_plan,
    recompute_ready,
)
from store.due_times import finish_page_schedule
from store.errors import InvalidPlanError
from store.models import HOSTS, PAGES, PERIOD_RELEASES, RELEASED_PAGES
from store.period_use import plan_period_use
from store.plans import extend_plan_in_force, plan_detail
from store.releases import release_pages
from store.urgent import URGENT_DUE
from tests.conftest import T0

DAY = timedelta(days=1)
BIG = LeasePolicy(max_urls=10_000, max_urls_per_host=10_000, max_hosts=1_000)


def _pages(db: Database, host: str, n: int, **values: Any) -> list[int]:
    """n pages on ``host`` (added in order), then ``values`` set on all of them; their ids."""
    origin = f"http://{host}.test"
    add_pages(db, [(f"{origin}/{host}-{i}", origin) for i in range(n)], now=T0 - 30 * DAY)
    with db.write() as conn:
        ids = list(
            conn.execute(
                select(PAGES.c.id).where(PAGES.c.url.like(f"{origin}/%")).order_by(PAGES.c.id)
            ).scalars()
        )
        if values:
            conn.execute(update(PAGES).where(PAGES.c.id.in_(ids)).values(**values))
    return ids


def _fetched(db: Database, host: str, bucket: int, fetched: list[datetime]) -> list[int]:
    """Fetched pages of ``bucket`` on ``host``, one per last fetch time, not due (plan regime);
    the page schedule wants each a day after its fetch."""
    ids = _pages(db, host, len(fetched), status="ok", bucket=bucket, next_due_at=None, fetches=1)
    with db.write() as conn:
        for pid, at in zip(ids, fetched, strict=True):
            conn.execute(
                update(PAGES)
                .where(PAGES.c.id == pid)
                .values(last_fetch_at=at, scheduled_at=at + DAY)
            )
    return ids


def _plan(
    db: Database,
    quotas: dict[int, int],
    new_pages: int = 0,
    periods: int = 2,
    *,
    marginal: dict[int, float] | None = None,
    new_marginal: float | None = None,
    fractions: dict[int, float] | None = None,
    solver: dict[str, Any] | None = None,
) -> int:
    """Publish a plan whose page schedule counts as done (the tests set scheduled_at)."""
    version = publish_plan(
        db,
        PlanDraft(
            starts_at=T0,
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=t,
                    starts_at=T0 + (t - 1) * DAY,
                    ends_at=T0 + t * DAY,
                    capacity=1000.0,
                    new_pages=new_pages,
                    quotas=quotas,
                    marginal=marginal or {},
                    new_marginal=new_marginal,
                    fractions=fractions or {},
                )
                for t in range(1, periods + 1)
            ],
            inputs={},
            solver=solver or {},
        ),
        now=T0 - DAY,
    )
    finish_page_schedule(db, version, objective="test", pages=0, now=T0 - DAY)
    return version


def _due(db: Database) -> dict[int, datetime]:
    """Pages the lease queue will hand out: released (queued) and due in ``pages``."""
    with db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.id, PAGES.c.next_due_at).where(PAGES.c.next_due_at.is_not(None))
        ).all()
        queued = conn.execute(select(RELEASED_PAGES.c.page_id, RELEASED_PAGES.c.due_at)).all()
    return {r.id: r.next_due_at for r in rows} | {r.page_id: r.due_at for r in queued}


def _lease_all(db: Database, now: datetime) -> set[int]:
    queue = LeaseQueue(db, BIG)
    leased: set[int] = set()
    while batch := queue.lease("w", now=now):
        leased.update(p.page_id for lease in batch for p in lease.pages)
    return leased


def test_pooled_quotas_take_the_most_overdue_pages_then_spill_to_early_ones(db: Database) -> None:
    # Periods of a day; a page is due once half its bucket's interval has passed by the
    # period's end, and the quotas are pooled: their total (8) goes to the due pages most
    # overdue for their bucket's interval, whatever each bucket's own quota. Bucket 3: 12
    # pages, a third of them a period (an interval of 3 days); 6 were fetched 2.5 days ago
    # (1.17 intervals by the period's end), 6 an hour ago (0.35: not due). Bucket 8: a fifth
    # a period (5 days); 1 fetched 3 days ago (0.8 intervals: due), 4 two hours ago (not
    # due). Bucket 3's quota of 4 does not cap it: all 6 of its due pages go, with bucket 8's
    # one; the crawl left spills by value (bucket 8 is worth more) to bucket 8's soonest due
    # page not due yet.
    old3 = _fetched(db, "a", 3, [T0 - timedelta(hours=60, minutes=i) for i in range(6)])
    new3 = _fetched(db, "b", 3, [T0 - timedelta(hours=1, minutes=i) for i in range(6)])
    due8 = _fetched(db, "c", 8, [T0 - 3 * DAY])
    recent8 = _fetched(db, "d", 8, [T0 - timedelta(hours=2, minutes=i) for i in range(4)])
    _plan(db, {3: 4, 8: 4}, marginal={3: 2.0, 8: 3.0}, fractions={3: 1 / 3, 8: 1 / 5})
    summary = release_period(db, now=T0, min_delay_seconds=0.0)
    assert summary.by_bucket == {3: 6, 8: 1} and summary.released == 8
    assert summary.spilled == {8: 1} and summary.unspent == 0
    ((short,),) = [summary.shortfalls]
    assert (short.bucket, short.quota, short.chosen) == (RECRAWLS, 8, 7)
    due = set(_due(db))
    assert set(old3) | set(due8) <= due and not set(new3) & due
    assert due & set(recent8) == {recent8[3]}  # fetched longest ago of the four


@pytest.mark.parametrize(("renewal", "released"), [(None, 0), (0.1, 1)])
def test_a_plan_for_a_growing_web_makes_pages_due_sooner(
    db: Database, renewal: float | None, released: int
) -> None:
    # Bucket 8 is planned a fifth of its pages a period. On an old web that is an interval
    # of 5 days; on a web growing at 0.1 a period (the plan's solver record), whose young
    # pages need no crawl yet, ln(1 + 0.1 x 5) / 0.1 = 4.05 days. A page fetched 1.2 days
    # before the period, 2.2 days by its end, is due (half an interval) only on the growing
    # web; without spill nothing else takes the quota.
    page = _fetched(db, "c", 8, [T0 - timedelta(hours=28.8)])
    solver = {"renewal": renewal} if renewal is not None else {}
    _plan(db, {8: 1}, marginal={8: 1.0}, fractions={8: 1 / 5}, solver=solver)
    summary = release_period(db, now=T0, min_delay_seconds=0.0, spill=False)
    assert summary.released == released
    assert (page[0] in _due(db)) == bool(released)


def test_pooled_quotas_reach_a_bucket_whose_quota_rounded_to_nothing(db: Database) -> None:
    # Bucket 5 is planned 0.4 crawls of each page a period, yet its quota rounded to 0 this
    # period; its 100 pages are 3.6 intervals overdue by the period's end, more than a first
    # read of a bucket takes (POOLED_READ). Bucket 3's quota of 100 has 150 pages due but
    # only 0.75 of an interval old. The total goes to bucket 5's pages: the release reads it
    # on once every page it read was taken.
    overdue5 = _fetched(db, "e", 5, [T0 - 8 * DAY - timedelta(minutes=i) for i in range(100)])
    old3 = _fetched(db, "a", 3, [T0 - 2 * DAY - timedelta(minutes=i) for i in range(150)])
    _plan(db, {3: 100}, marginal={3: 1.0}, fractions={3: 1 / 4, 5: 0.4})
    summary = release_period(db, now=T0, min_delay_seconds=0.0)
    assert POOLED_READ < 100
    assert summary.by_bucket == {5: 100} and summary.shortfalls == ()
    due = set(_due(db))
    assert set(overdue5) <= due and not due & set(old3)


def test_pooled_quotas_read_past_a_full_host_to_more_overdue_pages(db: Database) -> None:
    # Bucket 1 (interval 10 days, quota 10): its 100 oldest pages (5.1 intervals by the
    # period's end) are on a host that takes one request a day, more than a first read; its
    # next 30 (4.1 intervals) each on a host of its own. Bucket 2 (no quota): 100 pages 0.7
    # of an interval old. The first read of bucket 1 holds only the full host's pages; the
    # pool must not go to bucket 2 for want of reading on.
    slow = _fetched(db, "slow", 1, [T0 - 50 * DAY - timedelta(minutes=i) for i in range(100)])
    free = [_fetched(db, f"f{i}", 1, [T0 - 40 * DAY])[0] for i in range(30)]
    young = _fetched(db, "b", 2, [T0 - 6 * DAY - timedelta(minutes=i) for i in range(100)])
    with db.write() as conn:
        conn.execute(
            update(HOSTS).where(HOSTS.c.origin == "http://slow.test").values(crawl_delay=90_000.0)
        )
    _plan(db, {1: 10}, marginal={1: 1.0}, fractions={1: 0.1, 2: 0.1})
    summary = release_period(db, now=T0, min_delay_seconds=0.0)
    assert summary.by_bucket == {1: 10}, summary
    due = set(_due(db))
    assert len(due & set(slow)) == 1 and len(due & set(free)) == 9 and not due & set(young)


def test_without_due_every_page_of_a_bucket_is_eligible(db: Database) -> None:
    _fetched(db, "a", 3, [T0 - timedelta(hours=60, minutes=i) for i in range(6)])
    _fetched(db, "c", 8, [T0 - 3 * DAY])
    recent8 = _fetched(db, "d", 8, [T0 - timedelta(hours=2, minutes=i) for i in range(4)])
    _plan(db, {3: 4, 8: 4}, marginal={3: 2.0, 8: 3.0}, fractions={3: 1 / 3, 8: 1 / 5})
    summary = release_period(db, now=T0, min_delay_seconds=0.0, due=False)
    assert summary.by_bucket == {3: 4, 8: 4} and summary.spilled == {}
    assert len(set(_due(db)) & set(recent8)) == 3


def test_quotas_met_exactly_longest_unvisited_first(db: Database) -> None:
    # Bucket 3: 12 pages fetched hours apart (4 hosts); bucket 8: 6 pages; bucket 9 none.
    sched3 = [T0 - timedelta(hours=40 - 3 * i) for i in range(12)]
    b3 = [pid for h in range(4) for pid in _fetched(db, f"a{h}", 3, sched3[h::4])]
    b8 = _fetched(db, "b", 8, [T0 - timedelta(hours=6 - i) for i in range(6)])
    _fetched(db, "c", 9, [T0 - 5 * DAY] * 3)
    new = _pages(db, "n", 5)  # never fetched, due now (seeded before the plan)
    with db.write() as conn:
        for cash, pid in zip([0.1, 0.5, 0.3, 0.9, 0.2], new, strict=True):
            conn.execute(update(PAGES).where(PAGES.c.id == pid).values(cash=cash))
    _plan(db, {3: 5, 8: 4}, new_pages=2)
    now = T0 + timedelta(hours=2)
    summary = release_period(db, now=now, min_delay_seconds=1.0)
    assert summary.status == "released" and (summary.plan, summary.period) == (1, 1)
    assert summary.by_bucket == {3: 5, 8: 4} and summary.new_pages == 2
    assert summary.released == 11 and summary.shortfalls == ()
    due = _due(db)
    by_fetch = dict(zip([p for h in range(4) for p in sched3[h::4]], b3, strict=True))
    oldest = [by_fetch[s] for s in sorted(by_fetch)[:5]]
    assert set(oldest) <= set(due)
    assert set(b8[:4]) <= set(due)
    # Each bucket's pages are spread evenly over the rest of the period, oldest first (the
    # bucket with no quota gets nothing, however old its pages).
    span = (T0 + DAY - now).total_seconds() - 1e-3
    for pages in (oldest, b8[:4]):
        offsets = [(due[p] - now).total_seconds() for p in pages]
        assert offsets == pytest.approx([span * j / len(pages) for j in range(len(pages))])
    assert {new[3], new[1]} <= set(due)  # highest cash first
    # The other never-fetched pages were due from before the plan: withdrawn.
    assert len(due) == 11 and summary.withdrawn == 3
    assert all(now <= t < T0 + DAY for t in due.values())
    assert _lease_all(db, T0 + DAY - timedelta(seconds=1)) == set(due)


def test_host_capacity_is_never_exceeded(db: Database) -> None:
    slow = _fetched(db, "slow", 5, [T0 - timedelta(hours=30 - i) for i in range(20)])
    fast = _fetched(db, "fast", 5, [T0 - timedelta(hours=5 - i) for i in range(5)])
    with db.write() as conn:  # robots.txt: one request per 3 hours
        conn.execute(
            update(HOSTS).where(HOSTS.c.origin == "http://slow.test").values(crawl_delay=10_800.0)
        )
    _plan(db, {5: 12})
    summary = release_period(db, now=T0, min_delay_seconds=2.0)
    due = _due(db)
    # floor((86400 - 0.001) / 10800) + 1 = 8 requests to the slow host in the day.
    assert summary.by_bucket == {5: 12} and summary.shortfalls == ()
    assert set(due) == set(slow[:8]) | set(fast[:4])
    times = sorted(due[p] for p in slow[:8])
    gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
    assert min(gaps) >= 10_800 - 1e-3 and times[-1] < T0 + DAY


def test_shortfalls_are_named(db: Database) -> None:
    _fetched(db, "only", 2, [T0 - timedelta(hours=i) for i in range(3)])
    (recent,) = _fetched(db, "recent", 4, [T0 - timedelta(minutes=1)])  # however recent
    _plan(db, {2: 5, 4: 1}, new_pages=1)
    summary = release_period(db, now=T0)
    reasons = {(s.bucket, s.chosen, s.reason) for s in summary.shortfalls}
    assert reasons == {(2, 3, NOT_ENOUGH_DUE), (NEW_PAGES, 0, NOT_ENOUGH_DUE)}
    assert recent in _due(db) and summary.by_bucket[4] == 1
    # Nothing else to spend the 3 crawls on.
    assert (summary.spilled, summary.unspent) == ({}, 3)


def test_a_full_host_makes_the_release_read_further(db: Database) -> None:
    # 70 overdue pages of one host that allows one request a day, then one of another host:
    # the first read (quota + 64 = 66 rows) sees only the full host.
    crowded = _fetched(db, "crowded", 1, [T0 - timedelta(minutes=200 - i) for i in range(70)])
    other = _fetched(db, "other", 1, [T0 - timedelta(minutes=1)])
    with db.write() as conn:
        conn.execute(
            update(HOSTS)
            .where(HOSTS.c.origin == "http://crowded.test")
            .values(crawl_delay=90_000.0)
        )
    _plan(db, {1: 2})
    summary = release_period(db, now=T0, candidate_factor=1.0)
    assert summary.by_bucket == {1: 2} and summary.shortfalls == ()
    assert set(_due(db)) == {crowded[0], other[0]}


def test_host_capacity_shortfall_when_every_candidate_was_read(db: Database) -> None:
    _fetched(db, "crowded", 1, [T0 - timedelta(minutes=10 - i) for i in range(4)])
    with db.write() as conn:
        conn.execute(update(HOSTS).values(crawl_delay=90_000.0))
    _plan(db, {1: 3})
    (short,) = release_period(db, now=T0).shortfalls
    assert (short.chosen, short.reason, short.host_skipped) == (1, HOST_CAPACITY, 3)


def test_a_second_release_does_nothing(db: Database) -> None:
    ids = _fetched(db, "h", 1, [T0 - timedelta(hours=i) for i in range(4)])
    _plan(db, {1: 2})
    first = release_period(db, now=T0)
    due = _due(db)
    assert first.status == "released" and len(due) == 2
    with db.write() as conn:  # even if the pages changed since, nothing is written again
        conn.execute(RELEASED_PAGES.delete())
    again = release_period(db, now=T0 + timedelta(hours=1))
    assert again.status == "already released" and (again.plan, again.period) == (1, 1)
    assert _due(db) == {}
    again_ids = release_pages(
        db, 1, 1, page_ids=ids, due_epoch_s=[T0.timestamp()] * 4, fetches=[1] * 4
    )
    assert again_ids is None
    assert _due(db) == {}
    with db.read() as conn:
        (row,) = conn.execute(select(PERIOD_RELEASES)).all()
    assert (row.plan_id, row.period, row.pages) == (1, 1, 2)
    # The next period is released on its own.
    assert release_period(db, now=T0 + DAY).status == "released"


def test_release_pages_queues_each_page_once(db: Database) -> None:
    """A page queued already keeps its row; a page given twice is queued at its earliest due
    time; a page whose fetch count moved on (fetched meanwhile) is left out."""
    _plan(db, {3: 10})
    a, b, c, d = _fetched(db, "once", 3, [T0 - DAY] * 4)
    t = T0.timestamp()
    assert release_pages(db, 1, 1, page_ids=[a], due_epoch_s=[t + 50], fetches=[1]) == 1
    queued = release_pages(
        db,
        1,
        2,
        page_ids=[a, b, b, c, d],
        due_epoch_s=[t + 10, t + 30, t + 20, t + 5, t + 1.5],
        fetches=[1, 1, 1, 0, 1],
    )
    assert queued == 2
    second = timedelta(seconds=1)
    assert _due(db) == {a: T0 + 50 * second, b: T0 + 20 * second, d: T0 + 1.5 * second}


def test_pages_changed_after_the_read_are_released_as_they_are_now(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the candidate read and the release's write: a page fetched (reported) is left
    out; a page re-bucketed or re-scheduled without a fetch, and a new page whose cash moved,
    are still released (their index entries moved: the release reads them by id); a page
    leased meanwhile, or made urgent, is left out; the rest are queued with the URL and
    validators of their row."""
    old = _fetched(db, "a", 3, [T0 - timedelta(hours=10 - i) for i in range(6)])
    new = _pages(db, "n", 3)
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == old[0]).values(etag='"e0"', signature="s0"))
        for cash, pid in zip([0.9, 0.8, 0.7], new, strict=True):
            conn.execute(update(PAGES).where(PAGES.c.id == pid).values(cash=cash))
    _plan(db, {3: 6}, new_pages=3)
    fetched, rebucketed, rescheduled, leased, urgent = old[1:]
    moved_cash = new[0]
    import service.pipeline as pipeline

    real = pipeline.queue_release

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        assert sorted(kwargs["page_ids"]) == sorted(old + new)
        with db.write() as conn:
            for pid, values in [
                (fetched, {"fetches": 2, "scheduled_at": T0 + 5 * DAY}),
                (rebucketed, {"bucket": 4}),
                (rescheduled, {"scheduled_at": T0 - timedelta(hours=20)}),
                (leased, {"leased_until": T0 + DAY}),
                (urgent, {"next_due_at": URGENT_DUE}),
                (moved_cash, {"cash": 2.5}),
            ]:
                conn.execute(update(PAGES).where(PAGES.c.id == pid).values(**values))
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "queue_release", meanwhile)
    summary = release_period(db, now=T0 + timedelta(minutes=1), min_delay_seconds=1.0)
    assert summary.status == "released"
    with db.read() as conn:
        rows = conn.execute(select(RELEASED_PAGES)).all()
        urls = dict(conn.execute(select(PAGES.c.id, PAGES.c.url)).tuples().all())
    queued = {r.page_id: r for r in rows}
    assert set(queued) == {old[0], rebucketed, rescheduled, *new}
    assert summary.released == len(queued)
    assert all(r.url == urls[pid] for pid, r in queued.items())
    assert (queued[old[0]].etag, queued[old[0]].signature) == ('"e0"', "s0")
    assert queued[old[0]].status == "ok" and queued[new[1]].status == "new"


def test_sqlite_release_reads_its_pages_from_the_candidate_indexes(sqlite_url: str) -> None:
    """The release's write on SQLite looks its pages up in the covering candidate indexes
    only (every column it copies and checks is in them), never in the table."""
    from store import open_database, upgrade_schema
    from store.dialects import sqlite_releases as sql

    db = open_database(sqlite_url, create=True)
    upgrade_schema(db)
    with db.write() as conn:
        conn.exec_driver_sql(sql.CHOSEN_TABLE)
        plan = " | ".join(
            str(row[-1])
            for row in conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql.QUEUE_BY_INDEX}", {"plan": 1, "period": 1, "now": "x"}
            )
        )
        conn.exec_driver_sql(sql.CHOSEN_DROP)
    db.dispose()
    assert "COVERING INDEX ix_pages_bucket_fetched (bucket=? AND last_fetch_at=?)" in plan
    assert "COVERING INDEX ix_pages_new_cash (cash=? AND id=?" in plan
    assert "PRIMARY KEY (rowid" not in plan and "SCAN p" not in plan


def test_a_long_url_with_a_long_etag_fits_the_candidate_index(db: Database) -> None:
    """The candidate indexes hold the URL and validators; PostgreSQL's B-tree entries hold at
    most 2,704 bytes, so there a page keeps no ETag that would pass 2,400 bytes with its URL
    and signature (the write succeeds, the ETag is dropped); shorter ETags are kept."""
    (long_page,) = _pages(db, "l" * 10, 1)
    (short_page,) = _pages(db, "s", 1)
    long_url = "http://" + "l" * 10 + ".test/" + "x" * (2048 - 23)
    etag, signature = "e" * 512, "f" * 64
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == long_page).values(url=long_url))
        for pid in (long_page, short_page):
            conn.execute(
                update(PAGES)
                .where(PAGES.c.id == pid)
                .values(status="ok", fetches=1, bucket=3, etag=etag, signature=signature)
            )
    with db.read() as conn:
        kept = dict(conn.execute(select(PAGES.c.id, PAGES.c.etag)).tuples().all())
    assert kept[short_page] == etag
    assert kept[long_page] == (None if db.dialect == "postgresql" else etag)


def test_concurrent_releases_release_once(db: Database) -> None:
    _fetched(db, "h", 1, [T0 - timedelta(hours=i) for i in range(30)])
    _plan(db, {1: 10})
    results: list[ReleaseSummary] = []
    barrier = threading.Barrier(3)

    def run() -> None:
        barrier.wait()
        results.append(release_period(db, now=T0))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(r.status for r in results) == {"released": 1, "already released": 2}
    assert len(_due(db)) == 10


def test_without_a_plan_or_period_nothing_is_released(db: Database) -> None:
    _fetched(db, "h", 1, [T0 - DAY])
    assert release_period(db, now=T0).status == "no plan"
    _plan(db, {1: 1}, periods=1)
    assert release_period(db, now=T0 - timedelta(seconds=1)).status == "no current period"
    assert _due(db) == {}
    # past its last period the plan stays in force (test_a_plan_whose_periods_ended_...)
    assert release_period(db, now=T0 + DAY).period == 2


def test_report_after_a_plan_waits_for_the_next_release(db: Database) -> None:
    ids = _fetched(db, "h", 6, [T0 - timedelta(hours=6 - i) for i in range(4)])
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == ids[0]).values(refresh_interval=2.5))
    _plan(db, {6: 3})
    release_period(db, now=T0)
    end = T0 + DAY - timedelta(seconds=1)
    queue = LeaseQueue(db, BIG)
    (lease,) = queue.lease("w", now=end)
    assert {p.page_id for p in lease.pages} == set(ids[:3])
    at = end + timedelta(seconds=0.5)
    results = [
        FetchResult(page_id=ids[0], fetched_at=at, status="ok", http_status=200),
        FetchResult(page_id=ids[1], fetched_at=at, status="ok", http_status=304),
        FetchResult(
            page_id=ids[2], fetched_at=at, status="error", next_due_at=at + timedelta(minutes=5)
        ),
    ]
    queue.finish(lease.lease_id, results, now=at)
    with db.read() as conn:
        rows = {
            r.id: r
            for r in conn.execute(
                select(PAGES.c.id, PAGES.c.next_due_at, PAGES.c.scheduled_at).where(
                    PAGES.c.id.in_(ids[:3])
                )
            )
        }
    assert rows[ids[0]].next_due_at is None
    assert rows[ids[0]].scheduled_at == at + timedelta(days=2.5)
    assert rows[ids[1]].next_due_at is None
    assert rows[ids[1]].scheduled_at == at + queue.policy.revisit_after
    assert rows[ids[2]].next_due_at == at + timedelta(minutes=5)  # the worker's retry holds
    # Nothing else is leased until the next period's release.
    assert _lease_all(db, at + timedelta(minutes=1)) == set()
    assert _lease_all(db, at + timedelta(minutes=5)) == {ids[2]}


def test_report_without_a_plan_keeps_the_old_behaviour(db: Database) -> None:
    ids = _pages(db, "h", 2)
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == ids[1]).values(refresh_interval=0.5))
    queue = LeaseQueue(db, LeasePolicy(revisit_after=timedelta(days=2)))
    (lease,) = queue.lease("w", now=T0)
    queue.finish(
        lease.lease_id,
        [FetchResult(page_id=p, fetched_at=T0, status="ok", http_status=200) for p in ids],
        now=T0,
    )
    with db.read() as conn:
        rows = {
            r.id: r
            for r in conn.execute(select(PAGES.c.id, PAGES.c.next_due_at, PAGES.c.scheduled_at))
        }
    assert rows[ids[0]].next_due_at == rows[ids[0]].scheduled_at == T0 + 2 * DAY
    assert rows[ids[1]].next_due_at == rows[ids[1]].scheduled_at == T0 + DAY / 2


def test_pages_added_after_a_plan_wait_for_a_release(db: Database) -> None:
    before = _pages(db, "early", 2)  # seeded before any plan: due now, as always
    assert set(_due(db)) == set(before)
    _plan(db, {}, new_pages=1)
    origin = "http://late.test"
    outcome = add_pages(db, [(f"{origin}/a", origin), (f"{origin}/b", origin)], now=T0)
    assert outcome.added == 2
    assert set(_due(db)) == set(before)  # the discoveries bypass no quota
    with db.write() as conn:
        late = list(
            conn.execute(select(PAGES.c.id).where(PAGES.c.url.like(f"{origin}/%"))).scalars()
        )
        conn.execute(update(PAGES).where(PAGES.c.id == late[1]).values(cash=0.5))
    summary = release_period(db, now=T0)
    assert summary.new_pages == 1
    assert set(_due(db)) == {late[1]}  # chosen by cash; the early backlog withdrawn
    assert _lease_all(db, T0 + DAY - timedelta(seconds=1)) == {late[1]}


def test_unleased_pages_of_an_earlier_period_are_carried_over(db: Database) -> None:
    # Period 1 releases 3 of bucket 4's pages; none is leased before period 2 is released.
    ids = _fetched(db, "h", 4, [T0 - timedelta(hours=10 - i) for i in range(8)])
    _plan(db, {4: 3})
    first = release_period(db, now=T0)
    assert first.released == 3 and first.carried_over == 0
    period1 = _due(db)
    assert set(period1) == set(ids[:3])
    # A worker leases and fetches one of them during period 1.
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1, max_hosts=1))
    (lease,) = queue.lease("w", now=T0 + timedelta(hours=12))
    (page,) = lease.pages
    at = T0 + timedelta(hours=12)
    queue.finish(
        lease.lease_id,
        [FetchResult(page_id=page.page_id, fetched_at=at, status="ok", http_status=200)],
        now=at,
    )
    # Period 2: the two unfetched pages of period 1 stay queued (counted, not withdrawn) and
    # are not chosen again; the quota takes the next 3 pages.
    second = release_period(db, now=T0 + DAY)
    assert second.status == "released" and second.carried_over == 2
    assert second.released == 3 and second.withdrawn == 0
    due = _due(db)
    carried = set(ids[:3]) - {page.page_id}
    assert set(due) == carried | set(ids[3:6])
    assert all(due[p] == period1[p] for p in carried)  # their period-1 release times
    # The carried-over pages come first in their host's next lease.
    one_by_one = LeaseQueue(db, LeasePolicy(max_urls=2, max_urls_per_host=2, max_hosts=1))
    (lease,) = one_by_one.lease("w", now=T0 + 2 * DAY - timedelta(seconds=1))
    assert {p.page_id for p in lease.pages} == carried
    with db.read() as conn:
        by_period = dict(
            conn.execute(select(PERIOD_RELEASES.c.period, PERIOD_RELEASES.c.pages)).tuples().all()
        )
    assert by_period == {1: 3, 2: 3}


def test_a_queued_page_is_leased_once_and_unreported_pages_stay_queued(db: Database) -> None:
    ids = _fetched(db, "h", 2, [T0 - timedelta(hours=5 - i) for i in range(4)])
    _plan(db, {2: 4})
    release_period(db, now=T0)
    queue = LeaseQueue(db, BIG)
    end = T0 + DAY - timedelta(seconds=1)
    (lease,) = queue.lease("w", now=end)
    assert [p.page_id for p in lease.pages] == ids  # due order (overdue spread in order)
    assert queue.lease("w2", now=end) == []  # the host is held: its queue with it
    assert queue.work_remaining(now=end)
    at = end + timedelta(seconds=0.5)
    returned = queue.finish(
        lease.lease_id,
        [FetchResult(page_id=p, fetched_at=at, status="ok", http_status=200) for p in ids[:2]],
        now=at,
    )[1]
    assert returned == 2
    assert set(_due(db)) == set(ids[2:])  # reported pages left the queue
    (again,) = queue.lease("w2", now=at)
    assert [p.page_id for p in again.pages] == ids[2:]
    assert again.pages[0].url.endswith("h-2") and again.pages[0].status == "ok"


def test_an_urgent_released_page_is_leased_once(db: Database) -> None:
    ids = _fetched(db, "h", 3, [T0 - timedelta(hours=3 - i) for i in range(3)])
    _plan(db, {3: 3})
    release_period(db, now=T0)
    with db.write() as conn:  # the urgent lane puts a queued page first
        conn.execute(update(PAGES).where(PAGES.c.id == ids[2]).values(next_due_at=URGENT_DUE))
    recompute_ready(db)  # a due time written by hand
    (lease,) = LeaseQueue(db, BIG).lease("w", now=T0 + DAY - timedelta(seconds=1))
    assert [p.page_id for p in lease.pages] == [ids[2], ids[0], ids[1]]


def test_a_failed_candidate_read_leaves_the_connection_usable(db: Database) -> None:
    """A candidate query that fails (here one on a table that does not exist) raises, and
    the connection goes back to the pool as it was: on PostgreSQL, where the buckets' queries
    go out in one pipeline, out of pipeline mode. The next read and a write then work."""
    from store import releases

    _plan(db, {3: 1})
    (page,) = _fetched(db, "p", 3, [T0 - DAY])
    real = db.backend.releases
    mark = "%s" if db.dialect == "postgresql" else "?"

    class ReadsNoTable(type(real)):  # type: ignore[misc]
        refresh_sql = f"SELECT {mark}, {mark}, {mark} FROM no_such_table"

    _use_releases(db, ReadsNoTable())
    with pytest.raises(Exception, match="no_such_table"):
        releases.refresh_candidates(db, {3: 10, 4: 10}, now=T0)
    _use_releases(db, real)
    found = releases.refresh_candidates(db, {3: 10, 4: 10}, now=T0)
    assert (found[3].page_id, found[4].page_id) == ([page], [])
    if db.dialect == "postgresql":  # every pooled connection
        with ExitStack() as stack:
            for _ in range(db.engine.pool.checkedin()):  # type: ignore[attr-defined]
                raw = stack.enter_context(db.read()).connection.driver_connection
                assert raw._pipeline is None  # type: ignore[union-attr]
    assert release_pages(db, 1, 1, page_ids=[page], due_epoch_s=[T0.timestamp()], fetches=[1]) == 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(min_value=0, max_value=4e9, allow_nan=False),
            # fractions a hair below the next second: the microseconds round up to it
            st.integers(0, 4_000_000_000).map(lambda s: s + 0.9999996),
        ),
        max_size=40,
    )
)
def test_chosen_rows_split_times_as_the_store_formats_them(secs: list[float]) -> None:
    from store.dialects.sqlite_releases import chosen_values
    from store.types import seconds_micros

    n = len(secs)
    flat = chosen_values([3] * n, ["k"] * n, list(range(n)), secs, [7] * n)
    rows = [tuple(flat[k : k + 6]) for k in range(0, len(flat), 6)]
    assert rows == [(3, "k", i, *seconds_micros(s), 7) for i, s in enumerate(secs)]


def test_due_times_are_stored_to_the_microsecond_by_key_and_by_id(db: Database) -> None:
    """The release stores each due time as ``seconds_micros`` splits it (microseconds rounded
    half to even, a fraction that rounds to the next second carried), whether a page is found
    by its candidate index key or by id, and on either backend."""
    from store import releases
    from store.types import seconds_micros

    _plan(db, {3: 10}, new_pages=5)
    scheduled = [T0 - DAY + timedelta(microseconds=k * 123_457) for k in range(4)]
    # far ahead, where float seconds no longer hold every microsecond exactly
    scheduled.append(datetime(2242, 12, 20, 7, 39, 32, 42_132, tzinfo=T0.tzinfo))
    refresh = _fetched(db, "micro", 3, scheduled)
    new = _pages(db, "fresh", 2, status="new", cash=0.25)
    found = releases.refresh_candidates(db, {3: 10}, now=T0)[3]
    fresh = releases.new_page_candidates(db, 5, now=T0)
    assert sorted(found.page_id) == refresh and sorted(fresh.page_id) == new
    t = T0.timestamp()
    fractions = [0.1234565, 0.9999996, 0.0000004, 0.5, 0.75, 0.25]
    ids = [*found.page_id, *fresh.page_id]
    due = [t + f for f in [*fractions, 0.0]][: len(ids)]
    real = db.backend.releases

    class ByKeyOnly(type(real)):  # type: ignore[misc]
        """Every page found by its key: no read by id."""

        def queue_by_id(self, *args: Any) -> int:
            raise AssertionError("read by id")

        queue_missing = queue_by_id

    _use_releases(db, ByKeyOnly())
    done = releases.queue_release(
        db,
        1,
        1,
        page_ids=ids,
        due_epoch_s=due,
        fetches=[*found.fetches, *fresh.fetches],
        buckets=[*found.bucket, *fresh.bucket],
        keys=[*found.key, *fresh.key],
        now=T0,
    )
    assert done is not None and done.released == len(ids)
    _use_releases(db, real)

    def stored(secs: float) -> datetime:
        whole, micros = seconds_micros(secs)
        return datetime.fromtimestamp(whole, T0.tzinfo) + timedelta(microseconds=micros)

    assert _due(db) == {i: stored(s) for i, s in zip(ids, due, strict=True)}
    # By id (no keys): the same rounding.
    with db.write() as conn:
        conn.execute(RELEASED_PAGES.delete())
    assert release_pages(
        db, 1, 2, page_ids=ids, due_epoch_s=due, fetches=[*found.fetches, *fresh.fetches]
    ) == len(ids)
    assert _due(db) == {i: stored(s) for i, s in zip(ids, due, strict=True)}


# -- A release is one transaction ---------------------------------------------------------------
def _use_releases(db: Database, releases: Any) -> None:
    """The seam for a fault: ``db`` runs the release statements of ``releases`` (a subclass
    of its engine's)."""
    db.backend = replace(db.backend, releases=releases)


def _fails_after_queuing(db: Database, failure: Any) -> list[int]:
    """Make ``db``'s releases call ``failure(conn, calls)`` once the chosen pages are queued
    (``calls``: how many releases queued so far, this one included); their calls list."""
    calls: list[int] = []

    class Failing(type(db.backend.releases)):  # type: ignore[misc]
        def queue(self, conn: Any, *args: Any) -> tuple[int, list[int]]:
            done: tuple[int, list[int]] = super().queue(conn, *args)
            calls.append(len(calls) + 1)
            failure(conn, len(calls))
            return done

    _use_releases(db, Failing())
    return calls


def _raise(conn: Any, calls: int) -> None:
    raise RuntimeError("the release failed here")


def test_a_release_that_fails_leaves_nothing_queued(db: Database) -> None:
    """The release fails after it queued its pages: nothing of it stays (no queue row, no
    record of the period), and the next attempt releases the period whole, each page once."""
    ids = _fetched(db, "h", 2, [T0 - timedelta(hours=10 - i) for i in range(10)])
    _fetched(db, "g", 2, [T0 - timedelta(hours=30 - i) for i in range(4)])
    _plan(db, {2: 8})
    real = db.backend.releases
    _fails_after_queuing(db, _raise)
    with pytest.raises(RuntimeError, match="failed here"):
        release_period(db, now=T0)
    with db.read() as conn:
        assert conn.execute(select(PERIOD_RELEASES)).all() == []
        assert conn.execute(select(RELEASED_PAGES)).all() == []

    _use_releases(db, real)
    summary = release_period(db, now=T0)
    assert summary.status == "released" and summary.released == 8
    assert summary.carried_over == 0
    with db.read() as conn:
        queued = conn.execute(select(RELEASED_PAGES.c.page_id)).scalars().all()
        (row,) = conn.execute(select(PERIOD_RELEASES)).all()
    assert len(queued) == len(set(queued)) == 8 and row.pages == 8
    assert set(ids[:4]) <= set(queued)  # the most overdue of host h (g's four are older)
    assert release_period(db, now=T0 + DAY).released == 6  # what was left: 14 - 8
    assert len(_due(db)) == 14


def _deadlock_once(conn: Any, calls: int) -> None:
    if calls == 1:  # as PostgreSQL reports a deadlock (SQLSTATE 40P01)
        conn.exec_driver_sql(
            "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$"
        )


def test_a_release_retried_after_a_deadlock_counts_each_page_once(pg_store: Database) -> None:
    """A deadlock after the pages were queued: the transaction is rolled back and retried,
    and records every page it queued, once."""
    db = pg_store
    _fetched(db, "h", 2, [T0 - timedelta(hours=10 - i) for i in range(10)])
    _plan(db, {2: 8})
    calls = _fails_after_queuing(db, _deadlock_once)
    summary = release_period(db, now=T0)
    assert calls == [1, 2] and summary.released == 8
    with db.read() as conn:
        (row,) = conn.execute(select(PERIOD_RELEASES)).all()
    assert row.pages == 8 and len(_due(db)) == 8


def test_a_release_runs_at_read_committed_whatever_the_servers_isolation_default(
    pg_url: str,
) -> None:
    """The store pins READ COMMITTED: under a database default of REPEATABLE READ a release
    still queues what it chose, once."""
    import psycopg
    from psycopg import sql

    from store.open import open_database
    from store.schema import upgrade_schema
    from tests.conftest import _pg_admin_conninfo

    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
        admin.execute(
            sql.SQL(
                "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'"
            ).format(sql.Identifier(name))
        )
    with psycopg.connect(pg_url.replace("+psycopg", "")) as raw:
        assert raw.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    db = open_database(pg_url, create=True)
    try:
        upgrade_schema(db)
        with db.read() as conn:
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
        _fetched(db, "h", 2, [T0 - timedelta(hours=10 - i) for i in range(8)])
        _plan(db, {2: 8})
        assert release_period(db, now=T0).released == 8
        assert len(_due(db)) == 8
    finally:
        db.dispose()


# -- longest unvisited first, and spilling unusable quota ---------------------------------


def test_within_a_bucket_the_k_longest_unvisited_are_released(db: Database) -> None:
    """300 pages of bucket 6 on 10 hosts, last fetched at only 5 distinct times, importance
    with ties and unknowns: the quota of 100 takes exactly the 100 first in (last fetch,
    importance desc with unknown last, id) order that their hosts allow (one host allows 8
    requests in the period), on either engine; the candidate read's LIMIT (quota + 64) cuts
    through a tie, so the store's order must be the selection's."""
    rng = random.Random(6)
    ids: list[int] = []
    for h in range(10):
        ids += _fetched(db, f"k{h}", 6, [T0 - DAY] * 30)
    fetched = {pid: T0 - timedelta(hours=rng.choice([30, 20, 10, 5, 1])) for pid in ids}
    importance = {pid: rng.choice([None, 0.1, 0.2, 0.3]) for pid in ids}
    with db.write() as conn:
        for pid in ids:
            conn.execute(
                update(PAGES)
                .where(PAGES.c.id == pid)
                .values(last_fetch_at=fetched[pid], importance=importance[pid])
            )
        conn.execute(
            update(HOSTS).where(HOSTS.c.origin == "http://k3.test").values(crawl_delay=10_800.0)
        )
    host_of = {pid: k // 30 for k, pid in enumerate(ids)}
    _plan(db, {6: 100})
    summary = release_period(db, now=T0, candidate_factor=1.0)
    order = sorted(
        ids,
        key=lambda p: (fetched[p], importance[p] is None, -(importance[p] or 0.0), p),
    )
    expected: list[int] = []
    room = {h: 86_400 for h in range(10)} | {3: 8}
    for pid in order:
        if len(expected) < 100 and room[host_of[pid]] > 0:
            room[host_of[pid]] -= 1
            expected.append(pid)
    assert summary.by_bucket == {6: 100} and summary.shortfalls == ()
    assert set(_due(db)) == set(expected)
    assert all(T0 <= t < T0 + DAY for t in _due(db).values())


def _spill_world(db: Database) -> dict[str, list[int]]:
    """Bucket 3: 4 fetchable pages, 3 that are not (blocked, error); bucket 5: 5 pages;
    bucket 8: 10 pages (no quota); bucket 2: 10 pages; 5 new pages; each bucket's pages
    fetched an hour apart, bucket 8's the oldest."""
    world = {
        "b3": _fetched(db, "three", 3, [T0 - timedelta(hours=10 + i) for i in range(4)]),
        "b5": _fetched(db, "five", 5, [T0 - timedelta(hours=20 + i) for i in range(5)]),
        "b8": _fetched(db, "eight", 8, [T0 - timedelta(hours=40 + i) for i in range(10)]),
        "b2": _fetched(db, "two", 2, [T0 - timedelta(hours=30 + i) for i in range(10)]),
        "new": _pages(db, "fresh", 5, next_due_at=None),
    }
    (blocked, error, _) = _fetched(db, "odd", 3, [T0 - 5 * DAY] * 3)
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == blocked).values(status="blocked"))
        conn.execute(update(PAGES).where(PAGES.c.id == error).values(status="error"))
        conn.execute(update(PAGES).where(PAGES.c.id == _).values(status="blocked"))
    return world


def test_unusable_quota_spills_to_the_next_best_buckets_by_value(db: Database) -> None:
    """Bucket 3's quota of 10 has 4 fetchable pages: the other 6 crawls go, in the same
    period, to bucket 5 (the next value: its 3 pages past its quota of 2) and bucket 8 (no
    quota, next value: its 3 longest unvisited), not to bucket 2 or new pages, worth less:
    the release spends the period's capacity (16 crawls)."""
    world = _spill_world(db)
    _plan(
        db,
        {3: 10, 5: 2, 2: 3},
        new_pages=1,
        marginal={3: 5.0, 5: 4.0, 8: 3.0, 2: 1.0},
        new_marginal=0.5,
    )
    summary = release_period(db, now=T0)
    assert summary.by_bucket == {3: 4, 5: 2, 2: 3} and summary.new_pages == 1
    assert summary.spilled == {5: 3, 8: 3} and summary.unspent == 0
    assert summary.released == 16 == 10 + 2 + 3 + 1
    due = set(_due(db))
    assert set(world["b3"]) | set(world["b5"]) <= due
    b8_oldest = sorted(world["b8"], reverse=True)[:3]  # fetched longest ago: the last added
    assert set(world["b8"]) & due == set(b8_oldest)
    assert len(set(world["b2"]) & due) == 3 and len(set(world["new"]) & due) == 1
    assert summary.spill_line() == (
        "plan 1 period 1: spilled 6 crawls that quotas could not use to bucket 5 +3, "
        "bucket 8 +3; 0 unspent"
    )


def test_a_plan_of_new_pages_spills_to_every_small_bucket_it_values(db: Database) -> None:
    """A plan that gives all 30 crawls of the period to new pages when 4 are left (the
    live-loop test's cold start on a web of 80 pages): the other 26 go to the re-crawl
    candidates by value, though every bucket holds only 3 pages. Counting an unread bucket
    as holding all the reads asked of it, each round read one more bucket and the release
    stopped at 4 + 7 pages."""
    buckets = list(range(100, 112))
    for k, b in enumerate(buckets):
        _fetched(db, f"b{b}", b, [T0 - timedelta(hours=1 + k + 20 * i) for i in range(3)])
    _pages(db, "fresh", 4, next_due_at=None)
    _plan(
        db,
        {},
        new_pages=30,
        marginal={b: 10.0 - 0.1 * k for k, b in enumerate(buckets)},
        new_marginal=20.0,
    )
    summary = release_period(db, now=T0)
    assert summary.new_pages == 4
    assert summary.released == 30 and summary.unspent == 0
    # by value: the first 8 buckets in full, 2 of the 9th
    assert summary.spilled == {**{b: 3 for b in buckets[:8]}, buckets[8]: 2}


def test_without_values_unusable_quota_goes_to_the_longest_unvisited(db: Database) -> None:
    """A plan without marginal values (published before them): the crawls quotas cannot use
    go to the pages unvisited longest, whatever their bucket, then to new pages; what finds
    no page is reported unspent."""
    world = _spill_world(db)
    _plan(db, {3: 10, 2: 3}, periods=3)
    first = release_period(db, now=T0)
    assert first.by_bucket == {3: 4, 2: 3} and (first.spilled, first.unspent) == ({8: 6}, 0)
    assert set(world["b8"]) & set(_due(db)) == set(sorted(world["b8"], reverse=True)[:6])
    # Period 2 (period 1's pages still queued): bucket 3 has none left; 10 crawls spill to
    # the 10 longest unvisited of buckets 8 (4 left), 2 (4 past its quota) and 5 (2 of 5).
    second = release_period(db, now=T0 + DAY)
    assert second.by_bucket == {3: 0, 2: 3} and second.released == 13
    assert (second.spilled, second.unspent) == ({8: 4, 2: 4, 5: 2}, 0)
    # Period 3: only bucket 5's last 3 pages and the 5 new pages are left for 13 crawls.
    third = release_period(db, now=T0 + 2 * DAY)
    assert third.by_bucket == {3: 0, 2: 0} and third.released == 8
    assert (third.spilled, third.unspent) == ({5: 3, NEW_PAGES: 5}, 5)
    assert third.spill_line() == (
        "plan 1 period 3: spilled 8 crawls that quotas could not use to new pages +5, "
        "bucket 5 +3; 5 unspent"
    )
    assert set(world["new"]) <= set(_due(db))


def test_the_plan_keeps_its_marginal_values(db: Database) -> None:
    from store import plan_detail
    from store.releases import period_work

    version = _plan(db, {3: 4}, new_pages=2, marginal={3: 0.25, 9: 1.5}, new_marginal=0.75)
    detail = plan_detail(db, version)
    assert detail.marginal == {(t, b): v for t in (1, 2) for b, v in {3: 0.25, 9: 1.5}.items()}
    assert detail.new_marginal == {1: 0.75, 2: 0.75}
    assert detail.quotas == {(t, b): q for t in (1, 2) for b, q in {3: 4, 9: 0}.items()}
    work = period_work(db, version, T0)
    assert work is not None
    assert (work.marginal, work.new_marginal) == ({3: 0.25, 9: 1.5}, 0.75)
    plain = _plan(db, {3: 4})
    assert plan_detail(db, plain).marginal == {} and plan_detail(db, plain).new_marginal == {}


def _bound_setup(db: Database) -> tuple[list[int], list[int], int]:
    """Bucket 9: 40 pages on host ``slow`` (robots.txt: 3 h between requests, 8 a day) and
    40 on ``free``, all overdue, the slow host's the oldest (so bucket 9's own read holds
    them too)."""
    slow = _fetched(db, "slow", 9, [T0 - 12 * DAY - timedelta(minutes=i) for i in range(40)])
    free = _fetched(db, "free", 9, [T0 - 10 * DAY - timedelta(minutes=i) for i in range(40)])
    with db.write() as conn:
        conn.execute(
            update(HOSTS).where(HOSTS.c.origin == "http://slow.test").values(crawl_delay=10_800.0)
        )
        host = conn.execute(
            select(HOSTS.c.id).where(HOSTS.c.origin == "http://slow.test")
        ).scalar_one()
    return slow, free, int(host)


def test_a_bound_hosts_classes_take_their_own_pages_and_quota(db: Database) -> None:
    """A plan whose solver record names a politeness-bound host keys that host's classes
    past 255 (class 9 of bound host 0: 9 + 256): its pages, read with their bucket and with
    their host, are candidates of that class only, once each, and fill its quota; bucket
    9's quota goes to the other host's pages, however older the bound host's are."""
    slow, free, host = _bound_setup(db)
    solver = {"bound_hosts": {"host_id": [host], "cap": [8.0]}}
    fractions = {9: 0.5, 265: 5 / 40}
    _plan(db, {9: 20, 265: 5}, marginal={9: 1.0, 265: 2.0}, fractions=fractions, solver=solver)
    summary = release_period(db, now=T0, min_delay_seconds=0.0)
    assert summary.by_bucket == {9: 20, 265: 5}, summary
    assert summary.shortfalls == () and summary.spilled == {}
    due = set(_due(db))
    assert len(due & set(slow)) == 5 and len(due & set(free)) == 20
    assert set(slow[-5:]) <= due  # the host's longest unvisited


def test_a_bound_class_over_its_hosts_room_spills_the_rest(db: Database) -> None:
    """A bound host's quota beyond what its delay allows in the period: the host takes its
    8, the shortfall is named, and the rest goes by value to the other host's pages."""
    slow, free, host = _bound_setup(db)
    solver = {"bound_hosts": {"host_id": [host], "cap": [8.0]}}
    fractions = {9: 0.25, 265: 12 / 40}
    _plan(db, {9: 10, 265: 12}, marginal={9: 1.0, 265: 2.0}, fractions=fractions, solver=solver)
    summary = release_period(db, now=T0, min_delay_seconds=0.0)
    assert summary.by_bucket == {9: 10, 265: 8}, summary
    assert [(s.bucket, s.reason) for s in summary.shortfalls] == [(265, HOST_CAPACITY)]
    assert summary.spilled == {9: 4} and summary.released == 22
    due = set(_due(db))
    assert len(due & set(slow)) == 8 and len(due & set(free)) == 14


def test_a_plan_naming_no_bound_host_keeps_split_classes_out(db: Database) -> None:
    """Quotas of classes past 255 need the bound hosts that key them: a plan without them
    is refused with a line that says so."""
    with pytest.raises(InvalidPlanError, match=r"quotas need classes 0\.\.255"):
        _plan(db, {9: 1, 265: 1})
    _bound_setup(db)
    with pytest.raises(InvalidPlanError, match=r"classes 0\.\.511"):
        _plan(db, {9: 1, 777: 1}, solver={"bound_hosts": {"host_id": [1], "cap": [1.0]}})


def test_quota_classes_past_255_migrate_in_place_on_a_populated_store(db: Database) -> None:
    """Migration 0021 widens quotas.bucket (SQLite: the table's SQL text rewritten, as the
    plans' immutability triggers and foreign keys want): a store with a published plan
    upgrades in place, then takes a bound host's classes; down again, those quotas go and
    the old check is back."""
    from alembic import command
    from sqlalchemy import func, insert, text
    from sqlalchemy.exc import IntegrityError

    from store.models import QUOTAS
    from store.schema import _config

    def quota_rows() -> list[tuple[int, int]]:
        with db.read() as conn:
            rows = conn.execute(select(QUOTAS.c.bucket, QUOTAS.c.pages).order_by(QUOTAS.c.bucket))
            return [tuple(r) for r in rows]

    cfg = _config()
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0020")
    version = _plan(db, {9: 3}, periods=1)
    row = {"plan_id": version, "period": 1, "pages": 1, "fraction": 0.1}
    with pytest.raises(IntegrityError), db.write() as conn:
        conn.execute(insert(QUOTAS).values(bucket=265, **row))
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0021")
    with db.write() as conn:  # a pooled connection sees the new constraint
        conn.execute(insert(QUOTAS).values(bucket=265, **row))
    with pytest.raises(IntegrityError), db.write() as conn:
        conn.execute(insert(QUOTAS).values(bucket=-2, **row))
    assert quota_rows() == [(9, 3), (265, 1)]
    if db.dialect == "sqlite":
        with db.read() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
            assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0020")
    assert quota_rows() == [(9, 3)]
    with db.read() as conn:
        assert conn.execute(select(func.count()).select_from(QUOTAS)).scalar_one() == 1
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def test_a_plan_whose_periods_ended_stays_in_force(db: Database) -> None:
    """No newer plan when the last period ends (a late or failed nightly run): the last
    period repeats, numbered on, one period long each, with its quotas, and is released
    once per such period; the plan's own periods read back unchanged; nothing before the
    plan's first period."""
    old = _fetched(db, "a", 3, [T0 - timedelta(days=20, minutes=i) for i in range(30)])
    version = _plan(db, {3: 2}, periods=2, fractions={3: 0.1}, marginal={3: 1.0})
    assert release_period(db, now=T0 - timedelta(hours=1)).status == "no current period"
    later = T0 + 2 * DAY + timedelta(hours=30)  # 1.25 periods past the plan's end
    summary = release_period(db, now=later, min_delay_seconds=0.0)
    assert (summary.status, summary.period) == ("released", 4)
    assert (summary.starts_at, summary.ends_at) == (T0 + 3 * DAY, T0 + 4 * DAY)
    assert summary.released == 2 and set(_due(db)) <= set(old)
    again = release_period(db, now=later + timedelta(hours=1), min_delay_seconds=0.0)
    assert again.status == "already released"
    assert extend_plan_in_force(db, version, later) == 4  # written once
    nxt = release_period(db, now=later + DAY, min_delay_seconds=0.0)
    assert (nxt.status, nxt.period, nxt.released) == ("released", 5, 2)
    detail = plan_detail(db, version)
    assert set(detail.new_pages) == {1, 2} and {t for t, _ in detail.quotas} == {1, 2}
    uses = plan_period_use(db, version, now=later + DAY + timedelta(hours=1))
    assert [(u.period, u.released) for u in uses] == [(1, None), (2, None), (4, 2), (5, 2)]


def test_a_late_plan_charges_what_the_plan_in_force_released_in_its_window(
    db: Database,
) -> None:
    """The plan in force released the window (its last period repeated); a plan published
    during that window releases only what its quotas hold beyond those pages, and its next
    period in full."""
    _fetched(db, "a", 3, [T0 - timedelta(days=20, minutes=i) for i in range(30)])
    _plan(db, {3: 2}, periods=1, fractions={3: 0.1}, marginal={3: 1.0})
    later = T0 + DAY + timedelta(hours=2)  # the plan's period 2, repeated
    assert release_period(db, now=later, min_delay_seconds=0.0).released == 2
    version = publish_plan(
        db,
        PlanDraft(
            starts_at=T0 + DAY,
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=t,
                    starts_at=T0 + t * DAY,
                    ends_at=T0 + (t + 1) * DAY,
                    capacity=1000.0,
                    new_pages=0,
                    quotas={3: 5},
                    fractions={3: 0.2},
                )
                for t in (1, 2)
            ],
            inputs={},
            solver={},
        ),
        now=later,
    )
    finish_page_schedule(db, version, objective="test", pages=0, now=later)
    late = release_period(db, now=later + timedelta(hours=1), min_delay_seconds=0.0)
    assert (late.status, late.plan, late.period) == ("released", version, 1)
    assert (late.older_plans, late.released) == (2, 3)
    nxt = release_period(db, now=T0 + 2 * DAY + timedelta(minutes=1), min_delay_seconds=0.0)
    assert (nxt.status, nxt.plan, nxt.period, nxt.released, nxt.older_plans) == (
        "released",
        version,
        2,
        5,
        0,
    )
