"""Releasing a plan period's work: the indexed candidate queries and the one-shot release.

Once a plan is published, a fetched page gets no ``next_due_at`` from its report: it waits
until a period release chooses it. The release of period t of a plan reads, per bucket with a
quota, the pages the refresh schedule wants by the end of the period in ``scheduled_at``
order (index ``(bucket, scheduled_at)``, ``LIMIT k``), and the never-fetched pages by OPIC
cash (partial index ``ix_pages_new_cash``); the planner chooses among them (that choice is
planning logic and lives in ``planner.cycle.due_urls``); :func:`queue_release` then appends the
chosen pages to the release queue (``released_pages``, with their release time, URL and
validators, read from the candidate indexes' entries, which hold them, not from the table)
and writes the ``period_releases`` row in one transaction: a release that fails leaves
nothing queued. The primary key of
``period_releases`` makes the release happen once: a second release of the same period, even
one racing from another process, changes nothing. The lease queue takes released pages from
``released_pages`` by host and due time; a report of the page deletes its row.

Released pages are the plan's quota: a page stays queued until it is fetched, whatever later
releases do. A page already queued (by an earlier period, or an earlier plan) is not a
candidate again; the release counts those still waiting (``carried_over``). A release
withdraws (``next_due_at`` := NULL) only due times outside the plan's releases that it read:
candidates left waiting from before the first plan (the lease queue hands out the plan's
choice, not the old regime's backlog), and the chosen ones (now queued). Pages whose
``next_due_at`` the worker owns (status ``error``: retry; ``blocked``: robots.txt expiry) and
urgent pages are never candidates and keep their due time.

Candidates are read through the driver (plain tuples: the release reads 125,000 rows for a
quota of 100,000 pages). Times cross this module's boundary as aware datetimes, except the
candidates' scheduled times and the release times, which are float seconds since the Unix
epoch (arrays of them are what the planner computes with; no datetime object per page).
"""

from __future__ import annotations

import math
import operator
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain, repeat
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text, update

from store.database import PG_BY_ID, Database, driver_cursor, sqlite_bulk_cache
from store.host_ready import hold_hosts, lower_ready_from_queue, refresh_ready
from store.models import (
    HOSTS,
    NEW_PAGE_CONDITION,
    PAGES,
    PERIOD_RELEASES,
    PLAN_PERIODS,
    QUOTAS,
    RELEASED_PAGES,
)
from store.pages import insert_ignoring_conflicts, lock_pages
from store.types import UTCDateTime, sqlite_text, utcnow

