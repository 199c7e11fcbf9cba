"""``hosts.ready_at`` on SQLite: scalar ``max``/``min``, ids as an ``IN`` list, no row locks.

SQLite runs one writer at a time (the file's write lock, from ``BEGIN IMMEDIATE``): no
recomputation can run between a writer's read of due times and its lowering, so nothing is
held or skipped. Times compare as the store holds them (fixed-width UTC text), so ``max`` and
``min`` compute what PostgreSQL's ``GREATEST`` and ``LEAST`` do.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    FromClause,
    Select,
    Update,
    bindparam,
    func,
    select,
)

from store.models import HOSTS

__all__ = ["SqliteHostReady"]


class SqliteHostReady:
    """:class:`~store.backend.HostReadySql` on SQLite."""

    def greatest(self, *values: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.max(*values)  # the scalar max() of several arguments

    def least(self, a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        # The scalar min() is NULL when any argument is.
        return func.min(func.coalesce(a, b), func.coalesce(b, a))

    def host_ids(self) -> FromClause:
        ids: Any = bindparam("ids", expanding=True)
        return select(HOSTS.c.id).where(HOSTS.c.id.in_(ids)).subquery("t")

    def skip_held(self, hosts: Select[Any]) -> Select[Any]:
        return hosts  # no writer holds a host while this transaction runs

    def hold(self, conn: Connection, host_ids: list[int]) -> None:
        """Nothing: one writer at a time."""

    def hold_queued(self, conn: Connection, plan_id: int, period: int) -> None:
        """Nothing: one writer at a time."""

    def take(self, conn: Connection, host_ids: list[int]) -> list[int]:
        """All of them, without a statement: one writer at a time."""
        return host_ids

    def recompute_all(
        self, conn: Connection, hosts: Select[Any], *, at_once: Update, by_id: Update
    ) -> int:
        """One statement (200,000 hosts: about 0.2 s, where chunks of ids in ``IN`` lists
        took three times as long)."""
        return int(conn.execute(at_once).rowcount or 0)
