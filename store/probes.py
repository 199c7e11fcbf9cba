"""Probes: two crawls of a page a short delay apart, to learn whether it changes that fast.

The nightly run picks the pages whose change rate is worth learning
(:func:`estimators.bayes_action.choose_probes`) and :func:`mark_probes` records them: each
page's ``probe_delay`` (days) is set and the page joins the urgent lane (source ``probe``),
so its host's next lease fetches it first, politely. The report of that fetch
(:mod:`store.leases`) makes the page due again ``probe_delay`` later, records that second
crawl as an urgent request too, and clears the mark. Both crawls are thus charged to the plan
(the period release subtracts the urgent requests of the period before), and the estimators
read the short interval between them as any other change/no-change interval.

A new nightly run replaces the marks: a page marked and not yet fetched is marked again only
if it is still worth a probe. A page whose first fetch failed keeps its mark (and is fetched
again when its worker said).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, update

from store.database import Database
from store.models import PAGES
from store.types import utcnow
from store.urgent import queue_urgent

__all__ = ["mark_probes"]

_CHUNK = 5_000

_MARK = (
    update(PAGES).where(PAGES.c.id == bindparam("p_id")).values(probe_delay=bindparam("p_delay"))
)


def mark_probes(
    db: Database,
    page_ids: Sequence[int],
    delays: Sequence[float],
    *,
    now: datetime | None = None,
) -> int:
    """Replace the probe marks with ``page_ids``, each probed ``delays`` days apart, and put
    them in the urgent lane; returns the pages that joined it (a page leased now keeps its
    lease: its fetch, imminent, is the probe's first)."""
    if len(page_ids) != len(delays):
        raise ValueError(f"need a delay per page: {len(page_ids)} pages, {len(delays)} delays")
    if any(not d > 0 for d in delays):
        raise ValueError("a probe's delay must be > 0 days")
    when = now or utcnow()

    def clear(conn: Connection) -> None:
        conn.execute(update(PAGES).where(PAGES.c.probe_delay.is_not(None)).values(probe_delay=None))

    db.run_write(clear)
    queued = 0
    for start in range(0, len(page_ids), _CHUNK):
        ids = [int(i) for i in page_ids[start : start + _CHUNK]]
        rows = [
            {"p_id": i, "p_delay": float(d)}
            for i, d in zip(ids, delays[start : start + _CHUNK], strict=True)
        ]

        def work(conn: Connection, ids: list[int] = ids, rows: list[dict[str, Any]] = rows) -> int:
            joined = queue_urgent(conn, db, ids, when, "probe")[0]  # locks hosts, then pages
            conn.execute(_MARK, rows)
            return joined

        queued += db.run_write(work)
    return queued
