"""The lease queue: workers take batches of due URLs, report what they fetched, give hosts back.

A lease hands one host, and up to ``max_urls_per_host`` of its due pages, to one worker until
``expires_at``. While a lease on a host is live no other worker can lease that host, so the
worker that holds it owns the host's politeness (delay between requests, Retry-After,
backoff). When a worker dies, its leases expire and their pages, which were never reported,
are due again: nothing is lost. A report is recorded once per (lease, page), so a worker that
retries a report, or reports after its lease expired, never creates a second observation.

Leasing is one transaction per batch. On PostgreSQL the hosts are picked with
``SELECT ... FOR UPDATE SKIP LOCKED``: concurrent workers skip each other's candidate hosts
instead of queueing on them. On SQLite the transaction takes the write lock up front
(``BEGIN IMMEDIATE``), which serializes leasing between processes sharing the file.

What is due comes from ``pages.next_due_at``; the planner's schedule writes it. The store
decides nothing about *when* to crawl: a report without ``next_due_at`` falls back to the
configured ``LeasePolicy.revisit_after``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, bindparam, case, func, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute

from store.database import Database
from store.errors import InvalidReportError, LeaseNotFoundError
from store.models import LEASES, OBSERVATIONS, PAGE_STATUSES, PAGES, Host, Observation, Page
from store.models import Lease as LeaseRow
from store.pages import insert_ignoring_conflicts
from store.types import UTCDateTime, utcnow

__all__ = [
    "FetchResult",
    "HostUpdate",
    "Lease",
    "LeasePolicy",
    "LeaseQueue",
    "LeasedPage",
    "ReportOutcome",
]


@dataclass(frozen=True)
class LeasePolicy:
    """How the queue hands out work.

    Attributes
    ----------
    lease_seconds : how long a worker may hold a host before its pages return to the pool (s).
    max_urls : largest batch one lease call returns (URLs, over all hosts of the batch).
    max_urls_per_host : most pages of one host in one lease.
    max_hosts : most hosts in one batch.
    revisit_after : next due time after a fetch when the report names none (the planner's
        schedule normally does), as a ``timedelta``.
    """

    lease_seconds: float = 300.0
    max_urls: int = 100
    max_urls_per_host: int = 20
    max_hosts: int = 20
    revisit_after: timedelta = field(default=timedelta(days=1))

    def __post_init__(self) -> None:
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        for name in ("max_urls", "max_urls_per_host", "max_hosts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


@dataclass(frozen=True)
class LeasedPage:
    """A page handed to a worker, with the validators it needs for a conditional GET."""

    page_id: int
    url: str
    status: str
    last_fetch_at: datetime | None
    etag: str | None
    last_modified: datetime | None
    signature: str | None


@dataclass(frozen=True)
class Lease:
    """One host leased to one worker, with the pages to fetch and the host's politeness state."""

    lease_id: int
    worker: str
    host_id: int
    origin: str
    expires_at: datetime
    crawl_delay: float | None
    robots_txt: str | None
    robots_expires_at: datetime | None
    pages: tuple[LeasedPage, ...]


@dataclass(frozen=True)
class FetchResult:
    """What a worker saw when it fetched one leased page.

    ``changed``: True/False when the content signature was compared with the previous one,
    None when unknown. ``signature``/``etag``/``last_modified`` None keep the page's previous
    values (a 304 carries no body). ``next_due_at`` None means "revisit_after from now".
    """

    page_id: int
    fetched_at: datetime
    status: str
    http_status: int | None = None
    changed: bool | None = None
    last_modified: datetime | None = None
    etag: str | None = None
    signature: str | None = None
    bytes: int | None = None
    duration: float | None = None
    error: str | None = None
    next_due_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.status not in PAGE_STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {PAGE_STATUSES}")


@dataclass(frozen=True)
class HostUpdate:
    """Politeness and robots state a worker hands back with a host; None leaves a field as is."""

    next_fetch_at: datetime | None = None
    backoff_until: datetime | None = None
    consecutive_errors: int | None = None
    crawl_delay: float | None = None
    robots_txt: str | None = None
    robots_status: int | None = None
    robots_fetched_at: datetime | None = None
    robots_expires_at: datetime | None = None


