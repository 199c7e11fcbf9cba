"""Change notifications pushed by sites: observations of their own kind, and a crawl soon.

A site may tell us a page changed (an API call, or a sitemap's ``lastmod``). Each
notification is an observation with ``kind = 'notification'``, ``changed = true`` and
``fetched_at`` the time the site says the page changed (the time it told us, when it says
nothing); it never counts as a fetch (no HTTP status), so the change-rate estimators see it
only as a notification. A page whose notified change is newer than its last fetch is also put
in the immediate-crawl lane (source ``notification``), so the change is fetched soon. A
repeat of the same (page, time) is recorded once, even from concurrent writers (a partial
unique index, migration 0009).

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
from store.pages import add_pages, insert_ignoring_conflicts
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
    """Record change notifications and queue for an immediate crawl the pages whose notified
    change is newer than their last fetch (a change already fetched needs no crawl)."""
    when = now or utcnow()
    if not items:
        return NotificationOutcome(0, 0, 0)
    added = add_pages(db, [(n.url, n.origin) for n in items], now=when, due=False).added
    recorded = 0
    stale: dict[str, str] = {}
    for start in range(0, len(items), _CHUNK):
        chunk = items[start : start + _CHUNK]

        def work(conn: Connection, chunk: Sequence[Notification] = chunk) -> int:
            known = {
                url: (page, last)
                for url, page, last in conn.execute(
                    select(PAGES.c.url, PAGES.c.id, PAGES.c.last_fetch_at).where(
                        PAGES.c.url.in_(sorted({n.url for n in chunk}))
                    )
                ).tuples()
            }
            rows = set()
            for n in chunk:
                page, last = known[n.url]  # add_pages added the unknown ones
                at = min(n.changed_at or when, when)  # a change in the future is now
                rows.add((page, at))
                if last is None or at > last:
                    stale[n.url] = n.origin
            o = OBSERVATIONS.c
            seen = set(
                conn.execute(
                    select(o.page_id, o.fetched_at).where(
                        and_(
                            o.kind == "notification",
                            tuple_(o.page_id, o.fetched_at).in_(sorted(rows)),
                        )
                    )
                ).tuples()
            )
            fresh = [
                {
                    "page_id": page,
                    "kind": "notification",
                    "fetched_at": at,
                    "recorded_at": when,
                    "changed": True,
                }
                for page, at in sorted(rows - seen)
            ]
            if not fresh:
                return 0
            # The unique index refuses a copy a concurrent writer recorded meanwhile.
            insert = insert_ignoring_conflicts(db, OBSERVATIONS).returning(OBSERVATIONS.c.id)
            return len(conn.execute(insert, fresh).all())

        recorded += db.run_write(work)
    urgent = request_urgent(db, list(stale.items()), source="notification", now=when)
    return NotificationOutcome(recorded, added, urgent.queued + urgent.leased)


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
