"""When a host next has work for a lease: ``hosts.ready_at``, the key leases pick hosts by.

A host's ``ready_at`` is the earliest time a lease could take one of its pages: its earliest
due time (a page's ``next_due_at``, a queued page's ``due_at``), but not before the host's
``next_fetch_at`` (politeness), its ``backoff_until``, nor the end of its live lease
(``leased_until``: a lease sets ``ready_at`` to its expiry, so that leased hosts do not stand
first in ready order); NULL when nothing of the host is due. The lease queue walks hosts by
``(ready_at, id)`` through the partial index ``ix_hosts_ready`` and stops after the batch's
hosts: a lease reads the hosts it takes, not every host whose politeness delay has passed
(200,000 hosts, most with nothing due, made one lease call 0.4 to 0.8 s on PostgreSQL when
it probed each of them for due work).

The stored value is a lower bound, never later than the true one:

- every writer that makes a page due, or due earlier, lowers it in the same transaction
  (:func:`lower_ready` and its set-based forms): new pages, reports, the urgent lane and
  period releases;
- writers that make work disappear (a report, a withdrawal of due times) may leave it early:
  a host whose ``ready_at`` has passed but that has nothing to lease is *stale*. The lease
  queue recomputes the stale hosts it meets (:func:`refresh_ready`); a host given back
  recomputes its own; withdrawing the pre-plan due times recomputes every host that had one,
  and a period release recomputes the hosts of the due times it withdrew.

A stale host costs one look and one recomputation; a host with due work is never missed.

Concurrency (PostgreSQL, READ COMMITTED). A recomputation reads the host's due times in a
snapshot that cannot see another transaction's uncommitted page; if it then overwrote that
transaction's lowering (or ran before it, and the lowering, finding the old early value,
wrote nothing) the page would wait for a host that never comes up. So:

- a writer of due times holds its hosts with ``FOR KEY SHARE`` (:func:`hold_hosts`) before
  it lowers them, in a statement of its own; a page insert holds its host that way already
  (the foreign key's check). Writers never block each other;
- a recomputation locks its hosts ``FOR UPDATE SKIP LOCKED`` and reads their due times in
  the next statement: a host a writer holds is skipped, and keeps its (lower) value; a host
  locked first makes the writer wait, whose lowering then reads the recomputed value.

Recomputations never wait for a lock, so they take part in no deadlock. SQLite runs one
writer at a time.

Times compare as the store holds them (SQLite: fixed-width UTC text), so ``max``/``min``
of SQLite and ``GREATEST``/``LEAST`` of PostgreSQL compute the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    bindparam,
    case,
    cast,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql

from store.database import Database
from store.models import HOSTS, PAGES, RELEASED_PAGES
from store.types import UTCDateTime

__all__ = [
    "due_once",
    "earliest_due",
    "hold_hosts",
    "lower_ready",
    "lower_ready_from_queue",
    "lower_ready_to",
    "ready_from",
    "recompute_ready",
    "refresh_first_ready",
    "refresh_ready",
    "refresh_ready_everywhere",
    "take_hosts",
]

#: Hosts per statement when recomputing or lowering by id.
_CHUNK = 5_000


def _greatest(dialect: str, *values: ColumnElement[Any]) -> ColumnElement[Any]:
    """The largest of ``values`` (none NULL): ``GREATEST`` or SQLite's scalar ``max``."""
    return func.greatest(*values) if dialect == "postgresql" else func.max(*values)


