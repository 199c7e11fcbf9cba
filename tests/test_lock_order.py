"""PostgreSQL: concurrent crawl reports take their row locks in one order, so they wait for
one another instead of deadlocking (store.leases, store.pages, store.importance).

Each test runs two reports in two threads and holds both at the point where the old code's
lock orders crossed; a deadlock would show as an error with SQLSTATE 40P01 (which
``Database.run_write`` retries, hiding it but for a second's wait), so the tests listen for
errors on the engine.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select

from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    add_pages,
)
from store.importance import spread_virtual_cash
from store.models import PAGES
from tests.conftest import T0

DAY = timedelta(days=1)


def _split(cash: list[float], links: list[int]) -> list[float]:
    return [c / n if n else 0.0 for c, n in zip(cash, links, strict=True)]


def _deadlocks(db: Database) -> list[str]:
    """SQLSTATEs of deadlock errors raised on ``db`` from now on."""
    seen: list[str] = []

    @event.listens_for(db.engine, "handle_error")
    def _on_error(context: Any) -> None:
        state = getattr(context.original_exception, "sqlstate", None)
        if state == "40P01":
            seen.append(state)

    return seen


def _meet_at(db: Database, when: Callable[[str], bool], before: bool) -> None:
    """Hold each thread at the first statement ``when`` accepts (before or after it runs)
    until the other thread gets there too, or for 3 s (when the other one is waiting for a
    lock this one holds, which is what the tests want)."""
    barrier = threading.Barrier(2)
    local = threading.local()

    def meet(statement: str) -> None:
        if when(statement) and not getattr(local, "met", False):
            local.met = True
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=3)

    @event.listens_for(db.engine, "before_cursor_execute" if before else "after_cursor_execute")
    def _on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        meet(statement)


def _run_both(first: Callable[[], object], second: Callable[[], object]) -> list[object]:
    out: list[object] = []
    errors: list[BaseException] = []

    def run(target: Callable[[], object]) -> None:
        try:
            out.append(target())
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(out) == 2
    return out


def _ok(page_id: int, outlinks: tuple[str, ...] = ()) -> FetchResult:
    return FetchResult(
        page_id=page_id,
        fetched_at=T0,
        status="ok",
        http_status=200,
        outlinks=outlinks,
    )


def _cash(db: Database) -> float:
    with db.read() as conn:
        return float(conn.execute(select(func.sum(PAGES.c.cash))).scalar_one())


def test_reports_moving_cash_to_each_others_pages_do_not_deadlock(pg_store: Database) -> None:
    """Report A (host a) moves its page's cash to b's page, report B (host b) to a's; each
    holds its own page. Both lock every page they write, in id order, before writing."""
    urls = ["http://a.test/p", "http://b.test/p"]
    add_pages(pg_store, [(u, u.rsplit("/", 1)[0]) for u in urls], now=T0)
    with pg_store.write() as conn:  # some cash to move
        conn.execute(PAGES.update().values(cash=1.0))
    queue = LeaseQueue(pg_store, LeasePolicy(max_hosts=2))
    leases = {lease.origin: lease for lease in queue.lease("w", now=T0)}
    a, b = leases["http://a.test"], leases["http://b.test"]
    before = _cash(pg_store)
    deadlocks = _deadlocks(pg_store)
    _meet_at(pg_store, lambda s: "FROM pages" in s and "FOR" in s and "UPDATE" in s, before=False)
    found = _run_both(
        lambda: queue.report(
            a.lease_id, [_ok(a.pages[0].page_id, (urls[1],))], now=T0, cash_split=_split
        ),
        lambda: queue.report(
            b.lease_id, [_ok(b.pages[0].page_id, (urls[0],))], now=T0, cash_split=_split
        ),
    )
    assert deadlocks == []
    assert all(outcome.recorded == 1 for outcome in found)  # type: ignore[attr-defined]
    # Cash is conserved; the second report gave what the first had just moved to it too.
    with pg_store.read() as conn:
        cash, history = conn.execute(
            select(func.sum(PAGES.c.cash), func.sum(PAGES.c.history))
        ).one()
    assert (cash, history) == (pytest.approx(before), pytest.approx(3.0))


def test_reports_discovering_the_same_new_urls_do_not_deadlock(pg_store: Database) -> None:
    """Two reports discover the same 2,000 new URLs, given in opposite orders, and insert
    them at the same moment: both insert in URL order, so one waits for the other."""
    add_pages(
        pg_store,
        [("http://a.test/p", "http://a.test"), ("http://b.test/p", "http://b.test")],
        now=T0,
    )
    queue = LeaseQueue(pg_store, LeasePolicy(max_hosts=2))
    leases = {lease.origin: lease for lease in queue.lease("w", now=T0)}
    assert len(leases) == 2
    # Host c known already (both reports would otherwise queue on inserting its row first).
    add_pages(pg_store, [("http://c.test/", "http://c.test")], now=T0 + DAY)
    new = [(f"http://c.test/n{i:04d}", "http://c.test") for i in range(2_000)]
    deadlocks = _deadlocks(pg_store)
    _meet_at(pg_store, lambda s: s.lstrip().startswith("INSERT INTO pages"), before=True)

    def report(origin: str, discovered: list[tuple[str, str]]) -> object:
        lease = leases[origin]
        return queue.report(
            lease.lease_id,
            [_ok(lease.pages[0].page_id)],
            now=T0 + timedelta(seconds=1),
            discovered=discovered,
        )

    found = _run_both(
        lambda: report("http://a.test", new), lambda: report("http://b.test", new[::-1])
    )
    assert deadlocks == []
    assert sorted(outcome.discovered for outcome in found) == [0, 2_000]  # type: ignore[attr-defined]
    with pg_store.read() as conn:
        assert conn.execute(select(func.count()).select_from(PAGES)).scalar_one() == 2_003


def test_a_report_and_the_virtual_pages_gift_do_not_deadlock(pg_store: Database) -> None:
    """The nightly importance stage locks the pages table against other writers (SHARE ROW
    EXCLUSIVE) and updates every page. A report that held its page rows with only the row
    lock's weak table lock let it in, then waited for the table while the gift waited for
    its rows; the report takes the writers' table lock first now, so the gift waits."""
    urls = ["http://a.test/p", "http://b.test/p"]
    add_pages(pg_store, [(u, u.rsplit("/", 1)[0]) for u in urls], now=T0)
    with pg_store.write() as conn:
        conn.execute(PAGES.update().values(cash=1.0))
    queue = LeaseQueue(pg_store, LeasePolicy(max_hosts=2))
    a = next(lease for lease in queue.lease("w", now=T0) if lease.origin == "http://a.test")
    deadlocks = _deadlocks(pg_store)
    barrier = threading.Barrier(2)
    local = threading.local()

    def meet(pause: float) -> None:
        if not getattr(local, "met", False):
            local.met = True
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=3)
            time.sleep(pause)

    @event.listens_for(pg_store.engine, "after_cursor_execute")
    def _report_locked(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FOR NO KEY UPDATE" in statement:
            meet(0.5)  # the gift's LOCK TABLE goes first

    @event.listens_for(pg_store.engine, "before_cursor_execute")
    def _gift_starts(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "SHARE ROW EXCLUSIVE" in statement:
            meet(0.0)

    def gift(pages: int, cash: float) -> float:
        return (pages - cash) / pages

    _run_both(
        lambda: queue.report(
            a.lease_id, [_ok(a.pages[0].page_id, (urls[1],))], now=T0, cash_split=_split
        ),
        lambda: spread_virtual_cash(pg_store, gift),
    )
    assert deadlocks == []
    assert _cash(pg_store) == pytest.approx(2.0)  # the virtual page gave what it had


def test_a_late_give_back_and_a_new_lease_of_the_host_do_not_deadlock(pg_store: Database) -> None:
    """Lease A of a host expired; another worker's lease takes the host (locked) and the
    pages again, while A's worker gives the host back. The give-back holds the host before
    it locks its pages, so it waits for the new lease (or the lease skips the host); locking
    the pages first, it then waited for the host while the lease waited for the pages."""
    add_pages(pg_store, [(f"http://a.test/p{i}", "http://a.test") for i in range(3)], now=T0)
    first = LeaseQueue(pg_store, LeasePolicy(lease_seconds=60))
    (old,) = first.lease("w1", now=T0)
    later = T0 + timedelta(minutes=2)  # the lease has expired
    deadlocks = _deadlocks(pg_store)
    _meet_at(pg_store, lambda s: "SKIP LOCKED" in s or "FOR NO KEY UPDATE" in s, before=False)
    second = LeaseQueue(pg_store, LeasePolicy(lease_seconds=60))
    found = _run_both(
        lambda: second.lease("w2", now=later),
        lambda: first.release(old.lease_id, now=later),
    )
    assert deadlocks == []
    (leases,) = [f for f in found if isinstance(f, list)]
    # The new lease took the pages, or (the give-back holding the host first) skipped the
    # host, whose pages are then free for the next lease: none is lost either way.
    if not leases:
        leases = second.lease("w2", now=later + timedelta(hours=1))
    assert sorted(p.page_id for lease in leases for p in lease.pages) == sorted(
        p.page_id for p in old.pages
    )
