"""Hosts whose robots.txt can't be fetched after N tries are given up (issue 27, "Scope").

A real crawl over loopback HTTP: a seed site links to a host whose port has nothing listening
(connection refused) and to one whose robots.txt answers 503. Each is asked for robots.txt
``robots_give_up_after`` times (``robots_retry`` apart: 30 minutes in production, a fraction
of a second here), then given up: recorded on the host, every page of it out of the due set,
so that ``crawl --until-idle`` ends; ``status`` shows it on a line of its own. A reachable
robots.txt resets the count. The store's part (the give-back, links found later, a seed that
takes the host back) runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.remote import RemoteWorkQueue
from crawler.urls import normalize_url
from crawler.worker import CrawlSettings, CrawlStats, run_crawl, run_workers
from service.api.app import ApiSettings
from service.cli.app import app
from service.config import load_settings
from service.crawl_progress import progress_line
from store import (
    Database,
    FetchResult,
    HostUpdate,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    read_status,
    recompute_ready,
)
from store.models import HOSTS, PAGES
from store.status import work_remaining
from store.types import utcnow
from tests.api_server import TOKEN, ApiServer
from tests.conftest import T0
from tests.loopback import PagesHost, html_page

GIVE_UP_AFTER = 3
RETRY = timedelta(seconds=0.3)


def _closed_port() -> int:
    """A loopback port with nothing listening (bound, then closed: connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def servers() -> Iterator[list[PagesHost]]:
    started: list[PagesHost] = []
    yield started
    for server in started:
        server.stop()


def _crawl(db: Database, *, seconds: float = 60.0, **settings: Any) -> tuple[CrawlStats, float]:
    """An ``--until-idle`` crawl (bounded at ``seconds``); its counters and seconds taken."""
    crawl_settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.01, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True, connect_timeout=2.0),
        max_urls=50,
        idle_sleep=0.05,
        robots_give_up_after=settings.pop("give_up_after", GIVE_UP_AFTER),
        robots_retry=RETRY,
        **settings,
    )
    policy = LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=4)
    started = time.monotonic()
    stats = run_crawl(
        db,
        lambda: LeaseQueue(db, policy),
        crawl_settings,
        workers=2,
        until_idle=True,
        seconds=seconds,
    )
    return stats, time.monotonic() - started


def _host(db: Database, origin: str) -> Any:
    with db.read() as conn:
        return conn.execute(select(HOSTS).where(HOSTS.c.origin == origin)).one()


def _pages_of(db: Database, origin: str) -> list[Any]:
    with db.read() as conn:
        host = conn.execute(select(HOSTS.c.id).where(HOSTS.c.origin == origin)).scalar_one()
        return list(conn.execute(select(PAGES).where(PAGES.c.host_id == host)).all())


def test_unreachable_hosts_are_given_up_and_the_crawl_ends(
    db: Database, backend_url: str, servers: list[PagesHost]
) -> None:
    failing = PagesHost(robots_statuses=[503] * 10).start()  # robots.txt: 5xx, unreachable
    refused = f"http://127.0.0.1:{_closed_port()}"  # nothing listening
    seed = PagesHost().start()
    servers += [seed, failing]
    seed.pages["/index.html"] = html_page(
        "/p1.html",
        f"{failing.origin}/a.html",
        f"{failing.origin}/b.html",
        f"{refused}/x.html",
    )
    seed.pages["/p1.html"] = html_page("/index.html", f"{refused}/y.html")
    failing.pages["/a.html"] = html_page("/b.html")
    add_pages(db, [(seed.url("/index.html"), seed.origin)])

    stats, seconds = _crawl(db)

    # The crawl ended by itself: about (N - 1) retries of RETRY, not the 60 s bound.
    assert seconds < 30, seconds
    assert stats.given_up == 2
    assert "given up 2 hosts (robots.txt unreachable)" in progress_line(stats)
    # robots.txt asked exactly N times, no page of the host ever requested.
    assert failing.log == ["/robots.txt"] * GIVE_UP_AFTER
    for origin, paths in (
        (failing.origin, {"/a.html", "/b.html"}),
        (refused, {"/x.html", "/y.html"}),
    ):
        host = _host(db, origin)
        assert host.robots_failures == GIVE_UP_AFTER, origin
        assert host.given_up_at is not None and host.ready_at is None, origin
        pages = _pages_of(db, origin)
        assert {p.url for p in pages} == {normalize_url(origin + path) for path in paths}
        for page in pages:  # unfetchable, not due, never fetched, not leased
            assert page.status == "blocked" and page.next_due_at is None, page.url
            assert page.fetches == 0 and page.lease_id is None, page.url
    seed_host = _host(db, seed.origin)
    assert seed_host.robots_failures == 0 and seed_host.given_up_at is None
    assert {p.status for p in _pages_of(db, seed.origin)} == {"ok"}
    assert not work_remaining(db)

    st = read_status(db)
    assert (st.given_up_hosts, st.given_up_pages) == (2, 4)
    assert st.unfetchable == {"robots": 0}  # given-up pages are counted on their own line
    shown = CliRunner().invoke(app, ["status", "--db", backend_url])
    assert shown.exit_code == 0, shown.output
    assert (
        "given up 2 hosts (robots.txt unreachable), 4 pages not crawled; seed a URL to try again"
        in shown.output
    )


