"""Reading the pages of a bucket and writing their refresh schedule back (interval, due time).

The nightly page schedule works bucket by bucket: the plan gives each bucket a number of
crawls per period, and the refresh schedule splits it among the bucket's pages by importance
and change rate. :func:`bucket_pages` reads one bucket's fetched pages with one range scan of
the ``(bucket, last_fetch_at)`` index (memory: one bucket, not the store);
:func:`write_page_schedule` stores each page's ``refresh_interval`` (days) and
``scheduled_at`` (last fetch + interval). Period releases no longer order by it (they take a
bucket's pages unvisited longest first, as the planning model assumes); reports before the
first plan still make a page due at it.

A new plan takes over in three steps, and a period of it is released only after the last:
:func:`withdraw_due_pages` clears the due times of the older regime (one set-based statement,
only while none of the plan's periods is released), the buckets are written, and
:func:`finish_page_schedule` records the plan's schedule as complete (``page_schedules``).

Writes race with workers: a page fetched and reported while the schedule runs has a newer
``last_fetch_at`` and ``scheduled_at`` than the schedule read, so each page is written only
if its fetch count is still the one read (a report increments it).

Arrays cross this boundary as Python sequences and float seconds since the epoch, so the
store holds no planning logic and imports nothing beyond SQLAlchemy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, bindparam, exists, select, text, update

from store.database import PG_BY_ID, Database, driver_rows, sqlite_bulk_cache
from store.host_ready import refresh_ready_everywhere
from store.models import PAGE_SCHEDULES, PAGES, PERIOD_RELEASES, planned_rate
from store.pages import insert_ignoring_conflicts
from store.releases import REFRESH_STATUSES
from store.types import UTCDateTime, epoch_seconds, seconds_micros, utcnow
from store.urgent import URGENT_DUE

__all__ = [
    "HORIZON_DAYS",
    "NOTIFIED",
    "BucketPages",
    "bucket_pages",
    "buckets_in_use",
    "finish_page_schedule",
    "page_schedule_finished",
    "withdraw_due_pages",
    "write_page_schedule",
]

_WRITE_CHUNK = 100_000

#: The ``estimator`` of a page whose change notifications are reliable: its rate comes from
#: them, and it gets only slow check crawls (each notification queues a crawl).
NOTIFIED = "notifications"

#: Intervals longer than this (days, a century) are stored as "never": a page so unimportant
#: or so static that its next crawl would fall past any plan, and past what timestamps hold.
HORIZON_DAYS = 36_500.0


@dataclass(frozen=True)
class BucketPages:
    """The fetched pages of one bucket, one entry per page in each list.

    ``rate``: the rate the plan uses (``plan_rate``, else ``rate``), changes per day (None
    without one); ``importance``: None when unknown; ``last_fetch_s``: seconds since the
    epoch of the page's latest fetch; ``fetches``: its fetch count when read; ``notified``:
    its rate comes from reliable change notifications.
    """

    bucket: int
    page_id: list[int]
    host_id: list[int]
    rate: list[float | None]
    importance: list[float | None]
    last_fetch_s: list[float]
    fetches: list[int]
    notified: list[bool]


def buckets_in_use(db: Database) -> list[int]:
    """The buckets that hold at least one fetched page that re-crawls can choose."""
    p = PAGES
    with db.read() as conn:
        rows = conn.execute(
            select(p.c.bucket)
            .where(p.c.status.in_(REFRESH_STATUSES), p.c.last_fetch_at.is_not(None))
            .group_by(p.c.bucket)
            .order_by(p.c.bucket)
        ).scalars()
        return [int(b) for b in rows]


def bucket_pages(db: Database, bucket: int) -> BucketPages:
    """Every fetched page of ``bucket`` that re-crawl quotas choose from."""
    p = PAGES
    stmt = select(
        p.c.id,
        p.c.host_id,
        planned_rate(),
        p.c.importance,
        epoch_seconds(p.c.last_fetch_at, db.dialect),
        p.c.fetches,
        p.c.estimator,
    ).where(
        p.c.bucket == bucket,
        p.c.status.in_(REFRESH_STATUSES),
        p.c.last_fetch_at.is_not(None),
    )
    with db.read() as conn:
        rows = driver_rows(conn, stmt)
    if not rows:
        return BucketPages(bucket, [], [], [], [], [], [], [])
    ids, hosts, rates, importance, fetched, fetches, names = zip(*rows, strict=True)
    return BucketPages(
        bucket,
        list(ids),
        list(hosts),
        list(rates),
        list(importance),
        list(fetched),
        list(fetches),
        [name == NOTIFIED for name in names],
    )


_NOW = bindparam("now", type_=UTCDateTime())


def withdraw_due_pages(db: Database, plan_id: int, *, now: datetime | None = None) -> int:
    """Clear the pending due times of the regime before plan ``plan_id``, once it takes over.

    Pages waiting to be leased (``next_due_at`` set, no live lease at ``now``) that are new or
    in a re-crawl status lose their due time, so that only the new plan's releases make pages
    due (error and robots-blocked pages keep the retry time their worker set, and a probe's
    second crawl its time, :mod:`store.probes`). Does nothing
    once a period of the plan has been released (the check is in the same statement). One
    statement over the pages with a due time (the partial index ``ix_pages_host_due``).
    Returns the number of pages withdrawn.
    """
    p = PAGES
    released = exists().where(PERIOD_RELEASES.c.plan_id == plan_id)
    # The pages locked in id order first (PostgreSQL; as every writer of pages locks them,
    # store.pages.lock_pages), then written by primary-key lookups.
    waiting = (
        select(p.c.id)
        .where(
            p.c.next_due_at.is_not(None),
            p.c.next_due_at > URGENT_DUE,  # urgent pages stay ahead of the plan
            p.c.status.in_(("new", *REFRESH_STATUSES)),
            # and so do probes' second crawls (store.probes)
            (p.c.probe_delay.is_(None)) | (p.c.probe_delay > 0),
            (p.c.leased_until.is_(None)) | (p.c.leased_until < _NOW),
            ~released,
        )
        .order_by(p.c.id)
        .with_for_update(of=p, key_share=True)
    )
    stmt = update(p).where(p.c.id.in_(waiting.scalar_subquery())).values(next_due_at=None)
    when = now or utcnow()

    def work(conn: Connection) -> int:
        if db.dialect == "postgresql":
            conn.exec_driver_sql(PG_BY_ID)
        return int(conn.execute(stmt, {"now": when}).rowcount or 0)

    withdrawn = db.run_write(work)
    if withdrawn:
        # Hosts whose work this took away are ready later, or never. A transaction of its own,
        # which locks hosts before it reads pages (a lease's order; early values in between
        # are only stale, see store.host_ready).
        ready = db.backend.host_ready
        db.run_write(lambda conn: refresh_ready_everywhere(conn, ready, only_set=True))
    return withdrawn


def finish_page_schedule(
    db: Database, plan_id: int, *, objective: str, pages: int, now: datetime | None = None
) -> None:
    """Record plan ``plan_id``'s page schedule as written in full (idempotent)."""
    record = insert_ignoring_conflicts(db, PAGE_SCHEDULES)
    row = {"plan_id": plan_id, "finished_at": now or utcnow(), "objective": objective}
    db.run_write(lambda conn: conn.execute(record, {**row, "pages": pages}))


