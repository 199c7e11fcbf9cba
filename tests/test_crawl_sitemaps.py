"""Sitemaps in the crawl: the sitemap a host's robots.txt lists is read once per robots
fetch, politely, and its lastmod dates are recorded as change notifications."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, run_crawl
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store import LeasePolicy, LeaseQueue, add_pages, open_database, upgrade_schema
from store.models import OBSERVATIONS, PAGES

MIN_DELAY = 0.1


def test_listed_sitemaps_become_change_notifications(tmp_path: Path) -> None:
    web = SyntheticWeb(
        WebConfig(
            hosts=2,
            pages_per_host=8,
            rate_low=0.01,
            rate_high=0.05,
            seed=11,
            behaviors={0: HostBehavior(robots="User-agent: *\nSitemap: /sitemap.xml\n")},
        )
    )
    db = open_database(f"sqlite:///{tmp_path / 'c.db'}", create=True)
    upgrade_schema(db)
    settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=MIN_DELAY, max_delay=1.0),
        limits=FetchLimits(allow_private=True),
        idle_sleep=0.05,
        error_retry=timedelta(seconds=0.5),
    )
    policy = LeasePolicy(max_urls=20, max_urls_per_host=20)
    with WebServer(web, seed=11) as server:
        seeds = [normalize_url(o + "/s0/p0.html") for o in server.origins]
        add_pages(db, [(u, origin_of(u)) for u in seeds])
        stats = run_crawl(
            db, lambda: LeaseQueue(db, policy), settings, workers=2, until_idle=True, seconds=60
        )
        log = list(server.log)
    with db.read() as conn:
        notes = conn.execute(
            select(PAGES.c.url, OBSERVATIONS.c.fetched_at)
            .join(OBSERVATIONS, OBSERVATIONS.c.page_id == PAGES.c.id)
            .where(OBSERVATIONS.c.kind == "notification")
        ).all()
    host0 = [p for p in range(web.n_pages) if web.host_of[p] == 0]
    by_url = {normalize_url(server.url(p)): p for p in range(web.n_pages)}
    assert stats.notified == len(notes) > 0
    assert {by_url[u] for u, _ in notes} <= set(host0)  # only the host that lists one
    sitemap_reads = [r for r in log if r.path == "/sitemap.xml"]
    assert [r.host for r in sitemap_reads] == [0]  # read once, with robots.txt
    served = sitemap_reads[0].t
    for url, at in notes:  # each lastmod is the page's real last change then (to the second)
        truth = server.epoch + timedelta(seconds=web.last_change(by_url[url], served))
        assert abs((at - truth).total_seconds()) < 1.0
    for host in (0, 1):
        times = [r.t for r in log if r.host == host]
        assert all(b - a >= MIN_DELAY - 0.005 for a, b in itertools.pairwise(times))
