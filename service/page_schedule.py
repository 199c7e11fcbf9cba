"""The nightly page schedule stage: from the published plan's quotas to each page's due time.

The plan says how many pages of each bucket to crawl per period; the page schedule says how
often each page should come round inside that: the bucket's mean crawls per period over the
plan's cycle are split among its pages by :func:`planner.schedules.optimal.bucket_intervals`
(Xyleme's ``t = K / sqrt(importance x rate)`` by default), and every page gets a
``refresh_interval`` (days) and ``scheduled_at`` (last fetch + interval). Period releases
no longer order by these (they take each bucket's pages unvisited longest first, the order the
planning model assumes: :mod:`planner.cycle.due_urls`). Bucket by bucket, so memory holds one
bucket, not the store. Run for a plan before its first period release, it also withdraws
pages' pending due times, so that the crawl follows the new plan's quotas from its first
period; periods are released only once it has finished.

Service edge: wires the store to the planner core; no planning logic of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner.schedules.optimal import bucket_intervals
from store import Database, latest_plan, plan_quotas
from store.due_times import (
    HORIZON_DAYS,
    bucket_pages,
    buckets_in_use,
    finish_page_schedule,
    withdraw_due_pages,
    write_page_schedule,
)

__all__ = ["NOTIFIED_CHECK_FACTOR", "UNIFORM", "PageScheduleSummary", "schedule_pages"]

#: How much longer than its bucket's schedule a reliably notifying page waits for a check crawl.
NOTIFIED_CHECK_FACTOR = 8.0

#: The baseline's page schedule: equal intervals inside a bucket (a round robin), whatever
#: the pages' rates and importance.
UNIFORM = "uniform"

_DAY = 86_400.0


@dataclass(frozen=True)
class PageScheduleSummary:
    """What :func:`schedule_pages` did: ``plan`` version (None: no plan, nothing done),
    pages given an interval, pages left unscheduled (their bucket has no quota this cycle, or
    their interval is past the horizon), pending due times withdrawn from the older regime,
    crawls per period per bucket, and the seconds it took."""

    plan: int | None
    objective: str
    scheduled: int = 0
    unscheduled: int = 0
    withdrawn: int = 0
    crawls_per_period: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0


def schedule_pages(db: Database, *, objective: str = "obsolescence") -> PageScheduleSummary:
    """Give every fetched page its refresh interval and scheduled time from the current plan."""
    started = time.perf_counter()
    plan = latest_plan(db)
    if plan is None:
        return PageScheduleSummary(None, objective)
    quotas = plan_quotas(db, plan.version)
    crawls: dict[int, float] = {}
    for (_period, bucket), quota in quotas.items():
        crawls[bucket] = crawls.get(bucket, 0.0) + quota / plan.periods
    # The plan takes over: pending due times of older plans (or of the time before any plan)
    # are withdrawn, so that only its releases make pages due (a no-op once one happened).
    withdrawn = withdraw_due_pages(db, plan.version)
    scheduled = unscheduled = 0
    for bucket in buckets_in_use(db):
        pages = bucket_pages(db, bucket)
        rate = np.array([np.nan if r is None else r for r in pages.rate], dtype=float)
        importance = np.array([np.nan if v is None else v for v in pages.importance], dtype=float)
        share = crawls.get(bucket, 0.0)
        if objective == UNIFORM:  # the baseline: every page of a bucket alike, round robin
            rate, importance = np.ones_like(rate), np.ones_like(importance)
        intervals = bucket_intervals(
            rate * plan.period_days,
            importance,
            share,
            objective="obsolescence" if objective == UNIFORM else objective,
        )
        days = intervals * plan.period_days
        # Pages whose sites reliably notify their changes need no blind recrawls (each
        # notification queues a crawl); a slow check crawl remains, so that a site that stops
        # notifying is caught (a change seen and not notified ends the page's reliability).
        days[np.asarray(pages.notified, dtype=bool)] *= NOTIFIED_CHECK_FACTOR
        due = np.asarray(pages.last_fetch_s, dtype=float) + days * _DAY
        write_page_schedule(db, pages.page_id, days.tolist(), due.tolist(), pages.fetches)
        finite = int((np.isfinite(days) & (days <= HORIZON_DAYS)).sum())
        scheduled += finite
        unscheduled += days.size - finite
    finish_page_schedule(db, plan.version, objective=objective, pages=scheduled)
    return PageScheduleSummary(
        plan.version,
        objective,
        scheduled,
        unscheduled,
        withdrawn,
        {b: c for b, c in sorted(crawls.items()) if c > 0},
        time.perf_counter() - started,
    )
