"""``crawlplan demo``: the whole service on the embedded default, scored against ground truth.

A synthetic web on loopback (hundreds of hosts, one port each, 20,000 pages by default) is
crawled for real by two crawls side by side, each into its own SQLite store and with the same
budget of crawls per period:

* **crawlplan**: every cycle the nightly pipeline estimates change rates, solves the plan for
  the next cycle's periods and schedules the pages inside the quotas; the worker API releases
  each period's work on time and the workers lease it;
* **uniform**: the same crawler revisiting every page alike, the uniform plan that spends the
  same budget (what a fixed-schedule crawler does), through the same loop.

With :attr:`DemoSettings.oracle` the crawlplan side plans on the web's true rates instead
(written into its store before each nightly run; nothing estimated, nothing explored): the
live reference for what a plan reaches through this loop when the rates need no learning
(``tests/benchmarks/live_loop.py --oracle``).

Each side runs the production loop: ``crawlplan serve`` (the worker API over its store, which
releases each plan period's work on time: :func:`service.api.app.create_app`), ``crawlplan
worker --api`` (a worker pool that leases and reports over HTTP with a bearer token:
:class:`crawler.remote.RemoteWorkQueue`), and ``crawlplan nightly`` once per cycle
(:func:`service.nightly.run_nightly`, run here). The uniform side's worker API releases every
page a whole interval after its last fetch (``due_share`` 1.0), a strict round robin.

Processes: each side's web server (the same web, deterministic from its
:class:`~scenarios.synthetic_web.WebConfig`: :class:`~scenarios.server_process.
ServerProcess`), worker API and worker pool run in processes of their own; this process runs
the nightly pipeline, samples freshness, counts the releases each worker API reports and
prints progress. Python threads of one process share one interpreter lock: with everything in
one process each crawl was held to about 50 pages a second. Every child stops when told, or
by itself when this process goes away; a Ctrl-C (SIGINT, which the children ignore) stops
them all.

Every period both repositories are scored against the web's ground truth (the share of pages
whose stored copy is current); politeness is checked on each server's own request log and
change detection against the true change times. The report (markdown, CSV, PNG) is written
beside the stores.

Service edge: wires scenarios, crawler, store and the pipeline together.
"""

from __future__ import annotations

import csv
import math
import multiprocessing
import secrets
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select

from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_workers
from estimators.buckets import BucketScale
from planner.cycle.due_urls import DUE_SHARE
from scenarios.demo_report import plot_freshness, reference_freshness, share_of_gain
from scenarios.ground_truth import (
    match_fetches,
    score_change_detection,
    smallest_gaps,
    time_averaged_freshness,
)
from scenarios.server_process import ServerProcess, context, end_process
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import LoggedRequest
from service.config import Settings, load_settings
from service.crawl_progress import progress_line
from service.nightly import NightlyReport, NightlySettings, cycle_start, run_nightly
from service.pipeline import ReleaseSummary
from store import Database, add_pages, open_database, upgrade_schema
from store.estimates import write_estimates
from store.models import OBSERVATIONS, PAGES
from store.plans import latest_plan, plan_detail

__all__ = ["WORLDS", "DemoReport", "DemoSettings", "progress_line", "run_demo", "run_settings"]

_DAY = 86_400.0
_ANSWERED = (200, 304)
_NAMES = ("crawlplan", "uniform")
_MIN_DELAY = 0.05
#: The server log's clock resolution against the crawler's waits, seconds.
_CLOCK = 0.005
#: CrawlStats counters a worker pool process sends back.
_COUNTERS = tuple(f.name for f in fields(CrawlStats) if f.name not in ("started", "lock"))


@dataclass(frozen=True)
class DemoSettings:
    """The demo's web and crawl.

    ``hosts`` x ``pages`` pages; plan periods of ``period`` seconds, ``periods`` per cycle,
    ``cycles`` cycles; ``capacity`` crawls per period for each of the two crawls (default:
    ``share`` of the pages per cycle, so that planning matters); ``workers`` threads per crawl
    (each crawl in a process of its own). ``world``: one of :data:`WORLDS`.
    """

    directory: Path
    hosts: int = 120
    pages: int = 50
    period: float = 8.0
    periods: int = 3
    cycles: int = 8
    capacity: int | None = None
    workers: int = 8
    #: Half of 6,000 pages per 3-period cycle: 1,000 crawls a period, 125 a second, what each
    #: of two live crawls keeps up with beside the other on this 2-core machine; a uniform
    #: recrawl revisits a page every 48 s, so 2 of the 8 cycles are warm-up and the 6 after
    #: them revisit every page 3 times more (4 fetches a page in all, issue 25's steady
    #: state), in the 3 minutes of ``make demo``.
    share: float = 0.5
    rate_low: float = 1e-3
    rate_high: float = 0.2
    seed: int = 7
    world: str = "demo"
    #: The crawlplan side plans on the web's true rates, written into its store before each
    #: nightly run, and estimates nothing (:attr:`service.nightly.NightlySettings.estimate`):
    #: the live loop's own reference for what a plan reaches when the rates need no
    #: learning, under the same releases, politeness and crawler as the estimating plan.
    oracle: bool = False

    def __post_init__(self) -> None:
        if self.world not in WORLDS:
            raise ValueError(f"unknown world {self.world!r}; known: {', '.join(WORLDS)}")

    @classmethod
    def steady(cls, directory: Path, **changes: Any) -> DemoSettings:
        """``crawlplan demo --steady``: a smaller web crawled for longer, so that the steady
        state rests on pages fetched many times rather than on the prior.

        40 hosts x 25 pages = 1,000 pages, 50 crawls per 2.5 s period, 6 periods a cycle
        (0.3 crawls a page a cycle: a uniform recrawl revisits a page every 50 s), 40 cycles:
        600 s of crawling, 12 fetches a page on average, 4 cycles of warm-up and 36 of steady
        state (``make demo``'s 8 cycles give 4 fetches a page, 3 of them in its steady
        state). About 10 minutes in all. ``changes`` override any of these (and the other
        fields)."""
        preset = cls(directory, hosts=40, pages=25, period=2.5, periods=6, cycles=40, capacity=50)
        return replace(preset, **changes)

    @property
    def budget(self) -> int:
        """Crawls per period of each crawl."""
        if self.capacity is not None:
            return self.capacity
        return max(1, round(self.share * self.hosts * self.pages / self.periods))


