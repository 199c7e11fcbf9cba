"""What each plan period released, what the crawler fetched in it, and what it left waiting.

Per period of a plan (``crawlplan status``, the worker API's metrics, the nightly capacity
measurement):

* **released**: the pages its release queued (``period_releases``), re-crawls and new pages;
  ``carried_over``: pages of earlier releases still waiting when it was released, not
  counting those on hosts backed off then (429, 503, unreachable robots.txt: they wait for the
  host, not for the crawler).
* **fetched**: requests made in the period's window ``[starts_at, ends_at)`` (observations of
  kind ``fetch`` that took time: answered, or ``failed``: no HTTP answer, or an error status
  other than 404/410), whichever release the page came from, urgent crawls included.
  ``no_request``: fetch results recorded without a request (a crawler failure before
  asking; robots.txt refusals where the crawler records them as observations): they cost
  no capacity.
* **blocked**: its released pages robots.txt turned away when a worker leased them (no
  request, no observation: the report counts them, :func:`count_blocked`).
* **pending**: its released pages still in the queue, on a host under a live lease
  (``leased``) or not (``waiting``).
* **idle**: the planned capacity (crawls) minus the fetches, once the period has ended.

Counts come from a few grouped queries: one range scan of the ``fetched_at`` index per
period (a join of ``plan_periods`` with ``observations`` on the window), one scan of the
release queue; the same SQL on SQLite and PostgreSQL. Reading only, no planning logic: the
nightly run hands :func:`ended_periods` to :func:`estimators.capacity.crawl_capacity`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, case, func, or_, select, update

from store.database import Database
from store.models import (
    HOSTS,
    OBSERVATIONS,
    PERIOD_RELEASES,
    PLAN_PERIODS,
    PLANS,
    RELEASED_PAGES,
)
from store.types import utcnow

__all__ = [
    "EndedPeriods",
    "PeriodUse",
    "count_blocked",
    "current_and_last",
    "ended_periods",
    "plan_period_use",
    "queued_ready",
]


@dataclass(frozen=True)
class PeriodUse:
    """Period ``period`` of plan ``plan_id``: its capacity and what became of it (see the
    module docstring). ``released`` is None when the period was not released;
    ``recrawls``, ``new_pages`` and ``carried_over`` are None also for releases made before
    the store recorded them (migration 0015)."""

    plan_id: int
    period: int
    starts_at: datetime
    ends_at: datetime
    capacity: float
    released: int | None
    new_pages: int | None
    carried_over: int | None
    fetched: int
    failed: int
    no_request: int
    blocked: int | None
    leased: int
    waiting: int
    ended: bool

    @property
    def recrawls(self) -> int | None:
        """Re-crawls released: the pages released that had been fetched before."""
        if self.released is None or self.new_pages is None:
            return None
        return self.released - self.new_pages

    @property
    def idle(self) -> float | None:
        """Capacity left unused, crawls (None while the period runs)."""
        return max(self.capacity - self.fetched, 0.0) if self.ended else None

    @property
    def pending(self) -> int:
        """Released pages still queued: leased and waiting."""
        return self.leased + self.waiting


def _fetch_counts(conn: Connection, periods: Any, now: datetime) -> dict[tuple[int, int], Any]:
    """Per ``(plan_id, period)`` of the ``periods`` condition on ``plan_periods``: requests,
    failed requests and results without a request, in the period's window (before ``now``)."""
    o, pp = OBSERVATIONS.c, PLAN_PERIODS.c
    fetch = o.kind == "fetch"
    request = and_(fetch, o.duration.is_not(None))
    failed = and_(
        request,
        or_(o.http_status.is_(None), and_(o.http_status >= 400, o.http_status.not_in((404, 410)))),
    )
    # The window alone in the join (the kind counted in the sums): a range scan of the
    # fetched_at index per period; with the kind beside it SQLite builds an index on kind.
    window = and_(o.fetched_at >= pp.starts_at, o.fetched_at < pp.ends_at, o.fetched_at < now)
    rows = conn.execute(
        select(
            pp.plan_id,
            pp.period,
            func.sum(case((request, 1), else_=0)),
            func.sum(case((failed, 1), else_=0)),
            func.sum(case((and_(fetch, o.duration.is_(None)), 1), else_=0)),
        )
        .select_from(PLAN_PERIODS.join(OBSERVATIONS, window))
        .where(periods)
        .group_by(pp.plan_id, pp.period)
    ).all()
    return {(int(p), int(t)): (int(a or 0), int(b or 0), int(c or 0)) for p, t, a, b, c in rows}


