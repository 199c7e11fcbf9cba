"""``crawl.max_per_host``: up to N requests to one host in flight, each lane polite.

A host that takes 0.15 s per page is crawled with ``max_per_host`` 1 and 3. The server's
own record of when each request began and ended shows: never more than N in flight, N
reached when allowed, and, among any N + 1 consecutive requests, the first and the last at
least the delay apart (two of them share a lane, and a lane waits the delay after its own
request). Every page is fetched once, whatever N. On SQLite: the lanes are the crawler's,
whatever the store (leases and reports are tested on both backends elsewhere).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from sqlalchemy import select

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.worker import CrawlSettings, run_crawl
from service.config import load_settings
from service.errors import ConfigError
from store import Database, LeasePolicy, LeaseQueue, add_pages
from store.models import HOSTS, OBSERVATIONS
from store.types import utcnow
from tests.loopback import LoopbackHost, html_page, respond

PAGES = 18
ANSWER_SECONDS = 0.15
DELAY = 0.1


class SlowHost(LoopbackHost):
    """Pages ``/p0`` ... that each take :data:`ANSWER_SECONDS`, with when each request
    began and ended (monotonic seconds) and the most requests in flight at once."""

    def __init__(self, robots: str = "User-agent: *\nAllow: /\n", limited: str = "") -> None:
        super().__init__()
        self.robots = robots
        #: A path answered 429 (Retry-After 600), and when that answer was sent.
        self.limited = limited
        self.limited_at: float | None = None
        self.spans: list[tuple[float, float]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()

    def start(self) -> SlowHost:
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/robots.txt":
                    respond(self, 200, "text/plain", host.robots)
                    return
                began = time.monotonic()
                with host.lock:
                    host.in_flight += 1
                    host.most_in_flight = max(host.most_in_flight, host.in_flight)
                time.sleep(ANSWER_SECONDS)
                if self.path == host.limited:
                    self.send_response(429)
                    self.send_header("Retry-After", "600")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    host.limited_at = time.monotonic()
                else:
                    respond(self, 200, "text/html; charset=utf-8", html_page())
                with host.lock:
                    host.in_flight -= 1
                    host.spans.append((began, time.monotonic()))
                    host.log.append(self.path)

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)
        return self


@pytest.fixture
def host() -> Iterator[SlowHost]:
    site = SlowHost().start()
    yield site
    site.stop()


def _crawl(db: Database, max_per_host: int, seconds: float = 60) -> None:
    settings = CrawlSettings(
        politeness=PolitenessPolicy(
            min_delay=DELAY, max_delay=1.0, duration_factor=0.0, max_per_host=max_per_host
        ),
        limits=FetchLimits(allow_private=True),
        idle_sleep=0.05,
        sitemaps=False,
        noise_twins=0,  # every request is counted (twin fetches: test_noise.py)
    )
    policy = LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=1)
    run_crawl(
        db, lambda: LeaseQueue(db, policy), settings, workers=1, until_idle=True, seconds=seconds
    )


@pytest.mark.parametrize("lanes", [1, 3])
def test_at_most_max_per_host_in_flight_each_lane_polite(
    sqlite_store: Database, host: SlowHost, lanes: int
) -> None:
    db = sqlite_store
    add_pages(db, [(host.url(f"/p{i}"), host.origin) for i in range(PAGES)])
    _crawl(db, lanes)

    assert sorted(host.log) == sorted(f"/p{i}" for i in range(PAGES))
    with db.read() as conn:
        observed = list(conn.execute(select(OBSERVATIONS.c.page_id)).scalars())
    assert len(observed) == len(set(observed)) == PAGES
    assert host.most_in_flight == lanes
    starts = sorted(began for began, _ in host.spans)
    closest = min(b - a for a, b in zip(starts, starts[lanes:], strict=False))
    assert closest >= DELAY


def test_a_429_in_one_lane_ends_the_hosts_crawl_in_every_lane(sqlite_store: Database) -> None:
    """After the 429 is answered no lane starts another request: the rest of the lease is
    handed back, the host backed off by the Retry-After."""
    db = sqlite_store
    host = SlowHost(limited="/p4").start()
    try:
        add_pages(db, [(host.url(f"/p{i}"), host.origin) for i in range(PAGES)])
        _crawl(db, 3, seconds=4)  # the backed-off host's pages stay due: never idle
        assert host.limited_at is not None
        later = [began for began, _ in host.spans if began > host.limited_at]
        assert later == []
        assert len(host.spans) < PAGES
        with db.read() as conn:
            backoff = conn.execute(select(HOSTS.c.backoff_until)).scalar_one()
        assert backoff is not None and backoff > utcnow() + timedelta(seconds=500)
    finally:
        host.stop()


def test_a_host_that_asks_for_a_crawl_delay_gets_one_lane(sqlite_store: Database) -> None:
    db = sqlite_store
    host = SlowHost(robots="User-agent: *\nCrawl-delay: 0.05\n").start()
    try:
        add_pages(db, [(host.url(f"/p{i}"), host.origin) for i in range(6)])
        _crawl(db, 3)
        assert host.most_in_flight == 1 and len(host.spans) == 6
    finally:
        host.stop()


def test_max_per_host_setting(tmp_path: Path) -> None:
    assert load_settings({}).values["crawl.max_per_host"] == PolitenessPolicy().max_per_host == 1
    env = {"CRAWLPLAN_MAX_PER_HOST": "4"}
    assert load_settings({}, environ=env).crawl_settings().politeness.max_per_host == 4
    config = tmp_path / "crawlplan.toml"
    config.write_text("[crawl]\nmax_per_host = 0\n")
    with pytest.raises(ConfigError, match="max_per_host"):
        load_settings({}, config_file=config)
    with pytest.raises(ValueError, match="max_per_host"):
        PolitenessPolicy(max_per_host=0)
