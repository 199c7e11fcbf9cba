"""A period release on SQLite: the candidate queries and the queue's bulk insert.

The candidate queries run straight through the driver (plain tuples: a release reads
125,000 rows for a quota of 100,000 pages). Times are compared as SQLite stores a
:class:`~store.types.UTCDateTime`: naive UTC text ``YYYY-MM-DD HH:MM:SS.ffffff``, which
sorts as the time does. The release holds the file's write lock (``BEGIN IMMEDIATE``), so
it needs no row locks and is serialized with every other writer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from itertools import chain
from typing import Any

from sqlalchemy import Connection, bindparam, select

from store.backend import ChosenPages
from store.database import sqlite_bulk_cache
from store.models import PAGES
from store.types import sqlite_text, whole_micros

__all__ = ["SqliteReleases", "chosen_values"]

#: Refresh candidates of one bucket: fetched pages of the refresh statuses, free (no live
#: lease at ``?``), not urgent (``store.urgent.URGENT_DUE``, the epoch), not queued, longest
#: unvisited first (ties: importance, higher first, NULL last; then id); one range scan of
#: ``ix_pages_bucket_fetched`` (the ties sorted on the way). The last fetch in seconds is the
#: stored text's whole seconds plus its fraction; the key is the stored text.
REFRESH = """
SELECT id, host_id,
       CAST(strftime('%s', last_fetch_at) AS REAL) + CAST(substr(last_fetch_at, 20) AS REAL),
       importance, next_due_at IS NOT NULL, fetches, last_fetch_at
FROM pages
WHERE bucket = ? AND last_fetch_at IS NOT NULL AND status IN ('ok', 'gone', 'redirect')
  AND (leased_until IS NULL OR leased_until < ?)
  AND (next_due_at IS NULL OR next_due_at > '1970-01-01 00:00:00.000000')
  AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)
ORDER BY last_fetch_at, importance DESC, id
LIMIT ?
"""
#: Refresh candidates of one politeness-bound host: its pages as REFRESH reads a bucket's, up
#: to ``?`` per bucket, longest unvisited first in each (a window over the host's pages,
#: read by ``ix_pages_host``: a host that bounds the plan holds few pages a period can
#: take, and the release reads them once); the bucket last.
HOST_REFRESH = """
SELECT id, host_id, secs, importance, pending, fetches, key, bucket FROM (
    SELECT id, host_id,
           CAST(strftime('%s', last_fetch_at) AS REAL) + CAST(substr(last_fetch_at, 20) AS REAL)
               AS secs,
           importance, next_due_at IS NOT NULL AS pending, fetches, last_fetch_at AS key,
           bucket,
           ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY last_fetch_at, importance DESC, id)
               AS rank
    FROM pages
    WHERE host_id = ? AND last_fetch_at IS NOT NULL AND status IN ('ok', 'gone', 'redirect')
      AND (leased_until IS NULL OR leased_until < ?)
      AND (next_due_at IS NULL OR next_due_at > '1970-01-01 00:00:00.000000')
      AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)
)
WHERE rank <= ?
ORDER BY bucket, key, importance DESC, id
"""
#: New-page candidates: the condition of the partial index ``ix_pages_new_cash`` word for
#: word (``status = 'new'``), for SQLite to use it; cash stands for seconds and key.
NEW_PAGES = """
SELECT id, host_id, cash, importance, next_due_at IS NOT NULL, fetches, cash
FROM pages
WHERE status = 'new'
  AND (leased_until IS NULL OR leased_until < ?)
  AND (next_due_at IS NULL OR next_due_at > '1970-01-01 00:00:00.000000')
  AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = pages.id)
ORDER BY cash DESC, id DESC
LIMIT ?
"""
#: The chosen pages, ``(bucket, index key, id, whole seconds, microseconds, fetches)``, in a
#: temporary table filled by multi-row INSERTs (cheaper than executemany, or a JSON array's
#: parsing), in candidate order (by bucket then index key), so that the lookups below walk
#: each bucket's index entries in order. Bucket -1: a new page (key: its cash); -2: no key
#: given (key 0). A failed release rolls the table back with the rest.
CHOSEN_TABLE = """
CREATE TEMP TABLE release_chosen (
    bucket INTEGER NOT NULL, key NUMERIC, page_id INTEGER NOT NULL,
    secs INTEGER NOT NULL, micros INTEGER NOT NULL, fetches INTEGER NOT NULL)
