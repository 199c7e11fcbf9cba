"""A period release on PostgreSQL: the candidate queries and the queue's bulk insert.

The candidate queries go out at once in psycopg's pipeline mode, on one connection, and
their rows come back in binary format (:func:`store.database.driver_cursor`). The queue's
statements take the chosen pages as array literals (``unnest``), and pin their plans for the
rest of the transaction with ``SET LOCAL``: index lookups in the order given, never a hash
or a scan of a whole table. Releases are serialized by an advisory lock.

Times: a refresh candidate's key is its ``last_fetch_at`` in whole microseconds since the epoch,
exactly (``extract``'s numeric, not ``date_part``'s float8, which is off by one microsecond
for some times after 2106), sent as integers (text of integers is three times cheaper to
write and to parse than text of floats); release times go back the same way,
``timestamptz 'epoch' + us * interval '1 microsecond'`` (no float on the way).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import datetime
from itertools import repeat
from typing import Any

from sqlalchemy import Connection, TextClause, bindparam, text

from store.backend import ChosenPages
from store.database import PG_BY_ID, driver_cursor
from store.dialects.postgresql_host_ready import PostgresqlHostReady
from store.dialects.postgresql_pages import PostgresqlPages
from store.types import UTCDateTime, whole_micros

__all__ = ["PostgresqlReleases", "micros_since_epoch"]

#: Refresh candidates of one bucket (see :data:`store.dialects.sqlite_releases.REFRESH`).
REFRESH = """
SELECT id, host_id, date_part('epoch', last_fetch_at)::float8, importance,
       next_due_at IS NOT NULL, fetches, (extract(epoch FROM last_fetch_at) * 1000000)::int8
FROM pages
WHERE bucket = %s AND last_fetch_at IS NOT NULL AND status IN ('ok', 'gone', 'redirect')
  AND (leased_until IS NULL OR leased_until < %s)
  AND (next_due_at IS NULL OR next_due_at > to_timestamp(0))
  AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)
ORDER BY last_fetch_at, importance DESC NULLS LAST, id
LIMIT %s
"""
#: Refresh candidates of one politeness-bound host, up to ``%s`` per bucket (see
#: :data:`store.dialects.sqlite_releases.HOST_REFRESH`).
HOST_REFRESH = """
SELECT id, host_id, secs, importance, pending, fetches, key, bucket FROM (
    SELECT id, host_id, date_part('epoch', last_fetch_at)::float8 AS secs, importance,
           next_due_at IS NOT NULL AS pending, fetches,
           (extract(epoch FROM last_fetch_at) * 1000000)::int8 AS key, bucket, last_fetch_at,
           row_number() OVER (
               PARTITION BY bucket ORDER BY last_fetch_at, importance DESC NULLS LAST, id
           ) AS rank
    FROM pages
    WHERE host_id = %s AND last_fetch_at IS NOT NULL AND status IN ('ok', 'gone', 'redirect')
      AND (leased_until IS NULL OR leased_until < %s)
      AND (next_due_at IS NULL OR next_due_at > to_timestamp(0))
      AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)
) AS host_pages
WHERE rank <= %s
ORDER BY bucket, last_fetch_at, importance DESC NULLS LAST, id
"""
#: New-page candidates, by the partial index ``ix_pages_new_cash``.
NEW_PAGES = """
SELECT id, host_id, cash, importance, next_due_at IS NOT NULL, fetches, cash
FROM pages
WHERE status = 'new'
  AND (leased_until IS NULL OR leased_until < %s)
  AND (next_due_at IS NULL OR next_due_at > to_timestamp(0))
  AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)