def test_remote_workers_give_hosts_up_through_the_worker_api(
    db: Database, servers: list[PagesHost]
) -> None:
    """The count and the give-up travel through the worker API (lease out, finish in)."""
    failing = PagesHost(robots_statuses=[503] * 10).start()
    seed = PagesHost().start()
    servers += [seed, failing]
    seed.pages["/index.html"] = html_page(f"{failing.origin}/a.html")
    add_pages(db, [(seed.url("/index.html"), seed.origin)])
    api_settings = ApiSettings(
        tokens=(TOKEN,),
        policy=LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=4),
        release_every=None,
        allow_private=True,
    )
    settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.01, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True),
        idle_sleep=0.05,
        robots_retry=RETRY,
    )
    with ApiServer(db, api_settings) as api:
        stats = run_workers(
            lambda: RemoteWorkQueue(api.url, TOKEN),
            settings,
            workers=2,
            until_idle=True,
            seconds=60,
        )
    assert stats.given_up == 1
    assert failing.log == ["/robots.txt"] * GIVE_UP_AFTER
    host = _host(db, failing.origin)
    assert host.robots_failures == GIVE_UP_AFTER and host.given_up_at is not None
    assert [(p.status, p.next_due_at) for p in _pages_of(db, failing.origin)] == [("blocked", None)]


def test_a_reachable_robots_txt_resets_the_count(db: Database, servers: list[PagesHost]) -> None:
    """Two failures, a success, two failures again: never N in a row, never given up."""
    flaky = PagesHost(robots_statuses=[503, 503]).start()
    servers.append(flaky)
    flaky.pages["/index.html"] = html_page("/p1.html")
    flaky.pages["/p1.html"] = html_page("/index.html")
    add_pages(db, [(flaky.url("/index.html"), flaky.origin)])

    _crawl(db)
    host = _host(db, flaky.origin)
    assert host.robots_failures == 0 and host.given_up_at is None
    assert {p.status for p in _pages_of(db, flaky.origin)} == {"ok"}
    assert flaky.log.count("/robots.txt") == 3

    # A day later: robots.txt expired, the pages due again; it fails twice more, then answers.
    flaky.robots_statuses[:] = [503, 503]
    past = utcnow() - timedelta(seconds=1)
    with db.write() as conn:
        conn.execute(update(HOSTS).values(robots_expires_at=past))
        conn.execute(update(PAGES).values(next_due_at=past))
    recompute_ready(db)
    stats, _ = _crawl(db)
    host = _host(db, flaky.origin)
    assert stats.given_up == 0
    assert host.robots_failures == 0 and host.given_up_at is None
    assert flaky.log.count("/robots.txt") == 6
    assert {p.fetches for p in _pages_of(db, flaky.origin)} == {2}


def test_never_given_up_when_the_setting_is_zero(db: Database, servers: list[PagesHost]) -> None:
    """``robots_give_up_after = 0``: the failures are counted, the host is never given up
    (and the crawl runs to its time limit, as it did before hosts were given up)."""
    failing = PagesHost(robots_statuses=[503] * 1000).start()
    servers.append(failing)
    add_pages(db, [(failing.url("/a.html"), failing.origin)])
    stats, seconds = _crawl(db, give_up_after=0, seconds=2.0)
    assert seconds >= 2.0 and stats.given_up == 0
    host = _host(db, failing.origin)
    tries = failing.log.count("/robots.txt")
    assert tries > GIVE_UP_AFTER and host.robots_failures == tries
    assert host.given_up_at is None
    assert work_remaining(db, now=host.backoff_until)


