"""Pages on PostgreSQL: new pages from two arrays in one statement, row locks in id order.

Writers of several pages lock them in id order before they write any page or host row
(:func:`store.pages.lock_pages`), so that two writers wait for one another instead of
deadlocking.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Insert, Table, bindparam, text
from sqlalchemy.dialects import postgresql

from store.types import UTCDateTime

__all__ = ["PostgresqlPages"]

#: New pages from arrays of URLs and host ids; the hosts of the rows inserted (conflicts
#: insert none).
INSERT_PAGES = text(
    """
    INSERT INTO pages (url, host_id, status, first_seen, next_due_at, fetches, changes,
                       bucket, cash, history, discovered, new_after)
    SELECT u, h, :status, :now, :due, 0, 0, 0, 0.0, 0.0, :discovered, :new_after
    FROM unnest(CAST(:urls AS varchar[]), CAST(:hosts AS bigint[])) AS t(u, h)
    ON CONFLICT (url) DO NOTHING
    RETURNING host_id
    """
).bindparams(
    bindparam("now", type_=UTCDateTime()),
    bindparam("due", type_=UTCDateTime()),
    bindparam("new_after", type_=UTCDateTime()),
)
#: Pages locked in id order (the LockRows step runs after the sort). NO KEY UPDATE, as an
#: UPDATE of them takes: foreign-key checks (an observation's) still pass.
LOCK_PAGES = text(
    "SELECT id FROM pages WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR NO KEY UPDATE"
)
#: The same, with the pages a lease holds.
LOCK_LEASE_PAGES = text(
    "SELECT id FROM pages WHERE id = ANY(CAST(:ids AS bigint[])) OR lease_id = :lease "
    "ORDER BY id FOR NO KEY UPDATE"
)
#: The table lock an UPDATE of pages takes, taken before the row locks: a row lock alone
#: takes a weaker one (ROW SHARE), and a whole-table writer (store.importance's spread, SHARE
#: ROW EXCLUSIVE) could then come in between and wait for the rows while the writer waits for
#: it.
LOCK_TABLE = "LOCK TABLE pages IN ROW EXCLUSIVE MODE"


class PostgresqlPages:
    """:class:`~store.backend.PagesSql` on PostgreSQL."""

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return postgresql.insert(table).on_conflict_do_nothing()

    def insert_new(
        self,
        conn: Connection,
        urls: list[str],
        hosts: list[int],
        *,
        now: datetime,
        due: datetime | None,
        discovered: bool,
        status: str = "new",
        new_after: datetime | None = None,
    ) -> tuple[int, list[int]]:
        """One statement with two array parameters (one round trip per chunk); the hosts
        returned are exactly those of the pages inserted."""
        params = {
            "urls": urls,
            "hosts": hosts,
            "now": now,
            "due": due,
            "discovered": discovered,
            "status": status,
            "new_after": new_after,
        }
        inserted = list(conn.execute(INSERT_PAGES, params).scalars())
        return len(inserted), inserted

    def lock(self, conn: Connection, page_ids: list[int], lease_id: int | None) -> None:
        conn.exec_driver_sql(LOCK_TABLE)
        if lease_id is None:
            conn.execute(LOCK_PAGES, {"ids": page_ids}).all()
        else:
            conn.execute(LOCK_LEASE_PAGES, {"ids": page_ids, "lease": lease_id}).all()