ORDER BY cash DESC, id DESC
LIMIT %s
"""
#: The advisory lock that serializes releases (any constant of our own, "crawlrel"): no two
#: releases insert into ``released_pages`` at once, so a page queued already is committed
#: (or this transaction's), and NOT EXISTS leaves it out: a plain insert costs a third less
#: than ON CONFLICT's speculative insertion.
RELEASE_LOCK = "SELECT pg_advisory_xact_lock(7165897122648319340)"
#: The release sorts its 100,000 rows in memory, not in temporary files, and runs without
#: JIT compilation (its cost estimate passes the JIT threshold, but compiling takes longer
#: than the plain executor takes to run it).
SORT_MEMORY = "SET LOCAL work_mem = '64MB'; SET LOCAL jit = off"
#: The plan of QUEUE_BY_ID: pages by a prefetching bitmap heap scan (table blocks in file
#: order, two to three times faster from disk than a nested loop of index lookups)
#: hash-joined with the chosen ids, queued pages looked up by the page_id index.
BITMAP_PLAN = (
    "SET LOCAL enable_hashjoin = on; SET LOCAL enable_indexscan = off; "
    "SET LOCAL enable_seqscan = off; SET LOCAL effective_io_concurrency = 64"
)
#: The plan of QUEUE_BY_INDEX and QUEUE_MISSING: nested loops over the chosen pages, each
#: looked up by index, never a hash or a scan of a whole table.
INDEX_PLAN = (
    "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; "
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"
)
_NOW = bindparam("now", type_=UTCDateTime())
_HOST_READY = PostgresqlHostReady()
_PAGES = PostgresqlPages()
OWNERS = text("SELECT DISTINCT host_id FROM pages WHERE id = ANY(CAST(:ids AS bigint[]))")
WITHDRAW = text(
    """
    UPDATE pages SET next_due_at = NULL
    WHERE id = ANY(CAST(:ids AS bigint[]))
      AND (leased_until IS NULL OR leased_until < :now)
      AND next_due_at > to_timestamp(0)
    """
).bindparams(_NOW)
#: No keys: the chosen pages by id. A page is queued with its URL and validators, read from
#: pages in the same statement, only if still as the release read it: same fetch count, no
#: live lease, not urgent, not queued. Rows in host then due order, so that a host's pages
#: sit together in the queue.
QUEUE_BY_ID = text(
    """
    INSERT INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                last_fetch_at, etag, last_modified, signature)
    SELECT p.id, :plan, :period, p.host_id, timestamptz 'epoch' + t.s * interval '1 microsecond',
           p.url, p.status, p.last_fetch_at, p.etag, p.last_modified, p.signature
    FROM unnest(CAST(:ids AS bigint[]), CAST(:due_us AS bigint[]), CAST(:fetches AS int[]))
         AS t(i, s, f)
    JOIN pages p ON p.id = t.i
    WHERE p.id = ANY(CAST(:ids AS bigint[]))
      AND p.fetches = t.f
      AND (p.leased_until IS NULL OR p.leased_until < :now)
      AND (p.next_due_at IS NULL OR p.next_due_at > to_timestamp(0))
      AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = p.id)
    ORDER BY p.host_id, t.s, p.id
    """
).bindparams(_NOW)
#: Keys given: each chosen page read from the index entry its candidate query read
#: (index-only scans of ix_pages_bucket_fetched by (bucket, last_fetch_at), of
#: ix_pages_new_cash by cash; ``p.id + 0`` keeps the primary key out of it), in the order
#: given, not 100,000 scattered heap rows. Pages whose entry moved since: QUEUE_MISSING.
QUEUE_BY_INDEX = text(
    """
    WITH t AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:due_us AS bigint[]),
                             CAST(:fetches AS int[]), CAST(:buckets AS int[]),
                             CAST(:keys AS bigint[]), CAST(:cash AS float8[]))
                      AS t(i, s, f, b, k, c)
    )
    INSERT INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                last_fetch_at, etag, last_modified, signature)
    SELECT q.id, :plan, :period, q.host_id, timestamptz 'epoch' + q.s * interval '1 microsecond',
           q.url, q.status, q.last_fetch_at, q.etag, q.last_modified, q.signature
    FROM (SELECT p.id, p.host_id, t.s, p.url, p.status, p.last_fetch_at, p.etag,
                 p.last_modified, p.signature
          FROM t JOIN pages p
            ON p.bucket = t.b
               AND p.last_fetch_at = timestamptz 'epoch' + t.k * interval '1 microsecond'
               AND p.id + 0 = t.i
          WHERE t.b >= 0
            AND p.fetches = t.f
            AND (p.leased_until IS NULL OR p.leased_until < :now)
            AND (p.next_due_at IS NULL OR p.next_due_at > to_timestamp(0))
            AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = t.i)
          UNION ALL
          SELECT p.id, p.host_id, t.s, p.url, p.status, p.last_fetch_at, p.etag,
                 p.last_modified, p.signature
          FROM t JOIN pages p ON p.cash = t.c AND p.id + 0 = t.i
          WHERE t.b = -1 AND p.status = 'new'
            AND p.fetches = t.f
            AND (p.leased_until IS NULL OR p.leased_until < :now)
            AND (p.next_due_at IS NULL OR p.next_due_at > to_timestamp(0))
            AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = t.i)) AS q
    ORDER BY q.host_id, q.s, q.id
    """
).bindparams(_NOW)
#: The chosen pages QUEUE_BY_INDEX did not find (moved since the read), by id.
QUEUE_MISSING = text(
    """
    WITH t AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:due_us AS bigint[]),
                             CAST(:fetches AS int[])) AS t(i, s, f)
        WHERE NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = t.i)
    )
    INSERT INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                last_fetch_at, etag, last_modified, signature)
    SELECT p.id, :plan, :period, p.host_id, timestamptz 'epoch' + t.s * interval '1 microsecond',
           p.url, p.status, p.last_fetch_at, p.etag, p.last_modified, p.signature
    FROM t JOIN pages p ON p.id = t.i
    WHERE p.fetches = t.f
      AND (p.leased_until IS NULL OR p.leased_until < :now)
      AND (p.next_due_at IS NULL OR p.next_due_at > to_timestamp(0))
    ORDER BY p.host_id, t.s, p.id
    """
).bindparams(_NOW)


def micros_since_epoch(secs: list[float]) -> list[int]:
    """Each of ``secs`` in whole microseconds, rounded as SQLite's release stores them."""
    wholes, micros = whole_micros(secs)
    return list(map(operator.add, map(operator.mul, wholes, repeat(1_000_000)), micros))


