"""``/v1/urgent``: crawl URLs ahead of the plan (the immediate-crawl lane)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Depends

from service.api.context import Context, authorized, normalized
from service.api.schemas import PagesRequest
from store.urgent import request_urgent

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(authorized)])


@router.post("/v1/urgent")
def urgent(body: PagesRequest, context: Context) -> dict[str, int]:
    """Crawl these URLs ahead of the plan (still politely; charged to the next period)."""
    context.at_most(len(body.urls), context.settings.max_new_urls, "URLs")
    good = normalized(body.urls, allow_private=context.settings.allow_private)
    done = request_urgent(context.db, good, source="api")
    context.metrics.urgent.inc(done.queued + done.leased)
    return {**dataclasses.asdict(done), "rejected": len(body.urls) - len(good)}
