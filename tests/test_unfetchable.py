"""Every new page is fetchable: robots.txt and the crawl scope are checked when a URL is found.

Two small sites on loopback (real HTTP servers, with their own request logs) whose robots.txt
disallows ``/private/``, with links into it, across to each other and off-site. After a crawl
every ``/private/`` page is stored as unfetchable (status ``blocked``): never requested, never
a fetch, not a new page (n), in no bucket (class 0 included), not counted by the discovery
rates, never released, and shown by ``status``; off-site links are not stored at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.remote import RemoteWorkQueue
from crawler.robots import RobotsCache, RobotsRules
from crawler.scope import CrawlScope, registered_domain
from crawler.urls import origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_crawl, run_workers
from service.api.app import ApiSettings
from service.page_schedule import schedule_pages
from service.pipeline import aggregates_from_store, release_period
from store import (
    Database,
    LeasePolicy,
    LeaseQueue,
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    publish_plan,
    read_status,
    recompute_ready,
)
from store.measurements import measure_crawl
from store.models import HOSTS, OBSERVATIONS, PAGES, RELEASED_PAGES
from store.types import utcnow
from store.urgent import request_urgent
from tests.api_server import TOKEN, ApiServer
from tests.loopback import PagesHost, html_page

ROBOTS = "User-agent: *\nDisallow: /private/\n"


@pytest.fixture
def sites(settled_collector: None) -> Iterator[tuple[PagesHost, PagesHost]]:
    a, b = PagesHost(robots=ROBOTS).start(), PagesHost(robots=ROBOTS).start()
    assert b.server is not None
    b_port = b.server.server_address[1]
    a.pages.update(
        {
            "/index.html": html_page(
                "/p1.html",
                "/p2.html",
                "/private/a.html",
                "/private/b.html",
                f"{b.origin}/index.html",
                f"{b.origin}/private/y.html",  # b's robots.txt maybe not read yet
                f"http://localhost:{b_port}/offsite.html",  # another registered domain
            ),
            "/p1.html": html_page("/private/c.html", "/p2.html", "/index.html"),
            "/p2.html": html_page("/private/d.html", "/p1.html"),
        }
    )
    b.pages.update(
        {
            "/index.html": html_page("/q1.html", "/private/x.html", f"{a.origin}/private/e.html"),
            "/q1.html": html_page("/index.html", "/private/z.html"),
        }
    )
    yield a, b
    for site in (a, b):
        site.stop()


def _crawl(db: Database, scope: CrawlScope | None = None) -> CrawlStats:
    settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.01, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True),
        max_urls=50,
        idle_sleep=0.05,
        scope=scope or CrawlScope(),
        noise_twins=0,  # requests are counted (twin fetches: test_noise.py)
    )
    policy = LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=4)
    return run_crawl(
        db, lambda: LeaseQueue(db, policy), settings, workers=2, until_idle=True, seconds=60
    )


def _pages(db: Database) -> dict[str, Any]:
    with db.read() as conn:
        return {row.url: row for row in conn.execute(select(PAGES)).all()}


def _observed_pages(db: Database) -> set[int]:
    with db.read() as conn:
        return set(conn.execute(select(OBSERVATIONS.c.page_id)).scalars())


# Known flaky (2026-11-26): one clean-clone run in four counted 4 first fetches of 5 in
# measure_crawl's window; rerun twice before failing. The cause is open.
@pytest.mark.flaky(reruns=2)
def test_disallowed_links_are_unfetchable_not_new_pages(
    db: Database, sites: tuple[PagesHost, PagesHost]
) -> None:
    a, _b = sites
    add_pages(db, [(a.url("/index.html"), a.origin)])
    stats = _crawl(db)

    assert not [p for site in sites for p in site.log if p.startswith("/private/")]
    pages = _pages(db)
    private = {url: p for url, p in pages.items() if "/private/" in url}
    fetchable = {url: p for url, p in pages.items() if "/private/" not in url}
    assert len(private) == 8  # a, b, c, d, e on a; x, y, z on b
    for url, page in private.items():
        # unfetchable: not a fetch, no observation, not leased, checked again when a's or
        # b's robots.txt expires
        assert page.status == "blocked", url
        assert page.fetches == 0 and page.last_fetch_at is None, url
        assert page.next_due_at is not None and page.next_due_at > utcnow(), url
    assert not {p.id for p in private.values()} & _observed_pages(db)
    # Those found once their host's robots.txt was known (all but b's /private/y.html, found
    # on a's home page before b was crawled) got no OPIC cash from the pages that link to
    # them: only the virtual page's gift, alike.
    known_then = [p for url, p in private.items() if not url.endswith("/private/y.html")]
    assert len({round(p.cash, 12) for p in known_then}) == 1
    assert {p.status for p in fetchable.values()} == {"ok"}
    assert len(fetchable) == 5  # a's index, p1, p2; b's index, q1
    # The off-site link is out of the (default) domain scope: dropped, never requested.
    assert not [url for url in pages if "localhost" in url]
    assert stats.out_of_scope >= 1
    assert stats.unfetchable + stats.blocked >= 1

    # n, the new-page pool, and the buckets (class 0 included) hold fetchable pages only.
    aggregates = aggregates_from_store(db, period_days=1.0)
    assert aggregates.new_pages == 0
    assert int(aggregates.buckets.pages.sum()) == len(fetchable)
    assert int(aggregates.buckets.pages[0]) == len(fetchable)
    # The discovery rates count fetchable URLs found, and first fetches that happened.
    measured = measure_crawl(db, until=utcnow(), window=timedelta(days=1), bin_seconds=3600)
    assert sum(measured.new_crawls) == len(fetchable)
    assert sum(measured.discovered) == len(fetchable) - 1  # the seed was not discovered
    assert measured.fetches == len(fetchable)

    st = read_status(db)
    assert st.unfetchable == {"robots": len(private)}
    assert sum(st.by_bucket.values()) == len(fetchable)
    assert st.by_status["blocked"] == len(private)


def test_a_link_found_after_robots_is_known_is_never_released(
    db: Database, sites: tuple[PagesHost, PagesHost]
) -> None:
    """Once a plan is published new pages wait for a release of the new-page quota; a URL
    robots.txt disallows, found on a host whose robots.txt is known, is not one of them."""
    a, _b = sites
    add_pages(db, [(a.url("/index.html"), a.origin)])
    _crawl(db)
    start = utcnow() - timedelta(seconds=1)
    period = timedelta(minutes=10)
    publish_plan(
        db,
        PlanDraft(
            starts_at=start,
            period_days=period / timedelta(days=1),
            strategy="test",
            periods=[PlanPeriodDraft(1, start, start + period, 100.0, 50, {})],
            inputs={},
            solver={},
        ),
    )
    schedule_pages(db)
    # The home page changes: a new page and a new link into /private/; crawled at once.
    a.pages["/index.html"] = html_page("/p1.html", "/p3.html", "/private/f.html")
    a.pages["/p3.html"] = html_page("/index.html")
    request_urgent(db, [(a.url("/index.html"), a.origin)], source="cli")
    _crawl(db)
    pages = _pages(db)
    new_private = pages[a.url("/private/f.html")]
    assert new_private.status == "blocked" and new_private.next_due_at is not None
    assert pages[a.url("/p3.html")].status == "new"

    released = release_period(db, min_delay_seconds=0.01)
    assert released.status == "released"
    with db.read() as conn:
        queued = set(conn.execute(select(RELEASED_PAGES.c.page_id)).scalars())
    assert pages[a.url("/p3.html")].id in queued
    blocked = {p.id for url, p in pages.items() if "/private/" in url}
    assert not queued & blocked
    assert aggregates_from_store(db, period_days=1.0).new_pages == 1  # p3 alone
    assert "/private/f.html" not in a.log


def test_remote_workers_store_disallowed_links_as_unfetchable(
    db: Database, sites: tuple[PagesHost, PagesHost]
) -> None:
    """The same through the worker API: a remote pool reports what it found, the server
    stores the disallowed URLs as unfetchable pages."""
    a, _b = sites
    add_pages(db, [(a.url("/index.html"), a.origin)])
    api_settings = ApiSettings(
        tokens=(TOKEN,),
        policy=LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=4),
        release_every=None,
        allow_private=True,  # the sites are on loopback
    )
    settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.01, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True),
        idle_sleep=0.05,
    )
    with ApiServer(db, api_settings) as api:
        stats = run_workers(
            lambda: RemoteWorkQueue(api.url, TOKEN), settings, workers=2, until_idle=True
        )
    assert not [p for site in sites for p in site.log if p.startswith("/private/")]
    pages = _pages(db)
    private = [p for url, p in pages.items() if "/private/" in url]
    assert len(private) == 8 and {p.status for p in private} == {"blocked"}
    assert all(p.fetches == 0 and p.next_due_at is not None for p in private)
    assert not {p.id for p in private} & _observed_pages(db)
    assert stats.unfetchable >= 1 and stats.out_of_scope >= 1
    assert read_status(db).unfetchable == {"robots": 8}
    assert aggregates_from_store(db, period_days=1.0).new_pages == 0


def test_unfetchable_pages_come_back_when_robots_allows_them(
    db: Database, sites: tuple[PagesHost, PagesHost]
) -> None:
    """An unfetchable page is due again when the rules that blocked it expire: the worker
    then reads robots.txt anew and fetches the page if it is allowed now."""
    a, b = sites
    add_pages(db, [(a.url("/index.html"), a.origin)])
    _crawl(db, CrawlScope("hosts"))
    assert _pages(db)[a.url("/private/b.html")].status == "blocked"
    a.robots = "User-agent: *\nDisallow: /private/a.html\n"
    # A day later: the host's robots.txt and the rules that blocked the pages have expired.
    past = utcnow() - timedelta(seconds=1)
    with db.write() as conn:
        conn.execute(update(HOSTS).values(robots_expires_at=past))
        conn.execute(update(PAGES).where(PAGES.c.status == "blocked").values(next_due_at=past))
    recompute_ready(db)  # the hosts' ready times, after writing due times behind their back
    _crawl(db, CrawlScope("hosts"))
    pages = _pages(db)
    for path in ("/private/b.html", "/private/c.html", "/private/d.html"):
        assert pages[a.url(path)].status == "gone", path  # allowed now: fetched (a 404)
        assert a.log.count(path) == 1, path
    still = pages[a.url("/private/a.html")]
    assert still.status == "blocked" and still.next_due_at > utcnow()
    assert "/private/a.html" not in a.log
    assert b.log == []


def test_host_scope_keeps_the_crawl_on_the_seed_hosts(
    db: Database, sites: tuple[PagesHost, PagesHost]
) -> None:
    a, b = sites
    add_pages(db, [(a.url("/index.html"), a.origin)])
    stats = _crawl(db, CrawlScope("hosts"))
    assert b.log == []  # b is another host (same address, another port): out of scope
    assert {origin_of(url) for url in _pages(db)} == {a.origin}
    assert stats.out_of_scope >= 3


def test_scope_modes() -> None:
    domains, hosts, anything = CrawlScope("domains"), CrawlScope("hosts"), CrawlScope("any")
    on = "https://docs.python.org"
    assert domains.follows("https://www.python.org/x", on)
    assert domains.follows("http://python.org:8080/x", on)
    assert not domains.follows("https://pypi.org/x", on)
    assert not domains.follows("https://www.bbc.co.uk/", "https://news.example.co.uk")
    assert domains.follows("https://www.bbc.co.uk/", "https://news.bbc.co.uk")
    assert not hosts.follows("https://www.python.org/x", on)
    assert not hosts.follows("http://docs.python.org/x", on)  # another scheme: another host
    assert hosts.follows("https://docs.python.org/3/", on)
    assert anything.follows("https://pypi.org/x", on)
    assert registered_domain("127.0.0.1") == "127.0.0.1"
    assert registered_domain("localhost") == "localhost"
    assert registered_domain("a.b.github.io") == "b.github.io"
    with pytest.raises(ValueError, match="crawl scope 'everything' is not one of"):
        CrawlScope("everything")


def test_robots_cache_screens_with_known_rules_only() -> None:
    now = utcnow()
    cache = RobotsCache(capacity=2)
    cache.put("http://a.test", RobotsRules.from_response(200, ROBOTS, now))
    cache.put("http://down.test", RobotsRules.from_response(503, None, now))
    blocked = cache.disallows("http://a.test/private/1", "http://a.test", "crawlplan")
    assert blocked is not None and blocked.expires_at > now
    assert cache.disallows("http://a.test/open", "http://a.test", "crawlplan") is None
    # unreachable robots.txt says nothing about a URL; unknown hosts neither
    assert cache.disallows("http://down.test/private/1", "http://down.test", "x") is None
    assert cache.disallows("http://b.test/private/1", "http://b.test", "x") is None
    cache.put("http://c.test", RobotsRules.from_response(404, None, now))
    assert len(cache) == 2 and cache.get("http://a.test") is None  # the oldest forgotten
