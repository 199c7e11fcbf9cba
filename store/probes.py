"""Probes: two crawls of a page a short delay apart, to learn whether it changes that fast.

The nightly run picks the pages whose change rate is worth learning
(:func:`estimators.bayes_action.choose_probes`) and :func:`mark_probes` records them: each
page's ``probe_delay`` (days) is set and the page joins the urgent lane (source ``probe``),
so its host's next lease fetches it first, politely. The report of that fetch
(:mod:`store.leases`) makes the page due again ``probe_delay`` later, records that second
crawl as an urgent request too (at its due time, or at the report's if that is later, so
that the next period's release charges it), and clears the mark. Both crawls are thus charged
to the plan (the period release subtracts the urgent requests of the period before), and the
estimators read the short interval between them as any other change/no-change interval.

Between the two crawls the mark is the delay negated: a new plan does not withdraw the
second crawl's due time (:func:`store.due_times.withdraw_due_pages`), and a new night's
marks leave the page alone. The second crawl's report clears it. A redirect or gone answer
clears a mark (there is no rate to learn), and a failed fetch keeps it (the page is fetched
again when its worker said).

A **follow-up** is a probe whose first crawl is the page's next planned one: the page is
marked with its delay and left where the plan put it (not in the urgent lane), so the probe
costs one extra crawl, not two. Its report then works as a probe's first: the second crawl
is due the delay later, an urgent request.

A new nightly run replaces the marks: a page marked and not yet fetched is marked again only
if it is still worth a probe or a follow-up; a probe's page that is not stays in the urgent
lane, charged already, and is fetched once as an urgent page. A page whose second crawl is
pending is no release's candidate (:func:`store.releases.refresh_candidates`): that crawl is
charged once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection, bindparam, select, update

from store.database import PG_BY_ID, Database
from store.models import PAGES
from store.pages import lock_pages
from store.types import utcnow
from store.urgent import queue_urgent

__all__ = ["ProbeMarks", "mark_probes"]

_CHUNK = 5_000

_MARK = (
    update(PAGES).where(PAGES.c.id == bindparam("p_id")).values(probe_delay=bindparam("p_delay"))
)


class ProbeMarks(NamedTuple):
    """Pages :func:`mark_probes` marked: for a probe (and queued), for a follow-up."""

    probes: int
    follow_ups: int


def mark_probes(
    db: Database,
    page_ids: Sequence[int],
    delays: Sequence[float],
    *,
    follow_ups: Sequence[int] = (),
    follow_delays: Sequence[float] = (),
    now: datetime | None = None,
) -> ProbeMarks:
    """Replace the probe marks with ``page_ids``, each probed ``delays`` days apart, put in
    the urgent lane, and ``follow_ups``, each followed up ``follow_delays`` days after its
    next crawl; returns the pages marked. Only pages whose last fetch answered (status
    ``ok``) are marked, and a page waiting for its probe's second crawl keeps it (a mark on
    it would move that crawl). A page leased now keeps its lease: its fetch, imminent, is
    the probe's first."""
    for pages, times, what in (
        (page_ids, delays, "probe"),
        (follow_ups, follow_delays, "follow-up"),
    ):
        if len(pages) != len(times):
            raise ValueError(f"need a delay per {what}: {len(pages)} pages, {len(times)} delays")
        if any(not d > 0 for d in times):
            raise ValueError(f"a {what}'s delay must be > 0 days")
    when = now or utcnow()
    p = PAGES.c
    # The marked pages (ix_pages_probe) locked in id order, as every writer of pages locks
    # them (store.pages.lock_pages), then cleared by primary-key lookups.
    marked = (
        select(p.id)
        .where(p.probe_delay > 0)
        .order_by(p.id)
        .with_for_update(of=PAGES, key_share=True)
    )
    clear = update(PAGES).where(p.id.in_(marked.scalar_subquery())).values(probe_delay=None)

    def unmark(conn: Connection) -> None:
        if db.dialect == "postgresql":
            conn.exec_driver_sql(PG_BY_ID)
        conn.execute(clear)

    db.run_write(unmark)
    probes = _mark(db, page_ids, delays, when, urgent=True)
    return ProbeMarks(probes, _mark(db, follow_ups, follow_delays, when, urgent=False))


def _mark(
    db: Database, page_ids: Sequence[int], delays: Sequence[float], when: datetime, *, urgent: bool
) -> int:
    """Mark ``page_ids`` (no mark now, last fetch ``ok``) with their ``delays``, and with
    ``urgent`` put them in the urgent lane; returns how many, in chunks of :data:`_CHUNK`."""
    p = PAGES.c
    delay_of = {int(i): float(d) for i, d in zip(page_ids, delays, strict=True)}
    ids = sorted(delay_of)
    done = 0
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]

        def work(conn: Connection, chunk: list[int] = chunk) -> int:
            ready = conn.execute(
                select(p.id).where(
                    p.id.in_(chunk),
                    p.status == "ok",
                    p.probe_delay.is_(None),
                )
            ).scalars()
            ids = sorted(ready)
            if not ids:
                return 0
            if urgent:
                queue_urgent(conn, db, ids, when, "probe")  # locks hosts, then pages
            else:
                lock_pages(conn, db.backend.pages, ids)  # in id order, as a report does
            conn.execute(_MARK, [{"p_id": i, "p_delay": delay_of[i]} for i in ids])
            return len(ids)

        done += db.run_write(work)
    return done
