"""Reading the pages of a bucket and writing their refresh schedule back (interval, due time).

The nightly page schedule works bucket by bucket: the plan gives each bucket a number of
crawls per period, and the refresh schedule splits it among the bucket's pages by importance
and change rate. :func:`bucket_pages` reads one bucket's fetched pages with one range scan of
the ``(bucket, scheduled_at)`` index (memory: one bucket, not the store);
:func:`write_page_schedule` stores each page's ``refresh_interval`` (days) and
``scheduled_at`` (last fetch + interval), the key due-URL selection orders by.

Arrays cross this boundary as numpy-free Python sequences and float seconds since the epoch,
so the store holds no planning logic and imports nothing beyond SQLAlchemy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, select, text

from store.database import Database
from store.models import PAGES, PERIOD_RELEASES
from store.releases import REFRESH_STATUSES
from store.types import UTCDateTime, epoch_seconds, sqlite_text, utcnow

__all__ = [
    "BucketPages",
    "bucket_pages",
    "buckets_in_use",
    "plan_released",
    "write_page_schedule",
]

_WRITE_CHUNK = 20_000


@dataclass(frozen=True)
class BucketPages:
    """The fetched pages of one bucket, one entry per page in each list.

    ``rate``: changes per day (None without an estimate); ``importance``: None when unknown;
    ``last_fetch_s``: seconds since the epoch of the page's latest fetch.
    """

    bucket: int
    page_id: list[int]
    host_id: list[int]
    rate: list[float | None]
    importance: list[float | None]
    last_fetch_s: list[float]


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
        p.c.rate,
        p.c.importance,
        epoch_seconds(p.c.last_fetch_at, db.dialect),
    ).where(
        p.c.bucket == bindparam("bucket"),
        p.c.status.in_(REFRESH_STATUSES),
        p.c.last_fetch_at.is_not(None),
    )
    with db.read() as conn:
        rows = conn.execute(stmt, {"bucket": bucket}).all()
    if not rows:
        return BucketPages(bucket, [], [], [], [], [])
    ids, hosts, rates, importance, fetched = zip(*rows, strict=True)
    return BucketPages(bucket, list(ids), list(hosts), list(rates), list(importance), list(fetched))


_PG_WRITE = text(
    """
    UPDATE pages SET refresh_interval = t.d, scheduled_at = to_timestamp(t.s),
        next_due_at = CASE WHEN :withdraw AND (leased_until IS NULL OR leased_until < :now)
                      THEN NULL ELSE next_due_at END
    FROM unnest(CAST(:ids AS bigint[]), CAST(:days AS float8[]), CAST(:secs AS float8[]))
         AS t(i, d, s)
    WHERE pages.id = t.i
    """
).bindparams(bindparam("now", type_=UTCDateTime()))
_SQLITE_WRITE = (
    "UPDATE pages SET refresh_interval = ?, scheduled_at = ?, "
    "next_due_at = CASE WHEN ? AND (leased_until IS NULL OR leased_until < ?) "
    "THEN NULL ELSE next_due_at END WHERE id = ?"
)


def plan_released(db: Database, plan_id: int) -> bool:
    """Whether any period of plan ``plan_id`` has been released to the workers."""
    with db.read() as conn:
        row = conn.execute(
            select(PERIOD_RELEASES.c.period).where(PERIOD_RELEASES.c.plan_id == plan_id).limit(1)
        ).first()
    return row is not None


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else float(value)


def write_page_schedule(
    db: Database,
    page_ids: Sequence[int],
    interval_days: Sequence[float],
    scheduled_s: Sequence[float],
    *,
    withdraw: bool = False,
    now: datetime | None = None,
) -> int:
    """Store pages' refresh intervals (days) and scheduled times (epoch seconds).

    NaN or infinite values are stored as NULL: a page the plan does not refresh this cycle
    has no interval and no scheduled time, so due-URL selection never picks it. With
    ``withdraw`` the pages' pending due times are cleared too (pages held by a live lease at
    ``now`` keep theirs): a new plan takes over, and only its period releases make pages due.
    Written in transactions of 20,000 pages in id order; returns the number of pages written.
    """
    if not (len(page_ids) == len(interval_days) == len(scheduled_s)):
        raise ValueError("page_ids, interval_days and scheduled_s must have the same length")
    rows = sorted(
        zip((int(i) for i in page_ids), interval_days, scheduled_s, strict=True),
        key=lambda row: row[0],
    )
    when = now or utcnow()
    written = 0
    for start in range(0, len(rows), _WRITE_CHUNK):
        chunk = rows[start : start + _WRITE_CHUNK]
        ids = [r[0] for r in chunk]
        days = [_finite(r[1]) for r in chunk]
        secs = [_finite(r[2]) if days[k] is not None else None for k, r in enumerate(chunk)]
        written += db.run_write(
            functools.partial(
                _write, db, ids=ids, days=days, secs=secs, withdraw=withdraw, now=when
            )
        )
    return written


def _write(
    db: Database,
    conn: Connection,
    *,
    ids: list[int],
    days: list[float | None],
    secs: list[float | None],
    withdraw: bool,
    now: datetime,
) -> int:
    if db.dialect == "postgresql":
        result = conn.execute(
            _PG_WRITE, {"ids": ids, "days": days, "secs": secs, "withdraw": withdraw, "now": now}
        )
    else:
        stamp = sqlite_text(now)
        params = [
            (
                d,
                None if s is None else sqlite_text(datetime.fromtimestamp(s, UTC)),
                int(withdraw),
                stamp,
                i,
            )
            for i, d, s in zip(ids, days, secs, strict=True)
        ]
        result = conn.exec_driver_sql(_SQLITE_WRITE, params)
    return int(result.rowcount or 0)
