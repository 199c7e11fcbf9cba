"""Plan versions: published atomically, read back, immutable in the database itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import exc, text

from store import (
    Database,
    InvalidPlanError,
    PlanDraft,
    PlanPeriodDraft,
    latest_plan,
    plan_quotas,
    publish_plan,
    read_status,
)
from tests.conftest import T0


def _draft(periods: int = 3, strategy: str = "strategy-2") -> PlanDraft:
    return PlanDraft(
        starts_at=T0,
        period_days=1.0,
        strategy=strategy,
        periods=[
            PlanPeriodDraft(
                period=t,
                starts_at=T0 + timedelta(days=t - 1),
                ends_at=T0 + timedelta(days=t),
                capacity=100.0,
                new_pages=10,
                quotas={1: 30, 7: 60},
                fractions={1: 0.3, 7: 0.6},
            )
            for t in range(1, periods + 1)
        ],
        inputs={"buckets": [1, 7], "b": [100, 100]},
        solver={"iterations": 12, "status": "optimal"},
        objective=123.5,
        solver_status="optimal",
    )


def test_publish_and_read_back_versions(db: Database) -> None:
    assert latest_plan(db) is None
    v1 = publish_plan(db, _draft(), now=T0)
    v2 = publish_plan(db, _draft(periods=2, strategy="strategy-1"), now=T0 + timedelta(hours=1))
    assert (v1, v2) == (1, 2)
    current = latest_plan(db)
    assert current is not None and current.version == 2 and current.strategy == "strategy-1"
    assert current.total_quota == 2 * 90 and current.total_new_pages == 20
    assert plan_quotas(db, 1)[(3, 7)] == 60
    assert read_status(db).plan == current


@pytest.mark.parametrize(
    "table", ["plans SET strategy = 'x'", "quotas SET pages = 0", "plan_periods SET new_pages = 0"]
)
def test_published_plans_cannot_be_updated(db: Database, table: str) -> None:
    publish_plan(db, _draft(), now=T0)
    with pytest.raises(exc.DatabaseError, match="immutable"), db.write() as conn:
        conn.execute(text(f"UPDATE {table}"))
    assert plan_quotas(db, 1)[(1, 1)] == 30


def test_inconsistent_plans_are_refused(db: Database) -> None:
    draft = _draft()
    bad_periods = PlanDraft(**{**draft.__dict__, "periods": list(draft.periods)[1:]})
    with pytest.raises(InvalidPlanError, match=r"1\.\.T"):
        publish_plan(db, bad_periods)
    p = draft.periods[0]
    bad_bucket = PlanPeriodDraft(**{**p.__dict__, "quotas": {256: 1}})
    with pytest.raises(InvalidPlanError, match=r"0\.\.255"):
        publish_plan(db, PlanDraft(**{**draft.__dict__, "periods": [bad_bucket]}))
    assert latest_plan(db) is None