def plan_period_use(db: Database, plan_id: int, *, now: datetime | None = None) -> list[PeriodUse]:
    """Every period of plan ``plan_id`` that has begun by ``now``, in order (module docstring)."""
    when = now or utcnow()
    pp = PLAN_PERIODS.c
    with db.read() as conn:
        return _period_use(conn, and_(pp.plan_id == plan_id, pp.starts_at <= when), when)


def current_and_last(
    db: Database, *, now: datetime | None = None
) -> tuple[PeriodUse | None, PeriodUse | None]:
    """The period running at ``now`` of the latest published plan, and the period that ended
    last (of whichever plan: the latest plan's on a tie); None where there is none."""
    when = now or utcnow()
    pp, plans = PLAN_PERIODS.c, PLANS.c
    published = select(plans.id).where(plans.published_at.is_not(None))
    latest = published.order_by(plans.id.desc()).limit(1).scalar_subquery()
    with db.read() as conn:
        running = conn.execute(
            select(pp.plan_id, pp.period).where(
                pp.plan_id == latest, pp.starts_at <= when, pp.ends_at > when
            )
        ).first()
        ended = conn.execute(
            select(pp.plan_id, pp.period)
            .where(pp.plan_id.in_(published), pp.ends_at <= when)
            .order_by(pp.ends_at.desc(), pp.plan_id.desc())
            .limit(1)
        ).first()
        found = {}
        for key in (running, ended):
            if key is not None:
                (use,) = _period_use(
                    conn, and_(pp.plan_id == key.plan_id, pp.period == key.period), when
                )
                found[(key.plan_id, key.period)] = use
    return (
        None if running is None else found[(running.plan_id, running.period)],
        None if ended is None else found[(ended.plan_id, ended.period)],
    )


def _period_use(conn: Connection, periods: Any, when: datetime) -> list[PeriodUse]:
    """The plan periods of the ``periods`` condition on ``plan_periods``, as at ``when``."""
    pp, pr, rp, h = PLAN_PERIODS.c, PERIOD_RELEASES.c, RELEASED_PAGES.c, HOSTS.c
    rows = conn.execute(
        select(
            pp.plan_id,
            pp.period,
            pp.starts_at,
            pp.ends_at,
            pp.capacity,
            pr.pages,
            pr.new_pages,
            pr.carried_over,
            pr.carried_backed_off,
            pr.blocked,
        )
        .select_from(
            PLAN_PERIODS.outerjoin(
                PERIOD_RELEASES, and_(pr.plan_id == pp.plan_id, pr.period == pp.period)
            )
        )
        .where(periods)
        .order_by(pp.plan_id, pp.period)
    ).all()
    if not rows:
        return []
    fetches = _fetch_counts(conn, periods, when)
    leased = h.leased_until >= when
    queued = conn.execute(
        select(rp.plan_id, rp.period, func.sum(case((leased, 1), else_=0)), func.count())
        .select_from(RELEASED_PAGES.join(HOSTS, h.id == rp.host_id))
        .where(rp.plan_id.in_({int(row.plan_id) for row in rows}))
        .group_by(rp.plan_id, rp.period)
    ).all()
    pending = {(int(p), int(t)): (int(a or 0), int(n)) for p, t, a, n in queued}
    out = []
    for row in rows:
        key = (int(row.plan_id), int(row.period))
        fetched, failed, no_request = fetches.get(key, (0, 0, 0))
        held, total = pending.get(key, (0, 0))
        carried = (
            None
            if row.carried_over is None
            else int(row.carried_over) - int(row.carried_backed_off or 0)
        )
        out.append(
            PeriodUse(
                plan_id=key[0],
                period=key[1],
                starts_at=row.starts_at,
                ends_at=row.ends_at,
                capacity=float(row.capacity),
                released=None if row.pages is None else int(row.pages),
                new_pages=None if row.new_pages is None else int(row.new_pages),
                carried_over=carried,
                fetched=fetched,
                failed=failed,
                no_request=no_request,
                blocked=None if row.pages is None else int(row.blocked or 0),
                leased=held,
                waiting=total - held,
                ended=row.ends_at <= when,
            )
        )
    return out