# -- the store's part, on SQLite and PostgreSQL --------------------------------------------------

ORIGIN = "http://gone.test"
OTHER = "http://fine.test"


def _seed(db: Database, now: datetime) -> None:
    add_pages(
        db,
        [(f"{ORIGIN}/{i}.html", ORIGIN) for i in range(5)] + [(f"{OTHER}/0.html", OTHER)],
        now=now,
    )


def _lease_host(queue: LeaseQueue, origin: str, now: datetime) -> Any:
    leases = queue.lease("w", now=now)
    (lease,) = [x for x in leases if x.origin == origin]
    for other in leases:
        if other is not lease:
            queue.release(other.lease_id, now=now)
    return lease


def test_the_count_travels_with_the_lease_and_a_success_resets_it(db: Database) -> None:
    _seed(db, T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls_per_host=2))
    now = T0
    for expected in (1, 2):
        lease = _lease_host(queue, ORIGIN, now)
        assert lease.robots_failures == expected - 1
        retry = now + timedelta(minutes=30)
        queue.finish(
            lease.lease_id,
            [],
            HostUpdate(next_fetch_at=now, backoff_until=retry, robots_failures=expected),
            now=now,
        )
        assert _host(db, ORIGIN).robots_failures == expected
        assert _host(db, ORIGIN).given_up_at is None
        now = retry
    assert work_remaining(db, now=now)  # still due: not given up
    lease = _lease_host(queue, ORIGIN, now)
    assert lease.robots_failures == 2
    queue.finish(lease.lease_id, [], HostUpdate(robots_failures=0), now=now)
    assert _host(db, ORIGIN).robots_failures == 0
    # A HostUpdate without the count leaves it as it is.
    lease = _lease_host(queue, ORIGIN, now)
    queue.release(lease.lease_id, HostUpdate(robots_failures=1), now=now)
    queue.release(_lease_host(queue, ORIGIN, now).lease_id, HostUpdate(), now=now)
    assert _host(db, ORIGIN).robots_failures == 1


@pytest.mark.parametrize("hand_back", ["finish", "release"])
def test_a_given_up_host_leaves_the_due_set_whole(db: Database, hand_back: str) -> None:
    """Every page of the host: leased or not, due or waiting (no due time), queued or not."""
    _seed(db, T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls_per_host=2))
    with db.write() as conn:  # one page fetched before, waiting for a release (no due time)
        conn.execute(
            update(PAGES)
            .where(PAGES.c.url == f"{ORIGIN}/4.html")
            .values(status="ok", fetches=1, last_fetch_at=T0, next_due_at=None)
        )
    lease = _lease_host(queue, ORIGIN, T0)
    assert len(lease.pages) == 2  # three pages of the host are not in the lease
    host = HostUpdate(
        next_fetch_at=T0,
        backoff_until=T0 + timedelta(minutes=30),
        robots_status=599,
        robots_failures=GIVE_UP_AFTER,
        given_up_at=T0,
    )
    if hand_back == "finish":
        queue.finish(lease.lease_id, [], host, now=T0)
    else:
        queue.release(lease.lease_id, host, now=T0)

    gone = _host(db, ORIGIN)
    assert gone.given_up_at == T0 and gone.robots_failures == GIVE_UP_AFTER
    assert gone.ready_at is None and gone.lease_id is None
    pages = _pages_of(db, ORIGIN)
    assert len(pages) == 5
    for page in pages:
        assert (page.status, page.next_due_at, page.lease_id) == ("blocked", None, None), page.url
    # The other host's page is still due: there is work, and it is all the queue hands out.
    later = T0 + timedelta(days=2)
    assert work_remaining(db, now=later)
    leases = queue.lease("w", now=later)
    assert [x.origin for x in leases] == [OTHER]
    fetched = [FetchResult(p.page_id, later, "ok", http_status=200) for p in leases[0].pages]
    queue.finish(leases[0].lease_id, fetched, now=later)  # due again in a day
    assert not work_remaining(db, now=later) and not queue.work_remaining(now=later)
    st = read_status(db, now=later)
    assert (st.given_up_hosts, st.given_up_pages, st.unfetchable) == (1, 5, {"robots": 0})

    # A link found to the host later stays given up: unfetchable, not due.
    queue.add_pages([(f"{ORIGIN}/new.html", ORIGIN)], now=later)
    new = [p for p in _pages_of(db, ORIGIN) if p.url.endswith("/new.html")]
    assert [(p.status, p.next_due_at) for p in new] == [("blocked", None)]
    assert not queue.work_remaining(now=later)

    # A user seeding a URL of it takes it back: robots.txt asked again, its pages due now.
    seeded = add_pages(db, [(f"{ORIGIN}/0.html", ORIGIN)], now=later)
    assert (seeded.added, seeded.known) == (0, 1)
    back = _host(db, ORIGIN)
    assert back.given_up_at is None and back.robots_failures == 0
    assert back.robots_expires_at == later and back.backoff_until is None
    assert {p.next_due_at for p in _pages_of(db, ORIGIN)} == {later}
    lease = _lease_host(queue, ORIGIN, later)
    assert lease.robots_failures == 0 and lease.pages
    assert read_status(db, now=later).given_up_hosts == 0


