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

What differs between the engines (``GREATEST`` or SQLite's scalar ``max``, an array of ids
or an ``IN`` list, the row locks or none) is the engine's
:class:`~store.backend.HostReadySql` (``store.dialects.sqlite_host_ready``,
``postgresql_host_ready``), which every function here is given: ``db.backend.host_ready``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    FromClause,
    Select,
    Update,
    bindparam,
    case,
    cast,
    func,
    or_,
    select,
    update,
)

from store.backend import CHUNK
from store.database import Database
from store.models import HOSTS, PAGES, RELEASED_PAGES
from store.types import UTCDateTime

if TYPE_CHECKING:
    from store.backend import HostReadySql

__all__ = [
    "CHUNK",
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


def _not_before(
    sql: HostReadySql,
    due: ColumnElement[Any],
    next_fetch_at: ColumnElement[Any],
    backoff_until: ColumnElement[Any],
    leased_until: ColumnElement[Any],
) -> ColumnElement[Any]:
    """``due``, but not before ``next_fetch_at``, ``backoff_until`` or ``leased_until``
    (``due`` not NULL; ``next_fetch_at`` never is; NULL backoff or lease: none)."""
    return sql.greatest(
        due,
        next_fetch_at,
        func.coalesce(backoff_until, due),
        func.coalesce(leased_until, due),
    )


def ready_from(
    sql: HostReadySql,
    due: ColumnElement[Any],
    next_fetch_at: ColumnElement[Any],
    backoff_until: ColumnElement[Any],
    leased_until: ColumnElement[Any],
) -> ColumnElement[Any]:
    """``ready_at`` of a host whose earliest due time is ``due`` (NULL: nothing due)."""
    return case(
        (due.is_(None), None),
        else_=_not_before(sql, due, next_fetch_at, backoff_until, leased_until),
    )


def earliest_due(sql: HostReadySql, host_id: ColumnElement[int]) -> ColumnElement[Any]:
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
    return sql.least(planned, queued)


def _lowered(sql: HostReadySql, due: ColumnElement[Any]) -> tuple[ColumnElement[Any], Any]:
    """The ready time a due time ``due`` gives the host row, and when it lowers ``ready_at``."""
    h = HOSTS.c
    ready = _not_before(sql, due, h.next_fetch_at, h.backoff_until, h.leased_until)
    return ready, or_(h.ready_at.is_(None), h.ready_at > ready)


def due_once(sql: HostReadySql, host_id: ColumnElement[int]) -> Any:
    """A one-row subquery: columns ``host`` (``host_id``) and ``due``, the earliest due time
    of host ``host_id`` (:func:`earliest_due`), computed once. ``ready_from`` uses its due
    time four times, and an expression with the subqueries inline ran each of them as often
    (eight index probes where two do); OFFSET 0 keeps PostgreSQL and SQLite from pulling the
    subquery up."""
    host = cast(host_id, BigInteger).label("host")  # to join the host's row on
    return select(host, earliest_due(sql, host_id).label("due")).offset(0).subquery("d")


def _recompute_hosts(sql: HostReadySql, ids: FromClause) -> Update:
    """UPDATE of ``ready_at`` of the hosts whose ids the one-column table ``ids`` (column
    ``id``) lists, each host's earliest due time computed once; only changed rows written."""
    h = HOSTS.c
    due = (
        select(ids.c.id.label("id"), earliest_due(sql, ids.c.id).label("due"))
        .offset(0)
        .subquery("d")
    )
    value = ready_from(sql, due.c.due, h.next_fetch_at, h.backoff_until, h.leased_until)
    return (
        update(HOSTS)
        .where(h.id == due.c.id, h.ready_at.is_distinct_from(value))
        .values(ready_at=value)
    )


@dataclass(frozen=True)
class _Statements:
    """One engine's statements, built once (reports lower ``ready_at`` on every call)."""

    #: Recompute the hosts in list parameter ``ids``.
    by_id: Update
    #: The first ``count`` hosts a lease at ``now`` would pick (free, polite), in ready
    #: order, taken for recomputation.
    first: Select[Any]
    #: Every host, or every host with a ready time, in id order.
    every: Select[Any]
    every_set: Select[Any]
    #: Recompute them in one statement.
    every_at_once: Update
    every_set_at_once: Update
    #: Lower host ``host`` to due time ``due``.
    lower_by_id: Update
    #: Lower the hosts in list parameter ``ids`` that have a page due at ``due``.
    lower_due_at: Update
    #: Lower the hosts of period ``period`` of plan ``plan``'s queue to their earliest.
    lower_from_queue: Update


#: Statements by engine class (engines hold no state).
_BUILT: dict[type[Any], _Statements] = {}


def _statements(sql: HostReadySql) -> _Statements:
    """The statements of engine ``sql``, built once per engine class."""
    built = _BUILT.get(type(sql))
    if built is None:
        built = _BUILT[type(sql)] = _build(sql)
    return built


def _build(sql: HostReadySql) -> _Statements:
    h, r, p = HOSTS.c, RELEASED_PAGES.c, PAGES.c
    now = bindparam("now", type_=UTCDateTime())
    ids: Any = bindparam("ids", expanding=True)
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
    every = select(h.id).order_by(h.id)
    every_set = every.where(h.ready_at.is_not(None))
    ready, lowers = _lowered(sql, bindparam("due", type_=UTCDateTime()))
    due_there = select(p.id).where(p.host_id == h.id, p.next_due_at == bindparam("due")).exists()
    queued = (
        select(r.host_id, func.min(r.due_at).label("due"))
        .where(r.plan_id == bindparam("plan"), r.period == bindparam("period"))
        .group_by(r.host_id)
        .subquery()
    )
    ready_q, lowers_q = _lowered(sql, queued.c.due)
    return _Statements(
        by_id=_recompute_hosts(sql, sql.host_ids()),
        first=sql.skip_held(first),
        every=every,
        every_set=every_set,
        every_at_once=_recompute_hosts(sql, select(h.id).subquery("t")),
        every_set_at_once=_recompute_hosts(
            sql, select(h.id).where(h.ready_at.is_not(None)).subquery("t")
        ),
        lower_by_id=update(HOSTS).where(h.id == bindparam("host"), lowers).values(ready_at=ready),
        lower_due_at=update(HOSTS).where(h.id.in_(ids), lowers, due_there).values(ready_at=ready),
        lower_from_queue=update(HOSTS)
        .where(h.id == queued.c.host_id, lowers_q)
        .values(ready_at=ready_q),
    )


def hold_hosts(conn: Connection, sql: HostReadySql, host_ids: Sequence[int]) -> None:
    """Hold hosts ``host_ids`` (in id order) against recomputation until the transaction
    ends, before lowering their ``ready_at`` or making their pages due (module docstring;
    PostgreSQL: ``FOR KEY SHARE``; SQLite: nothing, one writer at a time)."""
    sql.hold(conn, sorted(set(host_ids)))


def take_hosts(conn: Connection, sql: HostReadySql, host_ids: Sequence[int]) -> list[int]:
    """Those of hosts ``host_ids`` this transaction may recompute: on PostgreSQL the ones it
    could lock ``FOR UPDATE SKIP LOCKED`` (none a writer holds), in id order; SQLite: all."""
    return sql.take(conn, sorted(set(host_ids)))


def _recompute(conn: Connection, sql: HostReadySql, ids: list[int]) -> int:
    """Recompute ``ready_at`` of hosts ``ids`` (taken already); hosts whose value changed."""
    stmt = _statements(sql).by_id
    changed = 0
    for start in range(0, len(ids), CHUNK):
        changed += int(conn.execute(stmt, {"ids": ids[start : start + CHUNK]}).rowcount or 0)
    return changed


def refresh_ready(conn: Connection, sql: HostReadySql, host_ids: Sequence[int]) -> None:
    """Recompute ``ready_at`` of those of hosts ``host_ids`` no writer holds, from their pages
    and queued pages (taken first, then read in a statement of their own)."""
    _recompute(conn, sql, take_hosts(conn, sql, host_ids))


def refresh_first_ready(conn: Connection, sql: HostReadySql, now: datetime, count: int) -> None:
    """Recompute ``ready_at`` of the first ``count`` hosts a lease at ``now`` would pick (free,
    polite, ``ready_at`` passed, no writer holding them), in ready order: the stale hosts a
    lease met, and those behind them."""
    first = conn.execute(_statements(sql).first, {"now": now, "count": count})
    _recompute(conn, sql, sorted(first.scalars()))


def refresh_ready_everywhere(conn: Connection, sql: HostReadySql, *, only_set: bool = False) -> int:
    """Recompute ``ready_at`` of every host (``only_set``: of hosts that have one) no writer
    holds.

    Two index lookups per host: for a store built by other means than :mod:`store`
    (benchmarks), and after withdrawing many due times. Returns the number of hosts whose
    value changed (only those are written).
    """
    s = _statements(sql)
    return sql.recompute_all(
        conn,
        s.every_set if only_set else s.every,
        at_once=s.every_set_at_once if only_set else s.every_at_once,
        by_id=s.by_id,
    )


def lower_ready(
    conn: Connection, sql: HostReadySql, due_by_host: dict[int, datetime], *, held: bool = False
) -> None:
    """Make ``ready_at`` of each host no later than its page due at ``due_by_host[host]``
    (the hosts held first, unless ``held``: the caller holds them already)."""
    if due_by_host:
        if not held:
            hold_hosts(conn, sql, list(due_by_host))
        rows = [{"host": h, "due": d} for h, d in sorted(due_by_host.items())]
        conn.execute(_statements(sql).lower_by_id, rows)


def lower_ready_to(
    conn: Connection,
    sql: HostReadySql,
    host_ids: Sequence[int],
    due: datetime,
    *,
    held: bool = False,
) -> None:
    """Lower ``ready_at`` of those of hosts ``host_ids`` that have a page due at ``due``
    (pages just made due at that time: added, or moved to the urgent lane); one index probe
    per host, so that hosts whose pages were known already are left as they are. The hosts
    are held first unless ``held`` (pages inserted in this transaction hold theirs: the
    foreign key's check locks them ``FOR KEY SHARE``)."""
    ids = sorted(set(host_ids))
    if not held:
        sql.hold(conn, ids)
    stmt = _statements(sql).lower_due_at
    for start in range(0, len(ids), CHUNK):
        conn.execute(stmt, {"ids": ids[start : start + CHUNK], "due": due})


def lower_ready_from_queue(conn: Connection, sql: HostReadySql, plan_id: int, period: int) -> None:
    """Lower ``ready_at`` of the hosts of the pages period ``period`` of plan ``plan_id``
    queued (each to its host's earliest queued due time), the hosts held first (the queue
    has no foreign key to hold them)."""
    sql.hold_queued(conn, plan_id, period)
    conn.execute(_statements(sql).lower_from_queue, {"plan": plan_id, "period": period})


def recompute_ready(db: Database) -> int:
    """Recompute every host's ``ready_at`` (one transaction); hosts whose value changed.

    For due times written outside :mod:`store` (an operator's SQL, a bulk load, a test
    making every page due again): the store's own writers keep ``ready_at`` as they go.
    """
    sql = db.backend.host_ready
    return db.run_write(lambda conn: refresh_ready_everywhere(conn, sql))
