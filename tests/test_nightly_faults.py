"""kill -9 of a nightly run during estimate, solve, publish and before its page schedule, on
SQLite and PostgreSQL: the previous plan stays in force, the next run finishes the work, and
nothing is published twice.

The killed run is a real process (``tests/nightly_fault.py``) that sends itself SIGKILL at
the named point, so no handler, ``finally`` or ``atexit`` runs: what is left in the store is
what a power cut or the OOM killer would leave. Times are the real clock's, as the run's
heartbeats are. The next run starts at once, though the killed run's heartbeat is fresh:
the nightly run lock the killed process held (``store.nightly_runs.run_liveness``) was freed
by the kernel (SQLite) or the server (PostgreSQL) when it died.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.nightly import NightlySettings, cycle_start, run_nightly
from store import Database, FetchResult, LeasePolicy, LeaseQueue, add_pages, latest_plan
from store.due_times import page_schedule_finished
from store.models import NIGHTLY_RUNS, PLANS, QUOTAS
from store.types import utcnow

SETTINGS = NightlySettings(period_days=1.0, periods=4, strategy=1, capacity=8.0)

DAY = timedelta(days=1)
ROOT = Path(__file__).resolve().parents[1]


def _history(db: Database, base: object, pages: int = 10, visits: int = 6) -> None:
    """``pages`` pages fetched daily for ``visits`` days from ``base`` (page k changes every
    k-th visit), and three pages never fetched."""
    add_pages(db, [(f"http://h.test/p{k}", "http://h.test") for k in range(pages)], now=base)
    queue = LeaseQueue(db, LeasePolicy(max_urls=pages, max_urls_per_host=pages))
    for day in range(visits):
        now = base + day * DAY + timedelta(minutes=1)  # type: ignore[operator]
        (lease,) = queue.lease("w", now=now)
        results = [
            FetchResult(
                leased.page_id,
                now,
                "ok",
                200,
                changed=None
                if day == 0
                else bool((k := int(leased.url.rsplit("p", 1)[1])) and day % k == 0),
                duration=0.1,
                next_due_at=now + DAY - timedelta(minutes=2),
            )
            for leased in lease.pages
        ]
        queue.finish(lease.lease_id, results, now=now)
    add_pages(db, [(f"http://h.test/new{k}", "http://h.test") for k in range(3)], now=base)


def _runs(db: Database) -> list[str]:
    with db.read() as conn:
        query = select(NIGHTLY_RUNS.c.status).order_by(NIGHTLY_RUNS.c.id)
        return list(conn.execute(query).scalars().all())


def _count(db: Database, table: object) -> int:
    with db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


#: The last stage a run killed at each point has finished.
_STAGE_BEFORE = {
    "estimate": "measure",
    "solve": "aggregate",
    "publish": "solve",
    "schedule": "publish",
}


@pytest.mark.parametrize("point", ["estimate", "solve", "publish", "schedule"])
def test_kill_9_during_nightly_keeps_the_plan_and_the_next_run_finishes(
    db: Database, point: str
) -> None:
    now = utcnow()
    if cycle_start(now + timedelta(minutes=2), 1.0) != cycle_start(now, 1.0):
        pytest.skip("too close to the cycle's end: the next run would plan the next cycle")
    _history(db, cycle_start(now, 1.0) - 7 * DAY)
    assert run_nightly(db, SETTINGS, now=now - DAY).status == "published"
    quotas_before = _count(db, QUOTAS)

    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.nightly_fault",
            str(db.url.render_as_string(hide_password=False)),
            point,
            now.isoformat(),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    # Killed inside the named stage: the stage before it was the last to finish.
    stages_done = [line.split(":")[0] for line in killed.stdout.splitlines() if " s" in line]
    assert stages_done[-1] == _STAGE_BEFORE[point], killed.stdout

    # The killed run is left "running"; the plan in force is the previous one (or, killed
    # after publishing, the new one with its page schedule unfinished).
    assert _runs(db) == ["published", "running"]
    plan = latest_plan(db)
    assert plan is not None
    if point == "schedule":
        assert plan.version == 2 and not page_schedule_finished(db, 2)
    else:
        assert plan.version == 1 and plan.starts_at < cycle_start(now, 1.0)
        assert _count(db, PLANS) == 1 and _count(db, QUOTAS) == quotas_before

    # At once, not after stale_after (30 minutes): the killed process's lock is gone.
    report = run_nightly(db, SETTINGS, now=utcnow())
    assert report.status == ("resumed" if point == "schedule" else "published"), report.message
    assert report.plan == 2 and _count(db, PLANS) == 2
    assert page_schedule_finished(db, 2)
    assert latest_plan(db).starts_at == cycle_start(now, 1.0)  # type: ignore[union-attr]
    assert _runs(db) == ["published", "abandoned", report.status]

    # Nothing is published twice: the cycle is planned.
    again = run_nightly(db, SETTINGS, now=utcnow())
    assert again.status == "unchanged" and _count(db, PLANS) == 2
