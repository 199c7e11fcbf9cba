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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, func, select, text, update

from store.database import Database
from store.models import PAGES

__all__ = ["CashSplit", "CashTotals", "VirtualGift", "move_cash", "spread_virtual_cash"]

#: ``(cash of each fetched page, its number of outlinks) -> share per outlink`` (whole quanta).
CashSplit = Callable[[list[float], list[int]], list[float]]
#: ``(pages, total cash of the pages) -> cash the virtual page gives every page``.
VirtualGift = Callable[[int, float], float]

_p = PAGES
_MOVE = (
    update(_p)
    .where(_p.c.id == bindparam("o_id"))
    .values(
        cash=_p.c.cash + bindparam("o_cash"),
        history=_p.c.history + bindparam("o_history"),
    )
)


def move_cash(
    conn: Connection, givers: Sequence[tuple[int, Sequence[str]]], split: CashSplit
) -> int:
    """Move each fetched page's cash to its outlinks, in the caller's transaction.

    ``givers``: (page id, normalized outlink URLs) per fetched page. Links to pages the store
    does not know, repeats and self-links do not count; a page with no link left gives all its
    cash to the virtual page. The page's history grows by its cash, its cash falls by the same
    amount (``cash - c``, not 0: cash that another report added meanwhile stays). Returns the
    number of transfers along links.
    """
    if not givers:
        return 0
    urls = sorted({u for _, links in givers for u in links})
    ids: dict[str, int] = {}
    for start in range(0, len(urls), 5_000):
        chunk = urls[start : start + 5_000]
        found = conn.execute(select(_p.c.url, _p.c.id).where(_p.c.url.in_(chunk))).tuples()
        ids.update(found.all())
    giver_ids = sorted({pid for pid, _ in givers})
    cash = dict(
        conn.execute(select(_p.c.id, _p.c.cash).where(_p.c.id.in_(giver_ids))).tuples().all()
    )
    targets = {
        pid: sorted({ids[u] for u in links if u in ids and ids[u] != pid})
        for pid, links in givers
        if pid in cash
    }
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
    rows = [
        {"o_id": pid, "o_cash": d[0], "o_history": d[1]}
        for pid, d in sorted(delta.items())  # id order: the same lock order in every report
        if d[0] != 0.0 or d[1] != 0.0
    ]
    if rows:
        conn.execute(_MOVE, rows)
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
        if each > 0:
            conn.execute(update(_p).values(cash=_p.c.cash + each))
        cash = float(cash) + each * int(count)
        history = float(history or 0.0)
        if count and cash + history > 0:
            conn.execute(
                update(_p).values(importance=(_p.c.history + _p.c.cash) / (history + cash))
            )
        return CashTotals(int(count), cash, history, each)

    return db.run_write(work)
