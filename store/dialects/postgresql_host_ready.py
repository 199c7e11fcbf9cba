"""``hosts.ready_at`` on PostgreSQL: ``GREATEST``/``LEAST``, ids as an array, and row locks.

Under READ COMMITTED a recomputation reads due times in a snapshot that cannot see another
transaction's uncommitted page, so writers and recomputations lock host rows
(:mod:`store.host_ready`): writers hold theirs ``FOR KEY SHARE`` (writers never block each
other), recomputations take theirs ``FOR UPDATE SKIP LOCKED`` (they never wait, and so take
part in no deadlock).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    FromClause,
    Select,
    Update,
    bindparam,
    func,
    select,
)
from sqlalchemy.dialects import postgresql

from store.backend import CHUNK
from store.models import HOSTS, RELEASED_PAGES

__all__ = ["PostgresqlHostReady"]

_h, _r = HOSTS.c, RELEASED_PAGES.c
_IDS: Any = bindparam("ids", expanding=True)
#: Hosts by id, in id order, held as writers hold them.
HOLD_BY_ID = (
    select(_h.id)
    .where(_h.id.in_(_IDS))
    .order_by(_h.id)
    .with_for_update(read=True, key_share=True, of=HOSTS)
)
#: The hosts of a period's queued pages, in id order, held the same way (the queue has no
#: foreign key to hold them).
HOLD_QUEUED = (
    select(_h.id)
    .where(
        _h.id.in_(
            select(_r.host_id).where(
                _r.plan_id == bindparam("plan"), _r.period == bindparam("period")
            )
        )
    )
    .order_by(_h.id)
    .with_for_update(read=True, key_share=True, of=HOSTS)
)
#: Hosts by id, in id order, taken for recomputation (those a writer holds skipped).
TAKE_BY_ID = (
    select(_h.id).where(_h.id.in_(_IDS)).order_by(_h.id).with_for_update(skip_locked=True, of=HOSTS)
)


class PostgresqlHostReady:
    """:class:`~store.backend.HostReadySql` on PostgreSQL."""

    def greatest(self, *values: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.greatest(*values)

    def least(self, a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.least(a, b)  # ignores NULLs

    def host_ids(self) -> FromClause:
        """The array parameter ``ids`` unnested (joined by the primary key: an ``IN`` list of
        thousands of values made PostgreSQL scan the table, testing each row against the
        whole list)."""
        return (
            func.unnest(bindparam("ids", type_=postgresql.ARRAY(BigInteger)))
            .table_valued("id")
            .render_derived(name="t")
        )

    def skip_held(self, hosts: Select[Any]) -> Select[Any]:
        return hosts.with_for_update(skip_locked=True, of=HOSTS)

    def hold(self, conn: Connection, host_ids: list[int]) -> None:
        for start in range(0, len(host_ids), CHUNK):
            conn.execute(HOLD_BY_ID, {"ids": host_ids[start : start + CHUNK]}).all()

    def hold_queued(self, conn: Connection, plan_id: int, period: int) -> None:
        conn.execute(HOLD_QUEUED, {"plan": plan_id, "period": period}).all()

    def take(self, conn: Connection, host_ids: list[int]) -> list[int]:
        taken: list[int] = []
        for start in range(0, len(host_ids), CHUNK):
            taken += conn.execute(TAKE_BY_ID, {"ids": host_ids[start : start + CHUNK]}).scalars()
        return taken

    def recompute_all(
        self, conn: Connection, hosts: Select[Any], *, at_once: Update, by_id: Update
    ) -> int:
        """Exactly the hosts taken, then recomputed by id (a host added, given a ready time
        or held by a writer while the lock ran was not taken: its value stands)."""
        ids = list(conn.execute(self.skip_held(hosts)).scalars())
        changed = 0
        for start in range(0, len(ids), CHUNK):
            changed += int(conn.execute(by_id, {"ids": ids[start : start + CHUNK]}).rowcount or 0)
        return changed
