"""The ``crawlplan`` command line (Typer): wiring only; each command builds objects and calls them.

Exit codes: 0 success; 1 done, but some input was rejected (listed on stderr); 2 a user error
(bad option, configuration, database URL or input file), printed as one ``error:`` line;
130 interrupted.
"""

from __future__ import annotations

import itertools
import json
import math
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, ParamSpec, TextIO, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from crawler.processes import run_crawl_processes
from crawler.remote import RemoteQueueError, RemoteWorkQueue
from crawler.seeds import RejectedURL, SeedReader
from crawler.sitemaps import SitemapError, parse_sitemap
from crawler.urls import InvalidURLError, normalize_url, origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_crawl, run_workers
from estimators.fetch_table import estimate_fetch_table
from planner.cycle.solution_mapping import solution_mapping
from planner.model.instance import CrawlInstance
from planner.model.paper_instances import paper_instance
from planner.model.weights import strategy_weights, weights_from_mapping
from planner.schedules.objectives import OBJECTIVES
from planner.schedules.optimal import refresh_schedule
from planner.solver.plan_solver import PlanSolver
from service.cli.importance import importance
from service.cli.scenario import scenario_app
from service.cli.support import err, fail, out, user_errors
from service.config import SETTINGS, Settings, load_settings
from service.demo import DemoSettings, progress_line, run_demo
from service.errors import InputFileError
from service.files import open_text_input, read_json, read_table, write_json, write_table
from service.nightly import NightlyReport, NightlySettings, run_nightly
from service.page_schedule import schedule_pages
from service.pipeline import ReleaseSummary, estimate_from_store, release_period
from service.schedule_files import describe_schedule, read_schedule_inputs, schedule_table
from store import (
    LeaseQueue,
    add_pages,
    check_schema,
    open_database,
    read_status,
    upgrade_schema,
)
from store.database import Database
from store.errors import NightlyRunBusyError
from store.notifications import Notification, record_notifications
from store.types import utcnow
from store.urgent import request_urgent

__all__ = ["app", "main"]

P = ParamSpec("P")
R = TypeVar("R")

app = typer.Typer(
    name="crawlplan",
    help=(
        "Optimization-driven crawl planner: estimates change rates, solves the WebFountain "
        "plan, and hands crawler workers polite, prioritized leases.\n\n"
        "Start with `crawlplan init`, then `crawlplan seed URL...`, then `crawlplan status`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL: sqlite:///PATH (default sqlite:///crawlplan.db) or "
        "postgresql://USER@HOST:PORT/DBNAME. Also $CRAWLPLAN_DB_URL or [store] db in "
        "crawlplan.toml.",
        show_default=False,
    ),
]
# Options of the commands that run a worker pool (crawl, worker).
WorkersOption = Annotated[
    int | None,
    typer.Option("--workers", "-w", min=1, help="Worker threads.", show_default=False),
]
ProcessesOption = Annotated[
    int | None,
    typer.Option(
        "--processes",
        "-p",
        min=1,
        help="Processes, each with --workers threads: a process uses one core at most.",
        show_default=False,
    ),
]
SecondsOption = Annotated[
    float | None,
    typer.Option("--seconds", min=0.1, help="Stop after this many seconds.", show_default=False),
]
UntilIdleOption = Annotated[
    bool, typer.Option("--until-idle", help="Stop when no page is due or leased.")
]
AllowPrivateOption = Annotated[
    bool,
    typer.Option(
        "--allow-private",
        help="Allow private and loopback addresses (off by default: URLs come from "
        "untrusted pages). The synthetic web on loopback needs it.",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Configuration file (default: $CRAWLPLAN_CONFIG, else ./crawlplan.toml if present).",
        show_default=False,
    ),
]


def _settings(db: str | None, config: Path | None) -> Settings:
    return load_settings({"store.db": db}, config_file=config)


def _open_checked(settings: Settings) -> Database:
    db = open_database(settings.db_url)
    check_schema(db)
    return db


@app.command()
@user_errors
def init(db: DbOption = None, config: ConfigOption = None) -> None:
    """Create the database schema, or migrate an existing database to this version."""
    settings = _settings(db, config)
    database = open_database(settings.db_url, create=True)
    before, after = upgrade_schema(database)
    if before is None:
        out.print(f"initialized {database.display_url} (schema revision {after})")
    elif before == after:
        out.print(f"{database.display_url} is up to date (schema revision {after})")
    else:
        out.print(f"migrated {database.display_url} from schema revision {before} to {after}")