@dataclass
class DemoReport:
    """Freshness samples (seconds since the start, crawlplan, uniform), per-cycle means,
    fetches of each crawl, pages released to it and fetched, period by period, the last
    plan's quotas per bucket, and the checks."""

    seconds: list[float] = field(default_factory=list)
    #: Per crawl, each sample's time on that crawl's server (seconds since its web's epoch).
    server_seconds: dict[str, list[float]] = field(default_factory=dict)
    planned: list[float] = field(default_factory=list)
    uniform: list[float] = field(default_factory=list)
    cycles: list[tuple[int, float, float]] = field(default_factory=list)
    fetched: dict[str, int] = field(default_factory=dict)
    released: dict[str, list[int]] = field(default_factory=dict)
    fetched_per_period: dict[str, list[int]] = field(default_factory=dict)
    carried_over: dict[str, list[int]] = field(default_factory=dict)
    #: Per crawl, pages of its plans' quotas that releases could not choose, by reason.
    short: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Per crawl, crawls that quotas left unused and releases gave to other pages (spill).
    spilled: dict[str, int] = field(default_factory=dict)
    #: Per crawl, urgent crawls (a probe's two crawls) the releases charged to the quotas:
    #: fetched from the urgent lane, not released with a period.
    urgent: dict[str, int] = field(default_factory=dict)
    quotas: dict[int, float] = field(default_factory=dict)
    #: The last plan's never-fetched pages per period (its new-page quota).
    new_pages_quota: float = 0.0
    bucket_rates: dict[int, float] = field(default_factory=dict)
    smallest_gap: float = 0.0
    #: Per crawl, the smallest gap between two requests to one host below that host's
    #: delay, counted (the politeness violations in its server's log), and its requests
    #: under robots.txt-disallowed paths.
    impolite: dict[str, int] = field(default_factory=dict)
    disallowed: dict[str, int] = field(default_factory=dict)
    min_delay: float = 0.0
    #: Cycles of warm-up (at least one uniform revisit of every page) before the steady state.
    warmup_cycles: int = 0
    #: Steady-state freshness (time-averaged from the end of the warm-up to the last sample,
    #: from each crawl's server log and the true change times), measured per crawl, the mean
    #: of its period-end samples over the same time, and the references computed from the
    #: true rates at the same budget.
    steady: dict[str, float] = field(default_factory=dict)
    sampled: dict[str, float] = field(default_factory=dict)
    #: Per crawl, each page's fetches over the whole run (answers in its server's log),
    #: shape (pages,): how well its plans could know the pages.
    fetches_per_page: dict[str, np.ndarray] = field(default_factory=dict)
    uniform_computed: float = float("nan")
    optimum: float = float("nan")
    detection: str = ""
    plans: int = 0
    pages: int = 0
    budget: int = 0
    periods: int = 1
    elapsed: float = 0.0


# -- the child processes ---------------------------------------------------------------------
def _sender(results: Connection, stop: threading.Event) -> Callable[[str, Any], None]:
    """Send one message to the parent (thread-safe); a parent gone away sets ``stop``."""
    sending = threading.Lock()

    def send(kind: str, payload: Any) -> None:
        with sending:
            try:
                results.send((kind, payload))
            except (BrokenPipeError, OSError):
                stop.set()  # nobody listens any more

    return send


def _api_main(
    db_url: str, options: dict[str, Any], control: Connection, results: Connection
) -> None:
    """A worker API process, what ``crawlplan serve`` runs: the app over the store, with its
    period releaser, on a loopback port of its own (sent as "ready"); every release it makes
    is sent to the parent, and it serves until "stop" (or until the parent goes away)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it tells us to stop
    stop = threading.Event()
    send = _sender(results, stop)
    db: Database | None = None
    try:
        import uvicorn

        from service.api.app import ApiSettings, create_app

        db = open_database(db_url)
        app = create_app(
            db, ApiSettings(**options, on_release=lambda summary: send("release", summary))
        )
        sock = socket.create_server(("127.0.0.1", 0))
        server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", timeout_keep_alive=5, lifespan="on")
        )
    except BaseException:
        send("error", traceback.format_exc())
        if db is not None:
            db.engine.dispose()
        return

    def watch() -> None:
        with suppress(EOFError, OSError):  # EOF: the parent is gone
            control.recv()  # "stop"
        server.should_exit = True

    threading.Thread(target=watch, name="demo-control", daemon=True).start()
    send("ready", int(sock.getsockname()[1]))
    try:
        with sock:
            server.run(sockets=[sock])
    except BaseException:
        send("error", traceback.format_exc())
    else:
        send("done", {})
    finally:
        db.engine.dispose()


def _worker_main(
    api_url: str,
    token: str,
    crawl: CrawlSettings,
    workers: int,
    control: Connection,
    results: Connection,
) -> None:
    """A worker pool process, what ``crawlplan worker --api`` runs: wait for "go", lease and
    report through the worker API at ``api_url`` until "stop" (or until the parent goes away),
    sending the counters every half second and once more at the end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it tells us to stop
    stop = threading.Event()
    stats = CrawlStats()
    send = _sender(results, stop)
    try:
        from crawler.remote import RemoteWorkQueue

        send("ready", None)
        if control.recv() != "go":
            return
    except (EOFError, OSError):
        return
    except BaseException:
        send("error", traceback.format_exc())
        return

    def watch() -> None:
        with suppress(EOFError, OSError):  # EOF: the parent is gone
            control.recv()  # "stop"
        stop.set()

    def report() -> None:
        while not stop.wait(0.5):
            send("stats", _counters(stats))

    threading.Thread(target=watch, name="demo-control", daemon=True).start()
    threading.Thread(target=report, name="demo-report", daemon=True).start()
    try:
        run_workers(
            lambda: RemoteWorkQueue(api_url, token),
            crawl,
            workers=workers,
            stop=stop,
            stats=stats,
        )
    except BaseException:
        send("error", traceback.format_exc())
    else:
        send("done", _counters(stats))
    finally:
        stop.set()


def _counters(stats: CrawlStats) -> dict[str, int]:
    with stats.lock:
        return {name: int(getattr(stats, name)) for name in _COUNTERS}


