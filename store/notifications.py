"""Change notifications pushed by sites: observations of their own kind, and a crawl soon.

A site may tell us a page changed (an API call, or a sitemap's ``lastmod``). Each
notification is an observation with ``kind = 'notification'``, ``changed = true`` and
``fetched_at`` the time the site says the page changed (the time it told us, when it says
nothing); it never counts as a fetch (no HTTP status), so the change-rate estimators see it
only as a notification. The page is also put in the immediate-crawl lane (source
``notification``), so the change is fetched soon. A repeat of the same (page, time) is
recorded once.

:func:`notification_times` reads them back for the estimators, which judge per page whether
its notifications are reliable (every change our fetches saw was notified): such a page
needs no blind recrawls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, and_, select, tuple_

from store.database import Database, driver_rows
from store.models import OBSERVATIONS, PAGES
from store.types import epoch_seconds, utcnow
from store.urgent import request_urgent

__all__ = ["Notification", "NotificationOutcome", "notification_times", "record_notifications"]

_CHUNK = 5_000


@dataclass(frozen=True)
class Notification:
    """``url`` (normalized) of ``origin`` changed at ``changed_at`` (None: now)."""

    url: str
    origin: str
    changed_at: datetime | None = None


@dataclass(frozen=True)
class NotificationOutcome:
    """``recorded`` notifications (repeats are not), ``added`` pages new to the store,
    ``queued`` pages put ahead of the plan."""

    recorded: int
    added: int
    queued: int


def record_notifications(
    db: Database, items: Sequence[Notification], *, now: datetime | None = None
) -> NotificationOutcome:
    """Record change notifications and queue their pages for an immediate crawl."""
    when = now or utcnow()
    if not items:
        return NotificationOutcome(0, 0, 0)
    urgent = request_urgent(db, [(n.url, n.origin) for n in items], source="notification", now=when)
    recorded = 0
    for start in range(0, len(items), _CHUNK):
        chunk = items[start : start + _CHUNK]

        def work(conn: Connection, chunk: Sequence[Notification] = chunk) -> int:
            ids: dict[str, int] = dict(
                conn.execute(
                    select(PAGES.c.url, PAGES.c.id).where(
                        PAGES.c.url.in_(sorted({n.url for n in chunk}))
                    )
                )
                .tuples()
                .all()
            )
            rows = {
                (ids[n.url], n.changed_at or when)
                for n in chunk
                if n.url in ids  # always: request_urgent added them
            }
            o = OBSERVATIONS.c
            known = set(
                conn.execute(
                    select(o.page_id, o.fetched_at).where(
                        and_(
                            o.kind == "notification",
                            tuple_(o.page_id, o.fetched_at).in_(sorted(rows)),
                        )
                    )
                ).all()
            )
            fresh = [
                {
                    "page_id": page,
                    "kind": "notification",
                    "fetched_at": at,
                    "recorded_at": when,
                    "changed": True,
                }
                for page, at in sorted(rows - known)
            ]
            if fresh:
                conn.execute(OBSERVATIONS.insert(), fresh)
            return len(fresh)

        recorded += db.run_write(work)
    return NotificationOutcome(recorded, urgent.added, urgent.queued + urgent.leased)


def notification_times(db: Database) -> list[tuple[int, float]]:
    """Every notification as (page id, epoch seconds), by page then time."""
    o = OBSERVATIONS.c
    with db.read() as conn:
        return [
            (int(page), float(at))
            for page, at in driver_rows(
                conn,
                select(o.page_id, epoch_seconds(o.fetched_at, db.dialect))
                .where(o.kind == "notification")
                .order_by(o.page_id, o.fetched_at),
            )
        ]
