"""``/v1/notifications``: a site says pages changed (pushed, or a sitemap's lastmod dates)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Depends

from service.api.context import Context, authorized, normalized
from service.api.schemas import NotificationsRequest
from store.notifications import Notification, record_notifications

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(authorized)])


@router.post("/v1/notifications")
def notifications(body: NotificationsRequest, context: Context) -> dict[str, int]:
    """Record change notifications (observations of their own kind, used by the
    estimators) and crawl the pages soon; a page that reliably notifies its changes
    gets no blind recrawls."""
    context.at_most(len(body.notifications), context.settings.max_new_urls, "notifications")
    items = []
    for note in body.notifications:
        good = normalized([note.url], allow_private=context.settings.allow_private)
        if good:
            items.append(Notification(good[0][0], good[0][1], note.changed_at))
    done = record_notifications(context.db, items)
    context.metrics.notifications.inc(done.recorded)
    return {**dataclasses.asdict(done), "rejected": len(body.notifications) - len(items)}
