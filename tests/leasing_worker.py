"""A test worker process for the concurrency and crash tests (run with multiprocessing spawn).

It leases batches until nothing is left to lease, "fetches" each page instantly, reports and
releases. While it holds a host it also holds an exclusive ``flock`` on a per-host file, so a
host leased to two workers at once is caught as it happens, and it logs the monotonic-clock
interval in which it held each lease (strictly inside the real holding interval).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from sqlalchemy import func, select

from store import FetchResult, LeasePolicy, LeaseQueue, open_database
from store.models import Page
from store.types import utcnow


def run(
    db_url: str,
    worker: str,
    lock_dir: str,
    out_path: str,
    *,
    lease_seconds: float = 600.0,
    max_urls: int = 60,
    hold_seconds: float = 0.0,
    stop_after_leases: int | None = None,
    finish: bool = False,
) -> None:
    """Lease, report and release until no page is due; write the log to ``out_path``."""
    db = open_database(db_url)
    queue = LeaseQueue(
        db,
        LeasePolicy(
            lease_seconds=lease_seconds, max_urls=max_urls, max_urls_per_host=20, max_hosts=5
        ),
    )
    log: list[dict[str, object]] = []
    violations: list[str] = []
    leases_taken = 0
    idle = 0
    while True:
        batch = queue.lease(worker)
        if not batch:
            with db.read() as conn:
                left = conn.execute(
                    select(func.count()).where(Page.next_due_at <= utcnow())
                ).scalar_one()
            if left == 0 or idle > 2000:
                break
            idle += 1
            time.sleep(0.01)
            continue
        idle = 0
        for lease in batch:
            lock = open(Path(lock_dir) / f"host-{lease.host_id}.lock", "w")  # noqa: SIM115
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                violations.append(f"host {lease.host_id} held by another worker")
                fcntl.flock(lock, fcntl.LOCK_EX)
            start = time.monotonic()
            if hold_seconds:
                time.sleep(hold_seconds)
            now = utcnow()
            results = [
                FetchResult(
                    page_id=p.page_id,
                    fetched_at=now,
                    status="ok",
                    http_status=200,
                    signature=f"{p.page_id:016x}",
                    bytes=1000,
                    duration=0.001,
                )
                for p in lease.pages
            ]
            if finish:
                # The host is free in the store once finish() commits, so the flock (and the
                # logged interval) must end before it: they sit inside the true holding time.
                end = time.monotonic()
                fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()
                outcome, _ = queue.finish(lease.lease_id, results)
            else:
                outcome = queue.report(lease.lease_id, results)
                end = time.monotonic()
                fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()
                queue.release(lease.lease_id)
            log.append(
                {
                    "lease": lease.lease_id,
                    "host": lease.host_id,
                    "pages": [p.page_id for p in lease.pages],
                    "start": start,
                    "end": end,
                    "recorded": outcome.recorded,
                }
            )
            leases_taken += 1
        if stop_after_leases is not None and leases_taken >= stop_after_leases:
            break
    Path(out_path).write_text(
        json.dumps({"worker": worker, "pid": os.getpid(), "log": log, "violations": violations})
    )
    db.dispose()


def lease_and_hang(db_url: str, worker: str, ready_path: str, lease_seconds: float) -> None:
    """Lease one batch, write its page ids to ``ready_path``, then hang until killed."""
    db = open_database(db_url)
    queue = LeaseQueue(db, LeasePolicy(lease_seconds=lease_seconds, max_urls=50, max_hosts=5))
    batch = queue.lease(worker)
    pages = [p.page_id for lease in batch for p in lease.pages]
    Path(ready_path).write_text(json.dumps(pages))
    time.sleep(3600)
