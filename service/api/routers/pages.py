"""``/v1/pages``: URLs discovered by a worker, added to the store."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.api.context import Context, authorized, normalized
from service.api.schemas import PagesRequest
from store import add_pages

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(authorized)])


@router.post("/v1/pages")
def pages(body: PagesRequest, context: Context) -> dict[str, int]:
    """Add discovered URLs (normalized again here; bad ones are counted, not added)."""
    context.at_most(len(body.urls), context.settings.max_new_urls, "URLs")
    good = normalized(body.urls)
    done = add_pages(context.db, good, discovered=True)
    context.metrics.discovered.inc(done.added)
    return {"added": done.added, "known": done.known, "rejected": len(body.urls) - len(good)}
