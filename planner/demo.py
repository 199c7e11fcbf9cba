"""``crawlplan demo``: the whole loop on the embedded default, scored against ground truth.

A synthetic web on loopback (scenarios), crawled for real by the crawler's workers into a fresh
SQLite store, then politeness and change detection are scored from the server's own request
log and the web's ground truth (service edge: it wires scenarios, crawler and store).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlStats
from planner.config import load_settings
from scenarios.ground_truth import score_change_detection, smallest_gaps
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import LoggedRequest, WebServer
from store import Database, add_pages, open_database, read_status, upgrade_schema
from store.models import OBSERVATIONS, PAGES

__all__ = ["CrawlRunner", "DemoSettings", "progress_line", "run_demo"]

#: Runs a crawl: (database, settings, crawl settings, workers=, until_idle=, seconds=).
CrawlRunner = Callable[..., CrawlStats]


@dataclass(frozen=True)
class DemoSettings:
    """The demo's web and crawl: hosts x pages, seconds of crawling, revisit delay (s)."""

    directory: Path
    hosts: int = 20
    pages: int = 25
    seconds: float = 25.0
    revisit: float = 4.0
    workers: int = 8


def progress_line(stats: CrawlStats) -> str:
    """One line of crawl counters."""
    return (
        f"fetched {stats.fetched:,} ({stats.pages_per_second():.1f} pages/s), "
        f"changed {stats.changed:,}, not modified {stats.not_modified:,}, "
        f"errors {stats.errors:,}, blocked {stats.blocked:,}, discovered {stats.discovered:,}, "
        f"hosts active {stats.active_hosts}"
    )


def run_demo(demo: DemoSettings, *, crawl: CrawlRunner, say: Callable[[str], None]) -> None:
    """Run the demo, reporting each step with ``say``."""
    directory, hosts, pages = demo.directory, demo.hosts, demo.pages
    seconds, revisit, workers = demo.seconds, demo.revisit, demo.workers
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "crawlplan.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    database = open_database(url, create=True)
    upgrade_schema(database)
    settings = load_settings(
        {
            "store.db": url,
            "crawl.min_delay": 0.05,
            "lease.revisit_after_days": revisit / 86_400,
        },
        environ={},
    )
    # A mixed web: most hosts honest; some lie about Last-Modified or send no ETag (change
    # detection must then rest on content signatures), one sheds load with 503 + Retry-After.
    behaviors = {
        1: HostBehavior(last_modified="now", etag=False),
        2: HostBehavior(last_modified="static", etag=False),
        3: HostBehavior(error_rate=0.05, retry_after=1.0),
        4: HostBehavior(robots="User-agent: *\nDisallow: /private/\nCrawl-delay: 0.5\n"),
    }
    web = SyntheticWeb(
        WebConfig(
            hosts=hosts,
            pages_per_host=pages,
            rate_low=1e-3,
            rate_high=0.5,
            seed=7,
            behaviors={h: b for h, b in behaviors.items() if h < hosts},
        )
    )
    with WebServer(web, seed=7) as server:
        say(
            f"synthetic web: {hosts} hosts x {pages} pages on 127.0.0.1 (one port per host), "
            "change rates 0.001-0.5 per second"
        )
        seeds = [normalize_url(o + "/s0/p0.html") for o in server.origins]
        add_pages(database, [(u, origin_of(u)) for u in seeds])
        say(f"store: {database.display_url}; seeded {len(seeds)} home pages")
        crawl_settings = settings.crawl_settings(allow_private=True)
        stats = crawl(
            database,
            settings,
            crawl_settings,
            workers=workers,
            until_idle=False,
            seconds=seconds,
        )
        say("crawl: " + progress_line(stats).replace(", hosts active 0", ""))
        with server.lock:
            log = list(server.log)
    times_by_host: dict[int, list[float]] = {}
    for r in log:
        times_by_host.setdefault(r.host, []).append(r.t)
    gaps = smallest_gaps(times_by_host)
    say(
        f"politeness (server's own log): {len(log):,} requests; smallest gap between two "
        f"requests to one host {min(gaps.values()):.3f} s "
        f"(configured minimum {crawl_settings.politeness.min_delay:g} s)"
    )
    score = score_change_detection(web, *served_and_observed(database, server, log))
    say(
        f"change detection vs ground truth: {score.revisits:,} revisits, "
        f"{score.real_changes:,} real changes, {score.detected:,} detected, "
        f"{score.missed:,} missed, {score.false_alarms:,} false alarms "
        "(every page shows a new timestamp and visitor number on each visit)"
    )
    st = read_status(database)
    say(
        f"store: {st.pages:,} pages on {st.hosts:,} hosts, {st.observations:,} observations; "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(st.by_status.items()))
    )


def served_and_observed(
    database: Database, server: WebServer, log: list[LoggedRequest]
) -> tuple[dict[int, list[float]], dict[int, list[bool | None]]]:
    """Per synthetic page: when the server served it, and what the crawler flagged."""
    served: dict[int, list[float]] = {}
    for r in log:
        page = server.web.page_at(r.host, r.path)
        if page is not None and r.status in (200, 304):
            served.setdefault(page, []).append(r.t)
    by_url = {server.url(p): p for p in range(server.web.n_pages)}
    observed: dict[int, list[bool | None]] = {}
    with database.read() as conn:
        rows = conn.execute(
            select(PAGES.c.url, OBSERVATIONS.c.changed)
            .join(OBSERVATIONS, OBSERVATIONS.c.page_id == PAGES.c.id)
            .where(OBSERVATIONS.c.http_status.in_((200, 304)))
            .order_by(OBSERVATIONS.c.page_id, OBSERVATIONS.c.fetched_at)
        ).all()
    for row in rows:
        if row.url in by_url:
            observed.setdefault(by_url[row.url], []).append(row.changed)
    return served, observed