__all__ = [
    "REFRESH_STATUSES",
    "Candidates",
    "PeriodWork",
    "QueuedRelease",
    "host_delays",
    "is_released",
    "new_page_candidates",
    "period_work",
    "queue_release",
    "queued_pages",
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
    when unknown; ``pending``: the page has a ``next_due_at`` (due outside the plan's
    releases: from before the first plan); ``fetches``: the page's fetch count when read (a
    release queues the page only if no fetch was reported since, so a page fetched meanwhile
    is not released again); ``key``: the page's index key as the store gives it
    (``scheduled_at``: SQLite's text, PostgreSQL's whole microseconds since the epoch;
    ``cash`` for new pages), with which a release finds the page's entry in the index the
    candidate query read; ``exhausted``: per bucket (``-1`` for new pages), True when the
    query returned fewer rows than asked, i.e. every candidate was read.
    """

    page_id: list[int] = field(default_factory=list)
    host_id: list[int] = field(default_factory=list)
    bucket: list[int] = field(default_factory=list)
    scheduled_s: list[float] = field(default_factory=list)
    importance: list[float] = field(default_factory=list)
    pending: list[bool] = field(default_factory=list)
    fetches: list[int] = field(default_factory=list)
    key: list[Any] = field(default_factory=list)
    exhausted: dict[int, bool] = field(default_factory=dict)

    def extend(self, rows: Sequence[Any], bucket: int, limit: int) -> None:
        """Append ``(id, host_id, seconds, importance, pending, fetches, key)`` rows of one
        bucket."""
        self.exhausted[bucket] = len(rows) < limit
        if not rows:
            return
        ids, hosts, keys, importance, pending, fetches, stored = zip(*rows, strict=True)
        self.fetches.extend(fetches)
        self.key.extend(stored)
        self.page_id.extend(ids)
        self.host_id.extend(hosts)
        self.bucket.extend([bucket] * len(rows))
        self.scheduled_s.extend(keys)
        nan = float("nan")
        self.importance.extend([nan if v is None else v for v in importance])
        self.pending.extend([bool(v) for v in pending])


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


def queued_pages(db: Database) -> int:
    """Pages in the release queue: released, not fetched yet (waiting or held by a lease)."""
    with db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(RELEASED_PAGES)).scalar_one())


#: Urgent pages (``store.urgent.URGENT_DUE``, the epoch) keep their due time: a release
#: neither queues, moves nor withdraws them.
_URGENT = "1970-01-01 00:00:00.000000"
# Candidate queries, straight through the driver (plain tuples, no type processing per row):
# free (no live lease at the given time), not urgent, not queued by an earlier release.
_STATUSES = ", ".join(f"'{s}'" for s in REFRESH_STATUSES)
_SQLITE_CANDIDATE = (
    "(leased_until IS NULL OR leased_until < ?) "
    f"AND (next_due_at IS NULL OR next_due_at > '{_URGENT}') "
    "AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)"
)
_PG_CANDIDATE = (
    "(leased_until IS NULL OR leased_until < %s) "
    "AND (next_due_at IS NULL OR next_due_at > to_timestamp(0)) "
    "AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)"
)
# SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC): whole seconds plus the fraction.
# PostgreSQL's key: the scheduled time in whole microseconds since the epoch, exactly
# (extract's numeric, not date_part's float8, which is off by one microsecond for some
# times after 2106), sent back as integers (text of integers is three times cheaper to
# write and to parse than text of floats).
_PG_KEY_US = "(extract(epoch FROM scheduled_at) * 1000000)::int8"
#: A bigint of microseconds since the epoch as a timestamptz, exactly (no float on the way).
_PG_FROM_US = "(timestamptz 'epoch' + {} * interval '1 microsecond')"
_SQLITE_REFRESH = (
    "SELECT id, host_id, CAST(strftime('%s', scheduled_at) AS REAL) "
    "+ CAST(substr(scheduled_at, 20) AS REAL), importance, next_due_at IS NOT NULL, fetches, "
    f"scheduled_at FROM pages WHERE bucket = ? AND scheduled_at < ? AND status IN ({_STATUSES}) "
    f"AND {_SQLITE_CANDIDATE} ORDER BY scheduled_at, id LIMIT ?"
)
_PG_REFRESH = (
    "SELECT id, host_id, date_part('epoch', scheduled_at)::float8, importance, "
    f"next_due_at IS NOT NULL, fetches, {_PG_KEY_US} "
    f"FROM pages WHERE bucket = %s AND scheduled_at < %s AND status IN ({_STATUSES}) "
    f"AND {_PG_CANDIDATE} ORDER BY scheduled_at, id LIMIT %s"
)
# The new-page condition word for word, for SQLite to use the partial index.
_SQLITE_NEW = (
    "SELECT id, host_id, cash, importance, next_due_at IS NOT NULL, fetches, cash FROM pages "
    f"WHERE {NEW_PAGE_CONDITION} AND {_SQLITE_CANDIDATE} ORDER BY cash DESC, id DESC LIMIT ?"
)
_PG_NEW = (
    "SELECT id, host_id, cash, importance, next_due_at IS NOT NULL, fetches, cash FROM pages "
    f"WHERE {NEW_PAGE_CONDITION} AND {_PG_CANDIDATE} ORDER BY cash DESC, id DESC LIMIT %s"
)


def _driver_rows(conn: Connection, sql: str, args: Sequence[Any]) -> list[Any]:
    cursor = driver_cursor(conn)
    try:
        cursor.execute(sql, tuple(args))
        return list(cursor.fetchall())
    finally:
        cursor.close()


#: Later than any scheduled time: "no bound" for the candidate query's range scan.
_FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


def _stamp(db: Database, when: datetime) -> Any:
    """A time as the driver takes it: SQLite's stored text, else the aware datetime."""
    return sqlite_text(when) if db.dialect == "sqlite" else when


def refresh_candidates(
    db: Database, limits: Mapping[int, int], *, before: datetime | None, now: datetime
) -> dict[int, Candidates]:
    """Per bucket, up to ``limits[bucket]`` pages scheduled before ``before`` (None: whenever
    scheduled, the soonest after the due ones), most overdue first.

    Pages of ``REFRESH_STATUSES`` not held by a live lease at ``now``, not urgent and not in
    the release queue, in ``scheduled_at`` order (ties by page id): one range scan of the
    ``(bucket, scheduled_at)`` index per bucket. Returns the candidates of each bucket asked
    for.
    """
    sql = _PG_REFRESH if db.dialect == "postgresql" else _SQLITE_REFRESH
    until, at = _stamp(db, before or _FAR_FUTURE), _stamp(db, now)
    out: dict[int, Candidates] = {}
    asked = [(b, n) for b, n in sorted(limits.items()) if n > 0]
    for bucket, limit in sorted(limits.items()):
        out[bucket] = Candidates()
        if limit <= 0:
            out[bucket].exhausted[bucket] = False
    with db.read() as conn:
        if db.dialect == "postgresql":
            rows = _pg_pipelined_rows(conn, sql, [(b, until, at, n) for b, n in asked])
        else:
            rows = [_driver_rows(conn, sql, (b, until, at, n)) for b, n in asked]
    for (bucket, limit), found in zip(asked, rows, strict=True):
        out[bucket].extend(found, bucket, limit)
    return out