def _array(values: Sequence[int] | Sequence[float]) -> str:
    """A PostgreSQL array literal of numbers (``repr`` of a float round-trips exactly): much
    faster than adapting 100,000 Python numbers one by one."""
    return "{" + ",".join(map(repr, values)) + "}"


def _pipelined_rows(
    conn: Connection, sql: str, arguments: Sequence[tuple[Any, ...]]
) -> list[list[Any]]:
    """The rows of ``sql`` for each of ``arguments``, the queries sent at once in psycopg's
    pipeline mode: the server runs the next bucket's query while this process converts the
    rows of the one before (one round trip in all). The pipeline is closed before returning,
    whatever happened, so the connection goes back to the pool as usual."""
    raw = conn.connection.driver_connection
    found: list[list[Any]] = []
    with raw.pipeline():  # type: ignore[union-attr]
        cursors = []
        for args in arguments:
            cursor = driver_cursor(conn)
            cursor.execute(sql, args)
            cursors.append(cursor)
        for cursor in cursors:
            try:
                found.append(list(cursor.fetchall()))
            finally:
                cursor.close()
    return found


class PostgresqlReleases:
    """:class:`~store.backend.ReleaseSql` on PostgreSQL. A subclass may replace a
    statement (a class attribute) or a step, to inject a fault in a test."""

    refresh_sql = REFRESH
    new_pages_sql = NEW_PAGES
    queue_by_index_sql: TextClause = QUEUE_BY_INDEX
    queue_missing_sql: TextClause = QUEUE_MISSING

    def refresh_rows(
        self, conn: Connection, asked: Sequence[tuple[int, int]], *, now: datetime
    ) -> list[list[Any]]:
        return _pipelined_rows(conn, self.refresh_sql, [(b, now, n) for b, n in asked])

    def host_rows(
        self, conn: Connection, hosts: Sequence[int], limit: int, *, now: datetime
    ) -> list[list[Any]]:
        return _pipelined_rows(conn, HOST_REFRESH, [(h, now, limit) for h in hosts])

    def new_page_rows(self, conn: Connection, limit: int, *, now: datetime) -> list[Any]:
        return _pipelined_rows(conn, self.new_pages_sql, [(now, limit)])[0]

    def serialize(self, conn: Connection) -> None:
        conn.exec_driver_sql(RELEASE_LOCK)

    def queue(
        self, conn: Connection, chosen: ChosenPages, withdraw: Sequence[int]
    ) -> tuple[int, list[int]]:
        # Withdrawn pages by id through the primary key, never a hash join over a scan of
        # the whole table; sorts in memory.
        conn.exec_driver_sql(PG_BY_ID)
        conn.exec_driver_sql(SORT_MEMORY)
        ids = sorted(withdraw)
        owners = sorted(conn.execute(OWNERS, {"ids": ids}).scalars()) if ids else []
        if ids:
            # Their hosts before the pages, as a lease locks them (store.host_ready), the
            # pages in id order, as every page writer locks them.
            _HOST_READY.hold(conn, sorted(set(owners)))
            _PAGES.lock(conn, sorted(set(ids)), None)
            conn.execute(WITHDRAW, {"ids": ids, "now": chosen.now})
        params: dict[str, Any] = {
            "ids": _array(chosen.ids),
            "due_us": _array(micros_since_epoch(chosen.due_s)),
            "fetches": _array(chosen.fetches),
            "now": chosen.now,
            "plan": chosen.plan_id,
            "period": chosen.period,
        }
        keys = chosen.keys
        if chosen.buckets is None or keys is None or None in keys:
            conn.exec_driver_sql(BITMAP_PLAN)
            return int(conn.execute(QUEUE_BY_ID, params).rowcount or 0), owners
        buckets = chosen.buckets
        params["buckets"] = _array(buckets)
        pairs = list(zip(buckets, keys, strict=True))
        params["keys"] = _array([0 if b < 0 else int(k) for b, k in pairs])
        params["cash"] = _array([float(k) if b < 0 else 0.0 for b, k in pairs])
        conn.exec_driver_sql(INDEX_PLAN)
        count = self.queue_by_index(conn, params)
        if count < len(chosen.ids):
            count += self.queue_missing(conn, params)
        return count, owners

    def queue_by_index(self, conn: Connection, params: dict[str, Any]) -> int:
        """Queue the chosen pages found by their candidate index entries; how many."""
        return int(conn.execute(self.queue_by_index_sql, params).rowcount or 0)

    def queue_missing(self, conn: Connection, params: dict[str, Any]) -> int:
        """Queue the chosen pages not queued yet, by id; how many."""
        return int(conn.execute(self.queue_missing_sql, params).rowcount or 0)
