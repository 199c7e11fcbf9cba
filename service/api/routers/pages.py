"""``/v1/pages``: URLs discovered by a worker, added to the store."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Depends

from service.api.context import Context, authorized, normalized
from service.api.schemas import PagesRequest
from store import add_pages, add_unfetchable

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(authorized)])


@router.post("/v1/pages")
def pages(body: PagesRequest, context: Context) -> dict[str, int]:
    """Add discovered URLs (normalized again here; bad ones are counted, not added), and the
    ``blocked`` ones robots.txt disallows as unfetchable pages (never candidates)."""
    given = len(body.urls) + len(body.blocked)
    context.at_most(given, context.settings.max_new_urls, "URLs")
    good = normalized(body.urls, allow_private=context.settings.allow_private)
    done = add_pages(context.db, good, discovered=True)
    checks = {b.url: b.check_at for b in body.blocked}
    allow = context.settings.allow_private
    blocked = [
        (url, origin, checks[raw]) for raw, (url, origin) in _normalized_by_raw(checks, allow)
    ]
    unfetchable = add_unfetchable(context.db, blocked) if blocked else 0
    context.metrics.discovered.inc(done.added)
    return {
        "added": done.added,
        "known": done.known,
        "unfetchable": unfetchable,
        "rejected": given - len(good) - len(blocked),
    }


def _normalized_by_raw(
    checks: Mapping[str, object], allow_private: bool
) -> list[tuple[str, tuple[str, str]]]:
    """Each crawlable URL as given, with its normalized form and origin."""
    return [
        (raw, pair) for raw in checks for pair in normalized([raw], allow_private=allow_private)
    ]
