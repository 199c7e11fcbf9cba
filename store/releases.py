"""Releasing a plan period's work: the indexed candidate queries and the one-shot release.

Once a plan is published, a fetched page gets no ``next_due_at`` from its report: it waits
until a period release chooses it. The release of period t of a plan reads, per bucket with a
quota, the pages the refresh schedule wants by the end of the period in ``scheduled_at``
order (index ``(bucket, scheduled_at)``, ``LIMIT k``), and the never-fetched pages by OPIC
cash (partial index ``ix_pages_new_cash``); the planner chooses among them (that choice is
planning logic and lives in ``planner.selection``); :func:`release_pages` then writes the
chosen pages' ``next_due_at`` and the ``period_releases`` row in one transaction. The primary
key of ``period_releases`` makes the release happen once: a second release of the same
period, even one racing from another process, changes nothing.

A release also withdraws (``next_due_at`` := NULL) the candidates it read but did not choose
when they were still waiting to be leased (from an earlier release, or from before the first
plan), so that the lease queue hands out the period's choice and not a backlog beyond the
quotas. Pages whose ``next_due_at`` the worker owns (status ``error``: retry; ``blocked``:
robots.txt expiry) are never candidates and keep their due time.

Times cross this module's boundary as aware datetimes, except the candidates' scheduled
times and the release times, which are float seconds since the Unix epoch (arrays of them are
what the planner computes with; no datetime object per page).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    bindparam,
    or_,
    select,
    text,
    update,
)

from store.database import PG_BY_ID, Database, sqlite_bulk_cache
from store.models import HOSTS, NEW_PAGE_CONDITION, PAGES, PERIOD_RELEASES, PLAN_PERIODS, QUOTAS
from store.pages import insert_ignoring_conflicts
from store.types import UTCDateTime, epoch_seconds, seconds_micros, sqlite_text, utcnow
from store.urgent import URGENT_DUE

__all__ = [
    "REFRESH_STATUSES",
    "Candidates",
    "PeriodWork",
    "host_delays",
    "is_released",
    "new_page_candidates",
    "period_work",
    "refresh_candidates",
    "release_pages",
]

#: Statuses of pages that re-crawl quotas choose from (``new`` pages have a quota of their
#: own; ``error`` and ``blocked`` pages are due when the worker said).
REFRESH_STATUSES = ("ok", "gone", "redirect")

_HOST_CHUNK = 5_000


@dataclass(frozen=True)
class PeriodWork:
    """Period ``period`` of plan ``plan_id``: its window, re-crawl quotas and new pages."""

    plan_id: int
    period: int
    starts_at: datetime
    ends_at: datetime
    quotas: dict[int, int]
    new_pages: int


@dataclass
class Candidates:
    """Candidate pages, one entry per page in each list (column lists, not rows).

    ``scheduled_s``: seconds since the epoch (``cash`` for new pages); ``importance``: NaN
    when unknown; ``pending``: the page has a ``next_due_at`` (waiting to be leased);
    ``fetches``: the page's fetch count when read (a release writes the page only if no fetch
    was reported since, so a page fetched meanwhile is not released again);
    ``exhausted``: per bucket (``-1`` for new pages), True when the query returned fewer rows
    than asked, i.e. every candidate was read.
    """

    page_id: list[int] = field(default_factory=list)
    host_id: list[int] = field(default_factory=list)
    bucket: list[int] = field(default_factory=list)
    scheduled_s: list[float] = field(default_factory=list)
    importance: list[float] = field(default_factory=list)
    pending: list[bool] = field(default_factory=list)
    fetches: list[int] = field(default_factory=list)
    exhausted: dict[int, bool] = field(default_factory=dict)

    def extend(self, rows: Sequence[Any], bucket: int, limit: int) -> None:
        """Append ``(id, host_id, key, importance, pending, fetches)`` rows of one bucket."""
        self.exhausted[bucket] = len(rows) < limit
        if not rows:
            return
        ids, hosts, keys, importance, pending, fetches = zip(*rows, strict=True)
        self.fetches.extend(fetches)
        self.page_id.extend(ids)
        self.host_id.extend(hosts)
        self.bucket.extend([bucket] * len(rows))
        self.scheduled_s.extend(keys)
        self.importance.extend(float("nan") if v is None else v for v in importance)
        self.pending.extend(bool(v) for v in pending)


_NOW = bindparam("now", type_=UTCDateTime())


def _free() -> ColumnElement[bool]:
    return or_(PAGES.c.leased_until.is_(None), PAGES.c.leased_until < _NOW)


def _not_urgent() -> ColumnElement[bool]:
    """Pages in the immediate-crawl lane are due already: a release neither counts nor
    moves them (their crawls are charged to the plan separately)."""
    return or_(PAGES.c.next_due_at.is_(None), PAGES.c.next_due_at > URGENT_DUE)


def period_work(db: Database, plan_id: int, now: datetime) -> PeriodWork | None:
    """The period of plan ``plan_id`` whose window [starts_at, ends_at) holds ``now``."""
    pp = PLAN_PERIODS
    with db.read() as conn:
        row = conn.execute(
            select(pp.c.period, pp.c.starts_at, pp.c.ends_at, pp.c.new_pages).where(
                pp.c.plan_id == plan_id, pp.c.starts_at <= now, pp.c.ends_at > now
            )
        ).first()
        if row is None:
            return None
        quotas = conn.execute(
            select(QUOTAS.c.bucket, QUOTAS.c.pages).where(
                QUOTAS.c.plan_id == plan_id, QUOTAS.c.period == row.period
            )
        ).all()
    return PeriodWork(
        plan_id=plan_id,
        period=row.period,
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        quotas={int(b): int(q) for b, q in quotas},
        new_pages=int(row.new_pages),
    )


def is_released(db: Database, plan_id: int, period: int) -> bool:
    """Whether period ``period`` of plan ``plan_id`` was released already."""
    pr = PERIOD_RELEASES
    with db.read() as conn:
        found = conn.execute(
            select(pr.c.plan_id).where(pr.c.plan_id == plan_id, pr.c.period == period)
        ).first()
    return found is not None


def refresh_candidates(
    db: Database, limits: Mapping[int, int], *, before: datetime, now: datetime
) -> dict[int, Candidates]:
    """Per bucket, up to ``limits[bucket]`` pages scheduled before ``before``, most overdue first.

    Pages of ``REFRESH_STATUSES`` not held by a live lease at ``now``, in ``scheduled_at``
    order (ties by page id): one range scan of the ``(bucket, scheduled_at)`` index per bucket.
    Returns the candidates of each bucket asked for.
    """
    p = PAGES
    stmt = (
        select(
            p.c.id,
            p.c.host_id,
            epoch_seconds(p.c.scheduled_at, db.dialect),
            p.c.importance,
            p.c.next_due_at.is_not(None),
            p.c.fetches,
        )
        .where(
            p.c.bucket == bindparam("bucket"),
            p.c.scheduled_at < bindparam("before", type_=UTCDateTime()),
            p.c.status.in_(REFRESH_STATUSES),
            _free(),
            _not_urgent(),
        )
        .order_by(p.c.scheduled_at, p.c.id)
        .limit(bindparam("limit"))
    )
    out: dict[int, Candidates] = {}
    with db.read() as conn:
        for bucket, limit in sorted(limits.items()):
            out[bucket] = one = Candidates()
            if limit <= 0:
                one.exhausted[bucket] = False
                continue
            rows = conn.execute(
                stmt, {"bucket": bucket, "before": before, "now": now, "limit": limit}
            ).all()
            one.extend(rows, bucket, limit)
    return out


def new_page_candidates(db: Database, limit: int, *, now: datetime) -> Candidates:
    """Up to ``limit`` never-fetched pages not leased at ``now``, highest OPIC cash first.

    One backward scan of the partial index ``ix_pages_new_cash`` (ties of cash: the most
    recently added page first). ``scheduled_s`` holds the cash; ``bucket`` is -1.
    """
    p = PAGES
    out = Candidates()
    if limit <= 0:
        return out
    stmt = (
        select(
            p.c.id,
            p.c.host_id,
            p.c.cash,
            p.c.importance,
            p.c.next_due_at.is_not(None),
            p.c.fetches,
        )
        .where(text(NEW_PAGE_CONDITION), _free(), _not_urgent())
        .order_by(p.c.cash.desc(), p.c.id.desc())
        .limit(bindparam("limit"))
    )
    with db.read() as conn:
        rows = conn.execute(stmt, {"now": now, "limit": limit}).all()
    out.extend(rows, -1, limit)
    return out


def host_delays(db: Database, host_ids: Sequence[int]) -> dict[int, float | None]:
    """Each host's robots.txt ``crawl_delay`` (seconds; None when it names none)."""
    h = HOSTS
    ids = sorted(set(host_ids))
    found: dict[int, float | None] = {}
    stmt = select(h.c.id, h.c.crawl_delay).where(h.c.id.in_(bindparam("ids", expanding=True)))
    with db.read() as conn:
        for start in range(0, len(ids), _HOST_CHUNK):
            chunk = ids[start : start + _HOST_CHUNK]
            found.update(conn.execute(stmt, {"ids": chunk}).tuples().all())
    return found


