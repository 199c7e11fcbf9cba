"""Crawling the synthetic web for real, over HTTP on loopback, and checking the server's log.

Every claim is checked against what the server saw (its request log) and what really
happened (the synthetic web's ground truth), never against the crawler's own account.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_crawl
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store import (
    Database,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    open_database,
    recompute_ready,
    upgrade_schema,
)
from store.models import Observation, Page
from store.types import utcnow
from tests.conftest import orm_all

MIN_DELAY = 0.1
CRAWL_DELAY = 0.3
RETRY_AFTER = 1.0
TOLERANCE = 0.005  # the server's clock reads arrival a hair after the socket accepted it

BEHAVIORS = {
    1: HostBehavior(robots=f"User-agent: *\nDisallow: /private/\nCrawl-delay: {CRAWL_DELAY}\n"),
    2: HostBehavior(error_rate=0.15, error_status=503, retry_after=RETRY_AFTER),
    3: HostBehavior(last_modified="now", etag=False, latency=0.05),
}


@dataclass
class Crawl:
    web: SyntheticWeb
    server: WebServer
    db: Database
    stats: CrawlStats


def _settings() -> CrawlSettings:
    return CrawlSettings(
        politeness=PolitenessPolicy(min_delay=MIN_DELAY, max_delay=2.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True, max_bytes=1_000_000),
        max_urls=40,
        idle_sleep=0.05,
        noise_twins=0,  # requests are counted against observations (twins: test_noise.py)
        error_retry=timedelta(seconds=0.5),
    )


def _crawl(db: Database, seconds: float = 60.0) -> CrawlStats:
    policy = LeasePolicy(lease_seconds=30, max_urls=40, max_urls_per_host=40, max_hosts=4)
    return run_crawl(
        db,
        lambda: LeaseQueue(db, policy),
        _settings(),
        workers=4,
        until_idle=True,
        seconds=seconds,
    )


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    web = SyntheticWeb(
        WebConfig(
            hosts=4,
            pages_per_host=12,
            sections_per_host=3,
            rate_low=0.05,
            rate_high=1.0,
            behaviors=BEHAVIORS,
            seed=3,
        )
    )
    path: Path = tmp_path_factory.mktemp("crawl") / "crawl.db"
    db = open_database(f"sqlite:///{path}", create=True)
    upgrade_schema(db)
    with WebServer(web, seed=1) as server:
        seeds = [normalize_url(origin + "/s0/p0.html") for origin in server.origins]
        add_pages(db, [(u, origin_of(u)) for u in seeds])
        stats = _crawl(db)
        # Second round: everything due again after the web has moved on a little.
        threading.Event().wait(1.5)
        with db.write() as conn:
            conn.execute(update(Page).where(Page.status == "ok").values(next_due_at=utcnow()))
        recompute_ready(db)  # due times written by hand
        stats2 = _crawl(db)
        stats.add(fetched=stats2.fetched, changed=stats2.changed)
        yield Crawl(web, server, db, stats)
    db.dispose()


def _pages(crawl: Crawl) -> dict[str, Page]:
    return {p.url: p for p in orm_all(crawl.db, select(Page))}


def _observations(crawl: Crawl, url: str) -> list[Observation]:
    page = _pages(crawl)[url]
    return orm_all(
        crawl.db,
        select(Observation).where(Observation.page_id == page.id).order_by(Observation.fetched_at),
    )


def test_every_reachable_page_is_discovered_and_fetched(crawl: Crawl) -> None:
    pages = _pages(crawl)
    for page in range(crawl.web.n_pages):
        url = crawl.server.url(page)
        assert url in pages, f"{url} never discovered"
        assert pages[url].status in ("ok", "error"), (url, pages[url].status)
    ok = sum(1 for p in pages.values() if p.status == "ok")
    assert ok >= crawl.web.n_pages


def test_no_host_gets_requests_closer_than_its_delay(crawl: Crawl) -> None:
    for host in range(crawl.web.config.hosts):
        requests_ = crawl.server.requests_to(host)
        assert len(requests_) > 10
        for before, after in itertools.pairwise(requests_):
            needed = CRAWL_DELAY if host == 1 else MIN_DELAY
            if before.status in (429, 503):
                needed = RETRY_AFTER
            gap = after.t - before.t
            assert gap >= needed - TOLERANCE, (host, before, after, gap)


def test_disallowed_urls_are_never_fetched(crawl: Crawl) -> None:
    paths = [r.path for r in crawl.server.log]
    assert not [p for p in paths if p.startswith("/private/")]
    blocked = [p for p in _pages(crawl).values() if "/private/" in p.url]
    assert blocked and all(p.status == "blocked" for p in blocked)


def test_errors_are_recorded_per_page_and_retried(crawl: Crawl) -> None:
    host2 = crawl.server.origins[2]
    failures = [
        o
        for url in _pages(crawl)
        if url.startswith(host2)
        for o in _observations(crawl, url)
        if o.http_status == 503
    ]
    assert failures, "the 503 host answered no 503: raise its error rate"
    assert all(o.error == "HTTP 503" for o in failures)
    served_503 = sum(1 for r in crawl.server.requests_to(2) if r.status == 503)
    assert len(failures) == served_503  # every error the server sent is on record


def test_changes_match_ground_truth_and_trivial_edits_do_not_count(crawl: Crawl) -> None:
    checked = changed = 0
    for page in range(crawl.web.n_pages):
        url = crawl.server.url(page)
        path = crawl.web.path(page)
        host = int(crawl.web.host_of[page])
        served = [
            r for r in crawl.server.requests_to(host) if r.path == path and r.status in (200, 304)
        ]
        observed = [o for o in _observations(crawl, url) if o.http_status in (200, 304)]
        assert len(served) == len(observed), url
        for (r0, r1), obs in zip(itertools.pairwise(served), observed[1:], strict=True):
            truth = crawl.web.version(page, r1.t) != crawl.web.version(page, r0.t)
            assert obs.changed is truth, (url, r0.t, r1.t)
            checked += 1
            changed += truth
    assert checked >= crawl.web.n_pages // 2
    assert 0 < changed < checked  # both kinds were exercised


def test_conditional_gets_give_304_where_the_server_supports_them(crawl: Crawl) -> None:
    conditional = [r for r in crawl.server.log if r.conditional]
    assert any(r.status == 304 for r in conditional)
    # Host 3 sends no ETag and a Last-Modified equal to the request time: never a 304.
    assert not any(r.status == 304 for r in crawl.server.requests_to(3))


def test_oversize_pages_are_truncated(crawl: Crawl) -> None:
    big = crawl.server.origins[0] + "/big.html"
    (obs,) = _observations(crawl, big)[:1]
    assert obs.error == "truncated at 1,000,000 bytes" and obs.bytes == 1_000_000


def test_redirects_are_recorded_and_loops_stopped(crawl: Crawl) -> None:
    origin = crawl.server.origins[0]
    pages = _pages(crawl)
    assert pages[origin + "/loop/a"].status == "redirect"
    assert pages[origin + "/loop/b"].status == "redirect"  # queued once, as the target
    loop_requests = [r for r in crawl.server.requests_to(0) if r.path.startswith("/loop/")]
    fetches = len(_observations(crawl, origin + "/loop/a")) + len(
        _observations(crawl, origin + "/loop/b")
    )
    assert len(loop_requests) == fetches  # one request per fetch: the loop is not followed
    moved = _observations(crawl, origin + "/moved/p1")
    assert moved[0].http_status == 301
    assert pages[origin + "/s1/p1.html"].status == "ok"
    # a redirect's answer (status and target) is its signature: the same target again is
    # no change, so the URL gets a change rate like a page's
    for path in ("/loop/a", "/loop/b", "/moved/p1"):
        observed = _observations(crawl, origin + path)
        assert all(o.signature is not None for o in observed), path
        assert [o.changed for o in observed[1:]] == [False] * (len(observed) - 1), path


def test_non_html_and_malformed_pages(crawl: Crawl) -> None:
    origin = crawl.server.origins[0]
    # an <a href> to an image is not a page: never stored, never requested
    assert origin + "/image.png" not in _pages(crawl)
    assert not [r for r in crawl.server.log if r.path == "/image.png"]
    (broken,) = _observations(crawl, origin + "/malformed.html")[:1]
    assert broken.http_status == 200 and broken.signature is not None


def test_a_slow_host_does_not_stall_the_others(tmp_path: Path) -> None:
    web = SyntheticWeb(
        WebConfig(
            hosts=2,
            pages_per_host=6,
            links_per_page=3,
            behaviors={1: HostBehavior(robots=None, latency=0.6)},
            seed=5,
        )
    )
    db = open_database(f"sqlite:///{tmp_path / 'slow.db'}", create=True)
    upgrade_schema(db)
    with WebServer(web) as server:
        # Every page known up front, so both hosts are leased to the one worker together.
        add_pages(db, [(server.url(p), origin_of(server.url(p))) for p in range(web.n_pages)])
        policy = LeasePolicy(max_urls=40, max_urls_per_host=40, max_hosts=2)
        run_crawl(
            db,
            lambda: LeaseQueue(db, policy),
            _settings(),
            workers=1,
            until_idle=True,
            seconds=20,
        )
        fast = [r.t for r in server.requests_to(0) if r.path.startswith("/s")]
        slow = [r.t for r in server.requests_to(1) if r.path.startswith("/s")]
    db.dispose()
    assert len(fast) >= 6 and len(slow) >= 6
    # The fast host's pages were done long before the slow host's, at the fast host's pace.
    assert max(fast[:6]) < sorted(slow)[3]
    assert max(b - a for a, b in itertools.pairwise(fast[:6])) < 0.5
