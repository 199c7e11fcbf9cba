"""A crawl over several processes, so that one machine's cores all parse and fetch.

A worker thread spends most of its CPU time in Python (HTTP parsing in ``requests``, HTML
parsing, signatures, the store's statements), and the threads of one process share one
interpreter lock: one process tops out at about one core. :func:`run_crawl_processes` starts
``processes`` spawned processes, each running :func:`~crawler.worker.run_workers` with its own
connection to the store. Nothing else changes: hosts are leased through the store, so a host
is still crawled by one worker at a time and politeness holds across processes.

The parent owns the stop: children ignore SIGINT (a Ctrl-C reaches the whole process group;
the parent turns it into a graceful stop) and treat SIGTERM as a graceful stop too. Each
child sends its counters every half second; the parent's :class:`CrawlStats` holds their
sum. A child whose parent died (SIGKILL) stops as if told to. A child that dies (SIGKILL,
a crash) loses only what it had not reported: its leases expire and their pages return to
the pool, as with a killed single-process crawl.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import signal
import threading
import time
from dataclasses import fields
from multiprocessing.queues import Queue as ProcessQueue
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

from crawler.worker import CrawlSettings, CrawlStats, run_workers
from estimators.opic import crawl_virtual_gift
from store import LeasePolicy, LeaseQueue, open_database
from store.importance import spread_virtual_cash

__all__ = ["run_crawl_processes"]

log = logging.getLogger(__name__)

#: The counters a child reports (every int field of CrawlStats).
_COUNTERS = tuple(f.name for f in fields(CrawlStats) if f.type in (int, "int"))
_REPORT_EVERY = 0.5


def _counters(stats: CrawlStats) -> dict[str, int]:
    with stats.lock:
        return {name: getattr(stats, name) for name in _COUNTERS}


def _child(
    index: int,
    db_url: str,
    policy: LeasePolicy,
    settings: CrawlSettings,
    workers: int,
    until_idle: bool,
    seconds: float | None,
    stop: ProcessEvent,
    reports: ProcessQueue[tuple[int, dict[str, int], bool]],
) -> None:
    """One process of the pool: ``workers`` threads until the shared stop, idle or time."""
    local_stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda _s, _f: local_stop.set())
    db = open_database(db_url)
    stats = CrawlStats()
    done = threading.Event()
    orphaned = threading.Event()

    def relay() -> None:  # the shared stop to the local one, counters to the parent
        while not done.is_set():
            if stop.wait(_REPORT_EVERY):
                local_stop.set()
            elif _orphaned():
                # A parent killed with SIGKILL sets no stop: a child that finds itself
                # orphaned stops by itself (its in-flight fetches end and are reported to the
                # store). Nobody reads its counters any more: a sibling holds the queue's pipe
                # open, so once full it would block this process's exit for good.
                orphaned.set()
                local_stop.set()
                reports.cancel_join_thread()
                return
            reports.put((index, _counters(stats), False))

    relay_thread = threading.Thread(target=relay, name="relay", daemon=True)
    relay_thread.start()
    try:
        run_workers(
            lambda: LeaseQueue(db, policy),
            settings,
            workers=workers,
            until_idle=until_idle,
            seconds=seconds,
            stop=local_stop,
            stats=stats,  # workers named {host}-{this child's pid}-{n}
        )
    finally:
        done.set()
        relay_thread.join(timeout=5)
        if not orphaned.is_set():
            reports.put((index, _counters(stats), True))
        db.engine.dispose()


def _orphaned() -> bool:
    """Whether the process that started this one has ended.

    Asked of the parent's sentinel, not of ``os.getppid()``: a parent killed while this
    process was still starting (importing takes seconds on a loaded machine) would leave a
    remembered parent pid that is already the reaper's."""
    parent = multiprocessing.parent_process()
    return parent is not None and not parent.is_alive()


def run_crawl_processes(
    db_url: str,
    policy: LeasePolicy,
    settings: CrawlSettings,
    *,
    processes: int,
    workers: int = 4,
    until_idle: bool = False,
    seconds: float | None = None,
    stop: threading.Event | None = None,
    stats: CrawlStats | None = None,
) -> CrawlStats:
    """Crawl the store at ``db_url`` with ``processes`` processes of ``workers`` threads.

    As :func:`crawler.worker.run_crawl` (the virtual page's OPIC cash is spread before and
    after, once), but ``stop`` is watched by the parent and ``stats`` holds the sum of the
    children's counters, updated every half second. Raises ``RuntimeError`` naming the
    processes that exited with an error.
    """
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    stop = stop or threading.Event()
    stats = stats or CrawlStats()
    db = open_database(db_url)
    spread_virtual_cash(db, crawl_virtual_gift)
    ctx = multiprocessing.get_context("spawn")
    shared_stop = ctx.Event()
    reports: ProcessQueue[tuple[int, dict[str, int], bool]] = ctx.Queue()
    children = [
        ctx.Process(
            target=_child,
            args=(i, db_url, policy, settings, workers, until_idle, seconds, shared_stop, reports),
            name=f"crawl-p{i}",
            daemon=True,
        )
        for i in range(processes)
    ]
    latest: dict[int, dict[str, int]] = {}
    finished: set[int] = set()

    def absorb(block: float | None) -> None:
        try:
            index, counters, last = reports.get(timeout=block) if block else reports.get_nowait()
        except queue.Empty:
            return
        latest[index] = counters
        if last:
            finished.add(index)
        _set_sums(stats, latest)

    try:
        for child in children:
            child.start()
        while any(c.is_alive() for c in children):
            if stop.is_set():
                shared_stop.set()
            absorb(0.25)
        deadline = time.monotonic() + 5.0  # the last reports of children that ended cleanly
        while len(finished) < processes and time.monotonic() < deadline:
            absorb(0.1)
    finally:
        shared_stop.set()
        for child in children:
            child.join(timeout=60)
        spread_virtual_cash(db, crawl_virtual_gift)
        db.engine.dispose()
    failed = [f"{c.name} (exit {c.exitcode})" for c in children if c.exitcode not in (0, None)]
    if failed:
        raise RuntimeError(f"crawl processes failed: {', '.join(failed)}")
    return stats


def _set_sums(stats: CrawlStats, latest: dict[int, dict[str, Any]]) -> None:
    with stats.lock:
        for name in _COUNTERS:
            setattr(stats, name, sum(c[name] for c in latest.values()))
