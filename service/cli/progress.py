"""Running a crawler worker pool from the command line: progress, period releases, stopping.

``crawlplan crawl`` and ``crawlplan worker`` share this: the pool runs in a background thread
while the main thread shows one progress line on a terminal, releases a new plan period's work
when it begins (a local crawl only), and turns SIGINT/SIGTERM into a clean stop (in-flight
fetches finish and are reported, leases are released).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from service.cli.support import err, freeze_start_up

if TYPE_CHECKING:
    from rich.console import Console

    from crawler.worker import CrawlSettings, CrawlStats
    from service.config import Settings
    from service.pipeline import ReleaseSummary
    from store.database import Database

__all__ = ["RELEASE_CHECK_SECONDS", "crawl_with_progress", "release_line", "with_progress"]

#: How often a running crawl checks whether a new plan period has begun (seconds).
RELEASE_CHECK_SECONDS = 5.0


def with_progress(
    run: Callable[[threading.Event, CrawlStats], CrawlStats],
    tick: Callable[[], None] | None = None,
) -> CrawlStats:
    """Run a worker pool in the background; show progress; call ``tick`` every few seconds;
    stop cleanly on SIGINT/SIGTERM."""
    from rich.live import Live
    from rich.text import Text

    from crawler.worker import CrawlStats
    from service.crawl_progress import progress_line

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
    next_tick = time.monotonic() + RELEASE_CHECK_SECONDS
    try:
        with Live(console=err, transient=True, auto_refresh=False, redirect_stdout=False) as live:
            runner.start()
            while runner.is_alive():
                runner.join(timeout=0.5)
                if tick is not None and time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + RELEASE_CHECK_SECONDS
                    tick()
                if err.is_terminal:
                    live.update(Text(progress_line(stats)), refresh=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stats


def crawl_with_progress(
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
    from crawler.processes import run_crawl_processes
    from crawler.worker import run_crawl
    from service.pipeline import release_period
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

    def release() -> None:  # a new plan period: release its work
        release_line(release_period(database, min_delay_seconds=min_delay))

    return with_progress(run, release)


def release_line(summary: ReleaseSummary, console: Console = err) -> None:
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
