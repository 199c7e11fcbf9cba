"""`crawlplan release`: the page schedule and the period release from the command line."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import select, update
from typer.testing import CliRunner

from service.cli.app import app
from store import PlanDraft, PlanPeriodDraft, add_pages, open_database, publish_plan
from store import upgrade_schema as migrate
from store.models import PAGES, RELEASED_PAGES
from store.types import utcnow


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["release", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_release_without_a_plan_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    migrate(open_database(url, create=True))
    code, out, err = _run("--db", url)
    assert code == 2 and out == ""
    assert err == "error: no plan has been published yet: nothing to release\n"
    code, _, err = _run("--db", url, "--reschedule")
    assert code == 2 and "no plan has been published yet" in err
    code, _, err = _run("--db", url, "--objective", "fast")
    assert code == 2 and "--objective must be one of obsolescence" in err


def test_reschedule_then_release_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db = open_database(url, create=True)
    migrate(db)
    now = utcnow()
    add_pages(db, [(f"http://a.test/{i}", "http://a.test") for i in range(10)])
    with db.write() as conn:
        conn.execute(
            update(PAGES).values(
                status="ok",
                bucket=30,
                rate=1.0,
                fetches=2,
                last_fetch_at=now - timedelta(days=3),
                next_due_at=now + timedelta(days=1),  # pre-plan due time: withdrawn
            )
        )
    day = timedelta(days=1)
    publish_plan(
        db,
        PlanDraft(
            starts_at=now - timedelta(hours=1),
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=t,
                    starts_at=now - timedelta(hours=1) + (t - 1) * day,
                    ends_at=now - timedelta(hours=1) + t * day,
                    capacity=100.0,
                    new_pages=0,
                    quotas={30: 4},
                )
                for t in (1, 2)
            ],
            inputs={},
            solver={},
        ),
    )
    code, out, err = _run("--db", url, "--reschedule")
    assert code == 0, err
    assert out.startswith("scheduled 10 pages of plan 1 (obsolescence); 0 in buckets without")
    assert "released plan 1 period 1: 4 pages (4 re-crawls in 1 buckets, 0 new)" in out
    with db.read() as conn:
        due = conn.execute(select(RELEASED_PAGES.c.page_id)).all()  # the release queue
    assert len(due) == 4
    code, out, _ = _run("--db", url)
    assert code == 0 and out == "plan 1: already released (period 1)\n"


def test_release_says_where_unusable_quota_went(tmp_path: Path) -> None:
    """A quota of 8 with 4 fetchable pages: the 4 other crawls go to the next bucket, and
    the release prints one line saying so."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db = open_database(url, create=True)
    migrate(db)
    now = utcnow()
    add_pages(db, [(f"http://a.test/{i}", "http://a.test") for i in range(10)])
    with db.write() as conn:
        conn.execute(
            update(PAGES).values(
                status="ok", rate=1.0, fetches=2, last_fetch_at=now - timedelta(days=3)
            )
        )
        conn.execute(update(PAGES).where(PAGES.c.id <= 4).values(bucket=30))
        conn.execute(update(PAGES).where(PAGES.c.id > 4).values(bucket=31))
    start, day = now - timedelta(hours=1), timedelta(days=1)
    publish_plan(
        db,
        PlanDraft(
            starts_at=start,
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(
                    period=1,
                    starts_at=start,
                    ends_at=start + day,
                    capacity=8.0,
                    new_pages=0,
                    quotas={30: 8},
                    marginal={30: 2.0, 31: 1.0},
                )
            ],
            inputs={},
            solver={},
        ),
    )
    code, out, err = _run("--db", url, "--reschedule")
    assert code == 0, err
    assert "released plan 1 period 1: 8 pages (4 re-crawls in 1 buckets, 0 new)" in out
    assert "bucket 30: 4 of 8 (not enough due pages)" in out
    assert out.endswith(
        "plan 1 period 1: spilled 4 crawls that quotas could not use to bucket 31 +4; 0 unspent\n"
    )
