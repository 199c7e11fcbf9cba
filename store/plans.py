"""Plan versions: published atomically, immutable afterwards, read back for leasing and audit.

A plan is written and published in one transaction, so workers see either the previous plan or
the whole new one, never a half-written one. The schema forbids UPDATE on ``plans``,
``plan_periods`` and ``quotas`` (triggers in the initial migration): a change is a new version.
Old versions may be deleted to save space; the latest published version is the current plan.

A plan stays in force until a newer one is published: when its periods have all ended (the
nightly run is late, or failed), :func:`extend_plan_in_force` repeats its last period, as new
rows numbered past its cycle (T + k for the k-th period after the last), so the crawl goes on
with the plan in force instead of idling. Its own periods 1..T never change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, exc, func, select

from store.database import Database
from store.errors import InvalidPlanError
from store.models import PLAN_PERIODS, PLANS, QUOTAS, Plan, PlanPeriod, Quota
from store.types import utcnow

#: One row when a plan has been published (a cheap probe: once one is, the plan decides what
#: is due, and reports and new pages leave ``next_due_at`` to its period releases).
PLAN_PUBLISHED = select(PLANS.c.id).where(PLANS.c.published_at.is_not(None)).limit(1)

__all__ = [
    "PLAN_PUBLISHED",
    "PlanDetail",
    "PlanDraft",
    "PlanPeriodDraft",
    "PlanSummary",
    "extend_plan_in_force",
    "latest_plan",
    "plan_detail",
    "plan_quotas",
    "publish_plan",
]


@dataclass(frozen=True)
class PlanPeriodDraft:
    """Period ``period`` (1..T) of a plan.

    ``quotas`` maps class to pages of that class to re-crawl this period (x_it): a bucket
    0..255, or class c of the plan's bound host g, ``c + 256 (g + 1)``, where the plan's
    solver record names g (``solver["bound_hosts"]["host_id"][g]``, the host whose
    politeness bound the plan: :mod:`planner.cycle.bound_hosts`);
    ``fractions`` maps bucket to x_it / b_i,t-1; ``new_pages`` is the quota of never-fetched
    pages (z_t); ``capacity`` is the crawls the period allows. ``marginal`` maps bucket to
    the plan's value of one more crawl of it this period (a bucket may have a value and no
    quota: it is stored with a quota of 0), ``new_marginal`` is that of one more new page;
    a release spends quota it cannot fill by these values (empty, None: the plan has none).
    """

    period: int
    starts_at: datetime
    ends_at: datetime
    capacity: float
    new_pages: int
    quotas: Mapping[int, int]
    fractions: Mapping[int, float] = field(default_factory=dict)
    marginal: Mapping[int, float] = field(default_factory=dict)
    new_marginal: float | None = None


@dataclass(frozen=True)
class PlanDraft:
    """A solved plan, ready to publish."""

    starts_at: datetime
    period_days: float
    strategy: str
    periods: Sequence[PlanPeriodDraft]
    inputs: Mapping[str, Any]
    solver: Mapping[str, Any]
    objective: float | None = None
    solver_status: str | None = None
    note: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class PlanSummary:
    """A published plan version without its quota rows."""

    version: int
    published_at: datetime
    starts_at: datetime
    period_days: float
    periods: int
    strategy: str
    objective: float | None
    solver_status: str | None
    total_quota: int
    total_new_pages: int


def _validate(draft: PlanDraft) -> None:
    numbers = [p.period for p in draft.periods]
    if numbers != list(range(1, len(numbers) + 1)):
        raise InvalidPlanError(f"plan periods must be numbered 1..T in order, got {numbers}")
    if draft.period_days <= 0:
        raise InvalidPlanError(f"period_days must be > 0, got {draft.period_days}")
    bound = draft.solver.get("bound_hosts") if isinstance(draft.solver, Mapping) else None
    groups = len(bound.get("host_id", ())) if isinstance(bound, Mapping) else 0
    top = 256 * (groups + 1) - 1  # the highest class key the bound hosts allow

    for p in draft.periods:
        if p.ends_at <= p.starts_at:
            raise InvalidPlanError(f"period {p.period} ends before it starts")
        if p.new_pages < 0:
            raise InvalidPlanError(f"period {p.period}: negative new-page quota {p.new_pages}")
        bad = {b: q for b, q in p.quotas.items() if not 0 <= b <= top or q < 0}
        if bad:
            raise InvalidPlanError(
                f"period {p.period}: quotas need classes 0..{top} (buckets 0..255, and 256 "
                f"more per bound host) and pages >= 0, got {bad}"
            )
        values = [*p.marginal.values(), *([] if p.new_marginal is None else [p.new_marginal])]
        odd = {b: v for b, v in p.marginal.items() if not 0 <= b <= top}
        if odd or not all(math.isfinite(v) for v in values):
            raise InvalidPlanError(
                f"period {p.period}: marginal values need classes 0..{top} and finite values, "
                f"got {dict(p.marginal)} and {p.new_marginal} for new pages"
            )


def publish_plan(db: Database, draft: PlanDraft, *, now: datetime | None = None) -> int:
    """Write and publish ``draft`` in one transaction; returns its version number."""
    _validate(draft)
    when = now or utcnow()

    def work(conn: Connection) -> int:
        version = int(conn.execute(select(func.coalesce(func.max(Plan.id), 0))).scalar_one()) + 1
        conn.execute(
            PLANS.insert(),
            {
                "id": version,
                "created_at": draft.created_at or when,
                "published_at": when,
                "starts_at": draft.starts_at,
                "period_days": draft.period_days,
                "periods": len(draft.periods),
                "strategy": draft.strategy,
                "objective": draft.objective,
                "solver_status": draft.solver_status,
                "inputs": dict(draft.inputs),
                "solver": dict(draft.solver),
                "note": draft.note,
            },
        )
        conn.execute(
            PLAN_PERIODS.insert(),
            [
                {
                    "plan_id": version,
                    "period": p.period,
                    "starts_at": p.starts_at,
                    "ends_at": p.ends_at,
                    "capacity": p.capacity,
                    "new_pages": p.new_pages,
                    "new_marginal": p.new_marginal,
                }
                for p in draft.periods
            ],
        )
        quota_rows = [
            {
                "plan_id": version,
                "period": p.period,
                "bucket": bucket,
                "pages": int(p.quotas.get(bucket, 0)),
                "fraction": float(p.fractions.get(bucket, 0.0)),
                "marginal": None if bucket not in p.marginal else float(p.marginal[bucket]),
            }
            for p in draft.periods
            for bucket in sorted(set(p.quotas) | set(p.marginal) | set(p.fractions))
        ]
        if quota_rows:
            conn.execute(QUOTAS.insert(), quota_rows)
        return version

    return db.run_write(work)


def latest_plan(db: Database, conn: Connection | None = None) -> PlanSummary | None:
    """The current plan: the latest published version, or None when none was published."""
    if conn is None:
        with db.read() as own:
            return latest_plan(db, own)
    plan = conn.execute(
        select(
            Plan.id,
            Plan.published_at,
            Plan.starts_at,
            Plan.period_days,
            Plan.periods,
            Plan.strategy,
            Plan.objective,
            Plan.solver_status,
        )
        .where(Plan.published_at.is_not(None))
        .order_by(Plan.id.desc())
        .limit(1)
    ).one_or_none()
    if plan is None:
        return None
    total_quota = conn.execute(
        select(func.coalesce(func.sum(Quota.pages), 0)).where(Quota.plan_id == plan.id)
    ).scalar_one()
    total_new = conn.execute(
        select(func.coalesce(func.sum(PlanPeriod.new_pages), 0)).where(
            PlanPeriod.plan_id == plan.id
        )
    ).scalar_one()
    assert plan.published_at is not None
    return PlanSummary(
        version=plan.id,
        published_at=plan.published_at,
        starts_at=plan.starts_at,
        period_days=plan.period_days,
        periods=plan.periods,
        strategy=plan.strategy,
        objective=plan.objective,
        solver_status=plan.solver_status,
        total_quota=int(total_quota),
        total_new_pages=int(total_new),
    )


def plan_quotas(db: Database, version: int) -> dict[tuple[int, int], int]:
    """Quotas of a plan version as ``{(period, bucket): pages}``."""
    with db.read() as conn:
        rows = conn.execute(
            select(Quota.period, Quota.bucket, Quota.pages).where(Quota.plan_id == version)
        ).all()
    return {(r.period, r.bucket): r.pages for r in rows}


@dataclass(frozen=True)
class PlanDetail:
    """A plan version's cycle: per period its quotas, crawl fractions, new-page quota and
    capacity.

    ``quotas`` and ``fractions`` map ``(period, bucket)``; ``new_pages`` and ``capacity``
    (crawls the period allowed) map period; ``marginal`` maps ``(period, bucket)`` and
    ``new_marginal`` period to the plan's marginal values (only those it has).
    """

    version: int
    quotas: dict[tuple[int, int], int]
    fractions: dict[tuple[int, int], float]
    new_pages: dict[int, int]
    capacity: dict[int, float] = field(default_factory=dict)
    marginal: dict[tuple[int, int], float] = field(default_factory=dict)
    new_marginal: dict[int, float] = field(default_factory=dict)


def plan_detail(db: Database, version: int) -> PlanDetail:
    """The quotas, fractions, new-page quotas and marginal values of plan ``version``'s own
    periods (not the repeats of its last period that kept it in force past its cycle)."""
    own = select(Plan.periods).where(Plan.id == version).scalar_subquery()
    with db.read() as conn:
        rows = conn.execute(
            select(Quota.period, Quota.bucket, Quota.pages, Quota.fraction, Quota.marginal).where(
                Quota.plan_id == version, Quota.period <= own
            )
        ).all()
        periods = conn.execute(
            select(
                PlanPeriod.period,
                PlanPeriod.new_pages,
                PlanPeriod.capacity,
                PlanPeriod.new_marginal,
            ).where(PlanPeriod.plan_id == version, PlanPeriod.period <= own)
        ).all()
    return PlanDetail(
        version,
        {(r.period, r.bucket): r.pages for r in rows},
        {(r.period, r.bucket): r.fraction for r in rows},
        {r.period: r.new_pages for r in periods},
        {r.period: float(r.capacity) for r in periods},
        {(r.period, r.bucket): float(r.marginal) for r in rows if r.marginal is not None},
        {r.period: float(r.new_marginal) for r in periods if r.new_marginal is not None},
    )


def extend_plan_in_force(db: Database, version: int, now: datetime) -> int | None:
    """Keep plan ``version`` in force at ``now``, past its last period: the period that holds
    ``now`` on the plan's grid of periods, written as a repeat of its last period (window,
    capacity, new-page quota, quotas, fractions and marginal values), numbered past the
    cycle. Returns that period's number, or None when ``now`` is not past the plan's end.

    Idempotent, and safe from two processes at once (the row written first stands)."""
    pp, q = PLAN_PERIODS.c, QUOTAS.c

    def work(conn: Connection) -> int | None:
        plan = conn.execute(select(PLANS.c.periods).where(PLANS.c.id == version)).first()
        if plan is None:
            return None
        last = conn.execute(
            select(
                pp.period, pp.starts_at, pp.ends_at, pp.capacity, pp.new_pages, pp.new_marginal
            ).where(pp.plan_id == version, pp.period == plan.periods)
        ).first()
        if last is None or now < last.ends_at:
            return None
        length = last.ends_at - last.starts_at
        later = int((now - last.ends_at) / length)
        period = int(last.period) + later + 1
        if (
            conn.execute(
                select(pp.period).where(pp.plan_id == version, pp.period == period)
            ).first()
            is not None
        ):
            return period
        starts_at = last.ends_at + later * length
        conn.execute(
            PLAN_PERIODS.insert(),
            {
                "plan_id": version,
                "period": period,
                "starts_at": starts_at,
                "ends_at": starts_at + length,
                "capacity": last.capacity,
                "new_pages": last.new_pages,
                "new_marginal": last.new_marginal,
            },
        )
        quotas = conn.execute(
            select(q.bucket, q.pages, q.fraction, q.marginal).where(
                q.plan_id == version, q.period == last.period
            )
        ).all()
        if quotas:
            conn.execute(
                QUOTAS.insert(),
                [
                    {
                        "plan_id": version,
                        "period": period,
                        "bucket": r.bucket,
                        "pages": r.pages,
                        "fraction": r.fraction,
                        "marginal": r.marginal,
                    }
                    for r in quotas
                ],
            )
        return period

    try:
        return db.run_write(work)
    except exc.IntegrityError:  # another process wrote the same period first
        return db.run_write(work)
