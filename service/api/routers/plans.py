"""``/v1/plan`` and ``/v1/work``: the current plan's quotas, and whether work remains."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from service.api.context import Context, authorized
from store import latest_plan, work_remaining
from store.plans import plan_detail

__all__ = ["router"]

router = APIRouter(prefix="/v1", dependencies=[Depends(authorized)])


@router.get("/work")
def work(context: Context) -> dict[str, Any]:
    """Whether any page is due now or leased (a worker pool run ``--until-idle`` stops
    when not), and the lease length in seconds."""
    return {
        "remaining": work_remaining(context.db),
        "lease_seconds": context.settings.policy.lease_seconds,
    }


@router.get("/plan")
def plan(context: Context) -> dict[str, Any]:
    """The current plan: its summary and, in ``period_quotas``, per period the quotas by
    bucket and the new pages."""
    current = latest_plan(context.db)
    if current is None:
        raise HTTPException(404, "no plan has been published yet")
    detail = plan_detail(context.db, current.version)
    periods: dict[int, dict[str, Any]] = {}
    for (period, bucket), pages in sorted(detail.quotas.items()):
        entry = periods.setdefault(period, {"period": period, "quotas": {}})
        entry["quotas"][str(bucket)] = pages
    for period, new_pages in detail.new_pages.items():
        periods.setdefault(period, {"period": period, "quotas": {}})["new_pages"] = new_pages
    return {
        **dataclasses.asdict(current),
        "period_quotas": [periods[k] for k in sorted(periods)],
    }
