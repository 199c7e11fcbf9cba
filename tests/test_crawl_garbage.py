"""A crawl of hosts that answer garbage, over real HTTP on loopback, on SQLite and PostgreSQL.

Host 0 answers every garbage mode on some of its pages, host 1 is well-behaved, and host 2
answers garbage on every page but its home page. Every broken answer must end as an error
observation of the right kind on its own page, complete answers in a broken encoding as
fetched pages (no false change), every good page on every host must be fetched, the host
that keeps answering garbage must be backed off lease after lease, and no worker may die.
Checked against the server's own request log and the web's ground truth.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from crawler.fetch import FetchLimits, FetchOutcome
from crawler.noise import NoiseRules
from crawler.politeness import PolitenessPolicy
from crawler.urls import origin_of
from crawler.worker import CrawlSettings, CrawlStats, CrawlWorker, run_crawl
from scenarios.synthetic_web import (
    ERROR_GARBAGE,
    GARBAGE_MODES,
    LENIENT_GARBAGE,
    HostBehavior,
    SyntheticWeb,
    WebConfig,
)
from scenarios.web_server import LoggedRequest, WebServer
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    open_database,
    recompute_ready,
    upgrade_schema,
)
from store.models import Observation, Page
from store.types import utcnow
from tests.conftest import fresh_pg_database, orm_all
from tests.test_fetch import GARBAGE_OUTCOMES

PAGES_PER_HOST = 12
MAX_ERRORS = 3
BLOCKED = "disallowed by robots.txt"  # recorded without a request
#: What each broken answer must be recorded as (error kind, HTTP status seen): the modes
#: that end as errors (the others deliver the page).
EXPECTED = {mode: out for mode, out in GARBAGE_OUTCOMES.items() if out[0] is not None}
BEHAVIORS = {
    0: HostBehavior(garbage=GARBAGE_MODES, garbage_share=len(GARBAGE_MODES) / 11),
    2: HostBehavior(garbage=ERROR_GARBAGE, garbage_share=1.0),
}


@dataclass
class Crawl:
    web: SyntheticWeb
    server: WebServer
    db: Database
    stats: CrawlStats
    crashes: list[BaseException]
    pages: dict[str, Page]
    observations: dict[int, list[Observation]]  # fetches (not robots.txt refusals), by page id


def _settings() -> CrawlSettings:
    return CrawlSettings(
        politeness=PolitenessPolicy(
            min_delay=0.02, max_delay=1.0, duration_factor=1.0, backoff_base=0.1, backoff_cap=0.5
        ),
        limits=FetchLimits(allow_private=True, read_timeout=5.0),
        max_urls=40,
        idle_sleep=0.05,
        noise_twins=0,  # requests are counted against observations (twins: test_noise.py)
        max_errors_per_lease=MAX_ERRORS,
        # Failed pages wait an hour: each crawl below fetches each of them once, then idles.
        error_retry=timedelta(hours=1),
    )


def _crawl(
    db: Database,
    stats: CrawlStats,
    worker_type: type[CrawlWorker] | None = None,
    seconds: float = 20,
) -> None:
    policy = LeasePolicy(lease_seconds=30, max_urls=40, max_urls_per_host=40, max_hosts=3)
    run_crawl(
        db,
        lambda: LeaseQueue(db, policy),
        _settings(),
        workers=2,
        until_idle=True,
        seconds=seconds,
        stats=stats,
        worker_type=worker_type,
    )


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """An empty database on each backend, for the whole module (one crawl per backend)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('garbage') / 'crawl.db'}"
        return
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="module")
def crawl(database_url: str) -> Iterator[Crawl]:
    web = SyntheticWeb(
        WebConfig(
            hosts=3,
            pages_per_host=PAGES_PER_HOST,
            rate_low=0.05,
            rate_high=1.0,
            behaviors=BEHAVIORS,
            seed=11,
        )
    )
    db = open_database(database_url, create=True)
    upgrade_schema(db)
    crashes: list[BaseException] = []
    previous_hook = threading.excepthook

    def record(args: threading.ExceptHookArgs) -> None:
        crashes.append(args.exc_value or RuntimeError(str(args.exc_type)))
        previous_hook(args)

    threading.excepthook = record
    try:
        with WebServer(web, seed=4) as server:
            urls = [server.url(page) for page in range(web.n_pages)]
            add_pages(db, [(url, origin_of(url)) for url in urls])
            stats = CrawlStats()
            _crawl(db, stats)
            # Again once the web has moved on: a page served in a broken encoding must show
            # a change exactly when the page really changed.
            threading.Event().wait(1.0)
            with db.write() as conn:
                conn.execute(update(Page).where(Page.status == "ok").values(next_due_at=utcnow()))
            recompute_ready(db)  # due times written by hand
            _crawl(db, stats)
    finally:
        threading.excepthook = previous_hook
    pages = {p.url: p for p in orm_all(db, select(Page))}
    observations: dict[int, list[Observation]] = {}
    fetches = select(Observation).where(
        Observation.kind == "fetch", Observation.error.is_distinct_from(BLOCKED)
    )
    for o in orm_all(db, fetches.order_by(Observation.fetched_at)):
        observations.setdefault(o.page_id, []).append(o)
    yield Crawl(web, server, db, stats, crashes, pages, observations)
    db.dispose()


