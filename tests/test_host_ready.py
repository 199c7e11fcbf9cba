"""``hosts.ready_at``: leases pick hosts by when they next have work (SQLite and PostgreSQL).

The invariant (:mod:`store.host_ready`): a host with a due page or a queued page has a
``ready_at`` no later than its earliest due time (not before its politeness and backoff
times), so that no due page is ever missed; and a lease reads the hosts it takes, not every
idle host.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from service.pipeline import release_period
from store import (
    Database,
    FetchResult,
    HostUpdate,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    open_database,
    recompute_ready,
    upgrade_schema,
)
from store.due_times import withdraw_due_pages
from store.host_ready import lower_ready_to, refresh_ready_everywhere
from store.models import HOSTS, PAGES, RELEASED_PAGES
from store.pages import add_pages_in
from store.urgent import URGENT_DUE, request_urgent
from tests.conftest import T0
from tests.test_releases import BIG, DAY, _fetched, _lease_all, _plan


def _seed(db: Database, hosts: int, per_host: int, *, due: bool = True, name: str = "h") -> None:
    pairs = [
        (f"http://{name}{h}.test/p{i}", f"http://{name}{h}.test")
        for h in range(hosts)
        for i in range(per_host)
    ]
    add_pages(db, pairs, now=T0, due=due)


def _exact(db: Database) -> dict[int, datetime | None]:
    """Each host's true ready time, from its pages and queued pages (computed here)."""
    with db.read() as conn:
        hosts = conn.execute(
            select(HOSTS.c.id, HOSTS.c.next_fetch_at, HOSTS.c.backoff_until, HOSTS.c.leased_until)
        ).all()
        dues = conn.execute(
            select(PAGES.c.host_id, PAGES.c.next_due_at).where(PAGES.c.next_due_at.is_not(None))
        ).all()
        queued = conn.execute(select(RELEASED_PAGES.c.host_id, RELEASED_PAGES.c.due_at)).all()
    first: dict[int, datetime] = {}
    for host, due in [*dues, *queued]:
        first[host] = min(first.get(host, due), due)
    out: dict[int, datetime | None] = {}
    for host, next_fetch, backoff, leased in hosts:
        due = first.get(host)
        out[host] = None if due is None else max(due, next_fetch, backoff or due, leased or due)
    return out


def _stored(db: Database) -> dict[int, datetime | None]:
    with db.read() as conn:
        return dict(conn.execute(select(HOSTS.c.id, HOSTS.c.ready_at)).tuples().all())


def _check(db: Database) -> None:
    """No host with work has a ready time later than its true one, or none."""
    stored = _stored(db)
    for host, exact in _exact(db).items():
        if exact is not None:
            assert stored[host] is not None and stored[host] <= exact, (host, stored[host], exact)


def _ok(page_id: int, at: datetime, **kw: object) -> FetchResult:
    return FetchResult(page_id=page_id, fetched_at=at, status="ok", http_status=200, **kw)  # type: ignore[arg-type]


def test_new_pages_make_their_hosts_ready_exactly(db: Database) -> None:
    _seed(db, hosts=3, per_host=2)
    _seed(db, hosts=2, per_host=2, due=False, name="idle")
    assert _stored(db) == _exact(db)
    assert sorted(v is None for v in _stored(db).values()) == [False] * 3 + [True] * 2


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_writer_keeps_ready_at_a_lower_bound_and_no_due_page_is_missed(
    db: Database, seed: int
) -> None:
    """Random leases, reports (with and without the worker's retry time), give-backs with
    politeness and backoff, urgent requests and new pages; the invariant after each step, and
    at the end every due page is leased."""
    rng = random.Random(seed)
    _seed(db, hosts=6, per_host=5)
    queue = LeaseQueue(db, LeasePolicy(max_urls=8, max_urls_per_host=3, max_hosts=3))
    now = T0
    held: list[tuple[int, list[int]]] = []
    for step in range(40):
        now += timedelta(seconds=rng.choice([0, 1, 30, 600, 4000]))
        op = rng.random()
        if op < 0.4:
            held += [
                (lease.lease_id, [p.page_id for p in lease.pages])
                for lease in queue.lease(f"w{step % 2}", now=now)
            ]
        elif op < 0.75 and held:
            lease_id, pages = held.pop(rng.randrange(len(held)))
            done = pages[: rng.randint(0, len(pages))]
            results = [
                _ok(
                    pid,
                    now,
                    next_due_at=rng.choice([None, now + timedelta(seconds=rng.randint(1, 900))]),
                )
                for pid in done
            ]
            politeness = HostUpdate(
                next_fetch_at=now + timedelta(seconds=rng.choice([0, 5, 120])),
                backoff_until=rng.choice([None, now + timedelta(minutes=30)]),
            )
            if rng.random() < 0.2:
                queue.report(lease_id, results, now=now)  # the lease just expires
            else:
                queue.finish(lease_id, results, politeness, now=now)
        elif op < 0.85:
            origin = f"http://h{rng.randrange(8)}.test"
            pairs = [(f"{origin}/new{step}-{i}", origin) for i in range(2)]
            add_pages(db, pairs, now=now)
        else:
            with db.read() as conn:
                urls = list(conn.execute(select(PAGES.c.url).limit(40)).scalars())
            pick = rng.sample(urls, 2)
            request_urgent(db, [(u, u.rsplit("/", 1)[0]) for u in pick], source="api", now=now)
        _check(db)
    with db.read() as conn:
        due = set(
            conn.execute(select(PAGES.c.id).where(PAGES.c.next_due_at.is_not(None))).scalars()
        )
    later = now + 10 * DAY  # every lease expired, every politeness delay and backoff passed
    assert _lease_all(db, later) == due


