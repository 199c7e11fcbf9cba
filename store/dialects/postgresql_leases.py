"""The lease queue on PostgreSQL: due pages of all picked hosts at once, the batch's marks
in one statement, hosts and reported pages locked.

Concurrent workers skip each other's candidate hosts (``FOR UPDATE SKIP LOCKED``) instead
of queueing on them. Due rows come through the driver in binary format; the lease's session
time zone is UTC, so that psycopg gives timestamptz values with ``tzinfo`` ``UTC`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Select, bindparam, text

from store.backend import LeaseBatch, LeasedPage
from store.database import PG_BY_ID, driver_cursor
from store.dialects.postgresql_pages import PostgresqlPages
from store.models import HOSTS, PAGES
from store.types import UTCDateTime

__all__ = ["PostgresqlLeases"]

#: The first due pages of each picked host from pages and from the release queue, one
#: LATERAL pair of index scans ((host_id, next_due_at), (host_id, due_at, page_id)) per host,
#: in the hosts' order (one round trip per batch). The rows come in due order; their due
#: time is not returned (one timestamp less to decode per row).
PAGES_DUE = """
SELECT x.host_id, x.id, x.url, x.status, x.last_fetch_at, x.etag, x.last_modified,
       x.signature, NULL AS due, x.queued
FROM unnest(%(hosts)s::bigint[]) WITH ORDINALITY AS h(id, ord)
CROSS JOIN LATERAL (
    (SELECT pages.host_id, pages.id, pages.url, pages.status, pages.last_fetch_at,
            pages.etag, pages.last_modified, pages.signature, pages.next_due_at AS due,
            false AS queued
     FROM pages
     WHERE pages.host_id = h.id AND pages.next_due_at <= %(now)s
       AND (pages.leased_until IS NULL OR pages.leased_until < %(now)s)
     ORDER BY pages.next_due_at, pages.id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT r.host_id, r.page_id, r.url, r.status, r.last_fetch_at, r.etag,
            r.last_modified, r.signature, r.due_at, true
     FROM released_pages r
     WHERE r.host_id = h.id AND r.due_at <= %(now)s
     ORDER BY r.due_at, r.page_id
     LIMIT %(limit)s)
) AS x
ORDER BY h.ord, x.due, x.id
"""
#: A batch's leases inserted, and its hosts and pages marked, in one statement. A leased
#: host is not ready before its lease ends (its ``ready_at`` had passed: it was picked).
TAKE_BATCH = text(
    """
    WITH leased AS (
        INSERT INTO leases (worker, host_id, created_at, expires_at, pages)
        SELECT :worker, t.h, :now, :until, t.n
        FROM unnest(CAST(:hosts AS bigint[]), CAST(:counts AS integer[])) AS t(h, n)
        RETURNING id, host_id
    ), hosts_taken AS (
        UPDATE hosts SET lease_id = leased.id, leased_until = :until, ready_at = :until
        FROM leased WHERE hosts.id = leased.host_id
    ), pages_taken AS (
        UPDATE pages SET lease_id = leased.id, leased_until = :until
        FROM unnest(CAST(:ids AS bigint[]), CAST(:page_hosts AS bigint[])) AS t(i, h)
        JOIN leased ON leased.host_id = t.h
        WHERE pages.id = t.i
    )
    SELECT host_id, id FROM leased
    """
).bindparams(bindparam("now", type_=UTCDateTime()), bindparam("until", type_=UTCDateTime()))
#: The lease transaction's session time zone.
UTC_SESSION = "SET LOCAL TimeZone = 'UTC'"
#: Zones psycopg gives timestamptz values in when the session's time zone is UTC.
_UTC_ZONES = (UTC, ZoneInfo("UTC"), ZoneInfo("Etc/UTC"))
_PAGES = PostgresqlPages()


def _utc(value: datetime | None) -> datetime | None:
    """A timestamptz from the driver as an aware UTC datetime (``tzinfo`` is ``UTC``)."""
    if value is None:
        return None
    zone = value.tzinfo
    if zone is UTC:
        return value
    if zone in _UTC_ZONES:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class PostgresqlLeases:
    """:class:`~store.backend.LeaseSql` on PostgreSQL."""

    def begin(self, conn: Connection) -> None:
        conn.exec_driver_sql(UTC_SESSION)

    def for_lease(self, hosts_due: Select[Any]) -> Select[Any]:
        """Concurrent workers skip each other's candidate hosts instead of queueing."""
        return hosts_due.with_for_update(skip_locked=True, of=HOSTS)

    def for_report(self, pages_reported: Select[Any]) -> Select[Any]:
        """Locked (held already by the report's lock_pages: no wait, no upgrade)."""
        return pages_reported.with_for_update(of=PAGES, key_share=True)

    def due_rows(
        self, conn: Connection, host_ids: list[int], per_host: int, now: datetime
    ) -> list[tuple[Any, ...]]:
        cursor = driver_cursor(conn)
        try:
            cursor.execute(PAGES_DUE, {"hosts": host_ids, "now": now, "limit": per_host})
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def take(
        self, conn: Connection, worker: str, batch: LeaseBatch, now: datetime, expires: datetime
    ) -> dict[int, int]:
        """One statement (:data:`TAKE_BATCH`)."""
        by_host = batch.by_host
        hosts = list(by_host)
        marks = sorted(batch.pages)
        params = {
            "worker": worker,
            "hosts": hosts,
            "counts": [len(by_host[h]) for h in hosts],
            "ids": [i for i, _ in marks],
            "page_hosts": [h for _, h in marks],
            "now": now,
            "until": expires,
        }
        # The pages to mark locked in id order first (the statement marks them host by
        # host), as every writer of pages locks them.
        if marks:
            _PAGES.lock(conn, sorted({i for i, _ in marks}), None)
        # Index lookups by id, never a hash join over a scan of the whole table.
        conn.exec_driver_sql(PG_BY_ID)
        return dict(conn.execute(TAKE_BATCH, params).tuples().all())

    def leased_pages(self, rows: Sequence[tuple[Any, ...]]) -> tuple[LeasedPage, ...]:
        """Built by ``tuple.__new__`` (what ``LeasedPage._make`` does)."""
        new, utc = tuple.__new__, _utc
        return tuple(
            [new(LeasedPage, (r[1], r[2], r[3], utc(r[4]), r[5], utc(r[6]), r[7])) for r in rows]
        )
