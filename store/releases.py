"""Releasing a plan period's work: the indexed candidate queries and the one-shot release.

Once a plan is published, a fetched page gets no ``next_due_at`` from its report: it waits
until a period release chooses it. The release of period t of a plan reads, per bucket with a
quota, the pages unvisited longest, in ``last_fetch_at`` order (index
``(bucket, last_fetch_at)``, ``LIMIT k``: the order the planning model assumes inside a
bucket), and the never-fetched pages by OPIC cash (partial index ``ix_pages_new_cash``); when
the plan's quotas cannot all be filled it reads other buckets' candidates too, to spend the
rest on them; the planner chooses among them (that choice is
planning logic and lives in ``planner.cycle.due_urls``); :func:`queue_release` then appends the
chosen pages to the release queue (``released_pages``, with their release time, URL and
validators, read from the candidate indexes' entries, which hold them, not from the table)
and writes the ``period_releases`` row (the pages queued, how many of them are new, and
the pages of earlier releases still waiting, on hosts backed off or not: what
:mod:`store.period_use` reports per period), in one transaction: a release that fails leaves
nothing queued. The primary key of ``period_releases`` makes the release happen once: a
second release of the same period, even one racing from another process, changes nothing.
The lease queue takes released pages from ``released_pages`` by host and due time; a report
of the page deletes its row.

Released pages are the plan's quota: a page stays queued until it is fetched, whatever later
releases do. A page already queued (by an earlier period, or an earlier plan) is not a
candidate again; the release counts those still waiting (``carried_over``). A release
withdraws (``next_due_at`` := NULL) only due times outside the plan's releases that it read:
candidates left waiting from before the first plan (the lease queue hands out the plan's
choice, not the old regime's backlog), and the chosen ones (now queued). Pages whose
``next_due_at`` the worker owns (status ``error``: retry; ``blocked``: robots.txt expiry) and
urgent pages are never candidates and keep their due time, nor are pages waiting for a
probe's second crawl (:mod:`store.probes`: charged already, as an urgent request).

This module holds what both engines share; each engine's statements are in
:mod:`store.dialects` (``sqlite_releases``, ``postgresql_releases``), chosen once per
database (:attr:`store.database.Database.backend`). Times cross this module's boundary as
aware datetimes, except the candidates' last fetch times and the release times, which are
float seconds since the Unix epoch (arrays of them are what the planner computes with; no
datetime object per page).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update

from store.backend import ChosenPages
from store.database import Database
from store.host_ready import lower_ready_from_queue, refresh_ready
from store.models import (
    HOSTS,
    PAGES,
    PERIOD_RELEASES,
    PLAN_PERIODS,
    PLANS,
    QUOTAS,
    RELEASED_PAGES,
)
from store.pages import insert_ignoring_conflicts
from store.types import utcnow

__all__ = [
    "REFRESH_STATUSES",
    "Candidates",
    "PeriodWork",
    "QueuedRelease",
    "host_candidates",
    "host_delays",
    "is_released",
    "new_page_candidates",
    "older_releases_in",
    "period_work",
    "queue_release",
    "queued_pages",
    "refresh_candidates",
    "release_pages",
]

#: Statuses of pages that re-crawl quotas choose from (``new`` pages have a quota of their
#: own; ``error`` and ``blocked`` pages are due when the worker said). The candidate
#: queries of :mod:`store.dialects` spell them out.
REFRESH_STATUSES = ("ok", "gone", "redirect")

_HOST_CHUNK = 5_000


@dataclass(frozen=True)
class PeriodWork:
    """Period ``period`` of plan ``plan_id``: its window, re-crawl quotas and new pages, and
    the plan's marginal values: ``marginal`` maps bucket to the value of one more crawl of it
    this period, ``new_marginal`` that of one more new page (empty, None: the plan has none).
    ``crawl_fraction`` maps bucket to its planned crawls per page and period, averaged over
    the plan's periods (x_it / b_i,t-1; a period without a quota row counts as 0).
    ``renewal``: the growing web's beta the plan was made for (its solver record's
    ``renewal``; 0: none), which sets its buckets' revisit intervals. ``bound_hosts``: the
    hosts whose politeness bound the plan (its solver record's ``bound_hosts``), in group
    order: the pages of ``bound_hosts[g]`` form classes of their own, keyed ``c + 256 (g +
    1)`` in ``quotas``, ``marginal`` and ``crawl_fraction``
    (:mod:`planner.cycle.bound_hosts`).
    """

    plan_id: int
    period: int
    starts_at: datetime
    ends_at: datetime
    quotas: dict[int, int]
    new_pages: int
    marginal: dict[int, float] = field(default_factory=dict)
    new_marginal: float | None = None
    crawl_fraction: dict[int, float] = field(default_factory=dict)
    renewal: float = 0.0
    bound_hosts: tuple[int, ...] = ()


@dataclass
class Candidates:
    """Candidate pages, one entry per page in each list (column lists, not rows).

    ``last_fetch_s``: the last fetch, seconds since the epoch (``cash`` for new pages);
    ``importance``: NaN
    when unknown; ``pending``: the page has a ``next_due_at`` (due outside the plan's
    releases: from before the first plan); ``fetches``: the page's fetch count when read (a
    release queues the page only if no fetch was reported since, so a page fetched meanwhile
    is not released again); ``key``: the page's index key as the store gives it
    (``last_fetch_at``: SQLite's text, PostgreSQL's whole microseconds since the epoch;
    ``cash`` for new pages), with which a release finds the page's entry in the index the
    candidate query read; ``exhausted``: per bucket (``-1`` for new pages), True when the
    query returned fewer rows than asked, i.e. every candidate was read.
    """

    page_id: list[int] = field(default_factory=list)
    host_id: list[int] = field(default_factory=list)
    bucket: list[int] = field(default_factory=list)
    last_fetch_s: list[float] = field(default_factory=list)
    importance: list[float] = field(default_factory=list)
    pending: list[bool] = field(default_factory=list)
    fetches: list[int] = field(default_factory=list)
    key: list[Any] = field(default_factory=list)
    exhausted: dict[int, bool] = field(default_factory=dict)

    def extend(self, rows: Sequence[Any], bucket: int, limit: int) -> None:
        """Append ``(id, host_id, seconds, importance, pending, fetches, key)`` rows of one
        bucket."""
        self.exhausted[bucket] = len(rows) < limit
        if not rows:
            return
        ids, hosts, keys, importance, pending, fetches, stored = zip(*rows, strict=True)
        self.fetches.extend(fetches)
        self.key.extend(stored)
        self.page_id.extend(ids)
        self.host_id.extend(hosts)
        self.bucket.extend([bucket] * len(rows))
        self.last_fetch_s.extend(keys)
        nan = float("nan")
        self.importance.extend([nan if v is None else v for v in importance])
        self.pending.extend([bool(v) for v in pending])


def period_work(db: Database, plan_id: int, now: datetime) -> PeriodWork | None:
    """The period of plan ``plan_id`` whose window [starts_at, ends_at) holds ``now``."""
    pp = PLAN_PERIODS
    with db.read() as conn:
        row = conn.execute(
            select(
                pp.c.period, pp.c.starts_at, pp.c.ends_at, pp.c.new_pages, pp.c.new_marginal
            ).where(pp.c.plan_id == plan_id, pp.c.starts_at <= now, pp.c.ends_at > now)
        ).first()
        if row is None:
            return None
        quotas = conn.execute(
            select(QUOTAS.c.bucket, QUOTAS.c.pages, QUOTAS.c.marginal).where(
                QUOTAS.c.plan_id == plan_id, QUOTAS.c.period == row.period
            )
        ).all()
        periods = conn.execute(
            select(func.count()).select_from(pp).where(pp.c.plan_id == plan_id)
        ).scalar_one()
        fractions = conn.execute(
            select(QUOTAS.c.bucket, func.sum(QUOTAS.c.fraction))
            .where(QUOTAS.c.plan_id == plan_id)
            .group_by(QUOTAS.c.bucket)
        ).all()
        solver = conn.execute(select(PLANS.c.solver).where(PLANS.c.id == plan_id)).scalar()
    renewal = solver.get("renewal") if isinstance(solver, dict) else None
    bound = solver.get("bound_hosts") if isinstance(solver, dict) else None
    bound_hosts = bound.get("host_id", []) if isinstance(bound, dict) else []
    return PeriodWork(
        plan_id=plan_id,
        period=row.period,
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        quotas={int(b): int(q) for b, q, _ in quotas},
        new_pages=int(row.new_pages),
        marginal={int(b): float(v) for b, _, v in quotas if v is not None},
        new_marginal=None if row.new_marginal is None else float(row.new_marginal),
        crawl_fraction={int(b): float(f or 0.0) / max(int(periods), 1) for b, f in fractions},
        renewal=float(renewal) if isinstance(renewal, int | float) and renewal > 0 else 0.0,
        bound_hosts=tuple(int(h) for h in bound_hosts),
    )


def is_released(db: Database, plan_id: int, period: int) -> bool:
    """Whether period ``period`` of plan ``plan_id`` was released already."""
    pr = PERIOD_RELEASES
    with db.read() as conn:
        found = conn.execute(
            select(pr.c.plan_id).where(pr.c.plan_id == plan_id, pr.c.period == period)
        ).first()
    return found is not None


def older_releases_in(db: Database, work: PeriodWork) -> int:
    """Pages that older plans released within ``work``'s window: a plan published late (its
    first period began while the plan in force, kept past its cycle, released) charges them
    against its own quotas, so that a window is released once, not once per plan."""
    pr = PERIOD_RELEASES.c
    with db.read() as conn:
        found = conn.execute(
            select(func.coalesce(func.sum(pr.pages), 0)).where(
                pr.plan_id < work.plan_id,
                pr.released_at >= work.starts_at,
                pr.released_at < work.ends_at,
            )
        ).scalar_one()
    return int(found)


def queued_pages(db: Database) -> int:
    """Pages in the release queue: released, not fetched yet (waiting or held by a lease)."""
    with db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(RELEASED_PAGES)).scalar_one())


def refresh_candidates(
    db: Database, limits: Mapping[int, int], *, now: datetime
) -> dict[int, Candidates]:
    """Per bucket, up to ``limits[bucket]`` fetched pages, longest unvisited first.

    Pages of ``REFRESH_STATUSES`` with a last fetch, not held by a live lease at ``now``, not
    urgent and not in the release queue, in ``last_fetch_at`` order (ties: importance, higher
    first, unknown last; then page id): one range scan of the ``(bucket, last_fetch_at)``
    index per bucket, on one connection. Returns the candidates of each bucket asked for.
    """
    out: dict[int, Candidates] = {}
    asked = [(b, n) for b, n in sorted(limits.items()) if n > 0]
    for bucket, limit in sorted(limits.items()):
        out[bucket] = Candidates()
        if limit <= 0:
            out[bucket].exhausted[bucket] = False
    with db.read() as conn:
        rows = db.backend.releases.refresh_rows(conn, asked, now=now)
        waiting = _probes_waiting(conn, [row for found in rows for row in found])
    for (bucket, limit), found in zip(asked, rows, strict=True):
        kept = [row for row in found if row[0] not in waiting] if waiting else found
        # exhausted as read: a page left out is still one the index held
        out[bucket].extend(kept, bucket, limit - (len(found) - len(kept)))
    return out


def _probes_waiting(conn: Connection, rows: Sequence[Any]) -> set[int]:
    """The pages among candidate ``rows`` whose probe's second crawl is due (``probe_delay <
    0``, :mod:`store.probes`): that crawl is charged already, as an urgent request, and
    a release that took the page would charge it again. Only pages with a due time can be
    such pages (the candidates' ``pending``, column 4), few once a plan is in force, and
    those alone are looked up (``ix_pages_probe``)."""
    pending = [int(row[0]) for row in rows if row[4]]
    found: set[int] = set()
    p = PAGES.c
    stmt = select(p.id).where(
        p.probe_delay.is_not(None), p.probe_delay < 0, p.id.in_(bindparam("ids", expanding=True))
    )
    for start in range(0, len(pending), _HOST_CHUNK):
        found.update(conn.execute(stmt, {"ids": pending[start : start + _HOST_CHUNK]}).scalars())
    return found


def host_candidates(db: Database, hosts: Sequence[int], limit: int, *, now: datetime) -> Candidates:
    """The refresh candidates of ``hosts`` (politeness-bound hosts: few pages a period), up
    to ``limit`` per host and bucket, each bucket's longest unvisited first, on the same
    conditions as :func:`refresh_candidates`; one read of each host's pages. ``bucket``
    holds each page's change-rate bucket (0..255); ``exhausted`` is keyed by bucket, True
    when no host held more candidates in it than read."""
    out = Candidates()
    if not hosts or limit <= 0:
        return out
    with db.read() as conn:
        per_host = db.backend.releases.host_rows(conn, list(hosts), limit, now=now)
        waiting = _probes_waiting(conn, [row for rows in per_host for row in rows])
    full: dict[int, bool] = {}
    for rows in per_host:
        start = 0
        while start < len(rows):
            bucket = int(rows[start][7])
            end = start
            while end < len(rows) and int(rows[end][7]) == bucket:
                end += 1
            kept = [row[:7] for row in rows[start:end] if row[0] not in waiting]
            out.extend(kept, bucket, limit + 1)
            full[bucket] = full.get(bucket, True) and end - start < limit
            start = end
    out.exhausted = full
    return out


def new_page_candidates(db: Database, limit: int, *, now: datetime) -> Candidates:
    """Up to ``limit`` never-fetched pages not leased at ``now``, highest OPIC cash first.

    One backward scan of the partial index ``ix_pages_new_cash`` (ties of cash: the most
    recently added page first); urgent and queued pages are left out. ``last_fetch_s``
    holds the cash; ``bucket`` is -1.
    """
    out = Candidates()
    if limit <= 0:
        return out
    with db.read() as conn:
        rows = db.backend.releases.new_page_rows(conn, limit, now=now)
    out.extend(rows, -1, limit)
    return out


def host_delays(db: Database, host_ids: Sequence[int]) -> dict[int, float | None]:
    """Each host's robots.txt ``crawl_delay`` (seconds; None when it names none)."""
    h = HOSTS
    ids = sorted(set(host_ids))
    found: dict[int, float | None] = {}
    stmt = select(h.c.id, h.c.crawl_delay).where(h.c.id.in_(bindparam("ids", expanding=True)))
    with db.read() as conn:
        for start in range(0, len(ids), _HOST_CHUNK):
            chunk = ids[start : start + _HOST_CHUNK]
            found.update(conn.execute(stmt, {"ids": chunk}).tuples().all())
    return found


@dataclass(frozen=True)
class QueuedRelease:
    """What :func:`queue_release` wrote: ``released`` pages queued by this release, and
    ``carried_over`` pages of earlier releases still in the queue (not fetched yet) when it
    ran; they stay queued."""

    released: int
    carried_over: int


def queue_release(
    db: Database,
    plan_id: int,
    period: int,
    *,
    page_ids: Sequence[int],
    due_epoch_s: Sequence[float],
    fetches: Sequence[int],
    buckets: Sequence[int] | None = None,
    keys: Sequence[Any] | None = None,
    withdraw_ids: Sequence[int] = (),
    now: datetime | None = None,
) -> QueuedRelease | None:
    """Release period ``period`` of plan ``plan_id``: one transaction, once (a release that
    fails queues nothing).

    Queues ``page_ids`` in ``released_pages`` with due times ``due_epoch_s`` (seconds since
    the epoch, one per page), clears ``next_due_at`` of ``withdraw_ids`` (and recomputes their
    hosts' ``ready_at``: :mod:`store.host_ready`), and records the
    release (``period_releases``, with the number of pages queued). A page is left out when a
    live lease holds it at ``now``, when it is urgent or queued already, or when its fetch
    count is no longer the ``fetches`` it had when read (a worker fetched and reported it in
    between: releasing it would fetch it twice). Returns None when the period had been
    released already (nothing written).

    ``buckets`` and ``keys``, one per page: the page's candidate bucket (-1: a new page) and
    index key (:attr:`Candidates.bucket`, :attr:`Candidates.key`). With them the release reads
    the pages from the index entries the candidate queries read, not from the table (pages
    moved since are read by id); without them, by id. Pages given in the order they were
    read (bucket by bucket, each in index order) are looked up in that order, the fastest.
    """
    if not len(page_ids) == len(due_epoch_s) == len(fetches):
        raise ValueError("page_ids, due_epoch_s and fetches must have the same length")
    if (buckets is None) != (keys is None):
        raise ValueError("buckets and keys go together")
    if buckets is not None and keys is not None and not len(buckets) == len(keys) == len(page_ids):
        raise ValueError("buckets and keys must have one entry per page")
    when = now or utcnow()
    chosen = _each_page_once(
        ChosenPages(
            plan_id=plan_id,
            period=period,
            now=when,
            ids=list(map(int, page_ids)),
            due_s=list(map(float, due_epoch_s)),
            fetches=list(map(int, fetches)),
            buckets=None if buckets is None else list(map(int, buckets)),
            keys=None if keys is None else list(keys),
        )
    )
    withdraw = list(map(int, withdraw_ids))
    sql = db.backend.releases
    record = insert_ignoring_conflicts(db, PERIOD_RELEASES).returning(PERIOD_RELEASES.c.plan_id)
    queued = select(func.count()).select_from(RELEASED_PAGES)
    rp = RELEASED_PAGES.c
    # Pages waiting on hosts backed off: a few hosts, each a range of the queue's key (as a
    # join, SQLite reads the whole queue: 0.3 s for 100,000 pages, against 0.1 ms).
    held_hosts = select(HOSTS.c.id).where(HOSTS.c.backoff_until > bindparam("now"))
    backed_off = select(func.count()).where(rp.host_id.in_(held_hosts))
    new_queued = select(func.count()).where(
        rp.plan_id == plan_id, rp.period == period, rp.status == "new"
    )

    def work(conn: Connection) -> QueuedRelease | None:
        inserted = conn.execute(
            record,
            {"plan_id": plan_id, "period": period, "released_at": when, "pages": len(page_ids)},
        ).first()
        if inserted is None:  # the primary key decided: released already
            return None
        sql.serialize(conn)
        carried = int(conn.execute(queued).scalar_one())
        held_back = int(conn.execute(backed_off, {"now": when}).scalar_one()) if carried else 0
        count, owners = sql.queue(conn, chosen, withdraw)
        if count:
            lower_ready_from_queue(conn, db.backend.host_ready, plan_id, period)
        # Hosts whose due times were withdrawn may have nothing due now: set right here, not
        # left to the leases that would meet them (the first release under a plan withdraws
        # the backlog of every host, and leases repair a few thousand hosts per call).
        refresh_ready(conn, db.backend.host_ready, owners)
        conn.execute(
            update(PERIOD_RELEASES)
            .where(PERIOD_RELEASES.c.plan_id == plan_id, PERIOD_RELEASES.c.period == period)
            .values(
                pages=count,
                new_pages=conn.execute(new_queued).scalar_one() if count else 0,
                carried_over=carried,
                carried_backed_off=held_back,
            )
        )
        return QueuedRelease(released=count, carried_over=carried)

    return db.run_write(work)


def _each_page_once(chosen: ChosenPages) -> ChosenPages:
    """``chosen`` with a page given more than once kept once: its earliest release time (ties:
    its first entry), as the queue's primary key would keep it."""
    if len(set(chosen.ids)) == len(chosen.ids):
        return chosen
    first: dict[int, int] = {}
    for k, (pid, due) in enumerate(zip(chosen.ids, chosen.due_s, strict=True)):
        kept = first.setdefault(pid, k)
        if due < chosen.due_s[kept]:
            first[pid] = k
    keep = sorted(first.values())

    def pick(values: list[Any] | None) -> Any:
        return None if values is None else [values[k] for k in keep]

    return ChosenPages(
        plan_id=chosen.plan_id,
        period=chosen.period,
        now=chosen.now,
        ids=pick(chosen.ids),
        due_s=pick(chosen.due_s),
        fetches=pick(chosen.fetches),
        buckets=pick(chosen.buckets),
        keys=pick(chosen.keys),
    )


def release_pages(
    db: Database,
    plan_id: int,
    period: int,
    *,
    page_ids: Sequence[int],
    due_epoch_s: Sequence[float],
    fetches: Sequence[int],
    withdraw_ids: Sequence[int] = (),
    now: datetime | None = None,
) -> int | None:
    """:func:`queue_release`, returning only the number of pages queued (None: released
    already)."""
    done = queue_release(
        db,
        plan_id,
        period,
        page_ids=page_ids,
        due_epoch_s=due_epoch_s,
        fetches=fetches,
        withdraw_ids=withdraw_ids,
        now=now,
    )
    return None if done is None else done.released
