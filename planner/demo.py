"""``crawlplan demo``: the whole service on the embedded default, scored against ground truth.

A synthetic web on loopback (hundreds of hosts, one port each) is crawled for real by two
crawls side by side, each into its own SQLite store and with the same budget of crawls per
period:

* **crawlplan**: every cycle the nightly pipeline estimates change rates, solves the
  WebFountain plan for the next cycle's periods, schedules the pages inside the quotas, and
  each period's work is released to the workers;
* **uniform**: the same crawler revisiting every page at a fixed interval, the interval that
  spends the same budget (what a fixed-schedule crawler does).

Every period both repositories are scored against the web's ground truth (the share of pages
whose stored copy is current); politeness is checked on the server's own request log and
change detection against the true change times. The report (markdown, CSV, PNG) is written
beside the stores.

Service edge: wires scenarios, crawler, store and the pipeline together.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_crawl
from estimators.buckets import BucketScale
from planner.config import load_settings
from planner.nightly import NightlySettings, cycle_start, run_nightly
from planner.pipeline import release_period
from scenarios.demo_report import plot_freshness
from scenarios.ground_truth import repository_freshness, score_change_detection, smallest_gaps
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import LoggedRequest, WebServer
from store import Database, LeaseQueue, add_pages, open_database, upgrade_schema
from store.models import OBSERVATIONS, PAGES
from store.plans import latest_plan, plan_detail

__all__ = ["DemoReport", "DemoSettings", "progress_line", "run_demo"]

_DAY = 86_400.0
_ANSWERED = (200, 304)


@dataclass(frozen=True)
class DemoSettings:
    """The demo's web and crawl.

    ``hosts`` x ``pages`` pages; plan periods of ``period`` seconds, ``periods`` per cycle,
    ``cycles`` cycles; ``capacity`` crawls per period for each of the two crawls (default:
    60 % of the pages per cycle, so that planning matters); ``workers`` threads per crawl.
    """

    directory: Path
    hosts: int = 100
    pages: int = 10
    period: float = 3.0
    periods: int = 4
    cycles: int = 10
    capacity: int | None = None
    workers: int = 6
    rate_low: float = 1e-3
    rate_high: float = 0.2
    seed: int = 7

    @property
    def budget(self) -> int:
        """Crawls per period of each crawl."""
        if self.capacity is not None:
            return self.capacity
        return max(1, round(0.6 * self.hosts * self.pages / self.periods))


@dataclass
class DemoReport:
    """Freshness samples (seconds since the start, crawlplan, uniform), per-cycle means,
    fetches of each crawl, the last plan's quotas per bucket, and the checks."""

    seconds: list[float] = field(default_factory=list)
    planned: list[float] = field(default_factory=list)
    uniform: list[float] = field(default_factory=list)
    cycles: list[tuple[int, float, float]] = field(default_factory=list)
    fetched: dict[str, int] = field(default_factory=dict)
    quotas: dict[int, float] = field(default_factory=dict)
    bucket_rates: dict[int, float] = field(default_factory=dict)
    smallest_gap: float = 0.0
    min_delay: float = 0.0
    detection: str = ""
    plans: int = 0


def progress_line(stats: CrawlStats) -> str:
    """One line of crawl counters."""
    return (
        f"fetched {stats.fetched:,} ({stats.pages_per_second():.1f} pages/s), "
        f"changed {stats.changed:,}, not modified {stats.not_modified:,}, "
        f"errors {stats.errors:,}, blocked {stats.blocked:,}, discovered {stats.discovered:,}, "
        f"hosts active {stats.active_hosts}"
    )


def _store(path: Path) -> Database:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    database = open_database(f"sqlite:///{path}", create=True)
    upgrade_schema(database)
    return database


def _urls(server: WebServer, n_pages: int) -> list[str]:
    return [server.url(p) for p in range(n_pages)]


def _freshness(db: Database, server: WebServer) -> float:
    """The store's repository freshness now, against the web's ground truth."""
    by_url = {normalize_url(server.url(p)): p for p in range(server.web.n_pages)}
    return repository_freshness(server.web, _latest_fetches(db, server, by_url), server.now())