def test_a_release_makes_its_hosts_ready_and_a_withdrawal_sets_them_right(db: Database) -> None:
    _seed(db, hosts=2, per_host=3)  # pre-plan due pages: ready at T0
    ids = _fetched(db, "q", 3, [T0 - timedelta(hours=3 - i) for i in range(4)])
    plan = _plan(db, {3: 4})
    assert withdraw_due_pages(db, plan, now=T0) == 6
    # Their hosts have nothing due any more: no ready time, not a stale one.
    assert _stored(db) == _exact(db)
    release_period(db, now=T0)
    _check(db)
    with db.read() as conn:
        host = conn.execute(select(PAGES.c.host_id).where(PAGES.c.id == ids[0])).scalar_one()
    assert _stored(db)[host] is not None
    assert _lease_all(db, T0 + DAY - timedelta(seconds=1)) == set(ids)


def test_a_release_that_withdraws_a_backlog_sets_its_hosts_right(db: Database) -> None:
    """The first release under a plan withdraws the never-fetched backlog it read and did not
    choose (no page schedule ran to withdraw it first): those hosts are set right by the
    release itself, none left stale for the leases to find."""
    _seed(db, hosts=30, per_host=2)  # pre-plan backlog: 60 new pages due at T0
    fetched = _fetched(db, "q", 3, [T0 - timedelta(hours=3 - i) for i in range(3)])
    _plan(db, {3: 3}, new_pages=4)
    summary = release_period(db, now=T0 + timedelta(hours=1))
    assert summary.released == 7 and summary.withdrawn == 56
    _check(db)
    with db.read() as conn:
        backlog = set(
            conn.execute(select(HOSTS.c.id).where(HOSTS.c.origin.like("http://h%"))).scalars()
        )
    stored, exact = _stored(db), _exact(db)
    assert len(backlog) == 30 and {h: stored[h] for h in backlog} == {h: exact[h] for h in backlog}
    with db.read() as conn:
        queued = set(conn.execute(select(RELEASED_PAGES.c.host_id)).scalars())
    # Only the hosts of the chosen new pages have a ready time: no stale one left.
    assert {h for h in backlog if stored[h] is not None} == backlog & queued != set()
    leased = _lease_all(db, T0 + DAY - timedelta(seconds=1))
    assert len(leased) == 7 and set(fetched) <= leased


def test_give_back_waits_for_politeness_and_backoff(db: Database) -> None:
    _seed(db, hosts=1, per_host=3)
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1))
    (lease,) = queue.lease("w", now=T0)
    queue.finish(
        lease.lease_id,
        [_ok(lease.pages[0].page_id, T0)],
        HostUpdate(next_fetch_at=T0 + timedelta(seconds=10)),
        now=T0,
    )
    assert _stored(db)[lease.host_id] == T0 + timedelta(seconds=10)
    assert queue.lease("w", now=T0 + timedelta(seconds=5)) == []
    (again,) = queue.lease("w", now=T0 + timedelta(seconds=10))
    queue.finish(again.lease_id, [], HostUpdate(backoff_until=T0 + timedelta(hours=1)), now=T0)
    assert _stored(db)[lease.host_id] == T0 + timedelta(hours=1)
    assert queue.lease("w", now=T0 + timedelta(minutes=59)) == []
    assert len(queue.lease("w", now=T0 + timedelta(hours=1))) == 1


