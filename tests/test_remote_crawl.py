"""Remote worker pools crawling the synthetic web through one worker API server, on SQLite
and PostgreSQL: every page fetched once, politeness held per host, and nothing lost or
duplicated when the API server is restarted or a worker pool is killed mid-run."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta

from sqlalchemy import func, select

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.remote import RemoteWorkQueue
from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_workers
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from service.api.app import ApiSettings
from store import Database, LeasePolicy, add_pages
from store.models import LEASES, OBSERVATIONS, PAGES
from tests.api_server import TOKEN, ApiServer

MIN_DELAY = 0.1
TOLERANCE = 0.005


def _web(hosts: int = 4) -> SyntheticWeb:
    return SyntheticWeb(
        WebConfig(
            hosts=hosts,
            pages_per_host=10,
            sections_per_host=2,
            rate_low=0.01,
            rate_high=0.02,
            seed=5,
        )
    )


def _settings() -> CrawlSettings:
    return CrawlSettings(
        politeness=PolitenessPolicy(min_delay=MIN_DELAY, max_delay=2.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True, max_bytes=1_000_000),
        max_urls=20,
        idle_sleep=0.05,
        noise_twins=0,  # requests are counted against observations (twins: test_noise.py)
        error_retry=timedelta(seconds=0.5),
    )


def _api_settings(lease_seconds: float = 30.0) -> ApiSettings:
    return ApiSettings(
        tokens=(TOKEN,),
        policy=LeasePolicy(
            lease_seconds=lease_seconds, max_urls=20, max_urls_per_host=10, max_hosts=2
        ),
        release_every=None,
        allow_private=True,  # the synthetic web is on loopback
    )


def _pool(
    api: ApiServer, name: str, stats: CrawlStats, seconds: float = 60.0, until_idle: bool = True
) -> threading.Thread:
    thread = threading.Thread(
        target=run_workers,
        args=(lambda: RemoteWorkQueue(api.url, TOKEN), _settings()),
        kwargs={
            "workers": 2,
            "until_idle": until_idle,
            "seconds": seconds,
            "stats": stats,
            "name_prefix": name,
        },
        daemon=True,
    )
    thread.start()
    return thread


def _leases(db: Database, worker: str) -> int:
    with db.read() as conn:
        return int(
            conn.execute(select(func.count()).where(LEASES.c.worker.like(worker))).scalar_one()
        )


def _seed(db: Database, server: WebServer) -> None:
    seeds = [normalize_url(origin + "/s0/p0.html") for origin in server.origins]
    add_pages(db, [(u, origin_of(u)) for u in seeds])


def _check(
    db: Database, web: SyntheticWeb, server: WebServer, *, killed: bool = False
) -> Counter[str]:
    """Every page fetched; the store's observations are exactly the server's page GETs (with
    ``killed``: a killed worker's unreported fetches are served but not recorded, and their
    pages fetched again, so each page is recorded once and served at least as often); no host
    got two requests closer than the minimum delay. Returns fetches per worker."""
    with db.read() as conn:
        rows = conn.execute(  # fetches that reached the server
            select(PAGES.c.url, OBSERVATIONS.c.worker)
            .join(OBSERVATIONS, OBSERVATIONS.c.page_id == PAGES.c.id)
            .where(OBSERVATIONS.c.http_status.is_not(None))
        ).all()
    recorded = Counter(url for url, _ in rows)
    served = Counter(server.origins[r.host] + r.path for r in server.log if r.path != "/robots.txt")
    for page in range(web.n_pages):
        assert server.url(page) in recorded, f"{server.url(page)} never fetched"
    if killed:
        assert set(recorded.values()) == {1}  # recorded once each: nothing double-counted
        assert all(served[url] >= 1 for url in recorded)
    else:
        assert recorded == served  # nothing lost, nothing recorded twice
    for host in range(web.config.hosts):
        for before, after in itertools.pairwise(server.requests_to(host)):
            assert after.t - before.t >= MIN_DELAY - TOLERANCE, (host, before, after)
    return Counter(worker.rsplit("-", 1)[0] for _, worker in rows)


def test_two_remote_pools_share_the_crawl(db: Database) -> None:
    # Six hosts: one pool's two workers lease at most four (two each), so the other pool
    # finds hosts to crawl however late its threads start on a loaded machine.
    web = _web(hosts=6)
    with WebServer(web, seed=1) as server, ApiServer(db, _api_settings()) as api:
        _seed(db, server)
        stats_a, stats_b = CrawlStats(), CrawlStats()
        pools = [_pool(api, "alpha", stats_a), _pool(api, "beta", stats_b)]
        for pool in pools:
            pool.join(timeout=90)
    by_pool = _check(db, web, server)
    assert set(by_pool) == {"alpha", "beta"}  # both pools did work
    assert stats_a.fetched + stats_b.fetched == sum(by_pool.values())


def test_an_api_server_restart_loses_nothing(db: Database) -> None:
    web = _web()
    with WebServer(web, seed=2) as server:
        api = ApiServer(db, _api_settings()).start()
        _seed(db, server)
        stats = CrawlStats()
        pool = _pool(api, "gamma", stats)
        time.sleep(1.0)
        api.stop()  # the server goes away mid-crawl ...
        time.sleep(1.5)
        api.start()  # ... and comes back on the same port
        pool.join(timeout=90)
        api.stop()
    assert stats.fetched > 0
    _check(db, web, server)


def test_a_killed_worker_pool_loses_nothing(db: Database, backend_url: str) -> None:
    web = _web()
    with WebServer(web, seed=3) as server, ApiServer(db, _api_settings(lease_seconds=2.0)) as api:
        _seed(db, server)
        env = {**os.environ, "CRAWLPLAN_API_TOKENS": TOKEN, "CRAWLPLAN_MIN_DELAY": str(MIN_DELAY)}
        doomed = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service",
                "worker",
                "--api",
                api.url,
                "--allow-private",
                "--workers",
                "2",
                "--name",
                "doomed",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while _leases(db, "doomed-%") == 0:  # wait until it holds work, then kill it
            assert doomed.poll() is None, "the worker pool exited early"
            assert time.monotonic() < deadline, "the worker pool never leased"
            time.sleep(0.05)
        time.sleep(0.3)
        doomed.send_signal(signal.SIGKILL)  # no goodbye: its leases must expire
        doomed.wait(timeout=10)
        stats = CrawlStats()
        _pool(api, "survivor", stats).join(timeout=90)
    by_pool = _check(db, web, server, killed=True)
    assert by_pool["survivor"] > 0
    assert _leases(db, "survivor-%") > 0


def test_remote_pools_crawl_to_the_plan_quotas(db: Database) -> None:
    """A published plan on the server: its releases (made by the API server) are crawled by
    two remote pools, every released page fetched once, politely."""
    from datetime import UTC, datetime

    from service.nightly import NightlySettings, run_nightly
    from store.models import PERIOD_RELEASES, RELEASED_PAGES

    web = _web()
    period = 2.0
    settings = ApiSettings(
        tokens=(TOKEN,),
        policy=LeasePolicy(lease_seconds=30, max_urls=20, max_urls_per_host=10, max_hosts=2),
        release_every=0.2,
        min_delay_seconds=MIN_DELAY,  # host capacity: 20 requests per 2 s period
        allow_private=True,
    )
    with WebServer(web, seed=4) as server:
        _seed(db, server)
        # Seed every page (a sitemap), then a cold-start plan: 12 new pages per period.
        add_pages(
            db,
            [
                (normalize_url(server.url(p)), server.origins[web.host_of[p]])
                for p in range(web.n_pages)
            ],
        )
        report = run_nightly(
            db,
            NightlySettings(period_days=period / 86_400, periods=3, capacity=12.0),
            now=datetime.now(UTC),
        )
        assert report.status == "published"
        plan_end = report.cycle_start.timestamp() + 3 * period
        with ApiServer(db, settings) as api:
            seconds = plan_end - datetime.now(UTC).timestamp() + 1.0  # the whole plan, + 1 s
            stats_a, stats_b = CrawlStats(), CrawlStats()
            pools = [
                _pool(api, "alpha", stats_a, seconds=seconds, until_idle=False),
                _pool(api, "beta", stats_b, seconds=seconds, until_idle=False),
            ]
            for pool in pools:
                pool.join(timeout=60)
    with db.read() as conn:
        by_period = dict(
            conn.execute(select(PERIOD_RELEASES.c.period, PERIOD_RELEASES.c.pages)).tuples().all()
        )
    # Periods 2 and 3 are whole: their quotas are met. Period 1 began before the plan was
    # published (periods start on whole multiples of the period): less time, fewer polite
    # requests per host.
    assert by_period[2] == by_period[3] == 12
    with db.read() as conn:
        pages_fetched = conn.execute(  # robots-blocked pages: unfetchable, never released
            select(func.count(func.distinct(OBSERVATIONS.c.page_id)))
        ).scalar_one()
        still_queued = dict(
            conn.execute(
                select(RELEASED_PAGES.c.period, func.count()).group_by(RELEASED_PAGES.c.period)
            )
            .tuples()
            .all()
        )
    served = Counter((r.host, r.path) for r in server.log if r.path != "/robots.txt")
    assert max(served.values()) == 1  # nothing fetched twice
    # Every released page is fetched or still queued: a newer release never drops an older
    # one's unleased pages (they are carried over). The pools stop one second after the
    # plan's end, so only the last period's latest releases may still be waiting, and those
    # of period 4: the plan stays in force past its end, its last period repeated.
    assert set(still_queued) <= {3, 4}, still_queued
    assert pages_fetched + sum(still_queued.values()) == sum(by_period.values())
    assert 0 < stats_a.fetched + stats_b.fetched == sum(served.values())
    for host in range(web.config.hosts):
        for before, after in itertools.pairwise(server.requests_to(host)):
            assert after.t - before.t >= MIN_DELAY - TOLERANCE