def _pg_pipelined_rows(
    conn: Connection, sql: str, arguments: Sequence[Sequence[Any]]
) -> list[list[Any]]:
    """The rows of ``sql`` for each of ``arguments``, the queries sent at once in psycopg's
    pipeline mode: the server runs the next bucket's query while this process converts the
    rows of the one before (one round trip in all, the two cores working at once). The
    pipeline is closed before returning, so the connection goes back to the pool as usual."""
    raw = conn.connection.driver_connection
    found: list[list[Any]] = []
    with raw.pipeline():  # type: ignore[union-attr]
        cursors = []
        for args in arguments:
            cursor = driver_cursor(conn)
            cursor.execute(sql, tuple(args))
            cursors.append(cursor)
        for cursor in cursors:
            try:
                found.append(list(cursor.fetchall()))
            finally:
                cursor.close()
    return found


def new_page_candidates(db: Database, limit: int, *, now: datetime) -> Candidates:
    """Up to ``limit`` never-fetched pages not leased at ``now``, highest OPIC cash first.

    One backward scan of the partial index ``ix_pages_new_cash`` (ties of cash: the most
    recently added page first); urgent and queued pages are left out. ``scheduled_s``
    holds the cash; ``bucket`` is -1.
    """
    out = Candidates()
    if limit <= 0:
        return out
    sql = _PG_NEW if db.dialect == "postgresql" else _SQLITE_NEW
    with db.read() as conn:
        rows = _driver_rows(conn, sql, (_stamp(db, now), limit))
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