class _Child:
    """The parent's handle on one child process (a worker API or a worker pool): what it sent
    when ready, its latest counters, the releases it reported, its stop."""

    def __init__(
        self, what: str, name: str, target: Callable[..., None], args: tuple[Any, ...], method: str
    ) -> None:
        ctx = context(method)
        control_reader, self._control = ctx.Pipe(duplex=False)
        self._results, results_writer = ctx.Pipe(duplex=False)
        self.label = f"the {name} {what}"
        self.stats = CrawlStats()
        self.ready: Any = None
        self._releases: list[ReleaseSummary] = []
        self.process: BaseProcess = ctx.Process(
            target=target,
            args=(*args, control_reader, results_writer),
            name=f"demo-{what.replace(' ', '-')}-{name}",
            daemon=True,
        )
        self.process.start()
        control_reader.close()
        results_writer.close()
        self._done = False

    def wait_ready(self, timeout: float = 120.0) -> Any:
        """What the child sent when ready (raises if it did not start in ``timeout`` s)."""
        if not self._results.poll(timeout):
            raise RuntimeError(f"{self.label} process did not start in {timeout:g} s")
        self._receive(self._results.recv())
        return self.ready

    def go(self) -> None:
        self._control.send("go")
        self.stats.started = time.monotonic()

    def poll(self) -> CrawlStats:
        """The latest counters (raises if the child failed or died)."""
        try:
            while not self._done and self._results.poll():
                self._receive(self._results.recv())
        except EOFError:
            self._done = True
        if not self._done and not self.process.is_alive():
            raise RuntimeError(f"{self.label} process died (exit {self.process.exitcode})")
        return self.stats

    def releases(self) -> list[ReleaseSummary]:
        """The releases reported since the last call."""
        self.poll()
        taken, self._releases = self._releases, []
        return taken

    def _receive(self, message: tuple[str, Any]) -> None:
        kind, payload = message
        if kind == "error":
            self._done = True
            raise RuntimeError(f"{self.label} failed:\n{payload}")
        if kind == "ready":
            self.ready = payload
        elif kind == "release":
            self._releases.append(payload)
        elif kind in ("stats", "done"):
            for name, value in payload.items():
                setattr(self.stats, name, value)
        self._done = kind == "done"

    def stop(self, timeout: float = 60.0) -> None:
        """Ask the child to stop, take its last counters, end the process (terminated, then
        killed, if it does not end in time)."""
        with suppress(BrokenPipeError, OSError):
            self._control.send("stop")
        deadline = time.monotonic() + timeout
        try:
            while not self._done and self._results.poll(max(0.0, deadline - time.monotonic())):
                self._receive(self._results.recv())
        except (EOFError, OSError):
            pass
        finally:
            end_process(self.process, max(1.0, deadline - time.monotonic()))
            self._control.close()
            self._results.close()


def _start_method() -> str:
    """``forkserver`` where there is one (the children fork from a process that imported this
    module once, instead of each importing the CLI again: seconds less set-up), else
    ``spawn``. Either way a child inherits nothing of this process's threads or stores."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload([__name__])
    return "forkserver"


# -- ground truth ----------------------------------------------------------------------------
class _Truth:
    """The web's change times, flattened for fast freshness: page p's changes are the keys
    ``p * span + t``, sorted, so one ``searchsorted`` counts every page's versions at once."""

    def __init__(self, web: SyntheticWeb) -> None:
        self.web = web
        self.span = float(web.config.horizon) * 2 + 1.0
        keys = [p * self.span + web.change_times(p) for p in range(web.n_pages)]
        self.keys = np.concatenate(keys) if keys else np.zeros(0)
        self.offset = np.arange(web.n_pages, dtype=float) * self.span

    def freshness(self, fetched_at: np.ndarray, t: float) -> float:
        """Share of live pages whose copy (fetched at ``fetched_at[p]``, NaN: never) is
        current at ``t`` (seconds since the epoch)."""
        alive = (self.web.born <= t) & (t < self.web.dies)
        if not alive.any():
            return 1.0
        seen = ~np.isnan(fetched_at)
        at = np.where(seen, fetched_at, 0.0)
        then = np.searchsorted(self.keys, self.offset + at, side="right")
        now = np.searchsorted(self.keys, self.offset + t, side="right")
        fresh = alive & seen & (then == now)
        return float(fresh.sum() / alive.sum())


def _latest_fetches(db: Database, by_url: dict[str, int], epoch: datetime, n: int) -> np.ndarray:
    """Per synthetic page, the server time (s) of the store's latest successful fetch (NaN:
    none)."""
    o = OBSERVATIONS.c
    with db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.url, func.max(o.fetched_at))
            .join(OBSERVATIONS, o.page_id == PAGES.c.id)
            .where(o.http_status.in_(_ANSWERED))
            .group_by(PAGES.c.url)
        ).all()
    out = np.full(n, np.nan)
    for url, at in rows:
        page = by_url.get(url)
        if page is not None and at is not None:
            out[page] = _seconds_since(at, epoch)
    return out


def _seconds_since(at: datetime | str, epoch: datetime) -> float:
    """A store timestamp (a datetime, naive meaning UTC, or its ISO text) as seconds since
    ``epoch``."""
    when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return (when - epoch).total_seconds()