def _located(label: str, lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(lines, start=1):
        yield f"{label} {number}", line


@app.command()
@user_errors
def seed(
    urls: Annotated[
        list[str] | None, typer.Argument(help="URLs to add.", show_default=False)
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="File of URLs, one per line ('#' comments and blank lines are skipped; "
            "'-' reads standard input).",
            show_default=False,
        ),
    ] = None,
    rejects: Annotated[
        Path | None,
        typer.Option(
            "--rejects",
            help="Write every rejected line (line number, text, reason) to this TSV file.",
            show_default=False,
        ),
    ] = None,
    now: Annotated[
        bool,
        typer.Option(
            "--now",
            help="Crawl these URLs ahead of the plan (the immediate-crawl lane), still "
            "politely; they count against the next period's capacity.",
        ),
    ] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Add URLs to crawl. Each URL is normalized and stored once; malformed ones are listed.

    Exits 1 when some lines were rejected (the good ones are stored all the same).
    """
    if not urls and file is None:
        raise fail("nothing to seed: pass URLs as arguments or --file FILE")
    settings = _settings(db, config)
    database = _open_checked(settings)
    with ExitStack() as stack:
        reject_out: TextIO | None = None
        if rejects is not None:
            try:
                reject_out = stack.enter_context(rejects.open("w", encoding="utf-8"))
            except OSError as error:
                raise InputFileError(f"cannot write {rejects}: {error.strerror}") from None
            reject_out.write("where\ttext\treason\n")

        def on_reject(r: RejectedURL) -> None:
            if reject_out is not None:
                reject_out.write(f"{r.where}\t{r.text}\t{r.reason}\n")

        reader = SeedReader(on_reject=on_reject)
        lines = _located("argument", urls or [])
        if file is not None:
            lines = itertools.chain(lines, _located("line", open_text_input(stack, file)))
        progress = stack.enter_context(
            Progress(
                TextColumn("seeding"),
                BarColumn(bar_width=None),
                TextColumn("{task.completed:,} URLs"),
                TimeElapsedColumn(),
                console=err,
                transient=True,
                disable=not err.is_terminal,
            )
        )
        task = progress.add_task("seed", total=None)

        def counted(pairs: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
            for i, pair in enumerate(pairs, start=1):
                if i % 10_000 == 0:
                    progress.update(task, completed=i)
                yield pair

        if now:
            urgent = request_urgent(database, list(counted(reader.pairs(lines))), source="cli")
        else:
            outcome = add_pages(database, counted(reader.pairs(lines)))
    if now:
        out.print(
            f"queued {urgent.queued:,} pages ahead of the plan ({urgent.added:,} new to the "
            f"store; {urgent.leased:,} already leased, crawled soon)"
        )
    else:
        out.print(
            f"seeded {outcome.added:,} new pages on {outcome.hosts_added:,} new hosts "
            f"({outcome.known:,} already known)"
        )
    if reader.rejected_count:
        for r in reader.rejected:
            err.print(f"  rejected {r.where}: {r.reason}", markup=False)
        more = reader.rejected_count - len(reader.rejected)
        if more:
            hint = f" (all in {rejects})" if rejects else "; pass --rejects FILE to list them all"
            err.print(f"  ... and {more:,} more{hint}", markup=False)
        err.print(
            f"error: {reader.rejected_count:,} malformed URLs were not seeded (listed above); "
            "fix them and seed again",
            markup=False,
        )
        raise typer.Exit(1)


@app.command()
@user_errors
def notify(
    urls: Annotated[
        list[str] | None, typer.Argument(help="Pages that changed.", show_default=False)
    ] = None,
    sitemap: Annotated[
        Path | None,
        typer.Option(
            "--sitemap",
            help="A sitemap (<urlset>) file: each URL with a <lastmod> is a notification.",
            show_default=False,
        ),
    ] = None,
    changed_at: Annotated[
        str | None,
        typer.Option(
            "--changed-at",
            help="When the URLs changed (ISO-8601; default now).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Record change notifications: the pages are crawled soon (still politely), and a page
    whose site reliably notifies its changes gets its rate from them and no blind recrawls.
    """
    if not urls and sitemap is None:
        raise fail("nothing to notify: pass URLs or --sitemap FILE")
    when = None
    if changed_at is not None:
        try:
            when = datetime.fromisoformat(changed_at.replace("Z", "+00:00"))
        except ValueError:
            raise fail(f"--changed-at must be an ISO-8601 time, got {changed_at!r}") from None
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
    pairs: list[tuple[str, datetime | None]] = [(u, when) for u in urls or []]
    if sitemap is not None:
        try:
            entries = parse_sitemap(sitemap.read_bytes())
        except OSError as error:
            raise InputFileError(f"cannot read {sitemap}: {error.strerror}") from None
        except SitemapError as error:
            raise InputFileError(f"{sitemap}: {error}") from None
        pairs += [(e.loc, e.lastmod) for e in entries if e.lastmod is not None]
    items, bad = [], []
    for url, at in pairs:
        try:
            normalized = normalize_url(url)
        except InvalidURLError as error:
            bad.append(f"{url}: {error}")
            continue
        items.append(Notification(normalized, origin_of(normalized), at))
    settings = _settings(db, config)
    database = _open_checked(settings)
    done = record_notifications(database, items)
    out.print(
        f"recorded {done.recorded:,} notifications ({done.added:,} pages new to the store); "
        f"{done.queued:,} pages queued for a crawl"
    )
    for line in bad[:10]:
        err.print(f"  rejected {line}", markup=False)
    if bad:
        err.print(f"error: {len(bad):,} URLs were not recorded (listed above)", markup=False)
        raise typer.Exit(1)


@app.command()
@user_errors
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show pages by status and by change-rate bucket, hosts, leases and the current plan."""
    settings = _settings(db, config)
    database = _open_checked(settings)
    st = read_status(database)
    if as_json:
        out.print_json(json.dumps(asdict(st), default=str))
        return
    out.print(f"store    {database.display_url}")
    out.print(
        f"pages    {st.pages:,} on {st.hosts:,} hosts; {st.due_now:,} due now, "
        f"{st.leased_now:,} leased in {st.active_leases:,} active leases"
    )
    out.print(f"fetches  {st.observations:,} observations recorded")
    table = Table(title="pages by status", title_justify="left", show_edge=False)
    table.add_column("status")
    table.add_column("pages", justify="right")
    for name, count in sorted(st.by_status.items()):
        table.add_row(name, f"{count:,}")
    out.print(table)
    buckets = Table(title="pages by change-rate bucket", title_justify="left", show_edge=False)
    buckets.add_column("bucket")
    buckets.add_column("pages", justify="right")
    for bucket, count in st.by_bucket.items():
        buckets.add_row("0 (no estimate yet)" if bucket == 0 else str(bucket), f"{count:,}")
    out.print(buckets)
    if st.plan is None:
        out.print("plan     none published yet")
    else:
        p = st.plan
        out.print(
            f"plan     version {p.version}, published {p.published_at:%Y-%m-%d %H:%M}Z, "
            f"{p.strategy}, {p.periods} periods of {p.period_days:g} days, "
            f"{p.total_quota:,} refresh + {p.total_new_pages:,} new pages"
        )


def _with_progress(
    run: Callable[[threading.Event, CrawlStats], CrawlStats],
    tick: Callable[[], None] | None = None,
) -> CrawlStats:
    """Run a worker pool in the background; show progress; call ``tick`` every few seconds;
    stop cleanly on SIGINT/SIGTERM."""
    stop = threading.Event()
    stats = CrawlStats()

    def request_stop(signum: int, _frame: object) -> None:
        if not stop.is_set():
            err.print(f"{signal.Signals(signum).name}: finishing in-flight fetches ...")
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    runner = threading.Thread(target=run, args=(stop, stats), daemon=True)
    if tick is not None:
        tick()
    next_tick = time.monotonic() + _RELEASE_CHECK_SECONDS
    try:
        with Live(console=err, transient=True, auto_refresh=False, redirect_stdout=False) as live:
            runner.start()
            while runner.is_alive():
                runner.join(timeout=0.5)
                if tick is not None and time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + _RELEASE_CHECK_SECONDS
                    tick()
                if err.is_terminal:
                    live.update(Text(progress_line(stats)), refresh=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stats


def _crawl_with_progress(
    database: Database,
    settings: Settings,
    crawl: CrawlSettings,
    *,
    workers: int,
    until_idle: bool,
    seconds: float | None,
    processes: int = 1,
) -> CrawlStats:
    """Crawl from the store with progress, releasing each new plan period's work."""
    policy = settings.lease_policy
    min_delay = float(settings.values["crawl.min_delay"])

    def run(stop: threading.Event, stats: CrawlStats) -> CrawlStats:
        if processes > 1:
            return run_crawl_processes(
                settings.db_url,
                policy,
                crawl,
                processes=processes,
                workers=workers,
                until_idle=until_idle,
                seconds=seconds,
                stop=stop,
                stats=stats,
            )
        return run_crawl(
            database,
            lambda: LeaseQueue(database, policy),
            crawl,
            workers=workers,
            until_idle=until_idle,
            seconds=seconds,
            stop=stop,
            stats=stats,
        )

    def release() -> None:  # a new plan period: release its work
        _release_line(release_period(database, min_delay_seconds=min_delay))

    return _with_progress(run, release)


#: How often a running crawl checks whether a new plan period has begun (seconds).
_RELEASE_CHECK_SECONDS = 5.0


def _release_line(summary: ReleaseSummary, console: Console = err) -> None:
    """One line (stderr by default) when a period's work was released; nothing otherwise."""
    if summary.status != "released":
        return
    shortfalls = "; ".join(
        f"{'new pages' if s.bucket < 0 else f'bucket {s.bucket}'}: {s.chosen} of {s.quota} "
        f"({s.reason})"
        for s in summary.shortfalls
    )
    console.print(
        f"released plan {summary.plan} period {summary.period}: {summary.released:,} pages "
        f"({sum(summary.by_bucket.values()):,} re-crawls in {len(summary.by_bucket)} buckets, "
        f"{summary.new_pages:,} new), carried over {summary.carried_over:,}, "
        f"withdrawn {summary.withdrawn:,}" + (f"; {shortfalls}" if shortfalls else "")
    )


@app.command()
@user_errors
def crawl(
    workers: WorkersOption = None,
    processes: ProcessesOption = None,
    seconds: SecondsOption = None,
    until_idle: UntilIdleOption = False,
    allow_private: AllowPrivateOption = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Crawl: lease due URLs, fetch them politely, report what changed, discover new pages.

    Runs until interrupted (Ctrl-C or SIGTERM: in-flight fetches finish and are reported,
    leases are released), until --seconds, or with --until-idle until nothing is due.
    """
    settings = _settings(db, config)
    database = _open_checked(settings)
    crawl_settings = settings.crawl_settings(allow_private=allow_private)
    stats = _crawl_with_progress(
        database,
        settings,
        crawl_settings,
        workers=workers or int(settings.values["crawl.workers"]),
        until_idle=until_idle,
        seconds=seconds,
        processes=processes or int(settings.values["crawl.processes"]),
    )
    out.print(progress_line(stats).replace(", hosts active 0", ""))


def _count(value: float, noun: str) -> str:
    """``3 periods``, ``1 day``, ``0.5 days``."""
    return f"{value:g} {noun}" + ("" if value == 1 else "s")


def _cycle_table(report: NightlyReport, periods: int) -> Table:
    """Per bucket: pages per period in the current plan and in the new cycle."""
    assert report.cycle is not None
    new: dict[int, float] = {}
    for quotas in report.cycle.quotas:
        for bucket, pages in quotas.items():
            new[bucket] = new.get(bucket, 0.0) + pages / periods
    old: dict[int, float] = {}
    current_periods = report.current.periods if report.current else 1
    for (_period, bucket), pages in report.current_quotas.items():
        old[bucket] = old.get(bucket, 0.0) + pages / current_periods
    table = Table("bucket", "current /period", "new /period", "change", box=None)
    changes = sorted(set(new) | set(old), key=lambda b: -abs(new.get(b, 0) - old.get(b, 0)))
    for bucket in sorted(changes[:15]):
        a, b = old.get(bucket, 0.0), new.get(bucket, 0.0)
        table.add_row(str(bucket), f"{a:,.1f}", f"{b:,.1f}", f"{b - a:+,.1f}")
    cur_new = sum(report.current_new_pages.values()) / current_periods
    new_new = sum(report.cycle.new_pages) / periods
    table.add_row("new", f"{cur_new:,.1f}", f"{new_new:,.1f}", f"{new_new - cur_new:+,.1f}")
    return table


@app.command()
@user_errors
def nightly(
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Plan from the estimates in the store and print how the new plan differs "
            "from the current one; write nothing.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Plan again even if this cycle already has a plan.")
    ] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Nightly plan generation: measure, estimate, importance, aggregate, solve, publish,
    schedule pages.

    Publishes the new plan version atomically (workers lease from the previous plan until
    then). Safe to re-run: a cycle already planned is left alone, and a run killed half-way is
    completed by the next. Exit code 0 when a plan is in place, 1 when the solver found none
    (the previous plan stays current), 2 on a user error such as a missing capacity, 75 when
    another nightly run is still running (try again later).
    [plan] settings in crawlplan.toml: period_days, periods, strategy, capacity, window_days,
    objective (`crawlplan config` lists them).
    """
    settings = _settings(db, config)
    nightly_settings = NightlySettings.from_config(settings)
    database = _open_checked(settings)
    try:
        report = run_nightly(
            database,
            nightly_settings,
            dry_run=dry_run,
            force=force,
            say=lambda line: err.print(f"  {line}", markup=False),
        )
    except NightlyRunBusyError as error:
        raise fail(str(error), code=75) from None
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in report.stages.items())
    if report.resumed is not None:
        out.print(f"finished the page schedule of plan {report.resumed} (an interrupted run)")
    if report.status in ("unchanged", "resumed"):
        out.print(f"{report.message}; nothing to do (--force plans again)", markup=False)
        return
    if report.status == "failed":
        err.print(f"error: {report.message}; the current plan stays in place", markup=False)
        raise typer.Exit(1)
    inputs = report.inputs
    assert inputs is not None and report.cycle is not None
    solver = report.solver
    buckets = len(inputs.bucket_ids)
    d = inputs.discovery
    out.print(
        f"cycle from {report.cycle_start:%Y-%m-%d %H:%M:%S} UTC: "
        f"{_count(nightly_settings.periods, 'period')} of "
        f"{_count(nightly_settings.period_days, 'day')}, {_count(buckets, 'bucket')} with pages, "
        f"{inputs.new_pages:,} new pages; capacity {inputs.capacity_crawls:,.0f} crawls per "
        f"period at {inputs.seconds_per_fetch:.3f} s each; discovery per crawl: old "
        f"{d.oldnwt:.3g}, new {d.newnwt:.3g}, outside {d.nconst:.3g} per period ({d.method})",
        markup=False,
    )
    if "objective" in solver:
        out.print(
            f"solver: {solver['status']}, objective {solver['objective']:.6g}, "
            f"{solver.get('iterations', 0)} iterations",
            markup=False,
        )
    else:
        out.print(f"solver: not needed ({solver.get('note', solver.get('status'))})", markup=False)
    if report.status == "dry-run":
        out.print(_cycle_table(report, nightly_settings.periods))
        out.print(f"dry run: nothing written ({timings})", markup=False)
        return
    recrawls = sum(sum(q.values()) for q in report.cycle.quotas)
    out.print(
        f"published plan {report.plan}: {recrawls:,} "
        f"re-crawls and {sum(report.cycle.new_pages):,} new pages over the cycle ({timings})",
        markup=False,
    )


@app.command()
@user_errors
def worker(
    api: Annotated[str, typer.Option("--api", help="The worker API's base URL (crawlplan serve).")],
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Bearer token (default: the first of api.tokens, e.g. $CRAWLPLAN_API_TOKENS).",
            show_default=False,
        ),
    ] = None,
    workers: WorkersOption = None,
    name: Annotated[
        str,
        typer.Option("--name", help="This pool's name (workers are NAME-0, NAME-1, ...)."),
    ] = socket.gethostname(),
    seconds: SecondsOption = None,
    until_idle: UntilIdleOption = False,
    allow_private: AllowPrivateOption = False,
    config: ConfigOption = None,
) -> None:
    """A remote worker pool: lease from the worker API, crawl politely, report over HTTP.

    Needs no database credentials: only the API's URL and a token. If the server goes away,
    calls are retried for two minutes, so a restart loses nothing.
    """
    settings = load_settings({}, config_file=config)
    secret = token or next(iter(settings.api_tokens), None)
    if not secret:
        raise fail("pass --token or set $CRAWLPLAN_API_TOKENS (the server's bearer token)")
    if not api.startswith(("http://", "https://")):
        raise fail(f"--api must be an http:// or https:// URL, got {api!r}")
    probe = RemoteWorkQueue(api, secret, f"{name}-probe", retry_seconds=0.0)
    try:
        probe.policy  # noqa: B018 (checks the URL and the token before starting)
    except RemoteQueueError as error:
        raise fail(str(error)) from None
    crawl_settings = settings.crawl_settings(allow_private=allow_private)

    def queue() -> RemoteWorkQueue:
        return RemoteWorkQueue(api, secret)

    def run(stop: threading.Event, stats: CrawlStats) -> CrawlStats:
        return run_workers(
            queue,
            crawl_settings,
            workers=workers or int(settings.values["crawl.workers"]),
            until_idle=until_idle,
            seconds=seconds,
            stop=stop,
            stats=stats,
            name_prefix=name,
        )

    stats = _with_progress(run)
    out.print(progress_line(stats).replace(", hosts active 0", ""))