def _least(dialect: str, a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
    """The smaller of ``a`` and ``b`` ignoring a NULL one; NULL when both are."""
    if dialect == "postgresql":
        return func.least(a, b)  # ignores NULLs
    # SQLite's scalar min() is NULL when any argument is.
    return func.min(func.coalesce(a, b), func.coalesce(b, a))


def _not_before(
    dialect: str,
    due: ColumnElement[Any],
    next_fetch_at: ColumnElement[Any],
    backoff_until: ColumnElement[Any],
    leased_until: ColumnElement[Any],
) -> ColumnElement[Any]:
    """``due``, but not before ``next_fetch_at``, ``backoff_until`` or ``leased_until``
    (``due`` not NULL; ``next_fetch_at`` never is; NULL backoff or lease: none)."""
    return _greatest(
        dialect,
        due,
        next_fetch_at,
        func.coalesce(backoff_until, due),
        func.coalesce(leased_until, due),
    )


def ready_from(
    dialect: str,
    due: ColumnElement[Any],
    next_fetch_at: ColumnElement[Any],
    backoff_until: ColumnElement[Any],
    leased_until: ColumnElement[Any],
) -> ColumnElement[Any]:
    """``ready_at`` of a host whose earliest due time is ``due`` (NULL: nothing due)."""
    return case(
        (due.is_(None), None),
        else_=_not_before(dialect, due, next_fetch_at, backoff_until, leased_until),
    )


def earliest_due(dialect: str, host_id: ColumnElement[int]) -> ColumnElement[Any]:
    """The earliest due time of host ``host_id``'s pages and queued pages (NULL: none).

    Leased pages count: their host is leased too, and is not ready before its lease ends.
    Two index lookups: ``ix_pages_host_due`` and the queue's primary key.
    """
    p, r = PAGES.c, RELEASED_PAGES.c
    planned = (
        select(func.min(p.next_due_at))
        .where(p.host_id == host_id, p.next_due_at.is_not(None))
        .scalar_subquery()
    )
    queued = select(func.min(r.due_at)).where(r.host_id == host_id).scalar_subquery()
    return _least(dialect, planned, queued)


def _lowered(dialect: str, due: ColumnElement[Any]) -> tuple[ColumnElement[Any], Any]:
    """The ready time a due time ``due`` gives the host row, and when it lowers ``ready_at``."""
    h = HOSTS.c
    ready = _not_before(dialect, due, h.next_fetch_at, h.backoff_until, h.leased_until)
    return ready, or_(h.ready_at.is_(None), h.ready_at > ready)


def due_once(dialect: str, host_id: ColumnElement[int]) -> Any:
    """A one-row subquery: columns ``host`` (``host_id``) and ``due``, the earliest due time
    of host ``host_id`` (:func:`earliest_due`), computed once. ``ready_from`` uses its due
    time four times, and an expression with the subqueries inline ran each of them as often
    (eight index probes where two do); OFFSET 0 keeps PostgreSQL and SQLite from pulling the
    subquery up."""
    host = cast(host_id, BigInteger).label("host")  # to join the host's row on
    return select(host, earliest_due(dialect, host_id).label("due")).offset(0).subquery("d")


def _recompute_hosts(dialect: str, ids: Any) -> Any:
    """UPDATE of ``ready_at`` of the hosts whose ids the one-column table ``ids`` (column
    ``id``) lists, each host's earliest due time computed once; only changed rows written."""
    h = HOSTS.c
    due = (
        select(ids.c.id.label("id"), earliest_due(dialect, ids.c.id).label("due"))
        .offset(0)
        .subquery("d")
    )
    value = ready_from(dialect, due.c.due, h.next_fetch_at, h.backoff_until, h.leased_until)
    return (
        update(HOSTS)
        .where(h.id == due.c.id, h.ready_at.is_distinct_from(value))
        .values(ready_at=value)
    )


def _id_list() -> Any:
    """PostgreSQL: the table of the ids in array parameter ``ids`` (joined by the primary key:
    an ``IN`` list of thousands of values made PostgreSQL scan the table, testing each row
    against the whole list)."""
    return (
        func.unnest(bindparam("ids", type_=postgresql.ARRAY(BigInteger)))
        .table_valued("id")
        .render_derived(name="t")
    )


@cache
def _statements(dialect: str) -> dict[str, Any]:
    """This dialect's statements, built once (reports lower ``ready_at`` on every call)."""
    h, r, p = HOSTS.c, RELEASED_PAGES.c, PAGES.c
    now = bindparam("now", type_=UTCDateTime())
    ids: Any = bindparam("ids", expanding=True)
    # The first hosts a lease would pick (free, polite), in ready order.
    first = (
        select(h.id)
        .where(
            h.ready_at <= now,
            or_(h.leased_until.is_(None), h.leased_until < now),
            h.next_fetch_at <= now,
            or_(h.backoff_until.is_(None), h.backoff_until <= now),
        )
        .order_by(h.ready_at, h.id)
        .limit(bindparam("count"))
    )
    hold_by_id = select(h.id).where(h.id.in_(ids)).order_by(h.id)
    queued_hosts = select(r.host_id).where(
        r.plan_id == bindparam("plan"), r.period == bindparam("period")
    )
    hold_queued = select(h.id).where(h.id.in_(queued_hosts)).order_by(h.id)
    take_by_id = select(h.id).where(h.id.in_(ids)).order_by(h.id)
    take_all = select(h.id).order_by(h.id)
    take_set = take_all.where(h.ready_at.is_not(None))
    if dialect == "postgresql":
        # Writers: FOR KEY SHARE. Recomputations: FOR UPDATE SKIP LOCKED (module docstring).
        hold_by_id, hold_queued = (
            stmt.with_for_update(read=True, key_share=True, of=HOSTS)
            for stmt in (hold_by_id, hold_queued)
        )
        first, take_by_id, take_all, take_set = (
            stmt.with_for_update(skip_locked=True, of=HOSTS)
            for stmt in (first, take_by_id, take_all, take_set)
        )
    ready, lowers = _lowered(dialect, bindparam("due", type_=UTCDateTime()))
    due_there = select(p.id).where(p.host_id == h.id, p.next_due_at == bindparam("due")).exists()
    queued = (
        select(r.host_id, func.min(r.due_at).label("due"))
        .where(r.plan_id == bindparam("plan"), r.period == bindparam("period"))
        .group_by(r.host_id)
        .subquery()
    )
    ready_q, lowers_q = _lowered(dialect, queued.c.due)
    return {
        "everywhere": _recompute_hosts(dialect, select(h.id).subquery("t")),
        "set": _recompute_hosts(dialect, select(h.id).where(h.ready_at.is_not(None)).subquery("t")),
        "by_id": _recompute_hosts(
            dialect,
            _id_list()
            if dialect == "postgresql"
            else select(h.id).where(h.id.in_(ids)).subquery("t"),
        ),
        "first": first,
        "hold_by_id": hold_by_id,
        "hold_queued": hold_queued,
        "take_by_id": take_by_id,
        "take_all": take_all,
        "take_set": take_set,
        "lower_by_id": update(HOSTS)
        .where(h.id == bindparam("host"), lowers)
        .values(ready_at=ready),
        "lower_due_at": update(HOSTS)
        .where(h.id.in_(ids), lowers, due_there)
        .values(ready_at=ready),
        "lower_from_queue": update(HOSTS)
        .where(h.id == queued.c.host_id, lowers_q)
        .values(ready_at=ready_q),
    }


def hold_hosts(conn: Connection, dialect: str, host_ids: Sequence[int]) -> None:
    """PostgreSQL: hold hosts ``host_ids`` (``FOR KEY SHARE``, in id order) against
    recomputation until the transaction ends, before lowering their ``ready_at`` or making
    their pages due (module docstring). SQLite: nothing (one writer at a time)."""
    if dialect != "postgresql":
        return
    ids = sorted(set(host_ids))
    stmt = _statements(dialect)["hold_by_id"]
    for start in range(0, len(ids), _CHUNK):
        conn.execute(stmt, {"ids": ids[start : start + _CHUNK]}).all()


def take_hosts(conn: Connection, dialect: str, host_ids: Sequence[int]) -> list[int]:
    """Those of hosts ``host_ids`` this transaction may recompute: on PostgreSQL the ones it
    could lock ``FOR UPDATE SKIP LOCKED`` (none a writer holds), in id order; SQLite: all."""
    ids = sorted(set(host_ids))
    if dialect != "postgresql":
        return ids
    stmt = _statements(dialect)["take_by_id"]
    taken: list[int] = []
    for start in range(0, len(ids), _CHUNK):
        taken += conn.execute(stmt, {"ids": ids[start : start + _CHUNK]}).scalars()
    return taken


def _recompute(conn: Connection, dialect: str, ids: list[int]) -> int:
    """Recompute ``ready_at`` of hosts ``ids`` (taken already); hosts whose value changed."""
    stmt = _statements(dialect)["by_id"]
    changed = 0
    for start in range(0, len(ids), _CHUNK):
        changed += int(conn.execute(stmt, {"ids": ids[start : start + _CHUNK]}).rowcount or 0)
    return changed


def refresh_ready(conn: Connection, dialect: str, host_ids: Sequence[int]) -> None:
    """Recompute ``ready_at`` of those of hosts ``host_ids`` no writer holds, from their pages
    and queued pages (locked first, then read in a statement of their own)."""
    _recompute(conn, dialect, take_hosts(conn, dialect, host_ids))


def refresh_first_ready(conn: Connection, dialect: str, now: datetime, count: int) -> None:
    """Recompute ``ready_at`` of the first ``count`` hosts a lease at ``now`` would pick (free,
    polite, ``ready_at`` passed, no writer holding them), in ready order: the stale hosts a
    lease met, and those behind them."""
    first = conn.execute(_statements(dialect)["first"], {"now": now, "count": count})
    _recompute(conn, dialect, sorted(first.scalars()))


def refresh_ready_everywhere(conn: Connection, dialect: str, *, only_set: bool = False) -> int:
    """Recompute ``ready_at`` of every host (``only_set``: of hosts that have one) no writer
    holds.

    Two index lookups per host: for a store built by other means than :mod:`store`
    (benchmarks), and after withdrawing many due times. Returns the number of hosts whose
    value changed (only those are written).
    """
    statements = _statements(dialect)
    if dialect != "postgresql":
        return int(conn.execute(statements["set" if only_set else "everywhere"]).rowcount or 0)
    # Exactly the hosts locked (a host added, given a ready time or held by a writer while
    # the lock ran was not locked: its value stands).
    ids = list(conn.execute(statements["take_set" if only_set else "take_all"]).scalars())
    return _recompute(conn, dialect, ids)


def lower_ready(
    conn: Connection, dialect: str, due_by_host: dict[int, datetime], *, held: bool = False
) -> None:
    """Make ``ready_at`` of each host no later than its page due at ``due_by_host[host]``
    (the hosts held first, unless ``held``: the caller holds them already)."""
    if due_by_host:
        if not held:
            hold_hosts(conn, dialect, list(due_by_host))
        rows = [{"host": h, "due": d} for h, d in sorted(due_by_host.items())]
        conn.execute(_statements(dialect)["lower_by_id"], rows)


def lower_ready_to(
    conn: Connection, dialect: str, host_ids: Sequence[int], due: datetime, *, held: bool = False
) -> None:
    """Lower ``ready_at`` of those of hosts ``host_ids`` that have a page due at ``due``
    (pages just made due at that time: added, or moved to the urgent lane); one index probe
    per host, so that hosts whose pages were known already are left as they are. The hosts
    are held first unless ``held`` (pages inserted in this transaction hold theirs: the
    foreign key's check locks them ``FOR KEY SHARE``)."""
    ids = sorted(set(host_ids))
    if not held:
        hold_hosts(conn, dialect, ids)
    stmt = _statements(dialect)["lower_due_at"]
    for start in range(0, len(ids), _CHUNK):
        conn.execute(stmt, {"ids": ids[start : start + _CHUNK], "due": due})


def lower_ready_from_queue(conn: Connection, dialect: str, plan_id: int, period: int) -> None:
    """Lower ``ready_at`` of the hosts of the pages period ``period`` of plan ``plan_id``
    queued (each to its host's earliest queued due time), the hosts held first (the queue
    has no foreign key to hold them)."""
    params = {"plan": plan_id, "period": period}
    statements = _statements(dialect)
    if dialect == "postgresql":
        conn.execute(statements["hold_queued"], params).all()
    conn.execute(statements["lower_from_queue"], params)


def recompute_ready(db: Database) -> int:
    """Recompute every host's ``ready_at`` (one transaction); hosts whose value changed.

    For due times written outside :mod:`store` (an operator's SQL, a bulk load, a test
    making every page due again): the store's own writers keep ``ready_at`` as they go.
    """
    return db.run_write(lambda conn: refresh_ready_everywhere(conn, db.dialect))
