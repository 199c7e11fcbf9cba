"""Running a crawler worker pool from the command line: progress, period releases, stopping.

``crawlplan crawl`` and ``crawlplan worker`` share this: the pool runs in a background thread
while the main thread shows one progress line on a terminal, releases a new plan period's work
when it begins (a local crawl only; the checks are timed by :class:`service.release_timing.
ReleaseTimer`: at each period boundary, and every 1 % of a period in between), and turns
SIGINT/SIGTERM into a clean stop (in-flight fetches finish and are reported, leases are
released; a fetch ends by its total timeout), after which the command exits 128 + the
signal's number (130 for SIGINT, 143 for SIGTERM); a second signal ends the process at once
with the same code (what was not reported is fetched again when its leases expire).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer

from service.cli.support import err, freeze_start_up

if TYPE_CHECKING:
    from rich.console import Console

    from crawler.worker import CrawlSettings, CrawlStats
    from service.config import Settings
    from service.pipeline import ReleaseSummary
    from store.database import Database

__all__ = [
    "PROGRESS_SECONDS",
    "crawl_with_progress",
    "exit_if_interrupted",
    "release_line",
    "with_progress",
]

#: How often the progress line is redrawn, seconds.
PROGRESS_SECONDS = 0.5


def with_progress(
    run: Callable[[threading.Event, CrawlStats], CrawlStats],
    tick: Callable[[], float] | None = None,
    *,
    signals: list[int] | None = None,
) -> CrawlStats:
    """Run a worker pool in the background; show progress; call ``tick`` at once and then
    again after the seconds its last call returned; stop cleanly on SIGINT/SIGTERM, and
    append the signal's number to ``signals`` (the command then exits 128 + it, see
    :func:`exit_if_interrupted`)."""
    from rich.live import Live
    from rich.text import Text

    from crawler.worker import CrawlStats
    from service.crawl_progress import progress_line

    stop = threading.Event()
    stats = CrawlStats()

    def request_stop(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():  # a second signal: the operator will not wait
            err.print(f"{name} again: stopping now; unreported fetches are crawled again")
            for child in multiprocessing.active_children():  # --processes: theirs too
                child.kill()
            os._exit(128 + signum)  # threads blocked in I/O would hold a normal exit
        err.print(f"{name}: finishing in-flight fetches (again to stop at once) ...")
        if signals is not None:
            signals.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    runner = threading.Thread(target=run, args=(stop, stats), daemon=True)
    next_tick = math.inf if tick is None else time.monotonic() + tick()
    next_draw = time.monotonic() + PROGRESS_SECONDS
    try:
        with Live(console=err, transient=True, auto_refresh=False, redirect_stdout=False) as live:
            runner.start()
            while runner.is_alive():
                runner.join(timeout=max(0.0, min(next_tick, next_draw) - time.monotonic()))
                if tick is not None and time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + tick()
                if time.monotonic() >= next_draw:
                    next_draw = time.monotonic() + PROGRESS_SECONDS
                    if err.is_terminal:
                        live.update(Text(progress_line(stats)), refresh=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stats


def exit_if_interrupted(signals: list[int]) -> None:
    """End a command stopped by a signal as the shell does: exit 128 + its number (130 for
    Ctrl-C / SIGINT, 143 for SIGTERM), after it has reported and released what it held."""
    if signals:
        raise typer.Exit(128 + signals[0])


def crawl_with_progress(
    database: Database,
    settings: Settings,
    crawl: CrawlSettings,
    *,
    workers: int,
    until_idle: bool,
    seconds: float | None,
    processes: int = 1,
    signals: list[int] | None = None,
) -> CrawlStats:
    """Crawl from the store with progress, releasing each new plan period's work."""
    from crawler.processes import run_crawl_processes
    from crawler.worker import run_crawl
    from service.pipeline import release_period
    from service.release_timing import ReleaseTimer
    from store import LeaseQueue

    freeze_start_up()

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

    timer = ReleaseTimer(period_seconds=float(settings.values["plan.period_days"]) * 86_400)

    def release() -> float:  # a new plan period: release its work; seconds to the next check
        summary = release_period(database, min_delay_seconds=min_delay)
        release_line(summary)
        return timer.wait_after(summary, datetime.now(UTC))

    return with_progress(run, release, signals=signals)


def _quota_name(bucket: int) -> str:
    from planner.cycle.due_urls import NEW_PAGES, RECRAWLS  # numpy: not at start-up

    if bucket == NEW_PAGES:
        return "new pages"
    return "re-crawls" if bucket == RECRAWLS else f"bucket {bucket}"


def release_line(summary: ReleaseSummary, console: Console = err) -> None:
    """One line (stderr by default) when a period's work was released, and one more when
    crawls its quotas could not use were spilled elsewhere; nothing otherwise."""
    if summary.status != "released":
        return
    shortfalls = "; ".join(
        f"{_quota_name(s.bucket)}: {s.chosen} of {s.quota} ({s.reason})" for s in summary.shortfalls
    )
    console.print(
        f"released plan {summary.plan} period {summary.period}: {summary.released:,} pages "
        f"({sum(summary.by_bucket.values()):,} re-crawls in {len(summary.by_bucket)} buckets, "
        f"{summary.new_pages:,} new), carried over {summary.carried_over:,}, "
        f"withdrawn {summary.withdrawn:,}"
        + (
            f", {summary.older_plans:,} released in this window by the plan before"
            if summary.older_plans
            else ""
        )
        + (f"; {shortfalls}" if shortfalls else "")
    )
    spill = summary.spill_line()
    if spill is not None:
        console.print(spill)