@app.command()
@user_errors
def release(
    reschedule: Annotated[
        bool,
        typer.Option(
            "--reschedule",
            help="First give every fetched page its refresh interval from the current plan "
            "(the nightly page schedule), then release.",
        ),
    ] = False,
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="Page-level schedule inside each bucket's quota (with --reschedule): "
            + ", ".join(OBJECTIVES)
            + ".",
        ),
    ] = "obsolescence",
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Release the current plan period's work to the workers (once per period).

    Chooses, per bucket, the pages whose scheduled time has passed longest ago up to the
    plan's quota, and new pages by OPIC cash, within each host's polite capacity; gives each
    a due time inside the period. `crawlplan crawl` does this by itself when a period begins.
    """
    if objective not in OBJECTIVES:
        raise fail(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    settings = _settings(db, config)
    database = _open_checked(settings)
    if reschedule:
        done = schedule_pages(database, objective=objective)
        if done.plan is None:
            raise fail("no plan has been published yet: publish one first (crawlplan nightly)")
        out.print(
            f"scheduled {done.scheduled:,} pages of plan {done.plan} ({objective}); "
            f"{done.unscheduled:,} in buckets without a quota this cycle ({done.seconds:.1f} s)"
        )
    summary = release_period(database, min_delay_seconds=float(settings.values["crawl.min_delay"]))
    if summary.status == "released":
        _release_line(summary, out)
    elif summary.status == "no plan":
        raise fail("no plan has been published yet: nothing to release")
    elif summary.status == "not scheduled yet":
        raise fail(
            f"plan {summary.plan} has no page schedule yet: run `crawlplan release "
            "--reschedule` (the nightly pipeline runs it after publishing a plan)"
        )
    else:
        out.print(
            f"plan {summary.plan}: {summary.status}"
            + (f" (period {summary.period})" if summary.period else "")
        )


@app.command()
@user_errors
def demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the stores and the report go (recreated).")
    ] = Path("demo-out"),
    hosts: Annotated[int, typer.Option(min=1, max=400, help="Synthetic hosts.")] = 200,
    pages: Annotated[int, typer.Option(min=2, help="Pages per host.")] = 100,
    period: Annotated[float, typer.Option(min=0.5, help="Seconds per plan period.")] = 8.0,
    periods: Annotated[int, typer.Option(min=1, help="Periods per plan cycle.")] = 3,
    cycles: Annotated[int, typer.Option(min=1, help="Cycles (nightly plans) to run.")] = 8,
    capacity: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Crawls per period of each crawl (default: 15 % of the pages per cycle).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Worker threads per crawl.")] = 8,
) -> None:
    """The whole service on the embedded default, scored against ground truth.

    Starts a synthetic web on loopback (one port per host, ground truth kept) and crawls it
    twice side by side with the same budget: crawlplan (nightly plans, period releases) and a
    uniform recrawl. Prints repository freshness per period and cycle for both, the plan's
    quotas by bucket, politeness and change-detection checks; writes report.md,
    freshness.csv and freshness.png to --dir.
    """
    run_demo(
        DemoSettings(
            directory,
            hosts=hosts,
            pages=pages,
            period=period,
            periods=periods,
            cycles=cycles,
            capacity=capacity,
            workers=workers,
        ),
        say=lambda line: out.print(line, markup=False),
    )


@app.command()
@user_errors
def solve(
    instance_file: Annotated[
        Path | None,
        typer.Argument(help="Instance JSON (see docs/model.md for the keys).", show_default=False),
    ] = None,
    out_file: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the solution JSON.")
    ] = Path("solution.json"),
    strategy: Annotated[
        int, typer.Option("--strategy", "-s", min=1, max=3, help="The paper's strategy 1, 2 or 3.")
    ] = 3,
    paper: Annotated[
        int | None,
        typer.Option(
            "--paper",
            min=1,
            max=3,
            help="Solve the paper's instance v1, v2 or v3 instead.",
            show_default=False,
        ),
    ] = None,
    periods: Annotated[
        int | None,
        typer.Option(
            "--periods", min=1, help="With --paper: periods T (default 14).", show_default=False
        ),
    ] = None,
    starts: Annotated[
        int, typer.Option("--starts", min=1, help="Solve from this many starting points.")
    ] = 1,
    write_instance: Annotated[
        Path | None,
        typer.Option(
            "--write-instance", help="Also write the instance solved (JSON).", show_default=False
        ),
    ] = None,
) -> None:
    """Solve the WebFountain plan for one instance: per-period quotas per change-rate bucket.

    Exit code 0 when the solver found an optimal (or acceptable) plan, 1 when it did not
    (the solution file still says why).
    """
    if (instance_file is None) == (paper is None):
        raise fail("pass an instance file or --paper 1|2|3 (one of them)")
    if paper is not None:
        instance = paper_instance(paper, **({"periods": periods} if periods else {}))
        weights = strategy_weights(strategy, instance.buckets, instance.periods)
        source = f"paper instance v{paper}"
    else:
        assert instance_file is not None
        data = read_json(instance_file)
        if not isinstance(data, dict):
            raise InputFileError(f"{instance_file}: expected a JSON object with instance keys")
        instance = CrawlInstance.from_mapping(data)
        weights = weights_from_mapping(data, instance, strategy)
        source = str(instance_file)
    if write_instance is not None:
        write_json(write_instance, instance.to_mapping())
    err.print(
        f"solving {source}: B = {instance.buckets} buckets, T = {instance.periods} periods, "
        f"{weights.label} ...",
        markup=False,
    )
    solution = PlanSolver(instance, weights).solve(starts=starts)
    write_json(out_file, solution_mapping(instance, solution))
    out.print(
        f"{solution.status.value}: objective {solution.objective:.6g} after "
        f"{solution.iterations} iterations (build {solution.build_seconds:.1f} s, solve "
        f"{solution.solve_seconds:.1f} s); written to {out_file}",
        markup=False,
    )
    if not solution.status.ok:
        err.print(f"error: the solver did not find a plan: {solution.message}", markup=False)
        raise typer.Exit(1)


@app.command()
@user_errors
def estimate(
    observations: Annotated[
        Path | None,
        typer.Option(
            "--observations",
            "-i",
            help="CSV or Parquet, one row per fetch: page, fetched_at (ISO-8601 or days), "
            "changed (1/0, empty on a page's first fetch), optional last_modified, host. "
            "Without it, every page of the store is re-estimated from its observations.",
            show_default=False,
        ),
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="CSV or Parquet, one row per page.", show_default=False),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Estimate each page's change rate (per day), its interval, estimator and bucket.

    With --observations and --out: file in, file out; bad rows are reported with their line
    numbers and the rest is estimated (exit code 1). Without them: the store's pages are
    re-estimated from their observations, in chunks, and the estimates written back.
    """
    if observations is None:
        if out_file is not None:
            raise fail("--out needs --observations; without them the store is estimated")
        settings = _settings(db, config)
        database = _open_checked(settings)
        summary = estimate_from_store(
            database, scale=settings.bucket_scale, policy=settings.last_modified_policy
        )
        out.print(
            f"estimated {summary.pages:,} pages from {summary.fetches:,} fetches "
            f"({', '.join(f'{k} {v:,}' for k, v in sorted(summary.by_estimator.items()))}); "
            f"rates and buckets written to {database.display_url}",
            markup=False,
        )
        return
    if out_file is None:
        raise fail("--observations needs --out FILE (.csv or .parquet)")
    table = read_table(observations)
    missing = [c for c in ("page", "fetched_at", "changed") if c not in table.columns]
    if missing:
        raise InputFileError(
            f"{observations}: missing column(s) {', '.join(missing)}; "
            "expected page, fetched_at, changed and optionally last_modified, host"
        )
    first_line = 2 if observations.suffix.lower() == ".csv" else 1
    settings = _settings(db, config)
    result = estimate_fetch_table(
        table,
        now=utcnow(),
        first_line=first_line,
        scale=settings.bucket_scale,
        policy=settings.last_modified_policy,
    )
    write_table(result.rates, out_file)
    counts = result.rates["estimator"].value_counts().to_dict()
    out.print(
        f"estimated {len(result.rates):,} pages from {len(table):,} fetches "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))}); "
        f"written to {out_file}",
        markup=False,
    )
    for problem in result.problems:
        err.print(f"  {problem.message}", markup=False)
    if result.problems:
        err.print(
            f"error: {len(result.problems)} kind(s) of bad rows in {observations} "
            "(listed above); the other rows were estimated",
            markup=False,
        )
        raise typer.Exit(1)


