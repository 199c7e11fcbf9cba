"""Pages on SQLite: new pages through the driver's executemany, no row locks (one writer at
a time)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Insert, Table
from sqlalchemy.dialects import sqlite

from store.database import DriverStatement
from store.models import PAGES

__all__ = ["SqlitePages"]

#: New pages, known URLs skipped, compiled once and run through the driver (a dialect's
#: INSERT ... ON CONFLICT has no cache key: SQLAlchemy would compile it again for every
#: crawl report).
INSERT_PAGES = DriverStatement(
    sqlite.insert(PAGES)
    .values(fetches=0, changes=0, bucket=0, cash=0.0, history=0.0)
    .on_conflict_do_nothing(),
    sqlite.dialect(),
    column_keys=(
        "url",
        "host_id",
        "status",
        "first_seen",
        "next_due_at",
        "discovered",
        "new_after",
    ),
)


class SqlitePages:
    """:class:`~store.backend.PagesSql` on SQLite."""

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return sqlite.insert(table).on_conflict_do_nothing()

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
        """executemany sums the rows' counts (conflicts add none) but cannot tell which rows
        were inserted: every host given is returned."""
        rows = [
            {
                "url": u,
                "host_id": h,
                "status": status,
                "first_seen": now,
                "next_due_at": due,
                "discovered": discovered,
                "new_after": new_after,
            }
            for u, h in zip(urls, hosts, strict=True)
        ]
        return INSERT_PAGES.execute(conn, rows).rowcount, hosts

    def lock(self, conn: Connection, page_ids: list[int], lease_id: int | None) -> None:
        """Nothing: one writer at a time."""
