"""The end-to-end demo, short: a synthetic web crawled for real under nightly plans and under
the uniform baseline at the same budget, scored against ground truth."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from planner.demo import DemoSettings, run_demo
from store import open_database
from store.models import (
    NIGHTLY_RUNS,
    OBSERVATIONS,
    PAGES,
    PERIOD_RELEASES,
    PLAN_PERIODS,
    PLANS,
    QUOTAS,
)


def test_short_demo_end_to_end(tmp_path: Path) -> None:
    lines: list[str] = []
    report = run_demo(
        DemoSettings(tmp_path, hosts=6, pages=6, period=1.5, periods=3, cycles=3, workers=3),
        say=lines.append,
    )
    # Freshness was measured every period for both crawls, against ground truth.
    assert len(report.seconds) == 9 and len(report.cycles) == 3
    assert all(0.0 <= f <= 1.0 for f in report.planned + report.uniform)
    assert report.planned[-1] > 0.2 and report.uniform[-1] > 0.2
    # Both crawls kept the same budget (quotas within capacity) and stayed polite.
    budget = 6 * 6 * 0.6 / 3
    for fetched in report.fetched.values():
        assert 0 < fetched <= 9 * round(budget) + 40  # + robots.txt and redirects followed
    assert report.smallest_gap >= 0.05 - 0.005
    db = open_database(f"sqlite:///{tmp_path / 'crawlplan.db'}")
    with db.read() as conn:
        plans = conn.execute(select(func.count()).select_from(PLANS)).scalar_one()
        runs = conn.execute(
            select(func.count()).where(NIGHTLY_RUNS.c.status == "published")
        ).scalar_one()
        releases = conn.execute(select(func.count()).select_from(PERIOD_RELEASES)).scalar_one()
        estimated = conn.execute(
            select(func.count()).where(PAGES.c.estimator.is_not(None))
        ).scalar_one()
        fetches = conn.execute(select(func.count()).select_from(OBSERVATIONS)).scalar_one()
        released = conn.execute(select(func.sum(PERIOD_RELEASES.c.pages))).scalar_one()
        planned = (
            conn.execute(select(func.sum(QUOTAS.c.pages))).scalar_one()
            + conn.execute(select(func.sum(PLAN_PERIODS.c.new_pages))).scalar_one()
        )
    assert plans == runs == 3  # a plan published by each cycle's nightly run
    assert releases >= 6  # the periods were released to the workers
    assert estimated > 0 and fetches > 0  # pages discovered, fetched and estimated
    assert released >= 0.5 * planned * releases / (3 * 3)  # quotas met in the periods run
    assert any(line.startswith("| 3 |") for line in lines)  # the per-cycle table
    for name in ("report.md", "freshness.csv", "freshness.png"):
        assert (tmp_path / name).stat().st_size > 0