# -- the demo --------------------------------------------------------------------------------
def _store(path: Path) -> Database:
    for suffix in ("", "-wal", "-shm", "-writer"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    database = open_database(f"sqlite:///{path}", create=True)
    upgrade_schema(database)
    return database


#: The webs the demo can crawl: ``demo`` (its own), and worlds built to differ from it.
#: ``robots``: every page links to three URLs under /private/, which robots.txt disallows on
#: every host, and every eighth host asks for a Crawl-delay of 0.5 s. ``fast-lying``: pages
#: ten times faster (0.01 to 2 changes a second) and three hosts in four with Last-Modified
#: that lies (the request time, never moving, or missing), without ETags. ``crawl-delay``:
#: every fourth host from the sixth on asks for 2 s between requests, fewer crawls a period
#: than a uniform share of the budget would give it (their politeness binds the plan:
#: ``planner.cycle.bound_hosts``).
WORLDS = ("demo", "robots", "fast-lying", "crawl-delay")

_ROBOTS_DELAY = "User-agent: *\nDisallow: /private/\nCrawl-delay: 0.5\n"
_ROBOTS_SLOW = "User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"


def _web_config(demo: DemoSettings) -> WebConfig:
    behaviors = {
        1: HostBehavior(last_modified="now", etag=False),
        2: HostBehavior(last_modified="static", etag=False),
        3: HostBehavior(error_rate=0.05, retry_after=1.0),
        4: HostBehavior(robots=_ROBOTS_DELAY),
    }
    rate_low, rate_high, private_links = demo.rate_low, demo.rate_high, 0
    if demo.world == "robots":
        private_links = 3
        behaviors.update({h: HostBehavior(robots=_ROBOTS_DELAY) for h in range(5, demo.hosts, 8)})
    elif demo.world == "crawl-delay":
        behaviors.update({h: HostBehavior(robots=_ROBOTS_SLOW) for h in range(6, demo.hosts, 4)})
    elif demo.world == "fast-lying":
        rate_low, rate_high = demo.rate_low * 10, demo.rate_high * 10
        lies = ("now", "static", "none")
        behaviors = {
            h: HostBehavior(last_modified=lies[h % 4 - 1], etag=False)
            for h in range(demo.hosts)
            if h % 4
        }
    return WebConfig(
        hosts=demo.hosts,
        pages_per_host=demo.pages,
        rate_low=rate_low,
        rate_high=rate_high,
        seed=demo.seed,
        behaviors={h: b for h, b in behaviors.items() if h < demo.hosts},
        private_links=private_links,
    )


def _host_delays(config: WebConfig, min_delay: float) -> np.ndarray:
    """Seconds between two requests to each host: the crawl's least delay, or the host's
    robots.txt Crawl-delay where longer."""
    delays = np.full(config.hosts, min_delay)
    for host, behavior in config.behaviors.items():
        for line in (behavior.robots or "").splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "crawl-delay":
                delays[host] = max(min_delay, float(value))
    return delays


@dataclass
class _Side:
    """One of the two crawls: its store, its web server, its worker API and worker pool
    processes, its nightly settings."""

    name: str
    db: Database
    db_url: str
    server: ServerProcess
    nightly: NightlySettings
    by_url: dict[str, int] = field(default_factory=dict)
    api: _Child | None = None
    crawl: _Child | None = None


@contextmanager
def _children(sides: list[_Side]) -> Iterator[None]:
    """Stop every worker pool, then every worker API, then every web server, however the
    block ends."""
    try:
        yield
    finally:
        for side in sides:
            if side.crawl is not None:
                side.crawl.stop()
        for side in sides:
            if side.api is not None:
                side.api.stop()
        for side in sides:
            side.server.stop()


def run_demo(
    demo: DemoSettings,
    *,
    say: Callable[[str], None],
    crawl_settings: CrawlSettings | None = None,
) -> DemoReport:
    """Run the demo, reporting each step with ``say``; returns the figures."""
    began = time.monotonic()
    directory = demo.directory
    directory.mkdir(parents=True, exist_ok=True)
    n_pages = demo.hosts * demo.pages
    budget = demo.budget
    revisit = n_pages * demo.period / budget  # seconds: the same crawls per second
    settings, nightly = run_settings(demo, revisit)
    crawl = crawl_settings or settings.crawl_settings(allow_private=True)
    config = _web_config(demo)
    cycle_seconds = demo.period * demo.periods
    report = DemoReport(
        min_delay=crawl.politeness.min_delay, pages=n_pages, budget=budget, periods=demo.periods
    )
    say(
        f"synthetic web: {demo.hosts} hosts x {demo.pages} pages = {n_pages:,} pages on "
        f"127.0.0.1 (one port per host), change rates {config.rate_low:g}-{config.rate_high:g} "
        "per second; starting, for each crawl, its web server, its worker API (crawlplan serve) "
        "and its worker pool (crawlplan worker --api), each in a process of its own"
    )
    method = _start_method()
    sides = [_side(name, directory, config, demo.seed, nightly, method) for name in _NAMES]
    if demo.oracle:  # no estimates, nothing to explore
        planned = next(side for side in sides if side.name == "crawlplan")
        planned.nightly = replace(planned.nightly, estimate=False, explore=0.0)
        say("oracle: the crawlplan side plans on the web's true rates and estimates nothing")
    token = secrets.token_urlsafe(24)
    with _children(sides):
        for side in sides:
            side.server.launch()
        for side in sides:  # the worker APIs import and open their stores meanwhile
            options = {
                "tokens": (token,),
                "policy": settings.lease_policy,
                "min_delay_seconds": _MIN_DELAY,
                "allow_private": True,
                # checks for a new period at least ten times a period (and at its start)
                "release_every": demo.period / 10,
                # the uniform side is a strict round robin: every page due a whole interval
                # after its last fetch (its plan gives every class one rate)
                "due_share": 1.0 if side.name == "uniform" else DUE_SHARE,
            }
            side.api = _Child("worker API", side.name, _api_main, (side.db_url, options), method)
        web = SyntheticWeb(config)  # the parent's copy, for ground truth
        truth = _Truth(web)
        for side in sides:
            side.server.wait_ready()
            _seed(side, web)
        say(
            f"both stores seeded with the web's {n_pages:,} URLs (a sitemap); budget: "
            f"{budget:,} crawls per {demo.period:g} s period for each crawl "
            f"({budget * demo.periods / n_pages:.2f} per page per cycle of {demo.periods} "
            "periods); crawlplan plans each cycle (crawlplan nightly), uniform crawls every "
            f"page alike (every {revisit:.0f} s), both released on time by their worker APIs"
        )
        for side in sides:
            report.plans += _run_nightly(side, web).status == "published"
        for side in sides:  # each worker pool leases through its side's worker API
            assert side.api is not None
            url = f"http://127.0.0.1:{side.api.wait_ready()}"
            args = (url, token, crawl, demo.workers)
            side.crawl = _Child("worker pool", side.name, _worker_main, args, method)
        for side in sides:
            assert side.crawl is not None
            side.crawl.wait_ready()
        # Periods counted from the first plan's start (a whole number of periods since the
        # epoch), so that samples and nightly runs fall on the plans' period boundaries.
        first_plan = latest_plan(sides[0].db)
        plan_start = (
            first_plan.starts_at
            if first_plan is not None
            else cycle_start(datetime.now(UTC), nightly.period_days)
        )
        started = time.monotonic() - (datetime.now(UTC) - plan_start).total_seconds()
        for side in sides:
            assert side.crawl is not None
            side.crawl.go()
        say(
            f"crawling: {demo.cycles} cycles of {demo.periods} periods of {demo.period:g} s "
            f"({demo.cycles * cycle_seconds:g} s), {demo.workers} worker threads per crawl "
            f"(set-up took {time.monotonic() - began:.0f} s)"
        )
        _cycles(demo, sides, truth, report, say, started, plan_start)
        for side in sides:
            assert side.crawl is not None
            side.crawl.stop()
            report.fetched[side.name] = side.crawl.stats.fetched
    logs = {side.name: side.server.log for side in sides}
    delays = _host_delays(config, crawl.politeness.min_delay)
    _checks(report, web, sides[0], logs, delays, say)
    _steady_state(report, demo, web, delays, logs, say)
    _quotas(report, sides[0].db)
    _page_table(directory / "pages.csv", report, demo, web, sides)
    report.elapsed = time.monotonic() - began
    _write(report, directory, cycle_seconds, say)
    return report


def _side(
    name: str,
    directory: Path,
    config: WebConfig,
    seed: int,
    nightly: NightlySettings,
    method: str,
) -> _Side:
    """One side of the comparison: its store, and a server of its own. Both servers serve the
    same web (same pages, same change times), so each crawl's politeness and change detection
    are checked on its own server's log. The uniform side plans with optimize off."""
    path = directory / f"{name}.db"
    return _Side(
        name,
        _store(path),
        f"sqlite:///{path}",
        ServerProcess(config, seed=seed, start_method=method),
        nightly if name == "crawlplan" else replace(nightly, optimize=False),
    )


def _write_true_rates(side: _Side, web: SyntheticWeb, scale: BucketScale) -> None:
    """The oracle: every page's true rate (changes per day) and its bucket in the side's
    store, as if estimated exactly, for a plan that estimates nothing. A page the web does not
    list (a host's special pages: redirects, a malformed page, an image) never changes."""
    with side.db.read() as conn:
        rows = conn.execute(select(PAGES.c.id, PAGES.c.url)).all()
    ids = [int(i) for i, _ in rows]
    rates = [float(web.rate[side.by_url[u]]) * _DAY if u in side.by_url else 0.0 for _, u in rows]
    buckets = [int(b) for b in scale.assign(rates)]
    write_estimates(side.db, ids, rates, rates, rates, ["true"] * len(ids), buckets)


def _run_nightly(side: _Side, web: SyntheticWeb) -> NightlyReport:
    """One nightly run of the side; with estimating off (the oracle), the true rates of every
    page found so far are written first."""
    if not side.nightly.estimate:
        _write_true_rates(side, web, side.nightly.scale or BucketScale())
    return run_nightly(side.db, side.nightly)


def _seed(side: _Side, web: SyntheticWeb) -> None:
    """Seed the side's store with every URL of the web, as a sitemap would (its server is up)."""
    urls = [side.server.origins[int(web.host_of[p])] + web.path(p) for p in range(web.n_pages)]
    side.by_url = {normalize_url(u): p for p, u in enumerate(urls)}
    add_pages(side.db, [(u, origin_of(u)) for u in side.by_url])


def run_settings(demo: DemoSettings, revisit: float) -> tuple[Settings, NightlySettings]:
    """The crawl's settings (``revisit``: seconds between a page's crawls under the uniform
    plan) and the nightly settings of the crawlplan side (the uniform side turns optimize off)."""
    settings = load_settings(
        {
            "crawl.min_delay": _MIN_DELAY,
            "crawl.workers": demo.workers,
            "lease.revisit_after_days": revisit / _DAY,
            # The web's days are seconds: a Last-Modified a minute before the fetch is no
            # sign of a server stamping the response time here (HTTP dates have whole
            # seconds, the web's clock is the crawler's).
            "estimate.clock_tolerance": 1.0,
        },
        environ={},
    )
    cycle_seconds = demo.period * demo.periods
    nightly = NightlySettings(
        period_days=demo.period / _DAY,
        periods=demo.periods,
        strategy=1,
        capacity=float(demo.budget),
        window_days=cycle_seconds / _DAY,
        # The web changes in seconds (86 to 17,280 changes a day): the default buckets hold it.
        scale=BucketScale(),
        last_modified=settings.last_modified_policy,
        # The same budget as the uniform crawl, in crawls: the crawler is not short of time
        # here, and measured fetch times (milliseconds, mostly the machine's load) would let
        # the plan buy more crawls by favouring buckets that happened to fetch fast.
        crawl_cost="equal",
        # The crawl's own least delay between two requests to a host (with robots.txt's
        # longer Crawl-delays): what caps a host's crawls a period.
        min_delay_seconds=_MIN_DELAY,
    )
    return settings, nightly


def _cycles(
    demo: DemoSettings,
    sides: list[_Side],
    truth: _Truth,
    report: DemoReport,
    say: Callable[[str], None],
    started: float,
    plan_start: datetime,
) -> None:
    """Crawl for ``demo.cycles`` cycles: sample freshness at each period end, run the nightly
    pipeline at each cycle end (both stores at once, each in a thread), and count the
    releases each side's worker API makes (each period on time, a new plan's first period as
    soon as it is published and scheduled)."""
    total = demo.cycles * demo.periods
    fetched_before = dict.fromkeys(_NAMES, 0)
    for name in _NAMES:
        report.released[name] = [0] * total
        report.fetched_per_period[name] = []
        report.carried_over[name] = [0] * total
    pending: dict[str, Future[NightlyReport]] = {}
    period_length = timedelta(seconds=demo.period)
    with ThreadPoolExecutor(max_workers=len(sides), thread_name_prefix="nightly") as pool:
        for k in range(1, total + 1):
            end = started + k * demo.period
            while (left := end - time.monotonic()) > 0:
                for side in sides:
                    if side.name in pending:
                        if not pending[side.name].done():
                            continue
                        _nightly_done(side, pending.pop(side.name).result(), report, say)
                    assert side.api is not None
                    for summary in side.api.releases():
                        _count_release(report, side.name, summary, plan_start, period_length)
                    assert side.crawl is not None
                    side.crawl.poll()
                time.sleep(min(0.25, max(left, 0.0)))
            _sample(k, demo, sides, truth, report, say, fetched_before)
            cycle, period = divmod(k - 1, demo.periods)
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
                    for side in sides:
                        if side.name in pending:  # a run longer than a cycle: wait for it
                            _nightly_done(side, pending.pop(side.name).result(), report, say)
                        pending[side.name] = pool.submit(_run_nightly, side, truth.web)
        for side in sides:
            if side.name in pending:
                _nightly_done(side, pending.pop(side.name).result(), report, say)


def _count_release(
    report: DemoReport,
    name: str,
    summary: ReleaseSummary,
    plan_start: datetime,
    period_length: timedelta,
) -> None:
    """Count one release a side's worker API made in the demo period it released."""
    if summary.starts_at is None:
        return
    # Counted in the plan period released (the clocks may differ by a few milliseconds at
    # a boundary), which is the demo's period.
    total = len(report.released[name])
    index = min(max(round((summary.starts_at - plan_start) / period_length), 0), total - 1)
    report.released[name][index] += summary.released
    report.carried_over[name][index] = summary.carried_over
    short = report.short.setdefault(name, {})
    for gap in summary.shortfalls:
        short[gap.reason] = short.get(gap.reason, 0) + gap.quota - gap.chosen
    report.spilled[name] = report.spilled.get(name, 0) + sum(summary.spilled.values())
    report.urgent[name] = report.urgent.get(name, 0) + summary.urgent


def _nightly_done(
    side: _Side, done: NightlyReport, report: DemoReport, say: Callable[[str], None]
) -> None:
    report.plans += done.status == "published"
    solver = done.solver
    detail = (
        f"{solver.get('buckets', 0)} buckets, solver {solver.get('status')}, "
        f"{done.probes:,} pages marked for a probe, {done.follow_ups:,} for a follow-up"
        if side.nightly.optimize
        else "the uniform plan"
    )
    say(
        f"  nightly ({side.name}): plan {done.plan} {done.status} ({detail}, "
        f"{sum(done.stages.values()):.1f} s)"
    )


def _sample(
    k: int,
    demo: DemoSettings,
    sides: list[_Side],
    truth: _Truth,
    report: DemoReport,
    say: Callable[[str], None],
    fetched_before: dict[str, int],
) -> None:
    """Score both repositories at the end of period ``k`` and print the progress line."""
    fresh = {}
    for side in sides:
        fetched_at = _latest_fetches(side.db, side.by_url, side.server.epoch, truth.web.n_pages)
        now = side.server.now()
        report.server_seconds.setdefault(side.name, []).append(now)
        fresh[side.name] = truth.freshness(fetched_at, now)
    stats = {}
    for side in sides:
        assert side.crawl is not None
        stats[side.name] = side.crawl.poll()
        fetched = stats[side.name].fetched
        report.fetched_per_period[side.name].append(fetched - fetched_before[side.name])
        fetched_before[side.name] = fetched
    report.seconds.append(round(k * demo.period, 3))
    report.planned.append(fresh["crawlplan"])
    report.uniform.append(fresh["uniform"])
    cycle, period = divmod(k - 1, demo.periods)
    a, b = stats["crawlplan"], stats["uniform"]
    released = {name: report.released[name][k - 1] for name in _NAMES}
    say(
        f"cycle {cycle + 1} period {period + 1}: freshness crawlplan {fresh['crawlplan']:.3f}, "
        f"uniform {fresh['uniform']:.3f}; released {released['crawlplan']:,} / "
        f"{released['uniform']:,}, fetched {report.fetched_per_period['crawlplan'][-1]:,} / "
        f"{report.fetched_per_period['uniform'][-1]:,} ({a.fetched:,} / {b.fetched:,} in all, "
        f"{a.pages_per_second():.0f} / {b.pages_per_second():.0f} pages/s)"
    )


def _checks(
    report: DemoReport,
    web: SyntheticWeb,
    planned: _Side,
    logs: dict[str, list[LoggedRequest]],
    delays: np.ndarray,
    say: Callable[[str], None],
) -> None:
    """Politeness and robots.txt from each server's own log, change detection against the
    true change times."""
    for name, log in logs.items():
        times_by_host: dict[int, list[float]] = {}
        for r in log:
            times_by_host.setdefault(r.host, []).append(r.t)
        # A gap shorter than the host's delay, less the log's clock resolution.
        report.impolite[name] = sum(
            int((np.diff(np.sort(times)) < delays[host] - _CLOCK).sum())
            for host, times in times_by_host.items()
        )
        report.disallowed[name] = sum(r.path.startswith("/private/") for r in log)
        gaps = smallest_gaps({h: sorted(t) for h, t in times_by_host.items()})
        smallest = min(gaps.values()) if gaps else 0.0
        report.smallest_gap = min(report.smallest_gap or smallest, smallest)
        say(
            f"politeness of {name} (its server's own log): {len(log):,} requests; smallest "
            f"gap between two requests to one host {smallest:.3f} s (minimum "
            f"{report.min_delay:g} s, more where robots.txt asks); gaps shorter than the "
            f"host's delay: {report.impolite[name]:,}; requests robots.txt disallows: "
            f"{report.disallowed[name]:,}"
        )
    fetches = recorded_fetches(
        planned.db, web, planned.by_url, logs["crawlplan"], planned.server.epoch
    )
    score = score_change_detection(web, fetches)
    report.detection = (
        f"{score.revisits:,} revisits, {score.real_changes:,} real changes, "
        f"{score.detected:,} detected, {score.missed:,} missed, "
        f"{score.false_alarms:,} false alarms"
    )


def _steady_state(
    report: DemoReport,
    demo: DemoSettings,
    web: SyntheticWeb,
    delays: np.ndarray,
    logs: dict[str, list[LoggedRequest]],
    say: Callable[[str], None],
) -> None:
    """Steady-state freshness of both crawls after the warm-up, beside the references
    computed from the true rates at the same budget (per period; each host's polite
    capacity bounds the optimum) and crawlplan's share of the optimum's gain.

    The measure is the time average over the steady state, from each crawl's server log
    (:func:`scenarios.ground_truth.time_averaged_freshness`), as the references are; the mean
    of the period-end samples over the same time (:attr:`DemoReport.sampled`) is kept beside
    it (within 0.002 of it on the demo's web, seed 7)."""
    revisit = web.n_pages * demo.period / demo.budget
    report.warmup_cycles = math.ceil(revisit / (demo.period * demo.periods) - 1e-9)
    ref = reference_freshness(
        web.rate * demo.period,
        float(demo.budget),
        host=web.host_of,
        host_capacity=demo.period / delays,
    )
    report.uniform_computed, report.optimum = ref.uniform, ref.optimum
    served = {name: _served(web, logs[name]) for name in _NAMES}
    for name, times_of in served.items():
        counts = np.zeros(web.n_pages, dtype=int)
        for page, times in times_of.items():
            counts[page] = len(times)
        report.fetches_per_page[name] = counts
    first = report.warmup_cycles * demo.periods
    if len(report.planned) <= first:
        say(
            f"steady state: none yet; a uniform recrawl revisits every page in {revisit:.0f} s, "
            f"so run more than {report.warmup_cycles} cycles (computed from the true rates: "
            f"uniform {ref.uniform:.3f}, optimum {ref.optimum:.3f})"
        )
        return
    for name, series in (("crawlplan", report.planned), ("uniform", report.uniform)):
        report.sampled[name] = float(np.mean(series[first:]))
        times = report.server_seconds[name]
        start = times[first - 1] if first > 0 else times[0] - demo.period
        report.steady[name] = time_averaged_freshness(web, served[name], start, times[-1])


def _steady_line(report: DemoReport) -> str:
    planned, uniform = report.steady["crawlplan"], report.steady["uniform"]
    share = share_of_gain(planned, uniform, report.optimum)
    computed = share_of_gain(planned - uniform, 0.0, report.optimum - report.uniform_computed)
    return (
        f"Steady state (cycles {report.warmup_cycles + 1}-{len(report.cycles)}, after "
        f"{report.warmup_cycles} cycles of warm-up): freshness crawlplan {planned:.3f}, uniform "
        f"recrawl {uniform:.3f} (computed {report.uniform_computed:.3f}; time averages, the "
        f"period-end samples give {report.sampled['crawlplan']:.3f} and "
        f"{report.sampled['uniform']:.3f}), optimum at this "
        f"budget {report.optimum:.3f} (computed from the true rates); crawlplan's share of the "
        f"optimum's gain over uniform: {share:.0%} (of the computed gain, optimum - computed "
        f"uniform: {computed:.0%})."
    )


def _quotas(report: DemoReport, planned_db: Database) -> None:
    plan = latest_plan(planned_db)
    if plan is None:
        return
    detail = plan_detail(planned_db, plan.version)
    for (_period, bucket), pages in detail.quotas.items():
        report.quotas[bucket] = report.quotas.get(bucket, 0.0) + pages / plan.periods
    report.new_pages_quota = sum(detail.new_pages.values()) / plan.periods
    with planned_db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.bucket, func.avg(PAGES.c.rate)).group_by(PAGES.c.bucket)
        ).all()
    report.bucket_rates = {int(b): float(r) / _DAY for b, r in rows if r is not None}