#: Urgent pages (``store.urgent.URGENT_DUE``, the epoch) keep their due time: a release
#: neither moves nor withdraws them.
_URGENT = "1970-01-01 00:00:00.000000"
_PG_RELEASE = text(
    """
    UPDATE pages SET next_due_at = to_timestamp(t.s)
    FROM unnest(CAST(:ids AS bigint[]), CAST(:secs AS float8[]), CAST(:fetches AS int[]))
         AS t(i, s, f)
    WHERE pages.id = t.i AND pages.fetches = t.f
      AND (pages.leased_until IS NULL OR pages.leased_until < :now)
      AND (pages.next_due_at IS NULL OR pages.next_due_at > to_timestamp(0))
    """
).bindparams(bindparam("now", type_=UTCDateTime()))
_PG_WITHDRAW = text(
    """
    UPDATE pages SET next_due_at = NULL
    WHERE id = ANY(CAST(:ids AS bigint[]))
      AND (leased_until IS NULL OR leased_until < :now)
      AND next_due_at > to_timestamp(0)
    """
).bindparams(bindparam("now", type_=UTCDateTime()))
# The due time is formatted by SQLite from whole seconds and microseconds, as UTCDateTime
# stores it (naive UTC text with microseconds): no datetime object per page.
_SQLITE_RELEASE = (
    "UPDATE pages SET next_due_at = strftime('%Y-%m-%d %H:%M:%S', ?, 'unixepoch') "
    "|| printf('.%06d', ?) WHERE id = ? AND fetches = ? "
    "AND (leased_until IS NULL OR leased_until < ?) "
    f"AND (next_due_at IS NULL OR next_due_at > '{_URGENT}')"
)
_SQLITE_WITHDRAW = (
    "UPDATE pages SET next_due_at = NULL WHERE id = ? "
    "AND (leased_until IS NULL OR leased_until < ?) "
    f"AND next_due_at > '{_URGENT}'"
)


