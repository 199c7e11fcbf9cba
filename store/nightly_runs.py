"""The record of nightly runs: one row each, a heartbeat per stage, and one run at a time.

:func:`start_run` is the lock: in one transaction it marks runs whose heartbeat is older than
``stale_after`` as ``abandoned`` (they were killed) and refuses to start while another run's
heartbeat is fresh. A run that holds :func:`run_liveness` (``crawlplan nightly`` does, for
its whole life) knows more: the lock is held by a live run's process and freed by the
kernel or the server when that process dies, so whoever gets it knows every other
``running`` row is a dead run's, and a run killed with SIGKILL is taken over at once rather
than after ``stale_after``. The lock is an ``flock`` of ``<db>-nightly`` beside a SQLite
file, and a session advisory lock on PostgreSQL (any machine that shares the server).

Each stage moves the heartbeat (:func:`heartbeat`), and
:func:`finish_run` writes the outcome. A killed run costs nothing but its row: everything it
wrote before the publish stage is recomputed by the next run, and the plan it may have
published is complete (publishing is one transaction).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, text, update

from store.database import Database, sqlite_path
from store.errors import NightlyRunBusyError
from store.models import NIGHTLY_RUNS
from store.types import utcnow

__all__ = [
    "NightlyRunRecord",
    "finish_run",
    "heartbeat",
    "recent_runs",
    "run_liveness",
    "start_run",
]

#: The PostgreSQL advisory lock key of :func:`start_run` (any constant of our own).
_LOCK_KEY = 0x63726177_6C6E6967  # "crawlnig"
#: The PostgreSQL session advisory lock key of :func:`run_liveness`.
_LIVENESS_KEY = 0x63726177_6C697665  # "crawlive"


@contextmanager
def run_liveness(db: Database, *, wait_seconds: float = 3.0) -> Iterator[bool | None]:
    """Hold the nightly run lock while the block runs.

    Yields True when this process holds it (no other live run does: pass
    ``others_dead=True`` to :func:`start_run`), False when another live process holds it
    (a run is going on), None when the store has no such lock (an in-memory SQLite
    database): then only heartbeats tell. A lock held by another session is tried again
    for ``wait_seconds``: PostgreSQL frees a killed client's lock when its server process
    notices the closed connection and exits, which takes a moment after the kill.
    """
    if db.dialect == "postgresql":
        with db.engine.connect() as conn:
            deadline = time.monotonic() + wait_seconds
            while True:
                got = bool(
                    conn.execute(
                        text("SELECT pg_try_advisory_lock(:key)"), {"key": _LIVENESS_KEY}
                    ).scalar_one()
                )
                conn.commit()
                if got or time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
            try:
                yield got
            finally:
                if got:
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _LIVENESS_KEY})
                    conn.commit()
        return
    path = sqlite_path(db.url)
    if path is None:
        yield None
        return
    try:
        fd = os.open(f"{path}-nightly", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a directory this process may not write: heartbeats decide
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class NightlyRunRecord:
    """One row of ``nightly_runs``."""

    id: int
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    cycle_start: datetime
    status: str
    plan_id: int | None
    stages: dict[str, Any]
    message: str | None


def start_run(
    db: Database,
    *,
    cycle_start: datetime,
    stale_after: timedelta,
    now: datetime | None = None,
    others_dead: bool | None = None,
) -> int:
    """Record a new run as ``running`` and return its id, or raise NightlyRunBusyError.

    ``others_dead`` is what :func:`run_liveness` yielded: True marks every ``running`` row
    ``abandoned`` whatever its heartbeat (its process is gone), False refuses at once (a
    live run holds the lock), None leaves it to the heartbeats."""
    when = now or utcnow()
    runs = NIGHTLY_RUNS.c
    if others_dead is False:
        raise NightlyRunBusyError(
            "another nightly run is still running (its process holds the nightly run lock): "
            "wait for it"
        )

    def work(conn: Connection) -> int:
        if conn.dialect.name == "postgresql":
            # Two runs starting at once would both see nothing running (read committed):
            # one lock for the check and the insert. SQLite's writes are serialized already.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        if others_dead:
            conn.execute(
                update(NIGHTLY_RUNS)
                .where(runs.status == "running")
                .values(status="abandoned", message="its process ended before the run did")
            )
        conn.execute(
            update(NIGHTLY_RUNS)
            .where(runs.status == "running", runs.heartbeat_at < when - stale_after)
            .values(status="abandoned", message="stopped before it finished (killed?)")
        )
        busy = conn.execute(
            select(runs.id, runs.heartbeat_at).where(runs.status == "running").limit(1)
        ).one_or_none()
        if busy is not None:
            raise NightlyRunBusyError(
                f"nightly run {busy.id} is still running (last heartbeat "
                f"{busy.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC): wait for it, or if it was killed "
                f"retry after {stale_after.total_seconds():.0f} s without a heartbeat"
            )
        return int(
            conn.execute(
                NIGHTLY_RUNS.insert()
                .values(
                    started_at=when,
                    heartbeat_at=when,
                    cycle_start=cycle_start,
                    status="running",
                    stages={},
                )
                .returning(runs.id)
            ).scalar_one()
        )

    return db.run_write(work)


def _still_running(conn: Connection, run_id: int, values: dict[str, Any]) -> None:
    moved = conn.execute(
        update(NIGHTLY_RUNS)
        .where(NIGHTLY_RUNS.c.id == run_id, NIGHTLY_RUNS.c.status == "running")
        .values(**values)
    ).rowcount
    if not moved:
        raise NightlyRunBusyError(
            f"nightly run {run_id} was taken for dead (no heartbeat for too long) and another "
            "run took over: this one stops"
        )


def heartbeat(
    db: Database, run_id: int, stages: Mapping[str, float], *, now: datetime | None = None
) -> None:
    """Move the run's heartbeat and store the stage timings so far; raises
    NightlyRunBusyError when another run has taken over (this one was marked abandoned)."""
    values = {"heartbeat_at": now or utcnow(), "stages": dict(stages)}
    db.run_write(lambda conn: _still_running(conn, run_id, values))


def finish_run(
    db: Database,
    run_id: int,
    *,
    status: str,
    stages: Mapping[str, float],
    plan_id: int | None = None,
    message: str | None = None,
    now: datetime | None = None,
) -> None:
    """Write the run's outcome (NightlyRunBusyError when another run took over)."""
    when = now or utcnow()
    values = {
        "status": status,
        "heartbeat_at": when,
        "finished_at": when,
        "plan_id": plan_id,
        "stages": dict(stages),
        "message": message,
    }
    db.run_write(lambda conn: _still_running(conn, run_id, values))


def recent_runs(db: Database, limit: int = 10) -> list[NightlyRunRecord]:
    """The latest runs, newest first."""
    with db.read() as conn:
        rows = conn.execute(
            select(NIGHTLY_RUNS).order_by(NIGHTLY_RUNS.c.id.desc()).limit(limit)
        ).all()
    return [NightlyRunRecord(**row._mapping) for row in rows]
