"""When a host next has work for a lease: ``hosts.ready_at``, the key leases pick hosts by.

A host's ``ready_at`` is the earliest time a lease could find one of its pages to fetch:
its earliest due time (a page's ``next_due_at``, a queued page's ``due_at``), but not before
the host's ``next_fetch_at`` (politeness) nor its ``backoff_until``; NULL when nothing of the
host is due. The lease queue walks hosts by ``(ready_at, id)`` through the partial index
``ix_hosts_ready`` and stops after the batch's hosts: a lease reads the hosts it takes, not
every host whose politeness delay has passed (200,000 hosts, most with nothing due, made one
lease call 0.8 s when it probed each of them for due work).

The stored value is a lower bound, never later than the true one:

- every writer that makes a page due, or due earlier, lowers it in the same transaction
  (:func:`lower_ready` and its set-based forms): new pages, reports, the urgent lane and
  period releases;
- writers that make work disappear (a report, a withdrawal of due times) may leave it early:
  a host whose ``ready_at`` has passed but that has nothing to lease is *stale*. The lease
  queue recomputes the stale hosts it meets (:func:`refresh_ready`); a host given back
  recomputes its own; withdrawing the pre-plan due times recomputes every host that had one.

A stale host costs one look and one recomputation; a host with due work is never missed.
Times compare as the store holds them (SQLite: fixed-width UTC text), so ``max``/``min``
of SQLite and ``GREATEST``/``LEAST`` of PostgreSQL compute the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    bindparam,
    case,
    func,
    or_,
    select,
    update,
)

from store.database import Database
from store.models import HOSTS, PAGES, RELEASED_PAGES
from store.types import UTCDateTime

__all__ = [
    "earliest_due",
    "lower_ready",
    "lower_ready_from_queue",
    "lower_ready_to",
    "ready_from",
    "recompute_ready",
    "refresh_first_ready",
    "refresh_ready",
    "refresh_ready_everywhere",
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


def ready_from(
    dialect: str,
    due: ColumnElement[Any],
    next_fetch_at: ColumnElement[Any],
    backoff_until: ColumnElement[Any],
) -> ColumnElement[Any]:
    """``ready_at`` of a host whose earliest due time is ``due`` (NULL: nothing due).

    ``next_fetch_at`` is never NULL; a NULL ``backoff_until`` is no backoff.
    """
    return case(
        (due.is_(None), None),
        else_=_greatest(dialect, due, next_fetch_at, func.coalesce(backoff_until, due)),
    )


def earliest_due(dialect: str, host_id: ColumnElement[int]) -> ColumnElement[Any]:
    """The earliest due time of host ``host_id``'s pages and queued pages (NULL: none).

    Leased pages count: their host is leased too, and a lease ends before they are free.
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


@cache
def _statements(dialect: str) -> dict[str, Any]:
    """This dialect's statements, built once (reports lower ``ready_at`` on every call)."""
    h, r = HOSTS.c, RELEASED_PAGES.c
    value = ready_from(dialect, earliest_due(dialect, h.id), h.next_fetch_at, h.backoff_until)
    # Only rows whose value changes are written.
    recompute = update(HOSTS).where(h.ready_at.is_distinct_from(value)).values(ready_at=value)
    first = (
        select(h.id)
        .where(h.ready_at <= bindparam("now", type_=UTCDateTime()))
        .order_by(h.ready_at, h.id)
        .limit(bindparam("count"))
    )
    if dialect == "postgresql":
        first = first.with_for_update(skip_locked=True)  # hosts other leases are taking
    ready, lowers = _lowered(dialect, bindparam("due", type_=UTCDateTime()))
    lower_by_id = update(HOSTS).where(h.id == bindparam("host"), lowers).values(ready_at=ready)
    p = PAGES.c
    due_there = select(p.id).where(p.host_id == h.id, p.next_due_at == bindparam("due")).exists()
    queued = (
        select(r.host_id, func.min(r.due_at).label("due"))
        .where(r.plan_id == bindparam("plan"), r.period == bindparam("period"))
        .group_by(r.host_id)
        .subquery()
    )
    ready_q, lowers_q = _lowered(dialect, queued.c.due)
    return {
        "everywhere": recompute,
        "set": recompute.where(h.ready_at.is_not(None)),
        "by_id": recompute.where(h.id.in_(bindparam("ids", expanding=True))),
        "first": recompute.where(h.id.in_(first.scalar_subquery())),
        "lower_by_id": lower_by_id,
        "lower_due_at": update(HOSTS)
        .where(h.id.in_(bindparam("ids", expanding=True)), lowers, due_there)
        .values(ready_at=ready),
        "lower_from_queue": update(HOSTS)
        .where(h.id == queued.c.host_id, lowers_q)
        .values(ready_at=ready_q),
    }


