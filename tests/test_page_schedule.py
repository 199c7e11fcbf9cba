"""The nightly page schedule on the store (SQLite and PostgreSQL): plan quotas to due times."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import select, update

from planner.schedules.optimal import bucket_intervals, xyleme_intervals
from service.page_schedule import schedule_pages
from service.pipeline import release_period
from store import Database, LeasePolicy, LeaseQueue, PlanDraft, PlanPeriodDraft, publish_plan
from store.due_times import HORIZON_DAYS, withdraw_due_pages, write_page_schedule
from store.models import PAGES, RELEASED_PAGES
from store.releases import release_pages
from tests.conftest import T0
from tests.test_releases import _pages

DAY = timedelta(days=1)


def _publish(db: Database, quotas: dict[int, list[int]], period_days: float = 1.0) -> int:
    periods = len(next(iter(quotas.values())))
    step = timedelta(days=period_days)
    return publish_plan(
        db,
        PlanDraft(
            starts_at=T0,
            period_days=period_days,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=t,
                    starts_at=T0 + (t - 1) * step,
                    ends_at=T0 + t * step,
                    capacity=1_000.0,
                    new_pages=0,
                    quotas={b: q[t - 1] for b, q in quotas.items()},
                )
                for t in range(1, periods + 1)
            ],
            inputs={},
            solver={},
        ),
        now=T0 - DAY,
    )


def _rows(db: Database, ids: list[int]) -> list[tuple[float | None, object]]:
    with db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.id, PAGES.c.refresh_interval, PAGES.c.scheduled_at)
            .where(PAGES.c.id.in_(ids))
            .order_by(PAGES.c.id)
        ).all()
    return [(r.refresh_interval, r.scheduled_at) for r in rows]


def test_no_plan_schedules_nothing(db: Database) -> None:
    summary = schedule_pages(db)
    assert summary.plan is None and summary.scheduled == 0


def test_bucket_quota_split_by_xyleme_rule(db: Database) -> None:
    rates = [0.5, 0.5, 0.5, 0.6]  # changes per day, one bucket
    importance = [1.0, 4.0, None, 2.0]
    last = T0 - timedelta(hours=6)
    ids = _pages(db, "a", 4, status="ok", bucket=7, last_fetch_at=last, fetches=3)
    with db.write() as conn:
        for pid, r, imp in zip(ids, rates, importance, strict=True):
            conn.execute(update(PAGES).where(PAGES.c.id == pid).values(rate=r, importance=imp))
    slow = _pages(db, "b", 2, status="ok", bucket=2, last_fetch_at=last, rate=0.01, fetches=2)
    never = _pages(db, "c", 2)  # status new: not the page schedule's business
    # bucket 7: 2 + 1 crawls over 2 periods of 2 days = 1.5 crawls per period; bucket 2: none
    _publish(db, {7: [2, 1], 2: [0, 0]}, period_days=2.0)

    summary = schedule_pages(db)

    assert summary.scheduled == 4 and summary.unscheduled == 2
    assert summary.crawls_per_period == {7: 1.5}
    lam = np.array(rates) * 2.0
    weights = np.array([1.0, 4.0, 1.0, 2.0])
    expected_days = xyleme_intervals(lam, weights, 1.5) * 2.0
    got = _rows(db, ids)
    np.testing.assert_allclose([g[0] for g in got], expected_days, rtol=1e-12)
    for (_, at), want in zip(got, expected_days, strict=True):
        assert at is not None
        assert abs((at - last).total_seconds() - want * 86_400) < 1e-3
    assert np.sum(2.0 / expected_days) == pytest.approx(1.5)  # crawls per period spent
    assert _rows(db, slow) == [(None, None), (None, None)]
    assert _rows(db, never) == [(None, None), (None, None)]


def test_schedule_then_release_then_lease(db: Database) -> None:
    # 6 pages of bucket 5 fetched 3 days ago on 3 hosts; the plan crawls 3 per period: the
    # release picks the 3 whose interval (by importance) has run out longest ago.
    last = T0 - 3 * DAY
    ids = []
    for h in range(3):
        ids += _pages(
            db,
            f"h{h}",
            2,
            status="ok",
            bucket=5,
            last_fetch_at=last,
            rate=1.0,
            fetches=4,
            next_due_at=None,
        )
    importance = [8.0, 1.0, 6.0, 1.0, 4.0, 1.0]
    with db.write() as conn:
        for pid, imp in zip(ids, importance, strict=True):
            conn.execute(update(PAGES).where(PAGES.c.id == pid).values(importance=imp))
    _publish(db, {5: [3, 3]})
    schedule_pages(db)
    summary = release_period(db, now=T0 + timedelta(minutes=1), min_delay_seconds=0.5)
    assert summary.status == "released" and summary.by_bucket == {5: 3}
    queue = LeaseQueue(db, LeasePolicy(max_urls=100, max_urls_per_host=100))
    leased = {
        p.page_id for lease in queue.lease("w", now=T0 + timedelta(hours=23)) for p in lease.pages
    }
    assert leased == {ids[0], ids[2], ids[4]}  # the important ones are the most overdue


def test_bucket_intervals_fill_missing_values() -> None:
    rate = np.array([np.nan, 2.0, 2.0, np.nan])
    importance = np.array([1.0, np.nan, 1.0, 1.0])
    np.testing.assert_allclose(bucket_intervals(rate, importance, 2.0), 2.0)
    assert np.isinf(bucket_intervals(rate, importance, 0.0)).all()
    np.testing.assert_allclose(bucket_intervals(np.full(3, np.nan), np.ones(3), 3.0), 1.0)


# -- races and edges (each once seen to go wrong) ----------------------------------------------


def test_release_waits_for_the_page_schedule(db: Database) -> None:
    _pages(db, "a", 3, status="ok", bucket=5, rate=1.0, fetches=1, last_fetch_at=T0 - 3 * DAY)
    _publish(db, {5: [2, 2]})
    now = T0 + timedelta(minutes=1)
    assert release_period(db, now=now).status == "not scheduled yet"
    schedule_pages(db)
    assert release_period(db, now=now).status == "released"


def test_withdrawal_never_undoes_a_release(db: Database) -> None:
    ids = _pages(db, "a", 3, status="ok", bucket=5, rate=1.0, fetches=1, last_fetch_at=T0 - DAY)
    version = _publish(db, {5: [2, 2]})
    schedule_pages(db)
    release_period(db, now=T0 + timedelta(minutes=1))
    due = _due_ids(db)
    assert len(due) == 2
    assert withdraw_due_pages(db, version) == 0  # a late or repeated schedule run
    assert _due_ids(db) == due
    assert set(due) <= set(ids)


def test_backlog_of_the_old_regime_is_withdrawn(db: Database) -> None:
    new = _pages(db, "n", 30, next_due_at=T0)  # seeded before any plan: due
    old = _pages(
        db, "o", 5, status="ok", bucket=9, fetches=2, last_fetch_at=T0 - DAY, next_due_at=T0 + DAY
    )  # due again under the revisit rule
    errors = _pages(db, "e", 2, status="error", fetches=1, last_fetch_at=T0, next_due_at=T0)
    _publish(db, {9: [0, 0]})
    summary = schedule_pages(db)
    assert summary.withdrawn == len(new) + len(old)
    assert set(_due_ids(db)) == set(errors)  # retries stay the worker's


def test_a_page_reported_meanwhile_keeps_its_fresher_schedule(db: Database) -> None:
    (pid,) = _pages(db, "a", 1, status="ok", bucket=5, fetches=3, last_fetch_at=T0 - DAY)
    fresh = T0 + timedelta(hours=20)
    with db.write() as conn:  # a report after the schedule read the page
        conn.execute(update(PAGES).values(fetches=4, scheduled_at=fresh))
    stale = (T0 - DAY).timestamp()
    assert write_page_schedule(db, [pid], [1.0], [stale + 86_400], [3]) == 0
    assert _rows(db, [pid]) == [(None, fresh)]
    assert write_page_schedule(db, [pid], [1.0], [stale + 86_400], [4]) == 1


def test_a_page_fetched_between_read_and_release_is_not_released_again(db: Database) -> None:
    (pid,) = _pages(db, "a", 1, status="ok", bucket=5, fetches=3, next_due_at=None)
    _publish(db, {5: [1, 1]})
    with db.write() as conn:
        conn.execute(update(PAGES).values(fetches=4))  # the report between read and write
    released = release_pages(
        db, 1, 1, page_ids=[pid], due_epoch_s=[T0.timestamp()], fetches=[3], now=T0
    )
    assert released == 0 and _due_ids(db) == []


def test_intervals_past_the_horizon_mean_never(db: Database) -> None:
    ids = _pages(db, "a", 2, status="ok", bucket=5, fetches=1, last_fetch_at=T0)
    huge = [HORIZON_DAYS * 10, 1e12]
    write_page_schedule(db, ids, huge, [T0.timestamp() + d * 86_400 for d in huge], [1, 1])
    assert _rows(db, ids) == [(None, None), (None, None)]


def _due_ids(db: Database) -> list[int]:
    """Pages the lease queue will hand out: due in ``pages`` or released (queued)."""
    with db.read() as conn:
        due = set(
            conn.execute(select(PAGES.c.id).where(PAGES.c.next_due_at.is_not(None))).scalars()
        )
        due.update(conn.execute(select(RELEASED_PAGES.c.page_id)).scalars())
    return sorted(due)