def _latest_fetches(db: Database, server: WebServer, by_url: dict[str, int]) -> dict[int, float]:
    """Per synthetic page, the server time (s) of the store's latest successful fetch."""
    o = OBSERVATIONS.c
    with db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.url, func.max(o.fetched_at))
            .join(OBSERVATIONS, o.page_id == PAGES.c.id)
            .where(o.http_status.in_(_ANSWERED))
            .group_by(PAGES.c.url)
        ).all()
    epoch = server.epoch
    out: dict[int, float] = {}
    for url, at in rows:
        if url in by_url and at is not None:
            when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
            when = when if when.tzinfo else when.replace(tzinfo=UTC)
            out[by_url[url]] = (when - epoch).total_seconds()
    return out


def run_demo(
    demo: DemoSettings,
    *,
    say: Callable[[str], None],
    crawl_settings: CrawlSettings | None = None,
) -> DemoReport:
    """Run the demo, reporting each step with ``say``; returns the figures."""
    directory = demo.directory
    directory.mkdir(parents=True, exist_ok=True)
    planned_db = _store(directory / "crawlplan.db")
    uniform_db = _store(directory / "uniform.db")
    n_pages = demo.hosts * demo.pages
    budget = demo.budget
    revisit = n_pages * demo.period / budget  # seconds: the same crawls per second
    settings = load_settings(
        {
            "crawl.min_delay": 0.05,
            "crawl.workers": demo.workers,
            "lease.revisit_after_days": revisit / _DAY,
        },
        environ={},
    )
    crawl = crawl_settings or settings.crawl_settings(allow_private=True)
    behaviors = {
        1: HostBehavior(last_modified="now", etag=False),
        2: HostBehavior(last_modified="static", etag=False),
        3: HostBehavior(error_rate=0.05, retry_after=1.0),
        4: HostBehavior(robots="User-agent: *\nDisallow: /private/\nCrawl-delay: 0.5\n"),
    }
    web = SyntheticWeb(
        WebConfig(
            hosts=demo.hosts,
            pages_per_host=demo.pages,
            rate_low=demo.rate_low,
            rate_high=demo.rate_high,
            seed=demo.seed,
            behaviors={h: b for h, b in behaviors.items() if h < demo.hosts},
        )
    )
    cycle_seconds = demo.period * demo.periods
    nightly = NightlySettings(
        period_days=demo.period / _DAY,
        periods=demo.periods,
        strategy=1,
        capacity=float(budget),
        window_days=cycle_seconds / _DAY,
        # The web changes in seconds, not days: buckets from one change a day to 1e6 a day.
        scale=BucketScale(1.0, 1e6),
    )
    uniform = replace(nightly, optimize=False)
    report = DemoReport(min_delay=crawl.politeness.min_delay)
    # One server per crawl, both serving the same web (same pages, same change times): each
    # crawl's politeness and change detection are checked on its own server's log.
    with WebServer(web, seed=demo.seed) as server, WebServer(web, seed=demo.seed) as twin:
        servers = {"crawlplan": server, "uniform": twin}
        for db, srv in ((planned_db, server), (uniform_db, twin)):
            add_pages(db, [(u, origin_of(u)) for u in map(normalize_url, _urls(srv, n_pages))])
        say(
            f"synthetic web: {demo.hosts} hosts x {demo.pages} pages on 127.0.0.1 (one port "
            f"per host), change rates {demo.rate_low:g}-{demo.rate_high:g} per second; both "
            f"stores seeded with its {n_pages:,} URLs (a sitemap)"
        )
        say(
            f"budget: {budget:,} crawls per {demo.period:g} s period for each crawl, cycles of "
            f"{demo.periods} periods; crawlplan solves the WebFountain plan each cycle, uniform "
            f"crawls every page alike (every {revisit:.0f} s), both through the same releases"
        )
        for db, settings_ in ((planned_db, nightly), (uniform_db, uniform)):
            report.plans += run_nightly(db, settings_).status == "published"
        stop = threading.Event()
        stats = {"crawlplan": CrawlStats(), "uniform": CrawlStats()}
        policy = settings.lease_policy
        threads = [
            threading.Thread(
                target=run_crawl,
                args=(db, lambda db=db: LeaseQueue(db, policy), crawl),
                kwargs={"workers": demo.workers, "stop": stop, "stats": stats[name]},
                daemon=True,
            )
            for name, db in (("crawlplan", planned_db), ("uniform", uniform_db))
        ]
        # Periods counted from the first plan's start (a whole number of periods since the
        # epoch), so that samples and nightly runs fall on the plans' period boundaries.
        first_plan = latest_plan(planned_db)
        plan_start = (
            first_plan.starts_at
            if first_plan is not None
            else cycle_start(datetime.now(UTC), nightly.period_days)
        )
        started = time.monotonic() - (datetime.now(UTC) - plan_start).total_seconds()
        for thread in threads:
            thread.start()
        try:
            _cycles(
                demo,
                (nightly, uniform),
                planned_db,
                uniform_db,
                servers,
                report,
                stats,
                say,
                started,
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        logs = {}
        for name, srv in servers.items():
            with srv.lock:
                logs[name] = list(srv.log)
    report.fetched = {name: s.fetched for name, s in stats.items()}
    _checks(report, web, server, planned_db, logs, say)
    _quotas(report, planned_db)
    _write(report, directory, cycle_seconds, say)
    return report


def _cycles(
    demo: DemoSettings,
    nightly: tuple[NightlySettings, NightlySettings],
    planned_db: Database,
    uniform_db: Database,
    servers: dict[str, WebServer],
    report: DemoReport,
    stats: dict[str, CrawlStats],
    say: Callable[[str], None],
    started: float,
) -> None:
    """Crawl for ``demo.cycles`` cycles: release each period, sample freshness at each period
    end, run the nightly pipeline at each cycle end."""
    min_delay = 0.05
    total = demo.cycles * demo.periods
    for k in range(1, total + 1):
        end = started + k * demo.period
        released = {"crawlplan": 0, "uniform": 0}
        while (left := end - time.monotonic()) > 0:
            for name, db in (("crawlplan", planned_db), ("uniform", uniform_db)):
                summary = release_period(db, min_delay_seconds=min_delay)
                released[name] += summary.released
            time.sleep(min(0.25, max(left, 0.0)))
        planned = _freshness(planned_db, servers["crawlplan"])
        uniform = _freshness(uniform_db, servers["uniform"])
        report.seconds.append(round(k * demo.period, 3))
        report.planned.append(planned)
        report.uniform.append(uniform)
        cycle, period = divmod(k - 1, demo.periods)
        say(
            f"cycle {cycle + 1} period {period + 1}: freshness crawlplan {planned:.3f}, "
            f"uniform {uniform:.3f}; released {released['crawlplan']:,} / "
            f"{released['uniform']:,}, fetched {stats['crawlplan'].fetched:,} / "
            f"{stats['uniform'].fetched:,} in all"
        )
        if period == demo.periods - 1:
            lo = k - demo.periods
            report.cycles.append(
                (
                    cycle + 1,
                    sum(report.planned[lo:k]) / demo.periods,
                    sum(report.uniform[lo:k]) / demo.periods,
                )
            )
            if k < total:
                done = run_nightly(planned_db, nightly[0])
                report.plans += done.status == "published"
                report.plans += run_nightly(uniform_db, nightly[1]).status == "published"
                solver = done.solver
                say(
                    f"  nightly: plan {done.plan} {done.status} ({solver.get('buckets', 0)} "
                    f"buckets, solver {solver.get('status')}, "
                    f"{sum(done.stages.values()):.1f} s)"
                )


def _checks(
    report: DemoReport,
    web: SyntheticWeb,
    server: WebServer,
    planned_db: Database,
    logs: dict[str, list[LoggedRequest]],
    say: Callable[[str], None],
) -> None:
    for name, log in logs.items():
        times_by_host: dict[int, list[float]] = {}
        for r in log:
            times_by_host.setdefault(r.host, []).append(r.t)
        gaps = smallest_gaps(times_by_host)
        smallest = min(gaps.values()) if gaps else 0.0
        report.smallest_gap = min(report.smallest_gap or smallest, smallest)
        say(
            f"politeness of {name} (its server's own log): {len(log):,} requests; smallest "
            f"gap between two requests to one host {smallest:.3f} s (minimum "
            f"{report.min_delay:g} s)"
        )
    log = logs["crawlplan"]
    served, observed = served_and_observed(planned_db, server, log)
    score = score_change_detection(web, served, observed)
    report.detection = (
        f"{score.revisits:,} revisits, {score.real_changes:,} real changes, "
        f"{score.detected:,} detected, {score.missed:,} missed, "
        f"{score.false_alarms:,} false alarms"
    )


def _quotas(report: DemoReport, planned_db: Database) -> None:
    plan = latest_plan(planned_db)
    if plan is None:
        return
    detail = plan_detail(planned_db, plan.version)
    for (_period, bucket), pages in detail.quotas.items():
        report.quotas[bucket] = report.quotas.get(bucket, 0.0) + pages / plan.periods
    with planned_db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.bucket, func.avg(PAGES.c.rate)).group_by(PAGES.c.bucket)
        ).all()
    report.bucket_rates = {int(b): float(r) / _DAY for b, r in rows if r is not None}