def page_schedule_finished(db: Database, plan_id: int) -> bool:
    """Whether plan ``plan_id``'s page schedule has been written in full."""
    with db.read() as conn:
        row = conn.execute(
            select(PAGE_SCHEDULES.c.plan_id).where(PAGE_SCHEDULES.c.plan_id == plan_id)
        ).first()
    return row is not None


_PG_WRITE = text(
    """
    UPDATE pages SET refresh_interval = t.d, scheduled_at = to_timestamp(t.s)
    FROM unnest(CAST(:ids AS bigint[]), CAST(:days AS float8[]), CAST(:secs AS float8[]),
                CAST(:fetches AS int[])) AS t(i, d, s, f)
    WHERE pages.id = t.i AND pages.fetches = t.f
    """
)
_SQLITE_WRITE = (
    "UPDATE pages SET refresh_interval = ?, "
    "scheduled_at = strftime('%Y-%m-%d %H:%M:%S', ?, 'unixepoch') || printf('.%06d', ?) "
    "WHERE id = ? AND fetches = ?"
)


def _interval(days: float) -> float | None:
    ok = not math.isnan(days) and 0 < days <= HORIZON_DAYS
    return float(days) if ok else None


def write_page_schedule(
    db: Database,
    page_ids: Sequence[int],
    interval_days: Sequence[float],
    scheduled_s: Sequence[float],
    fetches: Sequence[int],
) -> int:
    """Store pages' refresh intervals (days) and scheduled times (epoch seconds).

    An interval that is NaN, infinite or past :data:`HORIZON_DAYS` is stored as NULL with no
    scheduled time: a page the plan does not refresh, which due-URL selection never picks.
    A page whose fetch count is no longer ``fetches`` (reported meanwhile) is left alone.
    Written in transactions of 100,000 pages in id order; returns the number of pages written.
    """
    if not (len(page_ids) == len(interval_days) == len(scheduled_s) == len(fetches)):
        raise ValueError("page_ids, interval_days, scheduled_s and fetches must be as long")
    rows = sorted(
        zip((int(i) for i in page_ids), interval_days, scheduled_s, fetches, strict=True),
        key=lambda row: row[0],
    )
    written = 0
    for start in range(0, len(rows), _WRITE_CHUNK):
        chunk = rows[start : start + _WRITE_CHUNK]
        days = [_interval(r[1]) for r in chunk]
        secs = [float(r[2]) if d is not None else None for r, d in zip(chunk, days, strict=True)]
        part = functools.partial(
            _write,
            db,
            ids=[r[0] for r in chunk],
            days=days,
            secs=secs,
            fetches=[int(r[3]) for r in chunk],
        )
        written += db.run_write(part)
    return written


def _write(
    db: Database,
    conn: Connection,
    *,
    ids: list[int],
    days: list[float | None],
    secs: list[float | None],
    fetches: list[int],
) -> int:
    if db.dialect == "postgresql":
        params = {"ids": ids, "days": days, "secs": secs, "fetches": fetches}
        # A nested loop over the ids (sorted) with lookups by the primary key: rows locked in
        # id order, as every writer of pages locks them (store.pages.lock_pages), never a
        # hash join over a scan of the table (physical order).
        conn.exec_driver_sql(PG_BY_ID)
        result = conn.execute(_PG_WRITE, params)
    else:
        rows = []
        for i, d, s, f in zip(ids, days, secs, fetches, strict=True):
            whole, micros = (None, None) if s is None else seconds_micros(s)
            rows.append((d, whole, micros, i, f))
        with sqlite_bulk_cache(conn):  # scattered rows: keep their B-tree pages in memory
            result = conn.exec_driver_sql(_SQLITE_WRITE, rows)
    return int(result.rowcount or 0)
