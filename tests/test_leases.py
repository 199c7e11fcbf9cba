"""The lease queue's contract, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import timedelta

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


def test_gc_paused_restores_the_collector_as_it_found_it() -> None:
    """The lease and the release pause the cyclic collector; it comes back on when it was on
    (even after an error), stays off when the caller had turned it off, and an inner pause
    does not turn it back on early."""
    import gc

    from store.database import gc_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_gc_paused_from_overlapping_threads_leaves_the_collector_on() -> None:
    """Pauses that overlap in time, from several threads (the API server leases from a
    pool), end with the collector on: the last pause to end restores it."""
    import gc
    import threading

    from store.database import gc_paused

    inside = threading.Barrier(4)
    leave = [threading.Event() for _ in range(4)]

    def pause(i: int) -> None:
        with gc_paused():
            inside.wait(timeout=10)
            leave[i].wait(timeout=10)

    threads = [threading.Thread(target=pause, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for i in (2, 0, 3):  # end in another order than they began; one still paused
        leave[i].set()
        threads[i].join(timeout=10)
        assert not gc.isenabled()
    leave[1].set()
    threads[1].join(timeout=10)
    assert gc.isenabled()


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_gc_paused_overlapping_past_the_limit_collects_the_cycles_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pauses kept under way for good by overlapping callers would leave reference cycles to
    pile up: past ``GC_PAUSE_LIMIT_S`` the pause that ends collects them, once, outside the
    pauses' lock (the collector stays off for the others); within the limit it does not."""
    import gc
    import weakref
    from types import SimpleNamespace

    from store import database

    clock = [1000.0]
    monkeypatch.setattr(database, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    locked: list[bool] = []  # at each collection's start: was the pauses' lock held?

    def collecting(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            locked.append(database._GC_PAUSE.locked())

    def cycle_garbage() -> weakref.ref[_Cycle]:
        ref = weakref.ref(_Cycle())
        assert ref() is not None  # alive: nothing but a collection frees it
        return ref

    gc.callbacks.append(collecting)
    try:
        with database.gc_paused():
            clock[0] += database.GC_PAUSE_LIMIT_S - 1
            with database.gc_paused():
                within = cycle_garbage()
            assert within() is not None and locked == []  # within the limit: no collection
            clock[0] += 2
            with database.gc_paused():
                past = cycle_garbage()
            assert past() is None and within() is None  # collected on the way ...
            assert locked == [False]  # ... once, outside the lock
            with database.gc_paused():  # the limit counts again from that collection
                pass
            assert locked == [False] and not gc.isenabled()
    finally:
        gc.callbacks.remove(collecting)
    assert gc.isenabled()
