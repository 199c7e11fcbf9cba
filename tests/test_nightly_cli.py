"""`crawlplan nightly` from the command line: output, exit codes, dry run, settings."""

from __future__ import annotations

import gc
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update
from typer.testing import CliRunner

from service.cli.app import app
from store import add_pages, open_database
from store import upgrade_schema as migrate
from store.models import PAGES
from store.types import utcnow


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["nightly", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db = open_database(url, create=True)
    migrate(db)
    add_pages(db, [(f"http://a.test/{i}", "http://a.test") for i in range(30)])
    with db.write() as conn:  # 20 pages fetched (estimated in two buckets), 10 never
        conn.execute(
            update(PAGES)
            .where(PAGES.c.id <= 20)
            .values(
                status="ok",
                bucket=30 + PAGES.c.id % 2 * 40,
                rate=0.5,
                fetches=1,
                last_fetch_at=utcnow() - timedelta(days=2),
            )
        )
    db.dispose()
    return url


def test_nightly_needs_a_capacity_before_any_crawl(tmp_path: Path) -> None:
    url = _store(tmp_path)
    code, out, err = _run("--db", url)
    assert code == 2 and out == ""
    assert err.startswith("error: no crawl throughput has been measured yet: set plan.capacity")
    assert len(err.strip().splitlines()) == 1


def test_nightly_publishes_then_leaves_the_cycle_alone(tmp_path: Path) -> None:
    url = _store(tmp_path)
    env = {"CRAWLPLAN_CAPACITY": "10", "CRAWLPLAN_PERIODS": "3"}
    frozen = gc.get_freeze_count()  # what conftest froze before this module
    code, out, err = _run("--db", url, env=env)
    assert code == 0, err
    assert gc.get_freeze_count() > frozen  # what the run set up is out of the collector's way
    assert "3 periods of 1 day, 2 buckets with pages, 10 new pages; capacity 10" in out
    assert "solver: optimal" in out and "published plan 1:" in out
    for stage in ("measure", "estimate", "importance", "aggregate", "solve", "publish", "schedule"):
        assert f"  {stage}: " in err
    code, out, _ = _run("--db", url, env=env)
    assert code == 0 and "plan 1 already covers the cycle" in out
    code, out, _ = _run("--db", url, "--dry-run", env={**env, "CRAWLPLAN_CAPACITY": "20"})
    assert code == 0, out
    assert "bucket" in out and "current /period" in out and "dry run: nothing written" in out
    assert "capacity 20 crawls" in out


def test_bad_plan_settings_are_one_line(tmp_path: Path) -> None:
    url = _store(tmp_path)
    code, _, err = _run("--db", url, env={"CRAWLPLAN_STRATEGY": "4"})
    assert code == 2 and err == "error: plan.strategy must be 1, 2 or 3, got 4\n"
    code, _, err = _run("--db", url, env={"CRAWLPLAN_OBJECTIVE": "fast"})
    assert code == 2 and "plan.objective must be one of obsolescence" in err
    code, _, err = _run("--db", url, env={"CRAWLPLAN_PERIODS": "zero"})
    assert code == 2 and "plan.periods must be int" in err


def test_a_busy_nightly_exits_75_for_cron(tmp_path: Path) -> None:
    from datetime import timedelta as td

    from store.nightly_runs import run_liveness, start_run

    url = _store(tmp_path)
    db = open_database(url)
    with run_liveness(db) as alone:  # a live run holds the nightly run lock
        start_run(db, cycle_start=utcnow(), stale_after=td(minutes=30), others_dead=alone)
        code, _, err = _run("--db", url, env={"CRAWLPLAN_CAPACITY": "10"})
    assert code == 75 and "is still running" in err