# A chosen page is queued with its URL and validators, read from pages in the same statement,
# only if it is still as the release read it: no fetch reported since (same fetch count), no
# live lease, not urgent. A page queued already keeps its row (and its earlier due time).
# Rows go in host then due order, so that a host's pages sit together in the queue.
# PostgreSQL reads the chosen pages' rows with a bitmap heap scan (_PG_QUEUE_PLAN): table
# blocks in file order, prefetched (effective_io_concurrency) instead of read one at a time
# by a nested loop of index lookups (two to three times faster from disk).
_PG_QUEUE_SQL = f"""
    INSERT INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                last_fetch_at, etag, last_modified, signature)
    SELECT p.id, :plan, :period, p.host_id, {_PG_FROM_US.format("t.s")}, p.url, p.status,
           p.last_fetch_at, p.etag, p.last_modified, p.signature
    FROM unnest(CAST(:ids AS bigint[]), CAST(:due_us AS bigint[]), CAST(:fetches AS int[]))
         AS t(i, s, f)
    JOIN pages p ON p.id = t.i
    WHERE p.id = ANY(CAST(:ids AS bigint[]))
      AND p.fetches = t.f
      AND (p.leased_until IS NULL OR p.leased_until < :now)
      AND (p.next_due_at IS NULL OR p.next_due_at > to_timestamp(0))
    {{queued}}
    ORDER BY p.host_id, t.s, p.id
    {{conflict}}
"""
#: The plan of _PG_QUEUE (the rest of the transaction): pages by a prefetching bitmap heap
#: scan hash-joined with the chosen ids, never a scan of a whole table (queued pages looked
#: up by the page_id index, whatever the statistics say of ``released_pages``).
_PG_QUEUE_PLAN = (
    "SET LOCAL enable_hashjoin = on; SET LOCAL enable_indexscan = off; "
    "SET LOCAL enable_seqscan = off; SET LOCAL effective_io_concurrency = 64"
)
# Distinct page ids, releases serialized by _PG_RELEASE_LOCK: a page queued already is the
# only conflict, and it is committed (or this transaction's): NOT EXISTS leaves it out, and
# a plain insert costs a third less than ON CONFLICT's speculative insertion.
_PG_QUEUE = text(
    _PG_QUEUE_SQL.format(
        queued="AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = p.id)",
        conflict="",
    )
).bindparams(bindparam("now", type_=UTCDateTime()))
# A page id given twice: its first row (earliest due) is queued, the other skipped.
_PG_QUEUE_REPEATS = text(
    _PG_QUEUE_SQL.format(queued="", conflict="ON CONFLICT (page_id) DO NOTHING")
).bindparams(bindparam("now", type_=UTCDateTime()))
# PostgreSQL, keys given: each chosen page read from the index entry its candidate query read
# (index-only scans of ix_pages_bucket_scheduled by (bucket, scheduled_at), ix_pages_new_cash
# by cash; ``p.id + 0`` keeps the primary key out of it), the chosen pages in the order given
# (release_period gives them as read, so each bucket's index entries in order), not
# 100,000 scattered heap rows (read from disk when the OS has not kept them cached). Pages
# whose entry moved since the read are read by id afterwards (_PG_QUEUE_MISSING).
_PG_QUEUED_ROW = """
    SELECT p.id, p.host_id, t.s, p.url, p.status, p.last_fetch_at, p.etag, p.last_modified,
           p.signature
"""
_PG_UNCHANGED = """
      AND p.fetches = t.f
      AND (p.leased_until IS NULL OR p.leased_until < :now)
      AND (p.next_due_at IS NULL OR p.next_due_at > to_timestamp(0))
      AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = t.i)
"""
_PG_QUEUE_BY_INDEX_SQL = f"""
    WITH t AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:due_us AS bigint[]),
                             CAST(:fetches AS int[]), CAST(:buckets AS int[]),
                             CAST(:keys AS bigint[]), CAST(:cash AS float8[]))
                      AS t(i, s, f, b, k, c)
    )
    INSERT INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                last_fetch_at, etag, last_modified, signature)
    SELECT q.id, :plan, :period, q.host_id, {_PG_FROM_US.format("q.s")}, q.url, q.status,
           q.last_fetch_at, q.etag, q.last_modified, q.signature
    FROM ({_PG_QUEUED_ROW}
          FROM t JOIN pages p
            ON p.bucket = t.b AND p.scheduled_at = {_PG_FROM_US.format("t.k")}
               AND p.id + 0 = t.i
          WHERE t.b >= 0 {_PG_UNCHANGED}
          UNION ALL {_PG_QUEUED_ROW}
          FROM t JOIN pages p ON p.cash = t.c AND p.id + 0 = t.i
          WHERE t.b = -1 AND p.{NEW_PAGE_CONDITION} {_PG_UNCHANGED}) AS q
    ORDER BY q.host_id, q.s, q.id
    {{conflict}}
"""
_PG_QUEUE_MISSING_SQL = f"""
    WITH t AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:due_us AS bigint[]),
                             CAST(:fetches AS int[])) AS t(i, s, f)
        WHERE NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = t.i)
    )
    INSERT INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                last_fetch_at, etag, last_modified, signature)
    SELECT p.id, :plan, :period, p.host_id, {_PG_FROM_US.format("t.s")}, p.url, p.status,
           p.last_fetch_at, p.etag, p.last_modified, p.signature
    FROM t JOIN pages p ON p.id = t.i
    WHERE TRUE {_PG_UNCHANGED}
    ORDER BY p.host_id, t.s, p.id
    {{conflict}}
"""
_PG_REPEATED = "ON CONFLICT (page_id) DO NOTHING"


def _pg_statement(sql: str, repeats: bool) -> Any:
    return text(sql.format(conflict=_PG_REPEATED if repeats else "")).bindparams(
        bindparam("now", type_=UTCDateTime())
    )