def _page_table(
    path: Path, report: DemoReport, demo: DemoSettings, web: SyntheticWeb, sides: list[_Side]
) -> None:
    """``pages.csv``: per page of the web, its URL in crawlplan's store, its true change
    rate (per second), crawlplan's
    estimate (per second; empty: none) and estimator, and each crawl's successful fetches in
    the steady state (after the warm-up; the whole run when there is none), and the crawls
    per second crawlplan's last plan gives the page's class (``planned``; 0: none), so that
    where the plan puts its crawls, and where the release put them, can be read beside the
    truth."""
    first = report.warmup_cycles * demo.periods
    columns: dict[str, np.ndarray] = {}
    estimate = np.full(web.n_pages, np.nan)
    planned = np.zeros(web.n_pages)
    estimator = [""] * web.n_pages
    urls = [""] * web.n_pages
    for side in sides:
        times = report.server_seconds.get(side.name, [])
        since = side.server.epoch + timedelta(
            seconds=times[first - 1] if 0 < first <= len(times) else 0.0
        )
        o = OBSERVATIONS.c
        with side.db.read() as conn:
            rows = conn.execute(
                select(PAGES.c.url, func.count())
                .join(OBSERVATIONS, o.page_id == PAGES.c.id)
                .where(o.http_status.in_(_ANSWERED), o.fetched_at > since)
                .group_by(PAGES.c.url)
            ).all()
            pages = conn.execute(
                select(PAGES.c.url, PAGES.c.rate, PAGES.c.estimator, PAGES.c.bucket)
            ).all()
        counts = np.zeros(web.n_pages, dtype=int)
        for url, n in rows:
            if url in side.by_url:
                counts[side.by_url[url]] = n
        columns[side.name] = counts
        if side.name == "crawlplan":
            for url, index in side.by_url.items():
                urls[index] = url
            per_bucket = _planned_per_second(side.db, demo)
            for url, rate, name, bucket in pages:
                page = side.by_url.get(url)
                if page is None:
                    continue
                planned[page] = per_bucket.get(int(bucket or 0), 0.0)
                if rate is not None:
                    estimate[page], estimator[page] = rate / _DAY, name or ""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "page",
                "url",
                "host",
                "rate",
                "estimate",
                "estimator",
                "planned",
                *(f"fetches_{n}" for n in columns),
            ]
        )
        for page in range(web.n_pages):
            writer.writerow(
                [
                    page,
                    urls[page],
                    int(web.host_of[page]),
                    f"{web.rate[page]:.6g}",
                    "" if np.isnan(estimate[page]) else f"{estimate[page]:.6g}",
                    estimator[page],
                    f"{planned[page]:.6g}",
                    *(int(c[page]) for c in columns.values()),
                ]
            )