def _lowered(dialect: str, due: ColumnElement[Any]) -> tuple[ColumnElement[Any], Any]:
    """The ready time a due time ``due`` gives the host row, and when it lowers ``ready_at``."""
    h = HOSTS.c
    ready = _greatest(dialect, due, h.next_fetch_at, func.coalesce(h.backoff_until, due))
    return ready, or_(h.ready_at.is_(None), h.ready_at > ready)


def refresh_ready(conn: Connection, dialect: str, host_ids: Sequence[int]) -> None:
    """Recompute ``ready_at`` of hosts ``host_ids`` from their pages and queued pages."""
    ids = sorted(set(host_ids))
    stmt = _statements(dialect)["by_id"]
    for start in range(0, len(ids), _CHUNK):
        conn.execute(stmt, {"ids": ids[start : start + _CHUNK]})


def refresh_first_ready(conn: Connection, dialect: str, now: datetime, count: int) -> None:
    """Recompute ``ready_at`` of the first ``count`` hosts whose ``ready_at`` has passed at
    ``now``, in ready order (the stale hosts a lease met, and those behind them)."""
    conn.execute(_statements(dialect)["first"], {"now": now, "count": count})


def refresh_ready_everywhere(conn: Connection, dialect: str, *, only_set: bool = False) -> int:
    """Recompute ``ready_at`` of every host (``only_set``: of hosts that have one).

    One statement, two index lookups per host: for a store built by other means than
    :mod:`store` (benchmarks), and after withdrawing many due times. Returns the number of
    hosts whose value changed (only those are written).
    """
    stmt = _statements(dialect)["set" if only_set else "everywhere"]
    return int(conn.execute(stmt).rowcount or 0)


def lower_ready(conn: Connection, dialect: str, due_by_host: dict[int, datetime]) -> None:
    """Make ``ready_at`` of each host no later than its page due at ``due_by_host[host]``."""
    if due_by_host:
        rows = [{"host": h, "due": d} for h, d in sorted(due_by_host.items())]
        conn.execute(_statements(dialect)["lower_by_id"], rows)


def lower_ready_to(conn: Connection, dialect: str, host_ids: Sequence[int], due: datetime) -> None:
    """Lower ``ready_at`` of those of hosts ``host_ids`` that have a page due at ``due``
    (pages just made due at that time: added, or moved to the urgent lane); one index probe
    per host, so that hosts whose pages were known already are left as they are."""
    ids = sorted(set(host_ids))
    stmt = _statements(dialect)["lower_due_at"]
    for start in range(0, len(ids), _CHUNK):
        conn.execute(stmt, {"ids": ids[start : start + _CHUNK], "due": due})


def lower_ready_from_queue(conn: Connection, dialect: str, plan_id: int, period: int) -> None:
    """Lower ``ready_at`` of the hosts of the pages period ``period`` of plan ``plan_id``
    queued (each to its host's earliest queued due time): one statement."""
    conn.execute(_statements(dialect)["lower_from_queue"], {"plan": plan_id, "period": period})


def recompute_ready(db: Database) -> int:
    """Recompute every host's ``ready_at`` (one transaction); hosts whose value changed.

    For due times written outside :mod:`store` (an operator's SQL, a bulk load, a test
    making every page due again): the store's own writers keep ``ready_at`` as they go.
    """
    return db.run_write(lambda conn: refresh_ready_everywhere(conn, db.dialect))