#: The plan of _PG_QUEUE_BY_INDEX and _PG_QUEUE_MISSING (the rest of the transaction):
#: nested loops over the chosen pages, each looked up by index (queued pages by the page_id
#: index), never a hash or a scan of a whole table.
_PG_BY_INDEX_PLAN = (
    "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; "
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"
)
#: The PostgreSQL advisory lock that serializes releases (any constant of our own): no two
#: releases insert into ``released_pages`` at once.
_PG_RELEASE_LOCK = "SELECT pg_advisory_xact_lock(7165897122648319340)"  # "crawlrel"
_PG_OWNERS = text("SELECT DISTINCT host_id FROM pages WHERE id = ANY(CAST(:ids AS bigint[]))")
_PG_WITHDRAW = text(
    """
    UPDATE pages SET next_due_at = NULL
    WHERE id = ANY(CAST(:ids AS bigint[]))
      AND (leased_until IS NULL OR leased_until < :now)
      AND next_due_at > to_timestamp(0)
    """
).bindparams(bindparam("now", type_=UTCDateTime()))
# The due time is formatted by SQLite from whole seconds and microseconds, as UTCDateTime
# stores it (naive UTC text with microseconds; datetime() is strftime('%Y-%m-%d %H:%M:%S')
# without a format to parse): no datetime object per page. The chosen pages, (bucket, index
# key, id, whole seconds, microseconds, fetches), go through a temporary table filled by
# multi-row INSERTs (cheaper than executemany, or a JSON array's parsing), in the order the
# release passes them: candidate order, by bucket then index key, so that the lookups below
# walk each bucket's index entries in order. No key of its own: a page given twice is queued
# once, by released_pages' primary key. Bucket -1: a new page (key: its cash); -2: no key
# given (key 0).
_SQLITE_CHOSEN_TABLE = (
    "CREATE TEMP TABLE release_chosen (bucket INTEGER NOT NULL, key NUMERIC, "
    "page_id INTEGER NOT NULL, secs INTEGER NOT NULL, micros INTEGER NOT NULL, "
    "fetches INTEGER NOT NULL)"
)
#: Columns of release_chosen, and rows per multi-row INSERT (one statement binds 100,000
#: rows' values in 20 steps instead of 100,000: measured 40 % faster than executemany).
_CHOSEN_COLUMNS = 6
_CHOSEN_ROWS_PER_INSERT = 5_000
_SQLITE_CHOSEN_DROP = "DROP TABLE temp.release_chosen"
_SQLITE_QUEUE_COLUMNS = (
    "INSERT OR IGNORE INTO released_pages (page_id, plan_id, period, host_id, due_at, url, "
    "status, last_fetch_at, etag, last_modified, signature) "
)
_SQLITE_QUEUED_ROW = (
    "SELECT p.id, ?, ?, p.host_id, datetime(t.secs, 'unixepoch') "
    "|| printf('.%06d', t.micros) AS due, p.url, p.status, p.last_fetch_at, p.etag, "
    "p.last_modified, p.signature "
)
#: A chosen page is queued only if still as the release read it (see _PG_QUEUE_SQL).
_SQLITE_UNCHANGED = (
    "p.fetches = t.fetches AND (p.leased_until IS NULL OR p.leased_until < ?) "
    f"AND (p.next_due_at IS NULL OR p.next_due_at > '{_URGENT}')"
)
# Each chosen page's row read from the index entry its candidate query read (the entries of a
# bucket lie together, and were just read): ix_pages_bucket_scheduled and ix_pages_new_cash
# hold every column the release copies and checks, so the table's rows, 100,000 of them
# scattered over 10,000,000, are not read at all (from disk, when the OS has not kept them
# cached, that is seconds). A page whose entry moved since (fetched, re-scheduled,
# re-bucketed, cash moved) is not found here: the second statement reads it by id.
_SQLITE_QUEUE_BY_INDEX = (
    _SQLITE_QUEUE_COLUMNS
    + "SELECT * FROM ("
    + _SQLITE_QUEUED_ROW
    + "FROM temp.release_chosen AS t CROSS JOIN pages AS p "
    "INDEXED BY ix_pages_bucket_scheduled "
    "ON p.bucket = t.bucket AND p.scheduled_at = t.key AND p.id = t.page_id "
    f"WHERE t.bucket >= 0 AND {_SQLITE_UNCHANGED} "
    "UNION ALL "
    + _SQLITE_QUEUED_ROW
    + "FROM temp.release_chosen AS t CROSS JOIN pages AS p INDEXED BY ix_pages_new_cash "
    "ON p.cash = t.key AND p.id = t.page_id "
    f"WHERE t.bucket = -1 AND {NEW_PAGE_CONDITION.replace('status', 'p.status')} "
    f"AND {_SQLITE_UNCHANGED}"
    ") ORDER BY host_id, due, id"
)
# By id, from the table: the chosen pages not queued by _SQLITE_QUEUE_BY_INDEX (all of them
# when no keys were given).
_SQLITE_QUEUE_BY_ID = (
    _SQLITE_QUEUE_COLUMNS
    + _SQLITE_QUEUED_ROW
    + "FROM temp.release_chosen AS t CROSS JOIN pages AS p ON p.id = t.page_id "
    f"WHERE {_SQLITE_UNCHANGED} {{queued}}"
    "ORDER BY p.host_id, due, p.id"
)
_SQLITE_NOT_QUEUED = "AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = p.id) "
_SQLITE_WITHDRAW = (
    "UPDATE pages SET next_due_at = NULL WHERE id = ? "
    "AND (leased_until IS NULL OR leased_until < ?) "
    f"AND next_due_at > '{_URGENT}'"
)