def test_stale_hosts_are_set_right_and_never_block_a_lease(db: Database) -> None:
    """Hosts whose work went away behind the store's back (due times cleared by hand) stand
    first in ready order; a lease still finds the host with work behind 50 of them, and
    leaves them with no ready time."""
    _seed(db, hosts=50, per_host=1, name="gone")
    _seed(db, hosts=1, per_host=2, name="busy")
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.url.like("http://gone%")).values(next_due_at=None))
        conn.execute(
            update(HOSTS)
            .where(HOSTS.c.origin.like("http://busy%"))
            .values(ready_at=T0 + timedelta(seconds=1))
        )
    queue = LeaseQueue(db, LeasePolicy(max_urls=10, max_hosts=2))
    (lease,) = queue.lease("w", now=T0 + timedelta(seconds=1))
    assert lease.origin == "http://busy0.test" and len(lease.pages) == 2
    stored = _stored(db)
    assert [stored[h] for h in stored if h != lease.host_id] == [None] * 50
    with db.write() as conn:
        # nothing left to set right
        assert refresh_ready_everywhere(conn, db.backend.host_ready) == 0


def test_recompute_ready_after_due_times_written_by_hand(db: Database) -> None:
    _seed(db, hosts=2, per_host=1, due=False)
    with db.write() as conn:
        conn.execute(update(PAGES).values(next_due_at=T0))
    assert LeaseQueue(db).lease("w", now=T0) == []  # the store was not told
    assert recompute_ready(db) == 2
    assert _stored(db) == _exact(db)
    assert len(LeaseQueue(db).lease("w", now=T0)) == 2


def test_a_lease_walks_the_ready_index_not_the_idle_hosts(db: Database) -> None:
    """3,000 hosts with nothing due are not in the ready index at all; the host query reads
    the index in ready order (no scan of the hosts table, no sort)."""
    _seed(db, hosts=3_000, per_host=1, due=False, name="idle")
    _seed(db, hosts=1, per_host=1)
    queue = LeaseQueue(db, BIG)
    stmt = queue._sql.hosts_due
    with db.read() as conn:
        if db.dialect == "postgresql":
            conn.exec_driver_sql("ANALYZE hosts")
        compiled = stmt.compile(dialect=conn.dialect)
        bound = compiled.construct_params({"now": T0, "limit": 20})
        convert = compiled._bind_processors
        values = {k: convert[k](v) if k in convert else v for k, v in bound.items()}
        args = (
            tuple(values[k] for k in compiled.positiontup or ()) if compiled.positional else values
        )
        prefix = "EXPLAIN QUERY PLAN " if db.dialect == "sqlite" else "EXPLAIN "
        rows = conn.exec_driver_sql(prefix + str(compiled), args).all()  # type: ignore[arg-type]
        plan = "\n".join(str(row[-1]) for row in rows)
    assert "ix_hosts_ready" in plan, plan
    assert "Seq Scan" not in plan and "SCAN hosts\n" not in plan + "\n", plan
    assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan
    (lease,) = queue.lease("w", now=T0)
    assert lease.origin == "http://h0.test"


def test_the_migration_computes_every_hosts_ready_time(db: Database) -> None:
    """Down to 0010 (no ready_at) with due pages, queued pages, a host in backoff and an idle
    host; up again: every host's ready time is the exact one."""
    from alembic import command

    from store.schema import _config, upgrade_schema

    _seed(db, hosts=2, per_host=2)
    _seed(db, hosts=1, per_host=1, due=False, name="idle")
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_hosts=1))
    (lease,) = queue.lease("w", now=T0)
    queue.finish(lease.lease_id, [], HostUpdate(backoff_until=T0 + DAY), now=T0)
    ids = _fetched(db, "q", 3, [T0 - timedelta(hours=1)])
    _plan(db, {3: 1})
    release_period(db, now=T0)
    expected = _exact(db)
    assert sum(v is not None for v in expected.values()) == 3
    assert expected[lease.host_id] == T0 + DAY
    cfg = _config()
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0010")
    upgrade_schema(db)
    assert _stored(db) == expected
    assert _lease_all(db, T0 + timedelta(hours=1)) >= set(ids)