def _sorted_rows(
    ids: list[int], secs: list[float], fetches: list[int]
) -> tuple[list[int], list[float], list[int]]:
    rows = sorted(zip(ids, secs, fetches, strict=True))
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def release_pages(
    db: Database,
    plan_id: int,
    period: int,
    *,
    page_ids: Sequence[int],
    due_epoch_s: Sequence[float],
    fetches: Sequence[int],
    withdraw_ids: Sequence[int] = (),
    now: datetime | None = None,
) -> int | None:
    """Release period ``period`` of plan ``plan_id``: one transaction, once.

    Sets ``next_due_at`` of ``page_ids`` to ``due_epoch_s`` (seconds since the epoch, one
    per page), clears it for ``withdraw_ids``, and records the release (``period_releases``,
    with the number of pages released). A page is left alone when a live lease holds it at
    ``now``, or when its fetch count is no longer the ``fetches`` it had when read (a worker
    fetched and reported it in between: releasing it would fetch it twice). Returns the
    number of pages given a due time, or None when the period had been released already
    (nothing written).
    """
    if not len(page_ids) == len(due_epoch_s) == len(fetches):
        raise ValueError("page_ids, due_epoch_s and fetches must have the same length")
    when = now or utcnow()
    ids = [int(i) for i in page_ids]
    secs = [float(s) for s in due_epoch_s]
    counts = [int(f) for f in fetches]
    withdraw = [int(i) for i in withdraw_ids]
    record = insert_ignoring_conflicts(db, PERIOD_RELEASES).returning(PERIOD_RELEASES.c.plan_id)

    def work(conn: Connection) -> int | None:
        inserted = conn.execute(
            record,
            {"plan_id": plan_id, "period": period, "released_at": when, "pages": len(ids)},
        ).first()
        if inserted is None:  # the primary key decided: released already
            return None
        if db.dialect == "postgresql":
            # By id through the primary key in id order (the ids are sorted), never a hash
            # join over a scan of the whole table (which also writes in random order).
            conn.exec_driver_sql(PG_BY_ID)
            by_id, at, seen = _sorted_rows(ids, secs, counts)
            released = conn.execute(
                _PG_RELEASE, {"ids": by_id, "secs": at, "fetches": seen, "now": when}
            ).rowcount
            if withdraw:
                conn.execute(_PG_WITHDRAW, {"ids": withdraw, "now": when})
        else:
            # Through the driver, in id order (neighbouring rows share B-tree pages), with
            # the timestamps in the text form UTCDateTime stores (naive UTC, microseconds);
            # a large page cache while writing (100,000 scattered rows dirty as many pages).
            stamp = sqlite_text(when)
            rows = sorted(
                (i, *seconds_micros(s), f) for i, s, f in zip(ids, secs, counts, strict=True)
            )
            with sqlite_bulk_cache(conn):
                released = (
                    conn.exec_driver_sql(
                        _SQLITE_RELEASE, [(w, us, i, f, stamp) for i, w, us, f in rows]
                    ).rowcount
                    if rows
                    else 0
                )
                if withdraw:
                    conn.exec_driver_sql(_SQLITE_WITHDRAW, [(i, stamp) for i in sorted(withdraw)])
        conn.execute(
            update(PERIOD_RELEASES)
            .where(PERIOD_RELEASES.c.plan_id == plan_id, PERIOD_RELEASES.c.period == period)
            .values(pages=int(released or 0))
        )
        return int(released or 0)

    return db.run_write(work)