@dataclass(frozen=True)
class QueuedRelease:
    """What :func:`queue_release` wrote: ``released`` pages queued by this release, and
    ``carried_over`` pages of earlier releases still in the queue (not fetched yet) when it
    ran; they stay queued."""

    released: int
    carried_over: int


#: PostgreSQL: the release sorts its 100,000 rows in memory, not in temporary files, and
#: runs without JIT compilation (its cost estimate passes the JIT threshold, but compiling
#: takes longer than the plain executor takes to run it).
_PG_SORT_MEMORY = "SET LOCAL work_mem = '64MB'; SET LOCAL jit = off"


def _array(values: Sequence[int] | Sequence[float]) -> str:
    """A PostgreSQL array literal of numbers (``repr`` of a float round-trips exactly)."""
    return "{" + ",".join(map(repr, values)) + "}"


def _chosen_values(
    buckets: Sequence[int],
    keys: Sequence[Any],
    ids: list[int],
    secs: list[float],
    fetches: list[int],
) -> list[Any]:
    """The rows ``(bucket, key, id, whole seconds, microseconds, fetches)``, flat:
    :func:`store.types.seconds_micros` column by column (C loops of ``map``, no Python
    frame per page)."""
    wholes, micros = _whole_micros(secs)
    return list(chain.from_iterable(zip(buckets, keys, ids, wholes, micros, fetches, strict=True)))


def _whole_micros(secs: list[float]) -> tuple[list[int], list[int]]:
    """:func:`store.types.seconds_micros` of each of ``secs``, as two columns."""
    wholes = list(map(math.floor, secs))
    micros = list(map(round, map(operator.mul, map(operator.sub, secs, wholes), repeat(1e6))))
    if 1_000_000 in micros:  # a fraction that rounds up to the next second
        for k, m in enumerate(micros):
            if m == 1_000_000:
                wholes[k], micros[k] = wholes[k] + 1, 0
    return wholes, micros


def _micros_since_epoch(secs: list[float]) -> list[int]:
    """Each of ``secs`` in whole microseconds, rounded as SQLite's release stores them."""
    wholes, micros = _whole_micros(secs)
    return list(map(operator.add, map(operator.mul, wholes, repeat(1_000_000)), micros))