def test_a_late_give_back_gives_nothing_up(db: Database) -> None:
    """A worker whose lease expired and whose host went to another worker does not give
    the host up under the newer lease."""
    _seed(db, T0)
    queue = LeaseQueue(db, LeasePolicy(lease_seconds=60, max_urls_per_host=10))
    old = _lease_host(queue, ORIGIN, T0)
    later = T0 + timedelta(minutes=5)
    new = _lease_host(queue, ORIGIN, later)
    assert new.lease_id != old.lease_id
    queue.finish(
        old.lease_id, [], HostUpdate(robots_failures=GIVE_UP_AFTER, given_up_at=T0), now=later
    )
    assert _host(db, ORIGIN).given_up_at is None
    assert {p.status for p in _pages_of(db, ORIGIN)} == {"new"}


def test_the_setting_and_its_default() -> None:
    values = load_settings({}, environ={}).values
    assert values["crawl.robots_give_up_after"] == CrawlSettings().robots_give_up_after == 3
    env = {"CRAWLPLAN_ROBOTS_GIVE_UP_AFTER": "0"}
    assert load_settings({}, environ=env).crawl_settings().robots_give_up_after == 0
    with pytest.raises(ValueError, match="robots_give_up_after"):
        CrawlSettings(robots_give_up_after=-1)


def test_a_give_up_and_a_report_moving_cash_to_its_pages_do_not_deadlock(
    pg_store: Database,
) -> None:
    """PostgreSQL: host a is given up (every page of it written) while host b's report moves
    cash to a's pages, whose ids lie on both sides of b's page. Both lock all the pages they
    write in one statement, in id order: one waits for the other, neither deadlocks."""
    from tests.test_lock_order import _deadlocks, _meet_at, _ok, _run_both, _split

    db = pg_store
    for url in ("http://a.test/1", "http://b.test/1", "http://a.test/2"):  # ids 1, 2, 3
        add_pages(db, [(url, url.rsplit("/", 1)[0])], now=T0)
    with db.write() as conn:  # a's lease holds page 3 alone (page 1 waits for a release)
        conn.execute(update(PAGES).values(cash=1.0))
        conn.execute(update(PAGES).where(PAGES.c.id == 1).values(next_due_at=None))
    queue = LeaseQueue(db, LeasePolicy(max_hosts=2, max_urls_per_host=1))
    leases = {lease.origin: lease for lease in queue.lease("w", now=T0)}
    a, b = leases["http://a.test"], leases["http://b.test"]
    assert [p.page_id for p in a.pages] == [3]
    deadlocks = _deadlocks(db)
    _meet_at(db, lambda s: "FROM pages" in s and "FOR" in s and "UPDATE" in s, before=False)
    give_up = HostUpdate(robots_failures=GIVE_UP_AFTER, given_up_at=T0)
    _run_both(
        lambda: queue.finish(a.lease_id, [], give_up, now=T0),
        lambda: queue.report(
            b.lease_id,
            [_ok(b.pages[0].page_id, ("http://a.test/1", "http://a.test/2"))],
            now=T0,
            cash_split=_split,
        ),
    )
    assert deadlocks == []
    pages = _pages_of(db, "http://a.test")
    assert [(p.status, p.next_due_at) for p in pages] == [("blocked", None)] * 2
    assert _host(db, "http://a.test").given_up_at == T0