"""
CHOSEN_DROP = "DROP TABLE temp.release_chosen"
#: Columns of release_chosen, and rows per multi-row INSERT (one statement binds 100,000
#: rows' values in 20 steps instead of 100,000: measured 40 % faster than executemany).
CHOSEN_COLUMNS = 6
CHOSEN_ROWS_PER_INSERT = 5_000
#: Each chosen page's row read from the index entry its candidate query read:
#: ix_pages_bucket_fetched and ix_pages_new_cash hold every column the release copies and
#: checks, so the table's rows (100,000 scattered over 10,000,000) are not read at all. A
#: page is queued only if still as the release read it: same fetch count, no live lease,
#: not urgent. The due time is formatted by SQLite from whole seconds and microseconds, as
#: UTCDateTime stores it. A page whose entry moved since is not found: QUEUE_BY_ID reads it.
#: Rows go in host then due order, so that a host's pages sit together in the queue.
QUEUE_BY_INDEX = """
INSERT OR IGNORE INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                      last_fetch_at, etag, last_modified, signature)
SELECT * FROM (
    SELECT p.id, :plan, :period, p.host_id,
           datetime(t.secs, 'unixepoch') || printf('.%06d', t.micros) AS due,
           p.url, p.status, p.last_fetch_at, p.etag, p.last_modified, p.signature
    FROM temp.release_chosen AS t
    CROSS JOIN pages AS p INDEXED BY ix_pages_bucket_fetched
      ON p.bucket = t.bucket AND p.last_fetch_at = t.key AND p.id = t.page_id
    WHERE t.bucket >= 0
      AND p.fetches = t.fetches AND (p.leased_until IS NULL OR p.leased_until < :now)
      AND (p.next_due_at IS NULL OR p.next_due_at > '1970-01-01 00:00:00.000000')
    UNION ALL
    SELECT p.id, :plan, :period, p.host_id,
           datetime(t.secs, 'unixepoch') || printf('.%06d', t.micros) AS due,
           p.url, p.status, p.last_fetch_at, p.etag, p.last_modified, p.signature
    FROM temp.release_chosen AS t
    CROSS JOIN pages AS p INDEXED BY ix_pages_new_cash
      ON p.cash = t.key AND p.id = t.page_id
    WHERE t.bucket = -1 AND p.status = 'new'
      AND p.fetches = t.fetches AND (p.leased_until IS NULL OR p.leased_until < :now)
      AND (p.next_due_at IS NULL OR p.next_due_at > '1970-01-01 00:00:00.000000')
) ORDER BY host_id, due, id
"""
#: By id, from the table: the chosen pages QUEUE_BY_INDEX did not queue (all of them when
#: no keys were given), on the same conditions.
QUEUE_BY_ID = """
INSERT OR IGNORE INTO released_pages (page_id, plan_id, period, host_id, due_at, url, status,
                                      last_fetch_at, etag, last_modified, signature)
SELECT p.id, :plan, :period, p.host_id,
       datetime(t.secs, 'unixepoch') || printf('.%06d', t.micros) AS due,
       p.url, p.status, p.last_fetch_at, p.etag, p.last_modified, p.signature
FROM temp.release_chosen AS t CROSS JOIN pages AS p ON p.id = t.page_id
WHERE p.fetches = t.fetches AND (p.leased_until IS NULL OR p.leased_until < :now)
  AND (p.next_due_at IS NULL OR p.next_due_at > '1970-01-01 00:00:00.000000')
  AND NOT EXISTS (SELECT 1 FROM released_pages r WHERE r.page_id = p.id)
ORDER BY p.host_id, due, p.id
"""
#: Withdraw a due time from before the plans (never an urgent one, nor a leased page's).
WITHDRAW = """
UPDATE pages SET next_due_at = NULL
WHERE id = ? AND (leased_until IS NULL OR leased_until < ?)
  AND next_due_at > '1970-01-01 00:00:00.000000'
