"""The record of nightly runs: one row each, a heartbeat per stage, and one run at a time.

:func:`start_run` is the lock: in one transaction it marks runs whose heartbeat is older than
``stale_after`` as ``abandoned`` (they were killed) and refuses to start while another run's
heartbeat is fresh. Each stage moves the heartbeat (:func:`heartbeat`), and
:func:`finish_run` writes the outcome. A killed run costs nothing but its row: everything it
wrote before the publish stage is recomputed by the next run, and the plan it may have
published is complete (publishing is one transaction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, update

from store.database import Database
from store.errors import NightlyRunBusyError
from store.models import NIGHTLY_RUNS
from store.types import utcnow

__all__ = ["NightlyRunRecord", "finish_run", "heartbeat", "recent_runs", "start_run"]


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
) -> int:
    """Record a new run as ``running`` and return its id, or raise NightlyRunBusyError."""
    when = now or utcnow()
    runs = NIGHTLY_RUNS.c

    def work(conn: Connection) -> int:
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


def heartbeat(
    db: Database, run_id: int, stages: Mapping[str, float], *, now: datetime | None = None
) -> None:
    """Move the run's heartbeat and store the stage timings so far."""
    db.run_write(
        lambda conn: conn.execute(
            update(NIGHTLY_RUNS)
            .where(NIGHTLY_RUNS.c.id == run_id)
            .values(heartbeat_at=now or utcnow(), stages=dict(stages))
        )
    )


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
    """Write the run's outcome."""
    when = now or utcnow()
    db.run_write(
        lambda conn: conn.execute(
            update(NIGHTLY_RUNS)
            .where(NIGHTLY_RUNS.c.id == run_id)
            .values(
                status=status,
                heartbeat_at=when,
                finished_at=when,
                plan_id=plan_id,
                stages=dict(stages),
                message=message,
            )
        )
    )


def recent_runs(db: Database, limit: int = 10) -> list[NightlyRunRecord]:
    """The latest runs, newest first."""
    with db.read() as conn:
        rows = conn.execute(
            select(NIGHTLY_RUNS).order_by(NIGHTLY_RUNS.c.id.desc()).limit(limit)
        ).all()
    return [NightlyRunRecord(**row._mapping) for row in rows]