@dataclass(frozen=True)
class ReportOutcome:
    """``recorded`` new observations; ``duplicates`` already recorded for this lease;
    ``late`` of the recorded ones arrived after the lease had expired or was released."""

    recorded: int
    duplicates: int
    late: int


def _free(
    leased_until: InstrumentedAttribute[datetime | None], now: datetime
) -> ColumnElement[bool]:
    """The row is not held by a live lease."""
    return or_(leased_until.is_(None), leased_until < now)


class LeaseQueue:
    """Lease, report, renew and release over a :class:`~store.database.Database`."""

    def __init__(self, db: Database, policy: LeasePolicy | None = None) -> None:
        self.db = db
        self.policy = policy or LeasePolicy()

    # -- lease -------------------------------------------------------------------------------
    def lease(
        self, worker: str, *, max_urls: int | None = None, now: datetime | None = None
    ) -> list[Lease]:
        """Lease up to ``max_urls`` due pages, grouped by host, to ``worker``.

        Returns an empty list when nothing is due on a host that is free and polite to fetch.
        """
        limit = min(max_urls or self.policy.max_urls, self.policy.max_urls)
        when = now or utcnow()
        return self.db.run_write(lambda conn: self._lease(conn, worker, limit, when))

    def _lease(self, conn: Connection, worker: str, limit: int, now: datetime) -> list[Lease]:
        expires = now + timedelta(seconds=self.policy.lease_seconds)
        due = (
            select(Page.id)
            .where(Page.host_id == Host.id, Page.next_due_at <= now, _free(Page.leased_until, now))
            .exists()
        )
        hosts_q = (
            select(Host.id, Host.origin, Host.crawl_delay, Host.robots_txt, Host.robots_expires_at)
            .where(
                _free(Host.leased_until, now),
                Host.next_fetch_at <= now,
                or_(Host.backoff_until.is_(None), Host.backoff_until <= now),
                due,
            )
            .order_by(Host.next_fetch_at, Host.id)
            .limit(min(self.policy.max_hosts, limit))
        )
        if self.db.dialect == "postgresql":
            hosts_q = hosts_q.with_for_update(skip_locked=True, of=Host)
        leases: list[Lease] = []
        remaining = limit
        for host in conn.execute(hosts_q).all():
            if remaining <= 0:
                break
            rows = conn.execute(
                select(
                    Page.id,
                    Page.url,
                    Page.status,
                    Page.last_fetch_at,
                    Page.etag,
                    Page.last_modified,
                    Page.signature,
                )
                .where(
                    Page.host_id == host.id,
                    Page.next_due_at <= now,
                    _free(Page.leased_until, now),
                )
                .order_by(Page.next_due_at, Page.id)
                .limit(min(self.policy.max_urls_per_host, remaining))
            ).all()
            if not rows:
                continue
            lease_id = conn.execute(
                LEASES.insert().returning(LEASES.c.id),
                {
                    "worker": worker,
                    "host_id": host.id,
                    "created_at": now,
                    "expires_at": expires,
                    "pages": len(rows),
                },
            ).scalar_one()
            conn.execute(
                update(Host)
                .where(Host.id == host.id)
                .values(lease_id=lease_id, leased_until=expires)
            )
            conn.execute(
                update(Page)
                .where(Page.id.in_([r.id for r in rows]))
                .values(lease_id=lease_id, leased_until=expires)
            )
            remaining -= len(rows)
            leases.append(
                Lease(
                    lease_id=lease_id,
                    worker=worker,
                    host_id=host.id,
                    origin=host.origin,
                    expires_at=expires,
                    crawl_delay=host.crawl_delay,
                    robots_txt=host.robots_txt,
                    robots_expires_at=host.robots_expires_at,
                    pages=tuple(LeasedPage(*r) for r in rows),
                )
            )
        return leases

    # -- report ------------------------------------------------------------------------------
    def report(
        self, lease_id: int, results: Sequence[FetchResult], *, now: datetime | None = None
    ) -> ReportOutcome:
        """Record the observations of a lease's pages and update the pages' fetch state.

        Idempotent: a result already recorded for this lease is counted as a duplicate and
        changes nothing. Results for an expired lease are recorded (the fetch happened) but
        do not touch a newer lease of the same page.
        """
        when = now or utcnow()
        return self.db.run_write(lambda conn: self._report(conn, lease_id, results, when))

    def _lease_row(self, conn: Connection, lease_id: int) -> Row[Any]:
        row = conn.execute(
            select(
                LeaseRow.id,
                LeaseRow.worker,
                LeaseRow.host_id,
                LeaseRow.expires_at,
                LeaseRow.released_at,
            ).where(LeaseRow.id == lease_id)
        ).one_or_none()
        if row is None:
            raise LeaseNotFoundError(f"lease {lease_id} does not exist: lease a new batch")
        return row

    def _report(
        self, conn: Connection, lease_id: int, results: Sequence[FetchResult], now: datetime
    ) -> ReportOutcome:
        lease = self._lease_row(conn, lease_id)
        late = lease.released_at is not None or lease.expires_at < now
        unique: dict[int, FetchResult] = {}
        for result in results:
            unique.setdefault(result.page_id, result)
        ids = sorted(unique)
        if not ids:
            return ReportOutcome(0, len(results), 0)
        pages_q = (
            select(
                Page.id,
                Page.host_id,
                Page.last_fetch_at,
                Page.last_change_at,
                Page.etag,
                Page.last_modified,
                Page.signature,
                Page.lease_id,
            )
            .where(Page.id.in_(ids))
            .order_by(Page.id)
        )
        if self.db.dialect == "postgresql":
            pages_q = pages_q.with_for_update(of=Page)
        pages = {row.id: row for row in conn.execute(pages_q).all()}
        strangers = [pid for pid in ids if pid not in pages or pages[pid].host_id != lease.host_id]
        if strangers:
            raise InvalidReportError(
                f"lease {lease_id} holds host {lease.host_id}; pages {strangers[:5]} are not "
                "pages of that host"
            )
        recorded_q = select(Observation.page_id).where(
            Observation.lease_id == lease_id, Observation.page_id.in_(ids)
        )
        already = set(conn.execute(recorded_q).scalars())
        fresh = [pid for pid in ids if pid not in already]
        observations = []
        newer_updates: list[dict[str, object]] = []
        older_updates: list[dict[str, object]] = []
        for pid in fresh:
            r, page = unique[pid], pages[pid]
            newer = page.last_fetch_at is None or r.fetched_at > page.last_fetch_at
            previous = page.last_fetch_at if newer else self._previous_fetch(conn, pid, r)
            observations.append(
                {
                    "page_id": pid,
                    "lease_id": lease_id,
                    "worker": lease.worker,
                    "kind": "fetch",
                    "fetched_at": r.fetched_at,
                    "previous_fetch_at": previous,
                    "recorded_at": now,
                    "http_status": r.http_status,
                    "changed": r.changed,
                    "last_modified": r.last_modified,
                    "etag": r.etag,
                    "signature": r.signature,
                    "bytes": r.bytes,
                    "duration": r.duration,
                    "error": r.error,
                }
            )
            (newer_updates if newer else older_updates).append(
                self._page_update(page, r, lease_id, newer=newer)
            )
        if observations:
            conn.execute(insert_ignoring_conflicts(self.db, OBSERVATIONS), observations)
        if newer_updates:
            conn.execute(_UPDATE_NEWER, newer_updates)
        if older_updates:
            conn.execute(_UPDATE_OLDER, older_updates)
        return ReportOutcome(
            recorded=len(fresh),
            duplicates=len(results) - len(fresh),
            late=len(fresh) if late else 0,
        )

    def _previous_fetch(self, conn: Connection, page_id: int, r: FetchResult) -> datetime | None:
        return conn.execute(
            select(func.max(Observation.fetched_at)).where(
                Observation.page_id == page_id, Observation.fetched_at < r.fetched_at
            )
        ).scalar_one_or_none()

    def _page_update(
        self, page: Row[Any], r: FetchResult, lease_id: int, *, newer: bool
    ) -> dict[str, object]:
        changed = bool(r.changed)
        values: dict[str, object] = {"p_id": page.id, "p_lease": lease_id, "p_inc": int(changed)}
        if newer:
            values.update(
                p_status=r.status,
                p_http_status=r.http_status,
                p_last_fetch_at=r.fetched_at,
                p_last_change_at=r.fetched_at if changed else page.last_change_at,
                p_etag=r.etag if r.etag is not None else page.etag,
                p_last_modified=r.last_modified or page.last_modified,
                p_signature=r.signature if r.signature is not None else page.signature,
                p_next_due_at=r.next_due_at or r.fetched_at + self.policy.revisit_after,
            )
        return values

    # -- renew / release ---------------------------------------------------------------------
    def renew(self, lease_id: int, *, now: datetime | None = None) -> datetime | None:
        """Extend a live lease by ``lease_seconds``; None when it had expired or was released.

        A worker with slow hosts renews before expiry; once expired the host may belong to
        another worker, so an expired lease is never revived.
        """
        when = now or utcnow()

        def work(conn: Connection) -> datetime | None:
            lease = self._lease_row(conn, lease_id)
            if lease.released_at is not None or lease.expires_at <= when:
                return None
            expires = when + timedelta(seconds=self.policy.lease_seconds)
            conn.execute(update(LeaseRow).where(LeaseRow.id == lease_id).values(expires_at=expires))
            conn.execute(
                update(Host)
                .where(Host.id == lease.host_id, Host.lease_id == lease_id)
                .values(leased_until=expires)
            )
            conn.execute(update(Page).where(Page.lease_id == lease_id).values(leased_until=expires))
            return expires

        return self.db.run_write(work)

    def release(
        self, lease_id: int, host: HostUpdate | None = None, *, now: datetime | None = None
    ) -> int:
        """Give a host back; its leased pages that were not reported return to the pool.

        ``host`` carries the politeness and robots state the worker learned. Returns the
        number of pages returned unfetched. Releasing twice is harmless.
        """
        when = now or utcnow()

        def work(conn: Connection) -> int:
            lease = self._lease_row(conn, lease_id)
            if lease.released_at is not None:
                return 0
            host_q = select(Host.id, Host.lease_id, Host.next_fetch_at).where(
                Host.id == lease.host_id
            )
            if self.db.dialect == "postgresql":
                host_q = host_q.with_for_update()
            row = conn.execute(host_q).one()
            values: dict[str, object] = {}
            if row.lease_id == lease_id:
                values.update(lease_id=None, leased_until=None)
            if host is not None:
                for name in (
                    "backoff_until",
                    "consecutive_errors",
                    "crawl_delay",
                    "robots_txt",
                    "robots_status",
                    "robots_fetched_at",
                    "robots_expires_at",
                ):
                    if getattr(host, name) is not None:
                        values[name] = getattr(host, name)
                if host.next_fetch_at is not None:
                    values["next_fetch_at"] = max(row.next_fetch_at, host.next_fetch_at)
            if values:
                conn.execute(update(Host).where(Host.id == row.id).values(**values))
            returned = conn.execute(
                update(Page)
                .where(Page.lease_id == lease_id)
                .values(lease_id=None, leased_until=None)
            ).rowcount
            conn.execute(update(LeaseRow).where(LeaseRow.id == lease_id).values(released_at=when))
            return int(returned or 0)

        return self.db.run_write(work)


_pages = PAGES
_ours = _pages.c.lease_id == bindparam("p_lease")
# Counters move for every recorded observation; the lease columns clear only when the page is
# still held by the reporting lease (a late report must not free a newer lease of the page).
_COMMON = {
    "fetches": _pages.c.fetches + 1,
    "changes": _pages.c.changes + bindparam("p_inc"),
    "lease_id": case((_ours, None), else_=_pages.c.lease_id),
    "leased_until": case((_ours, None), else_=_pages.c.leased_until),
}
_UPDATE_OLDER = update(_pages).where(_pages.c.id == bindparam("p_id")).values(**_COMMON)
_UPDATE_NEWER = _UPDATE_OLDER.values(
    status=bindparam("p_status"),
    http_status=bindparam("p_http_status"),
    last_fetch_at=bindparam("p_last_fetch_at", type_=UTCDateTime()),
    last_change_at=bindparam("p_last_change_at", type_=UTCDateTime()),
    etag=bindparam("p_etag"),
    last_modified=bindparam("p_last_modified", type_=UTCDateTime()),
    signature=bindparam("p_signature"),
    next_due_at=bindparam("p_next_due_at", type_=UTCDateTime()),
)