"""
_OWNERS = select(PAGES.c.host_id).distinct().where(PAGES.c.id.in_(bindparam("ids", expanding=True)))
#: Page ids per ``IN`` list of the owners' query (under SQLite's variable limit).
_OWNERS_CHUNK = 5_000


def _rows(conn: Connection, sql: str, args: tuple[Any, ...]) -> list[Any]:
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, args)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def chosen_values(
    buckets: Sequence[int],
    keys: Sequence[Any],
    ids: list[int],
    secs: list[float],
    fetches: list[int],
) -> list[Any]:
    """The rows ``(bucket, key, id, whole seconds, microseconds, fetches)`` of
    ``release_chosen``, flat (C loops of ``map`` and ``zip``, no Python frame per page)."""
    wholes, micros = whole_micros(secs)
    return list(chain.from_iterable(zip(buckets, keys, ids, wholes, micros, fetches, strict=True)))


class SqliteReleases:
    """:class:`~store.backend.ReleaseSql` on SQLite. A subclass may replace a
    statement (a class attribute) or a step, to inject a fault in a test."""

    refresh_sql = REFRESH
    new_pages_sql = NEW_PAGES
    queue_by_index_sql = QUEUE_BY_INDEX
    queue_by_id_sql = QUEUE_BY_ID

    def refresh_rows(
        self, conn: Connection, asked: Sequence[tuple[int, int]], *, now: datetime
    ) -> list[list[Any]]:
        at = sqlite_text(now)
        return [_rows(conn, self.refresh_sql, (b, at, n)) for b, n in asked]

    def host_rows(
        self, conn: Connection, hosts: Sequence[int], limit: int, *, now: datetime
    ) -> list[list[Any]]:
        at = sqlite_text(now)
        return [_rows(conn, HOST_REFRESH, (h, at, limit)) for h in hosts]

    def new_page_rows(self, conn: Connection, limit: int, *, now: datetime) -> list[Any]:
        return _rows(conn, self.new_pages_sql, (sqlite_text(now), limit))

    def serialize(self, conn: Connection) -> None:
        """Nothing: the release's transaction holds the file's write lock."""

    def queue(
        self, conn: Connection, chosen: ChosenPages, withdraw: Sequence[int]
    ) -> tuple[int, list[int]]:
        owners = self.owners(conn, withdraw)
        # Through the driver, with the timestamps in the text form UTCDateTime stores.
        stamp = sqlite_text(chosen.now)
        with sqlite_bulk_cache(conn):
            if withdraw:
                conn.exec_driver_sql(WITHDRAW, [(i, stamp) for i in sorted(withdraw)])
            if not chosen.ids:
                return 0, owners
            conn.exec_driver_sql(CHOSEN_TABLE)
            n = len(chosen.ids)
            keyed = chosen.buckets is not None and chosen.keys is not None
            values = chosen_values(
                chosen.buckets if chosen.buckets is not None else [-2] * n,
                chosen.keys if chosen.keys is not None else [0] * n,
                chosen.ids,
                chosen.due_s,
                chosen.fetches,
            )
            self._fill_chosen(conn, values)
            args = {"plan": chosen.plan_id, "period": chosen.period, "now": stamp}
            count = self.queue_by_index(conn, args) if keyed else 0
            if count < n:
                # Pages not found by their key (moved, or no key given).
                count += self.queue_by_id(conn, args)
            conn.exec_driver_sql(CHOSEN_DROP)
        return count, owners

    def queue_by_index(self, conn: Connection, args: dict[str, Any]) -> int:
        """Queue the chosen pages found by their candidate index entries; how many."""
        return int(conn.exec_driver_sql(self.queue_by_index_sql, args).rowcount)

    def queue_by_id(self, conn: Connection, args: dict[str, Any]) -> int:
        """Queue the chosen pages not queued yet, by id; how many."""
        return int(conn.exec_driver_sql(self.queue_by_id_sql, args).rowcount)

    def owners(self, conn: Connection, page_ids: Sequence[int]) -> list[int]:
        """The hosts of pages ``page_ids``, in id order."""
        ids = sorted(page_ids)
        found: set[int] = set()
        for start in range(0, len(ids), _OWNERS_CHUNK):
            chunk = ids[start : start + _OWNERS_CHUNK]
            found.update(conn.execute(_OWNERS, {"ids": chunk}).scalars())
        return sorted(found)

    @staticmethod
    def _fill_chosen(conn: Connection, values: list[Any]) -> None:
        """Insert the flat rows ``values`` into ``temp.release_chosen``, many a statement."""
        raw = conn.connection.driver_connection
        limit = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)  # type: ignore[union-attr]
        per = max(1, min(CHOSEN_ROWS_PER_INSERT, limit // CHOSEN_COLUMNS))
        size = per * CHOSEN_COLUMNS
        row = "(" + ",".join("?" * CHOSEN_COLUMNS) + ")"
        cursor = raw.cursor()  # type: ignore[union-attr]
        try:
            for first in range(0, len(values), size):
                chunk = values[first : first + size]
                rows = len(chunk) // CHOSEN_COLUMNS
                cursor.execute(
                    "INSERT INTO temp.release_chosen VALUES " + ",".join([row] * rows), chunk
                )
        finally:
            cursor.close()