def _observed(crawl: Crawl, page: int) -> list[Observation]:
    return crawl.observations.get(crawl.pages[crawl.server.url(page)].id, [])


def _served(crawl: Crawl, page: int) -> list[LoggedRequest]:
    host, path = int(crawl.web.host_of[page]), crawl.web.path(page)
    return [r for r in crawl.server.requests_to(host) if r.path == path]


def test_every_mode_is_exercised(crawl: Crawl) -> None:
    modes = set(crawl.web.garbage.values())
    assert modes == set(GARBAGE_MODES)
    host2 = [crawl.web.garbage_mode(p) for p in range(2 * PAGES_PER_HOST, 3 * PAGES_PER_HOST)]
    assert host2[0] is None and all(m in ERROR_GARBAGE for m in host2[1:])


def test_every_broken_answer_is_an_error_of_its_kind_on_its_page(crawl: Crawl) -> None:
    for page, mode in crawl.web.garbage.items():
        if mode not in EXPECTED:
            continue
        url = crawl.server.url(page)
        kind, status = EXPECTED[mode]
        observed = _observed(crawl, page)
        served = _served(crawl, page)
        assert observed, f"{url} ({mode}) never fetched"
        assert [(o.error, o.http_status) for o in observed] == [(kind.value, status)] * len(
            observed
        ), (url, mode)
        assert all(o.signature is None and o.changed is None for o in observed)
        assert crawl.pages[url].status == "error", (url, mode)
        assert [r.garbage for r in served] == [mode] * len(served)


def test_complete_answers_in_broken_encodings_are_pages_and_not_changes(crawl: Crawl) -> None:
    checked = 0
    for page, mode in crawl.web.garbage.items():
        if mode not in LENIENT_GARBAGE:
            continue
        url = crawl.server.url(page)
        assert crawl.pages[url].status == "ok", (url, mode)
        observed = _observed(crawl, page)
        served = _served(crawl, page)
        assert len(observed) == len(served) >= 2, (url, mode)
        assert all(o.error is None and o.signature for o in observed if o.http_status == 200)
        for (r0, r1), obs in zip(itertools.pairwise(served), observed[1:], strict=True):
            truth = crawl.web.version(page, r1.t) != crawl.web.version(page, r0.t)
            assert obs.changed is truth, (url, mode, r0, r1)
            checked += 1
    assert checked >= len(LENIENT_GARBAGE)


def test_every_good_page_on_every_host_is_fetched(crawl: Crawl) -> None:
    good = [p for p in range(crawl.web.n_pages) if crawl.web.garbage_mode(p) is None]
    # Host 0's home page and two more, all of host 1, host 2's home page.
    assert len(good) == (PAGES_PER_HOST - len(GARBAGE_MODES)) + PAGES_PER_HOST + 1
    for page in good:
        url = crawl.server.url(page)
        assert crawl.pages[url].status == "ok", (url, crawl.pages[url].status)
        assert all(o.error is None for o in _observed(crawl, page)), url