def _planned_per_second(db: Database, demo: DemoSettings) -> dict[int, float]:
    """Crawls per second of each page of a class under the latest plan: its crawl fractions
    summed over the plan's cycle, over the cycle's seconds."""
    plan = latest_plan(db)
    if plan is None:
        return {}
    per_bucket: dict[int, float] = {}
    for (_period, bucket), fraction in plan_detail(db, plan.version).fractions.items():
        per_bucket[bucket] = per_bucket.get(bucket, 0.0) + fraction
    seconds = demo.period * plan.periods
    return {b: f / seconds for b, f in per_bucket.items()}


def _keeping_up(report: DemoReport) -> list[str]:
    lines = []
    for name in _NAMES:
        released = sum(report.released.get(name, []))
        fetched = sum(report.fetched_per_period.get(name, []))
        carried = report.carried_over.get(name, [])
        short = report.short.get(name, {})
        spilled = report.spilled.get(name, 0)
        unmet = (
            f"; quota pages not found: {sum(short.values()):,} ("
            + ", ".join(f"{reason}: {pages:,}" for reason, pages in sorted(short.items()))
            + f"), their crawls spilled to other pages: {spilled:,}"
            if short
            else ""
        )
        urgent = report.urgent.get(name, 0)
        also = f" and {urgent:,} urgent crawls (probes) charged to its quotas" if urgent else ""
        lines.append(
            f"Kept up, {name}: {fetched:,} fetched of {released:,} released{also} "
            f"({fetched / max(released + urgent, 1):.0%}); the most pages still queued from "
            f"earlier releases when a period was released: {max(carried, default=0):,}{unmet}."
        )
    return lines


