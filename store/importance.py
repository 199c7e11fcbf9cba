"""OPIC cash in the store: moving a fetched page's cash to its outlinks, the virtual page's
gift, and the stored importance (wiring only: the arithmetic comes from ``estimators.opic``,
handed in by the crawler as functions, since the store imports no estimator).

Every page brings one unit of cash when it is added (``pages.cash`` starts at 0, so the unit
waits on the virtual page). The virtual page is implicit: it holds ``pages - sum(cash)``, which
is never negative when transfers conserve cash; no row or table stores it, so the state of
OPIC is the ``cash``/``history`` columns alone and a restarted crawl continues where it
stopped. A report moves cash in its own transaction (:func:`move_cash`);
:func:`spread_virtual_cash` hands the virtual page's cash to every page and writes
``importance = (history + cash) / sum(history + cash)``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text, update

from store.database import PG_BY_ID, Database
from store.models import PAGES

__all__ = [
    "CashSplit",
    "CashTotals",
    "PageIds",
    "VirtualGift",
    "move_cash",
    "outlink_ids",
    "page_ids_of",
    "spread_virtual_cash",
]

#: ``(cash of each fetched page, its number of outlinks) -> share per outlink`` (whole quanta).
CashSplit = Callable[[list[float], list[int]], list[float]]
#: ``(pages, total cash of the pages) -> cash the virtual page gives every page``.
VirtualGift = Callable[[int, float], float]

_p = PAGES
_URL_IDS = select(_p.c.url, _p.c.id).where(_p.c.url.in_(bindparam("urls", expanding=True)))
_CASH = select(_p.c.id, _p.c.cash).where(_p.c.id.in_(bindparam("ids", expanding=True)))
# The cash moves, one row per page whose cash or history changes, in id order.
_SQLITE_MOVE = "UPDATE pages SET cash = cash + ?, history = history + ? WHERE id = ?"
# PostgreSQL: one statement for all of them, the ids looked up by index in the arrays' order
# (the same row lock order in every report).
_PG_MOVE = text(
    """
    UPDATE pages SET cash = pages.cash + t.c, history = pages.history + t.h
    FROM unnest(CAST(:ids AS bigint[]), CAST(:cash AS float8[]), CAST(:history AS float8[]))
         AS t(i, c, h)
    WHERE pages.id = t.i
    """
)


class PageIds:
    """Page ids by normalized URL, as committed in the store, so that a report's outlinks are
    not looked up one statement per report. A page keeps its id for good (pages are neither
    deleted nor renamed), so a remembered id never goes stale; a URL not remembered is looked
    up. Callers remember only ids they read in a committed transaction (an id read from a
    page added in a transaction that rolled back could be given to another URL). Bounded:
    past ``capacity`` the oldest half is forgotten (500,000 URLs of 50 characters take about
    120 MB). Shared by the threads of a process."""

    def __init__(self, capacity: int = 500_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, url: str) -> int | None:
        """The page id of ``url``, or None when not remembered."""
        return self._ids.get(url)

    def remember(self, pairs: Iterable[tuple[str, int]]) -> None:
        """Remember ``(url, page id)`` pairs read from committed rows."""
        with self._lock:
            ids = self._ids
            ids.update(pairs)
            if len(ids) > self.capacity:
                for url in list(islice(ids, len(ids) - self.capacity // 2)):
                    del ids[url]


_PAGE_IDS: weakref.WeakKeyDictionary[Database, PageIds] = weakref.WeakKeyDictionary()
_PAGE_IDS_LOCK = threading.Lock()


def page_ids_of(db: Database) -> PageIds:
    """The :class:`PageIds` of the store ``db`` (one per open database, so per process)."""
    with _PAGE_IDS_LOCK:
        found = _PAGE_IDS.get(db)
        if found is None:
            found = _PAGE_IDS[db] = PageIds()
        return found


def outlink_ids(
    conn: Connection,
    urls: Iterable[str],
    known: PageIds | None = None,
    found: list[tuple[str, int]] | None = None,
) -> dict[str, int]:
    """Page ids of those of ``urls`` the store knows: from ``known``, else looked up (in
    chunks of 5,000), the looked-up pairs appended to ``found``."""
    ids: dict[str, int] = {}
    missing: set[str] = set()
    for u in urls:
        if u not in ids:
            pid = known.get(u) if known is not None else None
            if pid is None:
                missing.add(u)
            else:
                ids[u] = pid
    if missing:
        ordered = sorted(missing)
        for start in range(0, len(ordered), 5_000):
            chunk = ordered[start : start + 5_000]
            rows = conn.execute(_URL_IDS, {"urls": chunk}).tuples().all()
            ids.update(rows)
            if found is not None:
                found.extend(rows)
    return ids


def move_cash(
    conn: Connection,
    givers: Sequence[tuple[int, Sequence[str]]],
    split: CashSplit,
    *,
    known: PageIds | None = None,
    found: list[tuple[str, int]] | None = None,
    cash: Mapping[int, float | None] | None = None,
    ids: Mapping[str, int] | None = None,
) -> int:
    """Move each fetched page's cash to its outlinks, in the caller's transaction.

    ``givers``: (page id, normalized outlink URLs) per fetched page. Links to pages the store
    does not know, repeats and self-links do not count; a page with no link left gives all its
    cash to the virtual page. The page's history grows by its cash, its cash falls by the same
    amount (``cash - c``, not 0: cash that another report added meanwhile stays). Returns the
    number of transfers along links.

    ``known``: ids remembered from earlier transactions; the other URLs are looked up, and
    appended as ``(url, id)`` to ``found`` (for the caller to remember once it commits).
    ``cash``: the givers' cash, read in this transaction (with their rows locked on
    PostgreSQL); else it is read here. ``ids``: the outlinks' page ids, as
    :func:`outlink_ids` gives them (a report that locked the pages it writes beforehand);
    else they are looked up here.
    """
    if not givers:
        return 0
    if ids is None:
        ids = outlink_ids(conn, (u for _, links in givers for u in links), known, found)
    if cash is None:
        giver_ids = sorted({pid for pid, _ in givers})
        cash = dict(conn.execute(_CASH, {"ids": giver_ids}).tuples().all())
    targets: dict[int, list[int]] = {}
    for pid, links in givers:
        if pid in cash and pid not in targets:
            to = {ids[u] for u in links if u in ids}
            to.discard(pid)
            targets[pid] = sorted(to)
    order = sorted(targets)
    taken = [float(cash[pid] or 0.0) for pid in order]
    shares = split(taken, [len(targets[pid]) for pid in order])
    delta: dict[int, list[float]] = {}
    for pid, c, share in zip(order, taken, shares, strict=True):
        entry = delta.setdefault(pid, [0.0, 0.0])
        entry[0] -= c
        entry[1] += c
        for target in targets[pid]:
            delta.setdefault(target, [0.0, 0.0])[0] += share
    # id order: the same lock order in every report
    moves = [(pid, d[0], d[1]) for pid, d in sorted(delta.items()) if d[0] != 0.0 or d[1] != 0.0]
    if moves:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(PG_BY_ID)
            conn.execute(
                _PG_MOVE,
                {
                    "ids": [m[0] for m in moves],
                    "cash": [m[1] for m in moves],
                    "history": [m[2] for m in moves],
                },
            )
        else:
            # straight through the driver: no per-row parameter processing
            conn.exec_driver_sql(_SQLITE_MOVE, [(c, h, pid) for pid, c, h in moves])
    return sum(len(t) for t in targets.values())


@dataclass(frozen=True)
class CashTotals:
    """The store's OPIC totals: ``pages`` (units of cash in all), cash the pages hold, and
    the virtual page's ``pages - cash``, after the gift; ``given`` to each page."""

    pages: int
    cash: float
    history: float
    given: float

    @property
    def virtual(self) -> float:
        """Cash on the virtual page (never negative when cash is conserved)."""
        return self.pages - self.cash