def test_no_worker_died_and_the_crawl_went_idle(crawl: Crawl) -> None:
    assert crawl.crashes == []
    assert crawl.stats.queue_errors == 0
    assert crawl.stats.active_hosts == 0
    error_pages = sum(1 for m in crawl.web.garbage.values() if m in ERROR_GARBAGE)
    # Each broken page failed once (its retry is an hour away), and nothing else failed.
    assert crawl.stats.errors == error_pages
    kinds = {kind.value for kind, _ in EXPECTED.values()}
    failures = [o for obs in crawl.observations.values() for o in obs if o.error in kinds]
    assert len(failures) == error_pages


def test_nothing_is_recorded_twice(crawl: Crawl) -> None:
    for page in range(crawl.web.n_pages):
        observed = _observed(crawl, page)
        assert len(observed) == len(_served(crawl, page)), crawl.server.url(page)
        assert len({(o.lease_id, o.page_id) for o in observed}) == len(observed)
    # Every request the server logged for a page became exactly one observation.
    by_path = Counter((r.host, r.path) for r in crawl.server.log)
    for url, stored in crawl.pages.items():
        host = crawl.server.origins.index(origin_of(url))
        path = url[len(origin_of(url)) :]
        assert by_path[(host, path)] == len(crawl.observations.get(stored.id, [])), url


def test_a_host_that_keeps_answering_garbage_is_backed_off(crawl: Crawl) -> None:
    origin = crawl.server.origins[2]
    ids = {p.id for url, p in crawl.pages.items() if url.startswith(origin + "/s")}
    errors_per_lease = Counter(
        o.lease_id for i in ids for o in crawl.observations.get(i, []) if o.error is not None
    )
    broken = PAGES_PER_HOST - 1
    assert sum(errors_per_lease.values()) == broken
    assert max(errors_per_lease.values()) <= MAX_ERRORS
    assert len(errors_per_lease) >= -(-broken // MAX_ERRORS)
    # Politeness held through the garbage: never two requests closer than the delay.
    times = [r.t for r in crawl.server.requests_to(2)]
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.02 - 0.005


def test_a_page_with_an_unparsable_link_is_still_a_page() -> None:
    from crawler.links import extract_links

    html = '<a href="http://[oops/">x</a><a href="/fine.html">y</a>'
    assert extract_links(html, "http://a.test/") == ["http://a.test/fine.html"]


def test_a_step_that_raises_costs_its_page_not_the_worker(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """An exception nobody foresaw (here: injected while one page is observed) records an
    error on that page and backs its host off; the worker lives and crawls the other host."""
    web = SyntheticWeb(WebConfig(hosts=2, pages_per_host=4, seed=5))
    db = open_database(f"sqlite:///{tmp_path_factory.mktemp('raises') / 'c.db'}", create=True)
    upgrade_schema(db)
    with WebServer(web, seed=5) as server:
        poisoned = server.url(1)
        urls = [server.url(p) for p in range(web.n_pages)]
        add_pages(db, [(u, origin_of(u)) for u in urls])
        (poisoned_id,) = (p.id for p in orm_all(db, select(Page)) if p.url == poisoned)

        class FlakyWorker(CrawlWorker):
            def observe(
                self,
                page_id: int,
                previous_signature: str | None,
                outcome: FetchOutcome,
                noise: NoiseRules | None = None,
            ) -> tuple[FetchResult, list[str]]:
                if page_id == poisoned_id:
                    raise RuntimeError("injected")
                return super().observe(page_id, previous_signature, outcome, noise)

        stats = CrawlStats()
        # This crawl never goes idle (the poisoned host is backed off with pages due), so it
        # runs to its bound: 6 s, of which the other host's four pages take about one.
        _crawl(db, stats, worker_type=FlakyWorker, seconds=6)
    pages = {p.url: p for p in orm_all(db, select(Page))}
    assert stats.worker_errors == 1
    assert pages[poisoned].status == "error"
    assert pages[poisoned].next_due_at is not None and pages[poisoned].next_due_at > utcnow()
    other_host = [u for u in urls if origin_of(u) != origin_of(poisoned)]
    assert all(pages[u].status == "ok" for u in other_host)