def test_leased_hosts_step_aside_and_a_stale_host_in_front_is_set_right(db: Database) -> None:
    """A lease moves its hosts to their lease's end in ready order (so that 1,000 leased hosts
    do not stand first); a stale host in front is set right and the host behind it leased in
    the same call."""
    pairs = [(f"http://{n}.test/p", f"http://{n}.test") for n in ("l1", "l2", "s")]
    add_pages(db, pairs, now=T0)
    add_pages(db, [("http://w.test/p", "http://w.test")], now=T0 + timedelta(minutes=2))
    held = LeaseQueue(db, LeasePolicy(lease_seconds=3600, max_hosts=2))
    leased = held.lease("a", now=T0)
    assert {lease.origin for lease in leased} == {"http://l1.test", "http://l2.test"}
    assert {_stored(db)[lease.host_id] for lease in leased} == {T0 + timedelta(hours=1)}
    short = LeaseQueue(db, LeasePolicy(lease_seconds=60, max_hosts=1))
    (s,) = short.lease("b", now=T0)
    assert s.origin == "http://s.test"
    short.report(s.lease_id, [_ok(s.pages[0].page_id, T0)], now=T0)  # then worker b dies
    # Ready order at 12:05: s (its lease's end, 12:01; nothing due), w (12:02), l1, l2.
    (w,) = short.lease("c", now=T0 + timedelta(minutes=5))
    assert w.origin == "http://w.test"
    assert _stored(db)[s.host_id] == T0 + DAY  # its next due time, set right on the way


def _in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(target()), daemon=True)
    thread.start()
    return thread, out


def test_a_new_page_and_a_give_back_at_once_lose_no_work(pg_url: str) -> None:
    """PostgreSQL, READ COMMITTED: another worker's report adds a page of a host (its
    transaction still open) while the host's lease is finished. The give-back cannot see the
    new page: it does not wait for it either, and leaves the host the lower bound its
    politeness gives instead of recomputing it from a snapshot without the page."""
    db = open_database(pg_url, create=True)
    upgrade_schema(db)
    try:
        queue = LeaseQueue(db, LeasePolicy())
        add_pages(db, [("http://a.test/p0", "http://a.test")], now=T0)
        (lease,) = queue.lease("w", now=T0)
        t1 = T0 + timedelta(seconds=1)
        polite = HostUpdate(next_fetch_at=t1 + timedelta(seconds=2))
        with db.engine.connect() as other:
            tx = other.begin()
            add_pages_in(db, other, [("http://a.test/p1", "http://a.test")], now=t1)
            finish, _ = _in_thread(
                lambda: queue.finish(
                    lease.lease_id, [_ok(lease.pages[0].page_id, t1)], polite, now=t1
                )
            )
            finish.join(10)
            assert not finish.is_alive()  # writers never wait for each other
            tx.commit()
        _check(db)
        assert _stored(db) == {lease.host_id: t1 + timedelta(seconds=2)}
        assert queue.lease("w", now=t1 + timedelta(seconds=1)) == []  # politeness holds
        (again,) = queue.lease("w", now=t1 + timedelta(seconds=2))
        assert [p.url for p in again.pages] == ["http://a.test/p1"]
    finally:
        db.dispose()


def test_an_urgent_page_and_a_lease_at_once_lose_no_work(pg_url: str) -> None:
    """PostgreSQL: a stale host (its lease expired after its page was reported) while a page of
    it joins the urgent lane (transaction still open): a lease skips the locked host instead of
    setting it right from a snapshot without the urgent page; the page is leased next."""
    db = open_database(pg_url, create=True)
    upgrade_schema(db)
    try:
        queue = LeaseQueue(db, LeasePolicy(lease_seconds=300))
        add_pages(db, [("http://a.test/p0", "http://a.test")], now=T0)
        (lease,) = queue.lease("w", now=T0)
        pid = lease.pages[0].page_id
        queue.report(lease.lease_id, [_ok(pid, T0)], now=T0)
        now = T0 + timedelta(minutes=10)  # the lease expired: the host is stale
        with db.engine.connect() as other:
            tx = other.begin()
            moved = (
                other.execute(
                    update(PAGES)
                    .where(PAGES.c.id == pid)
                    .values(next_due_at=URGENT_DUE)
                    .returning(PAGES.c.host_id)
                )
                .scalars()
                .all()
            )
            lower_ready_to(other, db.backend.host_ready, moved, URGENT_DUE)
            leasing, leased = _in_thread(lambda: queue.lease("w", now=now))
            leasing.join(10)
            assert leased == [[]]  # the host is locked: skipped, not set right
            tx.commit()
        (urgent,) = queue.lease("w", now=now)
        assert [p.page_id for p in urgent.pages] == [pid]
    finally:
        db.dispose()
