"""A summary of the store for ``crawlplan status``: pages by status and bucket, hosts, leases."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, or_, select

from store.database import Database
from store.models import (
    DUPLICATE_STATUS,
    UNFETCHABLE_STATUS,
    UNPLANNED_STATUSES,
    Host,
    Observation,
    Page,
    ReleasedPage,
)
from store.models import Lease as LeaseRow
from store.plans import PlanSummary, latest_plan
from store.types import URGENT_DUE, utcnow

__all__ = ["StoreStatus", "read_status", "work_remaining"]


@dataclass(frozen=True)
class StoreStatus:
    """Counts at one instant. ``by_bucket`` lists only non-empty buckets (0 = no estimate) of
    fetchable pages; ``unfetchable`` counts the pages that can't be fetched, by reason
    (``robots``: robots.txt disallows them), which are no candidates and in no bucket.
    ``given_up_hosts``: hosts the crawl gave up (robots.txt unreachable too many times in a
    row); ``given_up_pages``: their pages (unfetchable too, not due, not in ``unfetchable``).
    ``duplicates``: index files that answered as their directory URL does (status
    ``duplicate``, :mod:`store.duplicates`): no candidates, in no bucket.
    ``noise_checked_hosts``: hosts whose noise a twin fetch has checked; ``noisy_hosts``: those
    with noise rules (``crawler.noise``). ``probes_marked``: pages the last nightly run marked
    for a probe, waiting for its first crawl (in the urgent lane); ``follow_ups_marked``:
    those marked for a follow-up, waiting for their next planned crawl; ``probes_pending``:
    pages waiting for their probe's or follow-up's second crawl (:mod:`store.probes`)."""

    at: datetime
    pages: int
    hosts: int
    by_status: dict[str, int]
    by_bucket: dict[int, int]
    unfetchable: dict[str, int]
    due_now: int
    leased_now: int
    active_leases: int
    observations: int
    plan: PlanSummary | None
    given_up_hosts: int = 0
    given_up_pages: int = 0
    duplicates: int = 0
    noise_checked_hosts: int = 0
    noisy_hosts: int = 0
    probes_marked: int = 0
    probes_pending: int = 0
    follow_ups_marked: int = 0


def read_status(db: Database, *, now: datetime | None = None) -> StoreStatus:
    """Read the counts in one read transaction (a consistent snapshot on PostgreSQL)."""
    when = now or utcnow()
    with db.read() as conn:
        by_status = dict(
            conn.execute(select(Page.status, func.count()).group_by(Page.status)).tuples().all()
        )
        by_bucket = dict(
            conn.execute(
                select(Page.bucket, func.count())
                .where(Page.status.not_in(UNPLANNED_STATUSES))
                .group_by(Page.bucket)
                .order_by(Page.bucket)
            )
            .tuples()
            .all()
        )
        free = or_(Page.leased_until.is_(None), Page.leased_until < when)
        due_now = (
            conn.execute(select(func.count()).where(Page.next_due_at <= when, free)).scalar_one()
            + conn.execute(  # released pages due, on hosts not leased
                select(func.count())
                .select_from(ReleasedPage)
                .join(Host, Host.id == ReleasedPage.host_id)
                .where(
                    ReleasedPage.due_at <= when,
                    or_(Host.leased_until.is_(None), Host.leased_until < when),
                )
            ).scalar_one()
        )
        leased_now = conn.execute(
            select(func.count()).where(Page.leased_until >= when)
        ).scalar_one()
        active = conn.execute(
            select(func.count()).where(LeaseRow.released_at.is_(None), LeaseRow.expires_at >= when)
        ).scalar_one()
        hosts = conn.execute(select(func.count()).select_from(Host)).scalar_one()
        # Hosts given up, and their pages (through ix_pages_host): those blocked are counted
        # here, not as disallowed by robots.txt.
        given_up_hosts = conn.execute(
            select(func.count()).where(Host.given_up_at.is_not(None))
        ).scalar_one()
        given_up_pages, given_up_blocked = conn.execute(
            select(
                func.count(),
                func.coalesce(func.sum(case((Page.status == UNFETCHABLE_STATUS, 1), else_=0)), 0),
            )
            .select_from(Page)
            .join(Host, Host.id == Page.host_id)
            .where(Host.given_up_at.is_not(None))
        ).one()
        noise_checked, noisy = conn.execute(
            select(
                func.count(Host.noise_checked_at),
                func.coalesce(func.sum(case((Host.noise_rules != "", 1), else_=0)), 0),
            )
        ).one()
        observations = conn.execute(select(func.count()).select_from(Observation)).scalar_one()
        # the marked pages alone, through the partial index ix_pages_probe
        # (a probe's page is in the urgent lane, a follow-up's where the plan put it)
        urgent = (Page.probe_delay > 0) & (Page.next_due_at == URGENT_DUE)
        probes_marked, marked, probes_pending = conn.execute(
            select(
                func.coalesce(func.sum(case((urgent, 1), else_=0)), 0),
                func.coalesce(func.sum(case((Page.probe_delay > 0, 1), else_=0)), 0),
                func.coalesce(func.sum(case((Page.probe_delay < 0, 1), else_=0)), 0),
            ).where(Page.probe_delay.is_not(None))
        ).one()
        plan = latest_plan(db, conn)
    return StoreStatus(
        at=when,
        pages=sum(by_status.values()),
        hosts=int(hosts),
        by_status={k: int(v) for k, v in by_status.items()},
        by_bucket={int(k): int(v) for k, v in by_bucket.items()},
        unfetchable={"robots": int(by_status.get(UNFETCHABLE_STATUS, 0)) - int(given_up_blocked)},
        due_now=int(due_now),
        leased_now=int(leased_now),
        active_leases=int(active),
        observations=int(observations),
        plan=plan,
        given_up_hosts=int(given_up_hosts),
        given_up_pages=int(given_up_pages),
        noise_checked_hosts=int(noise_checked),
        noisy_hosts=int(noisy),
        duplicates=int(by_status.get(DUPLICATE_STATUS, 0)),
        probes_marked=int(probes_marked),
        probes_pending=int(probes_pending),
        follow_ups_marked=int(marked) - int(probes_marked),
    )


def work_remaining(db: Database, *, now: datetime | None = None) -> bool:
    """Whether any page is due now or held by a live lease (indexed probes, no counts);
    released pages (the release queue) included: a queued page is held while its host's
    lease is live. Pages of given-up hosts are none of these (no due time, not queued): a
    store where only they are left has no work."""
    when = now or utcnow()
    free = or_(Page.leased_until.is_(None), Page.leased_until < when)
    with db.read() as conn:
        due = conn.execute(select(Page.id).where(Page.next_due_at <= when, free).limit(1)).first()
        if due is not None:
            return True
        held = conn.execute(select(Page.id).where(Page.leased_until >= when).limit(1)).first()
        if held is not None:
            return True
        queued = conn.execute(
            select(ReleasedPage.page_id).where(ReleasedPage.due_at <= when).limit(1)
        ).first()
        if queued is not None:
            return True
        queued_held = conn.execute(
            select(ReleasedPage.page_id)
            .join(Host, Host.id == ReleasedPage.host_id)
            .where(Host.leased_until >= when)
            .limit(1)
        ).first()
    return queued_held is not None
