"""The lease queue's contract, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from store import (
    Database,
    FetchResult,
    HostUpdate,
    InvalidReportError,
    LeaseNotFoundError,
    LeasePolicy,
    LeaseQueue,
    add_pages,
)
from store.models import Host, Observation, Page
from tests.conftest import T0, orm_all, orm_one


def _seed(db: Database, hosts: int, per_host: int) -> None:
    pairs = [
        (f"http://h{h}.test/p{i}", f"http://h{h}.test")
        for h in range(hosts)
        for i in range(per_host)
    ]
    add_pages(db, pairs, now=T0)


def _ok(page_id: int, at: object, **kw: object) -> FetchResult:
    return FetchResult(page_id=page_id, fetched_at=at, status="ok", http_status=200, **kw)  # type: ignore[arg-type]


def test_lease_groups_by_host_and_respects_limits(db: Database) -> None:
    _seed(db, hosts=4, per_host=10)
    queue = LeaseQueue(db, LeasePolicy(max_urls=25, max_urls_per_host=8, max_hosts=10))
    leases = queue.lease("w1", now=T0)
    assert sum(len(lease.pages) for lease in leases) == 25
    assert all(len(lease.pages) <= 8 for lease in leases)
    assert len({lease.host_id for lease in leases}) == len(leases)
    for lease in leases:
        assert all(p.url.startswith(lease.origin + "/") for p in lease.pages)
        assert lease.expires_at == T0 + timedelta(seconds=queue.policy.lease_seconds)


def test_a_leased_host_is_not_leased_to_another_worker(db: Database) -> None:
    _seed(db, hosts=2, per_host=10)
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    first = queue.lease("w1", max_urls=5, now=T0)
    assert len(first) == 1
    second = queue.lease("w2", max_urls=100, now=T0)
    assert {lease.host_id for lease in second}.isdisjoint({first[0].host_id})
    assert queue.lease("w3", now=T0) == []  # both hosts are held


def test_report_records_once_and_updates_the_page(db: Database) -> None:
    _seed(db, hosts=1, per_host=3)
    queue = LeaseQueue(db, LeasePolicy(revisit_after=timedelta(days=2)))
    (lease,) = queue.lease("w1", now=T0)
    at = T0 + timedelta(seconds=5)
    results = [_ok(p.page_id, at, signature="abc", etag='"e1"', bytes=100) for p in lease.pages]
    outcome = queue.report(lease.lease_id, results, now=at)
    assert (outcome.recorded, outcome.duplicates, outcome.late) == (3, 0, 0)
    again = queue.report(lease.lease_id, results, now=at)
    assert (again.recorded, again.duplicates) == (0, 3)
    with db.read() as conn:
        assert conn.execute(select(func.count()).select_from(Observation)).scalar_one() == 3
        page = orm_one(db, select(Page).where(Page.id == lease.pages[0].page_id))
    assert page.status == "ok" and page.fetches == 1 and page.last_fetch_at == at
    assert page.etag == '"e1"' and page.signature == "abc"
    assert page.next_due_at == at + timedelta(days=2)
    assert page.lease_id is None and page.leased_until is None


def test_second_fetch_records_previous_fetch_and_change(db: Database) -> None:
    _seed(db, hosts=1, per_host=1)
    queue = LeaseQueue(db, LeasePolicy(revisit_after=timedelta(hours=1)))
    (lease,) = queue.lease("w1", now=T0)
    pid = lease.pages[0].page_id
    queue.report(lease.lease_id, [_ok(pid, T0, signature="s1")], now=T0)
    queue.release(lease.lease_id, now=T0)
    t1 = T0 + timedelta(hours=2)
    (lease2,) = queue.lease("w1", now=t1)
    assert lease2.pages[0].signature == "s1"  # the worker compares against it
    queue.report(lease2.lease_id, [_ok(pid, t1, signature="s2", changed=True)], now=t1)
    obs = orm_all(db, select(Observation).order_by(Observation.fetched_at))
    page = orm_one(db, select(Page))
    assert [o.previous_fetch_at for o in obs] == [None, T0]
    assert [o.changed for o in obs] == [None, True]
    assert page.changes == 1 and page.fetches == 2 and page.last_change_at == t1


def test_explicit_next_due_and_not_modified_keep_validators(db: Database) -> None:
    _seed(db, hosts=1, per_host=1)
    queue = LeaseQueue(db)
    (lease,) = queue.lease("w1", now=T0)
    pid = lease.pages[0].page_id
    queue.report(lease.lease_id, [_ok(pid, T0, signature="s1", etag='"v1"')], now=T0)
    queue.release(lease.lease_id, now=T0)
    t1 = T0 + timedelta(days=1)
    (lease2,) = queue.lease("w1", now=t1)
    due = t1 + timedelta(days=9)
    not_modified = FetchResult(
        page_id=pid, fetched_at=t1, status="ok", http_status=304, changed=False, next_due_at=due
    )
    queue.report(lease2.lease_id, [not_modified], now=t1)
    page = orm_one(db, select(Page))
    assert page.etag == '"v1"' and page.signature == "s1" and page.http_status == 304
    assert page.next_due_at == due


def test_release_returns_unreported_pages_and_sets_politeness(db: Database) -> None:
    _seed(db, hosts=1, per_host=4)
    queue = LeaseQueue(db)
    (lease,) = queue.lease("w1", now=T0)
    queue.report(lease.lease_id, [_ok(lease.pages[0].page_id, T0)], now=T0)
    polite = T0 + timedelta(seconds=30)
    returned = queue.release(
        lease.lease_id, HostUpdate(next_fetch_at=polite, crawl_delay=30.0), now=T0
    )
    assert returned == 3
    assert queue.release(lease.lease_id, now=T0) == 0  # idempotent
    assert queue.lease("w2", now=T0 + timedelta(seconds=10)) == []  # not polite yet
    (again,) = queue.lease("w2", now=polite)
    assert len(again.pages) == 3 and again.crawl_delay == 30.0
    with db.read() as conn:
        assert conn.execute(select(Host.crawl_delay)).scalar_one() == 30.0


def test_expired_lease_pages_are_leased_again_and_late_report_counts_once(db: Database) -> None:
    _seed(db, hosts=1, per_host=2)
    queue = LeaseQueue(db, LeasePolicy(lease_seconds=60))
    (dead,) = queue.lease("w-dead", now=T0)
    assert queue.lease("w2", now=T0 + timedelta(seconds=59)) == []
    later = T0 + timedelta(seconds=61)
    (fresh,) = queue.lease("w2", now=later)
    assert [p.page_id for p in fresh.pages] == [p.page_id for p in dead.pages]
    # The "dead" worker was only slow: its report arrives after expiry and is recorded.
    late = queue.report(
        dead.lease_id, [_ok(p.page_id, T0 + timedelta(seconds=30)) for p in dead.pages], now=later
    )
    assert (late.recorded, late.late) == (2, 2)
    assert queue.report(dead.lease_id, [_ok(dead.pages[0].page_id, T0)], now=later).recorded == 0
    with db.read() as conn:
        held = conn.execute(select(Page.lease_id)).scalars().all()
    assert held == [fresh.lease_id, fresh.lease_id]  # the late report did not free w2's lease
    now = later + timedelta(seconds=1)
    queue.report(fresh.lease_id, [_ok(p.page_id, now) for p in fresh.pages], now=now)
    with db.read() as conn:
        assert conn.execute(select(func.count()).select_from(Observation)).scalar_one() == 4
        assert set(conn.execute(select(Page.fetches)).scalars()) == {2}


def test_out_of_order_report_keeps_the_newest_state(db: Database) -> None:
    _seed(db, hosts=1, per_host=1)
    queue = LeaseQueue(db, LeasePolicy(lease_seconds=60))
    (slow,) = queue.lease("slow", now=T0)
    pid = slow.pages[0].page_id
    t_fast = T0 + timedelta(seconds=90)
    (fast,) = queue.lease("fast", now=t_fast)
    queue.report(fast.lease_id, [_ok(pid, t_fast, signature="new")], now=t_fast)
    queue.report(slow.lease_id, [_ok(pid, T0 + timedelta(seconds=10), signature="old")], now=t_fast)
    page = orm_one(db, select(Page))
    obs = orm_all(db, select(Observation).order_by(Observation.fetched_at))
    assert page.signature == "new" and page.last_fetch_at == t_fast and page.fetches == 2
    # previous_fetch_at is what was known when each observation was recorded: the late one
    # looked for an earlier fetch and found none; the newer one was recorded first.
    assert [o.previous_fetch_at for o in obs] == [None, None]


def test_renew_extends_a_live_lease_only(db: Database) -> None:
    _seed(db, hosts=1, per_host=1)
    queue = LeaseQueue(db, LeasePolicy(lease_seconds=60))
    (lease,) = queue.lease("w1", now=T0)
    renewed = queue.renew(lease.lease_id, now=T0 + timedelta(seconds=50))
    assert renewed == T0 + timedelta(seconds=110)
    assert queue.lease("w2", now=T0 + timedelta(seconds=100)) == []
    assert queue.renew(lease.lease_id, now=T0 + timedelta(seconds=200)) is None


def test_bad_reports_are_refused(db: Database) -> None:
    _seed(db, hosts=2, per_host=1)
    queue = LeaseQueue(db, LeasePolicy(max_hosts=1))
    (lease,) = queue.lease("w1", now=T0)
    (other,) = queue.lease("w2", now=T0)
    with pytest.raises(InvalidReportError, match="not pages of that host"):
        queue.report(lease.lease_id, [_ok(other.pages[0].page_id, T0)], now=T0)
    with pytest.raises(LeaseNotFoundError):
        queue.report(99_999, [_ok(lease.pages[0].page_id, T0)], now=T0)
    with pytest.raises(LeaseNotFoundError):
        queue.release(99_999)
    with pytest.raises(ValueError, match="status"):
        FetchResult(page_id=1, fetched_at=T0, status="fine")


def test_pages_with_no_due_time_are_never_leased(db: Database) -> None:
    add_pages(db, [("http://x.test/a", "http://x.test")], now=T0, due=False)
    assert LeaseQueue(db).lease("w1", now=T0 + timedelta(days=365)) == []


def test_host_backoff_blocks_leasing(db: Database) -> None:
    _seed(db, hosts=1, per_host=2)
    queue = LeaseQueue(db)
    (lease,) = queue.lease("w1", now=T0)
    queue.release(
        lease.lease_id,
        HostUpdate(backoff_until=T0 + timedelta(minutes=5), consecutive_errors=1),
        now=T0,
    )
    assert queue.lease("w1", now=T0 + timedelta(minutes=4)) == []
    assert len(queue.lease("w1", now=T0 + timedelta(minutes=5))) == 1


def test_finish_reports_and_releases_in_one_step(db: Database) -> None:
    _seed(db, hosts=1, per_host=3)
    queue = LeaseQueue(db)
    (lease,) = queue.lease("w1", now=T0)
    done = [_ok(p.page_id, T0) for p in lease.pages[:2]]
    polite = T0 + timedelta(seconds=5)
    outcome, returned = queue.finish(lease.lease_id, done, HostUpdate(next_fetch_at=polite), now=T0)
    assert (outcome.recorded, returned) == (2, 1)
    assert queue.finish(lease.lease_id, done, now=T0)[0].duplicates == 2
    (again,) = queue.lease("w2", now=polite)
    assert [p.page_id for p in again.pages] == [lease.pages[2].page_id]


def test_a_lease_leaves_the_garbage_collector_as_the_process_set_it(db: Database) -> None:
    """The store never switches the cyclic collector: it is on during every statement of a
    lease when the process has it on, and stays off when the process turned it off (its
    entry points decide: ``gc.freeze()`` after start-up, say)."""
    import gc

    from sqlalchemy import event

    _seed(db, hosts=1, per_host=3)
    seen: list[bool] = []

    def before(*_args: Any) -> None:
        seen.append(gc.isenabled())

    event.listen(db.engine, "before_cursor_execute", before)
    try:
        assert gc.isenabled()
        (lease,) = LeaseQueue(db).lease("w1", now=T0)
        assert seen and all(seen) and gc.isenabled()
        gc.disable()
        try:
            seen.clear()
            LeaseQueue(db).release(lease.lease_id, now=T0)
            assert seen and not any(seen) and not gc.isenabled()
        finally:
            gc.enable()
    finally:
        event.remove(db.engine, "before_cursor_execute", before)