def _write(
    report: DemoReport, directory: Path, cycle_seconds: float, say: Callable[[str], None]
) -> None:
    with (directory / "freshness.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "seconds",
                "crawlplan",
                "uniform",
                "released_crawlplan",
                "fetched_crawlplan",
                "released_uniform",
                "fetched_uniform",
            ]
        )
        per_period = zip(
            report.seconds,
            report.planned,
            report.uniform,
            report.released["crawlplan"],
            report.fetched_per_period["crawlplan"],
            report.released["uniform"],
            report.fetched_per_period["uniform"],
            strict=True,
        )
        for seconds, planned, uniform, *counts in per_period:
            writer.writerow(
                [f"{seconds:.4f}", f"{planned:.4f}", f"{uniform:.4f}", *map(str, counts)]
            )
    plot_freshness(
        directory / "freshness.png",
        report.seconds,
        {"crawlplan": report.planned, "uniform recrawl": report.uniform},
        cycle_seconds=cycle_seconds,
    )
    lines = [
        "# crawlplan demo",
        "",
        f"{report.pages:,} pages, {report.budget:,} crawls per period for each crawl; "
        f"{report.elapsed:.0f} s in all.",
        "",
        "Repository freshness against ground truth (mean over each cycle's periods):",
        "",
        "| cycle | crawlplan | uniform | difference | fetches crawlplan | fetches uniform |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    per = report.periods
    for cycle, planned, uniform in report.cycles:
        a, b = (
            sum(report.fetched_per_period[name][(cycle - 1) * per : cycle * per]) for name in _NAMES
        )
        lines.append(
            f"| {cycle} | {planned:.3f} | {uniform:.3f} | {planned - uniform:+.3f} "
            f"| {a:,} | {b:,} |"
        )
    lines += [
        "",
        f"Fetches: crawlplan {report.fetched.get('crawlplan', 0):,}, uniform "
        f"{report.fetched.get('uniform', 0):,}{_per_page(report)}. Plans published: "
        f"{report.plans}.",
        *_keeping_up(report),
        *([_steady_line(report)] if report.steady else []),
        "",
        "The last plan's quotas (crawls per period) by change-rate bucket:",
        "",
        "| bucket | mean change rate (per s) | crawls per period |",
        "|---:|---:|---:|",
    ]
    table_at = len(lines)
    for bucket, per_period_quota in sorted(report.quotas.items()):
        rate = report.bucket_rates.get(bucket, float("nan"))
        lines.append(f"| {bucket} | {rate:.4f} | {per_period_quota:.1f} |")
    lines.append(f"| new pages | - | {report.new_pages_quota:.1f} |")
    lines += ["", f"Change detection (crawlplan's store): {report.detection}.", ""]
    (directory / "report.md").write_text("\n".join(lines))
    shown = [*lines[:table_at], *_merged_quota_rows(report), *lines[-4:]]
    for line in shown[2:]:
        if line.startswith(("|", "Fetches", "Kept", "Steady", "Change")):
            say(line)
    say(
        f"report: {directory / 'report.md'}, {directory / 'freshness.csv'}, "
        f"{directory / 'freshness.png'}, {directory / 'pages.csv'} ({report.elapsed:.0f} s in all)"
    )


def _per_page(report: DemoReport, enough: int = 4) -> str:
    """The fetches a page over the run, each crawl, from its server's log: the median, and
    the share of pages fetched at least ``enough`` times (issue 25's steady state: a plan
    on pages fetched that often rests on their own changes, not on the prior)."""
    counts = [report.fetches_per_page.get(name) for name in _NAMES]
    if any(c is None or c.size == 0 for c in counts):
        return ""
    medians = " and ".join(f"{np.median(c):g}" for c in counts if c is not None)
    shares = " and ".join(f"{np.mean(c >= enough):.0%}" for c in counts if c is not None)
    return f" (a page: median {medians}; fetched at least {enough} times: {shares} of the pages)"


def _merged_quota_rows(report: DemoReport, small: float = 5.0) -> list[str]:
    """The quota table for the terminal: runs of adjacent buckets with under ``small`` crawls
    a period each merged into one row (bucket and rate ranges, quotas summed), a run ending
    once its quotas reach ``small`` (so a small budget spread thin over many buckets, as in
    ``--steady``, still shows where its crawls go)."""
    rows: list[str] = []
    run: list[tuple[int, float, float]] = []

    def flush() -> None:
        if not run:
            return
        (b0, r0, _), (b1, r1, _) = run[0], run[-1]
        total = sum(q for _, _, q in run)
        if len(run) == 1:
            rows.append(f"| {b0} | {r0:.4f} | {total:.1f} |")
        else:
            rows.append(f"| {b0}-{b1} | {r0:.4f}-{r1:.4f} | {total:.1f} |")
        run.clear()

    for bucket, quota in sorted(report.quotas.items()):
        rate = report.bucket_rates.get(bucket, float("nan"))
        if bucket > 0 and quota < small:
            run.append((bucket, rate, quota))
            if sum(q for _, _, q in run) >= small:
                flush()
            continue
        flush()
        rows.append(f"| {bucket} | {rate:.4f} | {quota:.1f} |")
    flush()
    return rows


def _served(web: SyntheticWeb, log: list[LoggedRequest]) -> dict[int, list[float]]:
    """Per synthetic page, the server times (s) at which the server served it (200 or 304),
    in the log's order."""
    served: dict[int, list[float]] = {}
    for r in log:
        page = web.page_at(r.host, r.path)
        if page is not None and r.status in _ANSWERED:
            served.setdefault(page, []).append(r.t)
    return served


def recorded_fetches(
    database: Database,
    web: SyntheticWeb,
    by_url: dict[str, int],
    log: list[LoggedRequest],
    epoch: datetime,
) -> dict[int, list[tuple[float, bool | None]]]:
    """Per synthetic page, the fetches the crawler recorded that the server answered: each
    the server time (s since ``epoch``) it was served, from the server's log, and the
    crawler's ``changed`` flag (:func:`~scenarios.ground_truth.match_fetches`).

    ``by_url`` maps each page's normalized URL (on this server's ports) to its page id."""
    recorded: dict[int, list[tuple[float, bool | None]]] = {}
    with database.read() as conn:
        rows = conn.execute(
            select(PAGES.c.url, OBSERVATIONS.c.fetched_at, OBSERVATIONS.c.changed)
            .join(OBSERVATIONS, OBSERVATIONS.c.page_id == PAGES.c.id)
            .where(OBSERVATIONS.c.http_status.in_(_ANSWERED))
            .order_by(OBSERVATIONS.c.page_id, OBSERVATIONS.c.fetched_at)
        ).all()
    for row in rows:
        if row.url in by_url:
            start = _seconds_since(row.fetched_at, epoch)
            recorded.setdefault(by_url[row.url], []).append((start, row.changed))
    return match_fetches(_served(web, log), recorded)
