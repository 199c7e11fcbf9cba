"""The immediate-crawl lane: pages put ahead of the plan, still crawled politely.

WebFountain keeps a queue for immediate crawls beside the planned ones; Xyleme has priority
levels. Here an urgent page gets ``next_due_at = URGENT_DUE`` (the epoch: before every planned
due time), so the lease queue's usual index scan (per host, by due time) hands it out first
on its host's next polite lease; nothing else in leasing changes, so politeness and one
worker per host hold as for any page. Each request is recorded in ``urgent_requests``; the
period release charges the requests of the previous period against its quotas, so urgent
work is counted against capacity.

A page already leased keeps its lease (its fetch is imminent anyway), and a page already in
the lane stays where it is: only pages that join the lane are recorded and charged, so
repeating a request costs the plan nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, and_, func, or_, select, update

from store.database import Database
from store.host_ready import hold_hosts, lower_ready_to
from store.models import PAGES, URGENT_REQUESTS, URGENT_SOURCES
from store.pages import add_pages, lock_pages
from store.types import URGENT_DUE, utcnow

__all__ = [
    "URGENT_DUE",
    "UrgentOutcome",
    "queue_urgent",
    "request_urgent",
    "urgent_requests_between",
]


_CHUNK = 5_000


@dataclass(frozen=True)
class UrgentOutcome:
    """``added``: pages that were new to the store; ``queued``: pages put ahead of the plan
    now; ``leased``: pages held by a live lease (left as they are: their fetch is imminent).
    Pages already in the lane are neither."""

    added: int
    queued: int
    leased: int


def request_urgent(
    db: Database,
    pages: Iterable[tuple[str, str]],
    *,
    source: str,
    now: datetime | None = None,
) -> UrgentOutcome:
    """Put ``(normalized_url, origin)`` pages ahead of the plan (adding unknown ones)."""
    if source not in URGENT_SOURCES:
        raise ValueError(f"source must be one of {URGENT_SOURCES}, got {source!r}")
    when = now or utcnow()
    pairs = list(dict.fromkeys(pages))
    added = add_pages(db, pairs, now=when, due=False).added
    queued = leased = 0
    urls = [url for url, _ in pairs]
    for start in range(0, len(urls), _CHUNK):
        chunk = urls[start : start + _CHUNK]

        def work(conn: Connection, chunk: list[str] = chunk) -> tuple[int, int]:
            found = conn.execute(select(PAGES.c.id).where(PAGES.c.url.in_(chunk))).scalars()
            return queue_urgent(conn, db, list(found), when, source)

        q, held = db.run_write(work)
        queued, leased = queued + q, leased + held
    return UrgentOutcome(added, queued, leased)


def queue_urgent(
    conn: Connection, db: Database, ids: list[int], when: datetime, source: str
) -> tuple[int, int]:
    """Put pages ``ids`` ahead of the plan inside a write transaction, recording a request
    (``source``, at ``when``) for each that joined the lane; returns (joined, held by a live
    lease)."""
    p = PAGES.c
    hosts = conn.execute(select(p.host_id).where(p.id.in_(ids))).scalars().all()
    # Hosts held before pages (a lease's order; store.host_ready).
    hold_hosts(conn, db.backend.host_ready, list(hosts))
    lock_pages(conn, db.backend.pages, sorted(ids))  # in id order, as a report does
    free = or_(p.leased_until.is_(None), p.leased_until < when)
    waiting = or_(p.next_due_at.is_(None), p.next_due_at > URGENT_DUE)
    joined = (
        conn.execute(
            update(PAGES)
            .where(and_(p.id.in_(ids), free, waiting))
            .values(next_due_at=URGENT_DUE)
            .returning(p.id, p.host_id)
        )
        .tuples()
        .all()
    )
    moved = [i for i, _ in joined]
    lower_ready_to(conn, db.backend.host_ready, [h for _, h in joined], URGENT_DUE, held=True)
    if moved:  # only pages that joined the lane now: these crawls are extra work
        conn.execute(
            URGENT_REQUESTS.insert(),
            [{"page_id": i, "requested_at": when, "source": source} for i in moved],
        )
    held = conn.execute(select(func.count()).where(p.id.in_(ids), ~free)).scalar_one()
    return len(moved), int(held)


def urgent_requests_between(db: Database, start: datetime, end: datetime) -> int:
    """Urgent requests made in ``[start, end)``."""
    r = URGENT_REQUESTS.c
    with db.read() as conn:
        return int(
            conn.execute(
                select(func.count()).where(r.requested_at >= start, r.requested_at < end)
            ).scalar_one()
        )