def _sqlite_fill_chosen(conn: Connection, values: list[Any]) -> None:
    """Insert the flat rows ``values`` into ``temp.release_chosen``, many rows a statement."""
    limit = conn.connection.driver_connection.getlimit(  # type: ignore[union-attr]
        sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER
    )
    per = max(1, min(_CHOSEN_ROWS_PER_INSERT, limit // _CHOSEN_COLUMNS))
    size = per * _CHOSEN_COLUMNS
    row = "(" + ",".join("?" * _CHOSEN_COLUMNS) + ")"
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        for first in range(0, len(values), size):
            chunk = values[first : first + size]
            rows = len(chunk) // _CHOSEN_COLUMNS
            cursor.execute(
                "INSERT INTO temp.release_chosen VALUES " + ",".join([row] * rows), chunk
            )
    finally:
        cursor.close()


def queue_release(
    db: Database,
    plan_id: int,
    period: int,
    *,
    page_ids: Sequence[int],
    due_epoch_s: Sequence[float],
    fetches: Sequence[int],
    buckets: Sequence[int] | None = None,
    keys: Sequence[Any] | None = None,
    withdraw_ids: Sequence[int] = (),
    now: datetime | None = None,
) -> QueuedRelease | None:
    """Release period ``period`` of plan ``plan_id``: one transaction, once (a release that
    fails queues nothing).

    Queues ``page_ids`` in ``released_pages`` with due times ``due_epoch_s`` (seconds since
    the epoch, one per page), clears ``next_due_at`` of ``withdraw_ids`` (and recomputes their
    hosts' ``ready_at``: :mod:`store.host_ready`), and records the
    release (``period_releases``, with the number of pages queued). A page is left out when a
    live lease holds it at ``now``, when it is urgent or queued already, or when its fetch
    count is no longer the ``fetches`` it had when read (a worker fetched and reported it in
    between: releasing it would fetch it twice). Returns None when the period had been
    released already (nothing written).

    ``buckets`` and ``keys``, one per page: the page's candidate bucket (-1: a new page) and
    index key (:attr:`Candidates.bucket`, :attr:`Candidates.key`). With them the release reads
    the pages from the index entries the candidate queries read, not from the table (pages
    moved since are read by id); without them, by id. Pages given in the order they were
    read (bucket by bucket, each in index order) are looked up in that order, the fastest.
    """
    if not len(page_ids) == len(due_epoch_s) == len(fetches):
        raise ValueError("page_ids, due_epoch_s and fetches must have the same length")
    if (buckets is None) != (keys is None):
        raise ValueError("buckets and keys go together")
    if buckets is not None and keys is not None and not len(buckets) == len(keys) == len(page_ids):
        raise ValueError("buckets and keys must have one entry per page")
    when = now or utcnow()
    ids = list(map(int, page_ids))
    secs = list(map(float, due_epoch_s))
    counts = list(map(int, fetches))
    withdraw = list(map(int, withdraw_ids))
    record = insert_ignoring_conflicts(db, PERIOD_RELEASES).returning(PERIOD_RELEASES.c.plan_id)
    queued = select(func.count()).select_from(RELEASED_PAGES)
    chosen: _PgChosen | None = None
    keyed = repeats = False
    if db.dialect == "postgresql":
        keyed = buckets is not None and keys is not None and None not in keys
        chosen = _PgChosen.of(ids, secs, counts, *((buckets, keys) if keyed else (None, None)))
        repeats = len(set(ids)) < len(ids)

    def work(conn: Connection) -> QueuedRelease | None:
        inserted = conn.execute(
            record,
            {"plan_id": plan_id, "period": period, "released_at": when, "pages": len(ids)},
        ).first()
        if inserted is None:  # the primary key decided: released already
            return None
        if db.dialect == "postgresql":
            conn.exec_driver_sql(_PG_RELEASE_LOCK)
        carried = int(conn.execute(queued).scalar_one())
        if chosen is not None:
            # Withdrawn pages by id through the primary key, never a hash join over a scan of
            # the whole table.
            conn.exec_driver_sql(PG_BY_ID)
            conn.exec_driver_sql(_PG_SORT_MEMORY)
            owners = _owners(conn, db.dialect, withdraw)
            if withdraw:
                # Their hosts before the pages, as a lease locks them (store.host_ready).
                hold_hosts(conn, db.dialect, owners)
                lock_pages(conn, db.dialect, withdraw)  # in id order, as every page writer
                conn.execute(_PG_WITHDRAW, {"ids": sorted(withdraw), "now": when})
            if keyed:
                params = chosen.params(plan_id, period, when)
                count = _pg_insert_keyed(conn, params, len(ids), repeats)
            else:
                statement = _PG_QUEUE_REPEATS if repeats else _PG_QUEUE
                conn.exec_driver_sql(_PG_QUEUE_PLAN)
                params = chosen.params(plan_id, period, when)
                count = int(conn.execute(statement, params).rowcount or 0)
        else:
            owners = _owners(conn, db.dialect, withdraw)
            count = _sqlite_queue(
                conn, plan_id, period, when, ids, secs, counts, withdraw, buckets, keys
            )
        if count:
            lower_ready_from_queue(conn, db.dialect, plan_id, period)
        # Hosts whose due times were withdrawn may have nothing due now: set right here, not
        # left to the leases that would meet them (the first release under a plan withdraws
        # the backlog of every host, and leases repair a few thousand hosts per call).
        refresh_ready(conn, db.dialect, owners)
        conn.execute(
            update(PERIOD_RELEASES)
            .where(PERIOD_RELEASES.c.plan_id == plan_id, PERIOD_RELEASES.c.period == period)
            .values(pages=count)
        )
        return QueuedRelease(released=count, carried_over=carried)

    return db.run_write(work)


@dataclass(frozen=True)
class _PgChosen:
    """The chosen pages as PostgreSQL's queue statements take them, one entry per page in
    each list: id, due time (whole microseconds since the epoch, rounded as SQLite's release
    stores it), fetch count and, when ``keyed``, candidate bucket (-1: a new page), index key
    (a refresh candidate's ``scheduled_at`` in microseconds, 0 for a new page) and cash (a
    new page's key, 0.0 for a refresh candidate)."""

    ids: list[int]
    due_us: list[int]
    fetches: list[int]
    keyed: bool
    buckets: list[int]
    keys: list[int]
    cash: list[float]

    @classmethod
    def of(
        cls,
        ids: list[int],
        secs: list[float],
        fetches: list[int],
        buckets: Sequence[int] | None,
        keys: Sequence[Any] | None,
    ) -> _PgChosen:
        if buckets is None or keys is None:
            return cls(ids, _micros_since_epoch(secs), fetches, False, [], [], [])
        pairs = list(zip(map(int, buckets), keys, strict=True))
        return cls(
            ids,
            _micros_since_epoch(secs),
            fetches,
            True,
            [b for b, _ in pairs],
            [0 if b < 0 else int(k) for b, k in pairs],
            [float(k) if b < 0 else 0.0 for b, k in pairs],
        )

    def __len__(self) -> int:
        return len(self.ids)

    def params(self, plan: int, period: int, when: datetime) -> dict[str, Any]:
        """The statement parameters. Arrays sent as text literals (``repr`` of a float is
        exact): much faster than adapting 100,000 Python numbers one by one."""
        params: dict[str, Any] = {
            "ids": _array(self.ids),
            "due_us": _array(self.due_us),
            "fetches": _array(self.fetches),
            "now": when,
            "plan": plan,
            "period": period,
        }
        if self.keyed:
            params |= {
                "buckets": _array(self.buckets),
                "keys": _array(self.keys),
                "cash": _array(self.cash),
            }
        return params


def _pg_insert_keyed(conn: Connection, params: dict[str, Any], pages: int, repeats: bool) -> int:
    """Queue the pages of ``params`` (:meth:`_PgChosen.params`, keyed; ``pages`` of them) by
    their index entries, then those not found there by id; the number queued."""
    conn.exec_driver_sql(_PG_BY_INDEX_PLAN)
    conn.exec_driver_sql(_PG_SORT_MEMORY)
    count = int(conn.execute(_pg_statement(_PG_QUEUE_BY_INDEX_SQL, repeats), params).rowcount or 0)
    if count < pages:
        # Pages not found by their key (moved since the read), and repeated ids.
        missing = _pg_statement(_PG_QUEUE_MISSING_SQL, repeats)
        count += int(conn.execute(missing, params).rowcount or 0)
    return count


_SQLITE_OWNERS = (
    select(PAGES.c.host_id).distinct().where(PAGES.c.id.in_(bindparam("ids", expanding=True)))
)


def _owners(conn: Connection, dialect: str, page_ids: Sequence[int]) -> list[int]:
    """The hosts of pages ``page_ids``, in id order."""
    ids = sorted(page_ids)
    if not ids:
        return []
    if dialect == "postgresql":
        return sorted(conn.execute(_PG_OWNERS, {"ids": ids}).scalars())
    found: set[int] = set()
    for start in range(0, len(ids), _HOST_CHUNK):
        found.update(
            conn.execute(_SQLITE_OWNERS, {"ids": ids[start : start + _HOST_CHUNK]}).scalars()
        )
    return sorted(found)


def _sqlite_queue(
    conn: Connection,
    plan_id: int,
    period: int,
    when: datetime,
    ids: list[int],
    secs: list[float],
    counts: list[int],
    withdraw: list[int],
    buckets: Sequence[int] | None,
    keys: Sequence[Any] | None,
) -> int:
    """:func:`queue_release`'s writes on SQLite (in its transaction); the pages queued."""
    # Through the driver, with the timestamps in the text form UTCDateTime stores (naive
    # UTC, microseconds).
    stamp = sqlite_text(when)
    with sqlite_bulk_cache(conn):
        if withdraw:
            conn.exec_driver_sql(_SQLITE_WITHDRAW, [(i, stamp) for i in sorted(withdraw)])
        if not ids:
            return 0
        # (A failed release rolls the temporary table back with the rest.)
        conn.exec_driver_sql(_SQLITE_CHOSEN_TABLE)
        keyed = buckets is not None and keys is not None
        values = _chosen_values(
            list(map(int, buckets)) if buckets is not None else [-2] * len(ids),
            keys if keys is not None else [0] * len(ids),
            ids,
            secs,
            counts,
        )
        _sqlite_fill_chosen(conn, values)
        args = (plan_id, period, stamp)
        count = 0
        if keyed:
            count = int(conn.exec_driver_sql(_SQLITE_QUEUE_BY_INDEX, args + args).rowcount)
        if count < len(ids):
            # Pages not found by their key (moved, or no key given), and repeated ids.
            by_id = _SQLITE_QUEUE_BY_ID.format(queued=_SQLITE_NOT_QUEUED if keyed else "")
            count += int(conn.exec_driver_sql(by_id, args).rowcount)
        conn.exec_driver_sql(_SQLITE_CHOSEN_DROP)
    return count


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
    """:func:`queue_release`, returning only the number of pages queued (None: released
    already)."""
    done = queue_release(
        db,
        plan_id,
        period,
        page_ids=page_ids,
        due_epoch_s=due_epoch_s,
        fetches=fetches,
        withdraw_ids=withdraw_ids,
        now=now,
    )
    return None if done is None else done.released