def _write(
    report: DemoReport, directory: Path, cycle_seconds: float, say: Callable[[str], None]
) -> None:
    with (directory / "freshness.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["seconds", "crawlplan", "uniform"])
        for row in zip(report.seconds, report.planned, report.uniform, strict=True):
            writer.writerow([f"{v:.4f}" for v in row])
    plot_freshness(
        directory / "freshness.png",
        report.seconds,
        {"crawlplan": report.planned, "uniform recrawl": report.uniform},
        cycle_seconds=cycle_seconds,
    )
    lines = [
        "# crawlplan demo",
        "",
        "Repository freshness against ground truth (mean over each cycle's periods):",
        "",
        "| cycle | crawlplan | uniform | difference |",
        "|---:|---:|---:|---:|",
    ]
    for cycle, planned, uniform in report.cycles:
        lines.append(f"| {cycle} | {planned:.3f} | {uniform:.3f} | {planned - uniform:+.3f} |")
    lines += [
        "",
        f"Fetches: crawlplan {report.fetched.get('crawlplan', 0):,}, uniform "
        f"{report.fetched.get('uniform', 0):,}. Plans published: {report.plans}.",
        "",
        "The last plan's quotas (crawls per period) by change-rate bucket:",
        "",
        "| bucket | mean change rate (per s) | crawls per period |",
        "|---:|---:|---:|",
    ]
    for bucket, per_period in sorted(report.quotas.items()):
        rate = report.bucket_rates.get(bucket, float("nan"))
        lines.append(f"| {bucket} | {rate:.4f} | {per_period:.1f} |")
    lines += ["", f"Change detection (crawlplan's store): {report.detection}.", ""]
    (directory / "report.md").write_text("\n".join(lines))
    for line in lines[2:]:
        if line.startswith(("|", "Fetches", "Change")):
            say(line)
    say(
        f"report: {directory / 'report.md'}, {directory / 'freshness.csv'}, "
        f"{directory / 'freshness.png'}"
    )


def served_and_observed(
    database: Database, server: WebServer, log: list[LoggedRequest]
) -> tuple[dict[int, list[float]], dict[int, list[bool | None]]]:
    """Per synthetic page: when the server served it, and what the crawler flagged."""
    served: dict[int, list[float]] = {}
    for r in log:
        page = server.web.page_at(r.host, r.path)
        if page is not None and r.status in _ANSWERED:
            served.setdefault(page, []).append(r.t)
    by_url = {server.url(p): p for p in range(server.web.n_pages)}
    observed: dict[int, list[bool | None]] = {}
    with database.read() as conn:
        rows = conn.execute(
            select(PAGES.c.url, OBSERVATIONS.c.changed)
            .join(OBSERVATIONS, OBSERVATIONS.c.page_id == PAGES.c.id)
            .where(OBSERVATIONS.c.http_status.in_(_ANSWERED))
            .order_by(OBSERVATIONS.c.page_id, OBSERVATIONS.c.fetched_at)
        ).all()
    for row in rows:
        if row.url in by_url:
            observed.setdefault(by_url[row.url], []).append(row.changed)
    return served, observed