@app.command()
@user_errors
def schedule(
    pages: Annotated[
        Path | None,
        typer.Option(
            "--pages",
            "-i",
            help="CSV or Parquet, one row per page: page, rate (changes per period), optional "
            "importance (>= 0) and host.",
            show_default=False,
        ),
    ] = None,
    bandwidth: Annotated[
        float | None,
        typer.Option("--bandwidth", "-g", help="Crawls per period, > 0 (G).", show_default=False),
    ] = None,
    objective: Annotated[
        str,
        typer.Option("--objective", help=f"What to optimize: {', '.join(OBJECTIVES)}."),
    ] = "obsolescence",
    hosts: Annotated[
        Path | None,
        typer.Option(
            "--hosts",
            help="CSV or Parquet, one row per host: host, capacity (crawls per period; empty: "
            "no limit), optional min_interval, max_interval (periods). Pages without a host "
            "column are on their URL's origin scheme://host[:port].",
            show_default=False,
        ),
    ] = None,
    bounds: Annotated[
        Path | None,
        typer.Option(
            "--bounds",
            help="CSV or Parquet: pattern (a glob on the page URL: * any run, ? one "
            "character), optional min_interval, max_interval (periods). The first matching "
            "pattern wins and overrides the host's bounds.",
            show_default=False,
        ),
    ] = None,
    discovery_share: Annotated[
        float,
        typer.Option(
            "--discovery-share", help="Share of the bandwidth kept for new pages, in [0, 1)."
        ),
    ] = 0.0,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="CSV or Parquet: page, refresh_rate (crawls per period), interval (periods; "
            "inf: never refreshed), host.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Optimal refresh rate and interval of every page for a bandwidth (Xyleme's schedule
    and its freshness, harmonic and binary variants), within host capacities and bounds.

    Prints one summary line: the bandwidth multiplier, the objective's value, the hosts whose
    capacity binds (with their multipliers) and the bandwidth left unspent. Hosts whose
    capacity cannot meet their pages' max intervals get a warning; the schedule is written.
    """
    if pages is None or out_file is None or bandwidth is None:
        raise fail("pass --pages FILE, --bandwidth G and --out FILE (.csv or .parquet)")
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise fail(
            f"--bandwidth must be a finite number > 0 (crawls per period), got {bandwidth:g}"
        )
    if objective not in OBJECTIVES:
        raise fail(f"unknown --objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    if not (0.0 <= discovery_share < 1.0):
        raise fail(f"--discovery-share must be in [0, 1), got {discovery_share:g}")
    if out_file.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise fail(f"{out_file}: the output must end in .csv or .parquet")
    inputs = read_schedule_inputs(pages, hosts, bounds)
    result = refresh_schedule(
        inputs.rate,
        bandwidth,
        objective=objective,
        importance=inputs.importance,
        host=inputs.host,
        host_capacity=inputs.capacity,
        min_interval=inputs.min_interval,
        max_interval=inputs.max_interval,
        discovery_share=discovery_share,
    )
    write_table(schedule_table(inputs, result), out_file)
    summary, warnings = describe_schedule(inputs, result, out_file)
    out.print(summary, markup=False)
    for line in warnings:
        err.print(line, markup=False)


app.command()(user_errors(importance))


app.add_typer(scenario_app, name="scenario")


@app.command()
@user_errors
def serve(
    host: Annotated[
        str | None, typer.Option("--host", help="Address to listen on.", show_default=False)
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port to listen on.", show_default=False),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the worker API (HTTP/JSON, OpenAPI at /docs) so that remote workers
    (`crawlplan worker --api URL`) lease and report without database credentials.

    Needs api.tokens (comma-separated bearer tokens, 16+ characters each) in crawlplan.toml
    or $CRAWLPLAN_API_TOKENS. Stops cleanly on Ctrl-C or SIGTERM.
    """
    import uvicorn

    from service.api.app import ApiSettings, create_app

    settings = _settings(db, config)
    tokens = settings.api_tokens
    if not tokens or any(len(t) < 16 for t in tokens):
        raise fail(
            "the worker API needs api.tokens: set $CRAWLPLAN_API_TOKENS or [api] tokens in "
            "crawlplan.toml to one or more comma-separated tokens of 16+ characters"
        )
    database = _open_checked(settings)
    app_ = create_app(
        database,
        ApiSettings(
            tokens=tokens,
            policy=settings.lease_policy,
            max_body_bytes=int(settings.values["api.max_body_bytes"]),
            min_delay_seconds=float(settings.values["crawl.min_delay"]),
        ),
    )
    listen = host or str(settings.values["api.host"])
    listen_port = port or int(settings.values["api.port"])
    err.print(f"worker API on http://{listen}:{listen_port} (OpenAPI at /docs)", markup=False)
    uvicorn.run(
        app_,
        host=listen,
        port=listen_port,
        log_level="warning",
        limit_concurrency=int(settings.values["api.max_connections"]),
        timeout_keep_alive=5,
    )


@app.command("config")
@user_errors
def show_config(db: DbOption = None, config: ConfigOption = None) -> None:
    """Print every setting, its value and where it came from (option, environment, file)."""
    settings = _settings(db, config)
    width = max(len(s.key) for s in SETTINGS)
    for s in SETTINGS:
        out.print(f"{s.key:<{width}} = {settings.values[s.key]}", markup=False)
        out.print(
            f"{'':<{width}}   from {settings.origins[s.key]}; ${s.env}; {s.help}", markup=False
        )


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)