def queued_ready(db: Database, *, now: datetime | None = None) -> int:
    """Pages in the release queue on hosts not backed off at ``now``."""
    when = now or utcnow()
    rp, h = RELEASED_PAGES.c, HOSTS.c
    with db.read() as conn:
        total = int(conn.execute(select(func.count()).select_from(RELEASED_PAGES)).scalar_one())
        on_held = rp.host_id.in_(select(h.id).where(h.backoff_until > when))
        held = int(conn.execute(select(func.count()).where(on_held)).scalar_one())
    return total - held


@dataclass(frozen=True)
class EndedPeriods:
    """The released plan periods that ended in a window, one entry per period window, in
    time order (columns): ``seconds`` its length, ``fetched`` requests made in it,
    ``offered`` pages released for it plus those carried into it, ``left`` released pages
    still waiting at its end (carried into the next release, else waiting at ``until`` when
    no release followed), all on hosts not backed off. Two plans' periods over the same
    window (a plan replaced within a period) count as one: their releases added up."""

    starts_at: list[datetime]
    seconds: list[float]
    fetched: list[int]
    offered: list[int]
    left: list[int]

    def __len__(self) -> int:
        return len(self.starts_at)


def ended_periods(db: Database, *, since: datetime, until: datetime) -> EndedPeriods:
    """The released plan periods within ``[since, until]`` that ended by ``until``."""
    pp, pr = PLAN_PERIODS.c, PERIOD_RELEASES.c
    inside = and_(pp.starts_at >= since, pp.ends_at <= until)
    released = PLAN_PERIODS.join(
        PERIOD_RELEASES, and_(pr.plan_id == pp.plan_id, pr.period == pp.period)
    )
    with db.read() as conn:
        rows = conn.execute(
            select(
                pp.plan_id,
                pp.period,
                pp.starts_at,
                pp.ends_at,
                pr.pages,
                pr.carried_over,
                pr.carried_backed_off,
            )
            .select_from(released)
            .where(inside)
            .order_by(pp.starts_at, pp.plan_id, pp.period)
        ).all()
        fetches = _fetch_counts(conn, inside, until)
        # Every release since the window began, in time order: what each found still waiting.
        later = conn.execute(
            select(pr.released_at, pr.carried_over, pr.carried_backed_off)
            .where(pr.released_at >= since)
            .order_by(pr.released_at)
        ).all()
    release_times = [r.released_at for r in later]
    waiting_now: int | None = None
    windows: dict[tuple[datetime, datetime], list[int]] = {}
    for row in rows:
        key = (row.starts_at, row.ends_at)
        got = windows.setdefault(key, [0, 0, 0])  # fetched, released, carried in
        got[0] = max(got[0], fetches.get((int(row.plan_id), int(row.period)), (0, 0, 0))[0])
        got[1] += int(row.pages)
        carried_in = int(row.carried_over or 0) - int(row.carried_backed_off or 0)
        got[2] = max(got[2], carried_in)
    out = EndedPeriods([], [], [], [], [])
    for (start, end), (fetched, pages, carried_in) in sorted(windows.items()):
        # The first release at or after the period's end found what it left.
        first = bisect_left(release_times, end)
        after = later[first] if first < len(later) else None
        if after is None:
            if waiting_now is None:
                waiting_now = queued_ready(db, now=until)
            left = waiting_now
        else:
            left = int(after.carried_over or 0) - int(after.carried_backed_off or 0)
        out.starts_at.append(start)
        out.seconds.append((end - start).total_seconds())
        out.fetched.append(fetched)
        out.offered.append(pages + carried_in)
        out.left.append(left)
    return out


def count_blocked(conn: Connection, page_ids: Sequence[int]) -> None:
    """Add the queued pages among ``page_ids``, which robots.txt turned away, to their
    releases' ``blocked`` counts, in the caller's transaction (a report's, before it takes
    them out of the queue: a page no longer queued is not counted twice). Rows are updated
    in key order, so that two reports never wait for each other's in a cycle."""
    rp, pr = RELEASED_PAGES.c, PERIOD_RELEASES.c
    rows = conn.execute(
        select(rp.plan_id, rp.period, func.count())
        .where(rp.page_id.in_(list(page_ids)))
        .group_by(rp.plan_id, rp.period)
        .order_by(rp.plan_id, rp.period)
    ).all()
    for plan_id, period, count in rows:
        conn.execute(
            update(PERIOD_RELEASES)
            .where(pr.plan_id == plan_id, pr.period == period)
            .values(blocked=func.coalesce(pr.blocked, 0) + int(count))
        )