def spread_virtual_cash(db: Database, gift: VirtualGift) -> CashTotals:
    """Give every page the virtual page's share and store every page's importance.

    One transaction (on PostgreSQL it locks ``pages`` against other writers for its length,
    so two spreads never give the same cash twice). Cost O(pages): run it at the start and
    the end of a crawl, not per fetch.
    """

    def work(conn: Connection) -> CashTotals:
        if conn.dialect.name == "postgresql":
            conn.execute(text("LOCK TABLE pages IN SHARE ROW EXCLUSIVE MODE"))
        count, cash, history = conn.execute(
            select(func.count(), func.coalesce(func.sum(_p.c.cash), 0.0), func.sum(_p.c.history))
        ).one()
        each = gift(int(count), float(cash))
        gift_each = each if each > 0 else 0.0
        cash = float(cash) + gift_each * int(count)
        history = float(history or 0.0)
        # One pass over the table: the gift and the importance it makes in one UPDATE (SET
        # expressions see the row as it was, hence ``cash + gift`` in the importance).
        values: dict[str, Any] = {}
        if gift_each > 0:
            values["cash"] = _p.c.cash + gift_each
        if count and cash + history > 0:
            values["importance"] = (_p.c.history + _p.c.cash + gift_each) / (history + cash)
        if values:
            conn.execute(update(_p).values(**values))
        return CashTotals(int(count), cash, history, each)

    return db.run_write(work)
