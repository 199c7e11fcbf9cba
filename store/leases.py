"""The lease queue: workers take batches of due URLs, report what they fetched, give hosts back.

A lease hands one host, and up to ``max_urls_per_host`` of its due pages, to one worker until
``expires_at``. While a lease on a host is live no other worker can lease that host, so the
worker that holds it owns the host's politeness (delay between requests, Retry-After,
backoff). When a worker dies, its leases expire and their pages, which were never reported,
are due again: nothing is lost. A report is recorded once per (lease, page), so a worker that
retries a report, or reports after its lease expired, never creates a second observation.

Leasing is one transaction per batch. Hosts are taken in the order their work became ready
(``hosts.ready_at``, kept by :mod:`store.host_ready`): a lease reads the hosts it takes, not
every host whose politeness delay has passed. On PostgreSQL the hosts are picked with
``SELECT ... FOR UPDATE SKIP LOCKED``: concurrent workers skip each other's candidate hosts
instead of queueing on them. On SQLite the transaction takes the write lock up front
(``BEGIN IMMEDIATE``), which serializes leasing between processes sharing the file. Each
engine's statements for reading a batch's due pages and marking them are in
:mod:`store.dialects` (``sqlite_leases``, ``postgresql_leases``).

What is due comes from two places: the release queue ``released_pages`` (the pages a plan
period released, :mod:`store.releases`, each with its release time ``due_at``), and
``pages.next_due_at`` (before any plan, a worker's retry time, the urgent lane). A host's
lease takes its due pages from both, the earliest due first. Pages due in ``pages`` are
marked leased there (``lease_id``/``leased_until``). Queued pages are not marked at all:
while a lease on their host is live no other lease can take the host, so the host's lease
is the mark; a report deletes the page's queue row, and what was not reported is simply
still queued when the host is given back or its lease expires. Leasing released pages thus
writes nothing per page: no scattered write into the 10,000,000-row ``pages`` table, nor
into the queue. The store decides nothing about *when* to crawl. A
report sets the page's ``scheduled_at`` (when the refresh schedule wants it again: the fetch
time plus the page's ``refresh_interval`` days, else ``LeasePolicy.revisit_after``) and its
``next_due_at``: the one the worker gave (errors, robots), else NULL once a plan has been
published (the page waits for the release of a plan period), else, before any plan,
``scheduled_at``.

A page robots.txt disallows is reported ``blocked`` without a request: it becomes
unfetchable (status ``blocked``, due again when the worker says: when the rules that
blocked it expire) and leaves the release queue, and nothing else of it changes: no
observation is recorded (no fetch happened), its fetch count and last fetch stay as they
were, so it never counts as a fetched page, nor as a first fetch in the discovery rates.

A host whose robots.txt the worker found unreachable too many times in a row is given up:
the worker hands it back with ``HostUpdate.given_up_at`` (and its failure count,
``robots_failures``, which every give-back may carry), and the give-back, in its
transaction, records it on the host and makes every page of the host unfetchable (status
``blocked``) with no due time, out of the release queue (counted ``blocked`` in its
release). The host is held first, then all its pages are locked in id order (with a
finish's other pages, in one statement), as every writer of pages locks them. A user's
seed takes the host back (:mod:`store.pages`).

A directory URL and its index file (``X/`` and ``X/index.html``) that answered as one
document are one page: a report that reads either settles the pair in its transaction, the
index file becoming ``duplicate`` (never planned, released or leased again) or, when its
directory answered gone or redirect, a page again (:mod:`store.duplicates`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Insert,
    Row,
    and_,
    bindparam,
    case,
    func,
    or_,
    select,
    update,
)

from store.backend import LeaseBatch, LeasedPage
from store.database import Database, DriverStatement
from store.duplicates import alias_pairs, settle_duplicates
from store.errors import InvalidReportError, LeaseNotFoundError
from store.host_ready import (
    due_once,
    hold_hosts,
    lower_ready,
    lower_ready_to,
    ready_from,
    refresh_first_ready,
    refresh_ready,
    take_hosts,
)
from store.importance import CashSplit, move_cash, outlink_ids, page_ids_of
from store.models import (
    HOSTS,
    LEASES,
    OBSERVATIONS,
    PAGE_STATUSES,
    PAGES,
    RELEASED_PAGES,
    URGENT_REQUESTS,
)
from store.notifications import Notification, record_notifications
from store.pages import CHUNK as PAGES_CHUNK
from store.pages import (
    UNFETCHABLE_STATUS,
    add_pages,
    add_pages_in,
    add_unfetchable,
    add_unfetchable_in,
    insert_ignoring_conflicts,
    lock_pages,
)
from store.period_use import count_blocked
from store.plans import PLAN_PUBLISHED
from store.status import work_remaining
from store.types import UTCDateTime, utcnow

__all__ = [
    "FetchResult",
    "HostUpdate",
    "Lease",
    "LeasePolicy",
    "LeaseQueue",
    "LeasedPage",
    "ReportOutcome",
    "lease_worker",
]


@dataclass(frozen=True)
class LeasePolicy:
    """How the queue hands out work.

    Attributes
    ----------
    lease_seconds : how long a worker may hold a host before its pages return to the pool (s);
        a live worker renews its leases every third of it (a heartbeat), so it can be short:
        a killed worker's hosts come back within it.
    max_urls : largest batch one lease call returns (URLs, over all hosts of the batch).
    max_urls_per_host : most pages of one host in one lease.
    max_hosts : most hosts in one batch.
    revisit_after : the refresh interval of a page the schedule has given none (its
        ``refresh_interval`` is NULL), as a ``timedelta``.
    """

    lease_seconds: float = 60.0
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
class Lease:
    """One host leased to one worker, with the pages to fetch and the host's politeness state."""

    lease_id: int
    worker: str
    host_id: int
    origin: str
    expires_at: datetime
    crawl_delay: float | None
    robots_txt: str | None
    robots_status: int | None
    robots_fetched_at: datetime | None
    robots_expires_at: datetime | None
    pages: tuple[LeasedPage, ...]
    #: Consecutive robots.txt fetches that found the host unreachable, before this lease.
    robots_failures: int = 0
    #: The host's noise rules (``crawler.noise``; '' none, None never checked), and when its
    #: last twin fetch checked them.
    noise_rules: str | None = None
    noise_checked_at: datetime | None = None


@dataclass(frozen=True)
class FetchResult:
    """What a worker saw when it fetched one leased page.

    ``changed``: True/False when the content signature was compared with the previous one,
    None when unknown. ``signature``/``etag``/``last_modified`` None keep the page's previous
    values (a 304 carries no body). ``next_due_at`` None leaves the next fetch to the plan
    (NULL until a period release once a plan is published, else the scheduled time).
    ``outlinks``: with a ``cash_split`` given to the report, a page read (ok, redirect, gone)
    gives its OPIC cash to these pages in the report's transaction (:mod:`store.importance`).
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
    #: Normalized URLs the page links to (pages already added): OPIC moves its cash there.
    outlinks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in PAGE_STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {PAGE_STATUSES}")


@dataclass(frozen=True)
class HostUpdate:
    """Politeness and robots state a worker hands back with a host; None leaves a field as is.

    ``robots_failures``: the host's consecutive unreachable robots.txt fetches (0 after a
    reachable one). ``given_up_at``: the worker gives the host up (its robots.txt was
    unreachable too many times in a row): the give-back makes every page of the host
    unfetchable with no due time, in its transaction (only while the lease is still the
    host's: a late give-back of an expired lease gives nothing up). ``noise_rules`` and
    ``noise_checked_at``: what the worker's twin fetch learned (``crawler.noise``).
    """

    next_fetch_at: datetime | None = None
    backoff_until: datetime | None = None
    consecutive_errors: int | None = None
    crawl_delay: float | None = None
    robots_txt: str | None = None
    robots_status: int | None = None
    robots_fetched_at: datetime | None = None
    robots_expires_at: datetime | None = None
    robots_failures: int | None = None
    given_up_at: datetime | None = None
    noise_rules: str | None = None
    noise_checked_at: datetime | None = None


@dataclass(frozen=True)
class ReportOutcome:
    """``recorded`` new observations; ``duplicates`` already recorded for this lease;
    ``late`` of the recorded ones arrived after the lease had expired or was released;
    ``discovered`` pages added by the report (its ``discovered`` URLs the store lacked);
    ``unfetchable`` pages added by the report (its ``blocked`` URLs the store lacked);
    ``blocked`` results: leased pages robots.txt disallowed, now unfetchable (no
    observation)."""

    recorded: int
    duplicates: int
    late: int
    discovered: int = 0
    unfetchable: int = 0
    blocked: int = 0


def _free(leased_until: ColumnElement[datetime | None]) -> ColumnElement[bool]:
    """The row is not held by a live lease at ``:now``."""
    return or_(leased_until.is_(None), leased_until < _NOW)


_NOW = bindparam("now", type_=UTCDateTime())
_UNTIL = bindparam("until", type_=UTCDateTime())
_LEASE: BindParameter[Any] = bindparam("lease")
_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_QUEUE_DUE = RELEASED_PAGES.c.due_at <= _NOW

#: Rounds a lease call takes when the hosts it picked turned out stale (nothing due; see
#: :mod:`store.host_ready`), and hosts set right in ready order after such a round.
_STALE_ROUNDS = 4
_STALE_REPAIR = 1_000
#: Columns of a due row: ``(host_id, id, url, status, last_fetch_at, etag, last_modified,
#: signature, due, queued)``.
_HOST, _ID, _QUEUED = 0, 1, 9


def _take_rows(rows: Sequence[tuple[Any, ...]], per_host: int, limit: int) -> LeaseBatch:
    """The batch from due rows in host order, then ``(due, id)`` order within a host.

    Each host gets its first ``per_host`` distinct pages, the batch its first ``limit``
    pages (a host gets min(per_host, what is left), as a loop over the hosts would). A page
    due both in ``pages`` and in the queue is leased once (and marked in ``pages``).
    """
    batch = LeaseBatch()
    total = 0
    host: int | None = None
    taken: list[tuple[Any, ...]] = []
    ids: set[int] = set()
    full = False
    for row in rows:
        if row[_HOST] != host:
            host, taken, ids = row[_HOST], [], set()
            full = per_host == 0 or total >= limit
            if not full:
                batch.by_host[row[_HOST]] = taken
        if full:
            continue
        pid = row[_ID]
        if pid not in ids:
            taken.append(row)
            ids.add(pid)
            total += 1
        if not row[_QUEUED]:
            batch.pages.append((pid, row[_HOST]))
        full = len(taken) >= per_host or total >= limit
    batch.by_host = {h: pages for h, pages in batch.by_host.items() if pages}
    return batch


class _Statements:
    """Every statement the queue runs, built once per queue (per dialect), with bind parameters.

    Building SQLAlchemy statements and their cache keys costs more than SQLite takes to run
    them; prebuilt statements keep the lease, report and release transactions short.
    """

    def __init__(self, db: Database, insert_observation: Insert) -> None:
        sql = db.backend.leases
        ready = db.backend.host_ready
        h, p, o, le = HOSTS, PAGES, OBSERVATIONS, LEASES
        r = RELEASED_PAGES
        # Hosts in the order their work became ready, through ix_hosts_ready: the scan
        # stops after the batch's hosts (plus hosts leased or stale, which it skips or
        # returns for the lease to set right), whatever the number of idle hosts.
        self.hosts_due = (
            select(
                h.c.id,
                h.c.origin,
                h.c.crawl_delay,
                h.c.robots_txt,
                h.c.robots_status,
                h.c.robots_fetched_at,
                h.c.robots_expires_at,
                h.c.robots_failures,
                h.c.noise_rules,
                h.c.noise_checked_at,
            )
            .where(
                h.c.ready_at <= _NOW,
                _free(h.c.leased_until),
                h.c.next_fetch_at <= _NOW,
                or_(h.c.backoff_until.is_(None), h.c.backoff_until <= _NOW),
            )
            .order_by(h.c.ready_at, h.c.id)
            .limit(bindparam("limit"))
        )
        self.hosts_due = sql.for_lease(self.hosts_due)
        self.lease_row = select(
            le.c.id, le.c.worker, le.c.host_id, le.c.expires_at, le.c.released_at, le.c.pages
        ).where(le.c.id == _LEASE)
        self.pages_reported = (
            select(
                p.c.id,
                p.c.host_id,
                p.c.last_fetch_at,
                p.c.last_change_at,
                p.c.etag,
                p.c.last_modified,
                p.c.signature,
                p.c.refresh_interval,
                p.c.probe_delay,
                p.c.cash,
            )
            .where(p.c.id.in_(_IDS))
            .order_by(p.c.id)
        )
        # Once a plan is published, fetched pages wait for a period release (one probe).
        self.plan_published = PLAN_PUBLISHED
        self.pages_reported = sql.for_report(self.pages_reported)
        self.recorded = select(o.c.page_id).where(o.c.lease_id == _LEASE, o.c.page_id.in_(_IDS))
        self.previous_fetch = select(func.max(o.c.fetched_at)).where(
            o.c.page_id == bindparam("page"),
            o.c.fetched_at < bindparam("at", type_=UTCDateTime()),
        )
        # A report's rows, straight through the driver (the observations' INSERT ... ON
        # CONFLICT would otherwise be compiled again on every report).
        engine_dialect = db.engine.dialect
        self.insert_observation = DriverStatement(
            insert_observation, engine_dialect, column_keys=_OBSERVATION_KEYS
        )
        self.update_newer = DriverStatement(_UPDATE_NEWER, engine_dialect)
        self.update_older = DriverStatement(_UPDATE_OLDER, engine_dialect)
        self.extend_lease = update(le).where(le.c.id == _LEASE).values(expires_at=_UNTIL)
        self.extend_host = (
            update(h)
            .where(h.c.id == bindparam("host"), h.c.lease_id == _LEASE)
            .values(
                leased_until=_UNTIL,
                # Not ready before the lease ends (as the lease set it).
                ready_at=case((h.c.ready_at < _UNTIL, _UNTIL), else_=h.c.ready_at),
            )
        )
        self.extend_pages = update(p).where(p.c.lease_id == _LEASE).values(leased_until=_UNTIL)
        # A fetched page leaves the queue (a late report too: the page was fetched; a newer
        # lease that holds it still has it in hand).
        self.unqueue = r.delete().where(r.c.page_id.in_(_IDS))
        self.reported = select(func.count()).where(o.c.lease_id == _LEASE)
        self.queue_due = select(r.c.page_id).where(_QUEUE_DUE).limit(1)
        # Queued pages held: a live lease on a host with queued pages.
        self.queue_held = (
            select(r.c.page_id)
            .join(h, h.c.id == r.c.host_id)
            .where(h.c.leased_until >= _NOW)
            .limit(1)
        )
        ours = h.c.lease_id == _LEASE
        next_fetch = bindparam("next_fetch_at", type_=UTCDateTime())
        fields = {
            name: func.coalesce(bindparam(name, type_=h.c[name].type), h.c[name])
            for name in _HOST_FIELDS
        }
        next_fetch_at = case(
            (and_(next_fetch.is_not(None), next_fetch > h.c.next_fetch_at), next_fetch),
            else_=h.c.next_fetch_at,
        )
        leased_until = case((ours, None), else_=h.c.leased_until)
        give_back = update(h).where(h.c.id == bindparam("host"))
        values = {
            "lease_id": case((ours, None), else_=h.c.lease_id),
            "leased_until": leased_until,
            "next_fetch_at": next_fetch_at,
            **fields,
        }
        # What the host has left, from its new politeness state (SET expressions read the
        # row as it was); or, when a writer holds the host, the bound politeness gives.
        left = due_once(ready, bindparam("host"))
        self.release_host = give_back.where(h.c.id == left.c.host).values(
            ready_at=ready_from(
                ready, left.c.due, next_fetch_at, fields["backoff_until"], leased_until
            ),
            **values,
        )
        self.release_host_bound = give_back.values(
            ready_at=ready_from(
                ready, next_fetch_at, next_fetch_at, fields["backoff_until"], leased_until
            ),
            **values,
        )
        self.return_pages = (
            update(p).where(p.c.lease_id == _LEASE).values(lease_id=None, leased_until=None)
        )
        self.close_lease = (
            update(le)
            .where(le.c.id == _LEASE)
            .values(released_at=bindparam("at", type_=UTCDateTime()))
        )
        # Giving a host up: the host's lease, its pages in id order (ix_pages_host), its
        # queued pages, and the pages made unfetchable with no due time.
        self.host_lease = select(h.c.lease_id).where(h.c.id == bindparam("host"))
        self.host_pages = select(p.c.id).where(p.c.host_id == bindparam("host")).order_by(p.c.id)
        self.host_queued = select(r.c.page_id).where(r.c.host_id == bindparam("host"))
        self.unqueue_host = r.delete().where(r.c.host_id == bindparam("host"))
        self.give_up_pages = (
            update(p)
            .where(p.c.host_id == bindparam("host"))
            .values(status=UNFETCHABLE_STATUS, next_due_at=None, lease_id=None, leased_until=None)
        )


#: Columns of a report's observation rows.
_OBSERVATION_KEYS = (
    "page_id",
    "lease_id",
    "worker",
    "kind",
    "fetched_at",
    "previous_fetch_at",
    "recorded_at",
    "http_status",
    "changed",
    "last_modified",
    "etag",
    "signature",
    "bytes",
    "duration",
    "error",
)

_HOST_FIELDS = (
    "backoff_until",
    "consecutive_errors",
    "crawl_delay",
    "robots_txt",
    "robots_status",
    "robots_fetched_at",
    "robots_expires_at",
    "robots_failures",
    "given_up_at",
    "noise_rules",
    "noise_checked_at",
)


class LeaseQueue:
    """Lease, report, renew and release over a :class:`~store.database.Database`."""

    def __init__(self, db: Database, policy: LeasePolicy | None = None) -> None:
        self.db = db
        self.policy = policy or LeasePolicy()
        self._sql = _Statements(db, insert_ignoring_conflicts(db, OBSERVATIONS))
        #: Page ids by URL (the process's, shared by its queues): what reports' OPIC cash
        #: moves need, remembered from leases and from the lookups of committed reports.
        self._page_ids = page_ids_of(db)

    # -- lease -------------------------------------------------------------------------------
    def lease(
        self, worker: str, *, max_urls: int | None = None, now: datetime | None = None
    ) -> list[Lease]:
        """Lease up to ``max_urls`` due pages, grouped by host, to ``worker``.

        Returns an empty list when nothing is due on a host that is free and polite to fetch.
        """
        limit = min(max_urls or self.policy.max_urls, self.policy.max_urls)
        leases = self.db.run_write(lambda conn: self._lease(conn, worker, limit, now or utcnow()))
        self._page_ids.remember((p.url, p.page_id) for lease in leases for p in lease.pages)
        return leases

    def _lease(self, conn: Connection, worker: str, limit: int, now: datetime) -> list[Lease]:
        q = self._sql
        sql = self.db.backend.leases
        sql.begin(conn)
        expires = now + timedelta(seconds=self.policy.lease_seconds)
        per_host = min(self.policy.max_urls_per_host, limit)
        params = {"now": now, "limit": min(self.policy.max_hosts, limit)}
        for _ in range(_STALE_ROUNDS):
            hosts = conn.execute(q.hosts_due, params).all()
            if not hosts:
                return []
            # Each host's first due pages, hosts in the order picked; the batch's first
            # ``limit`` of them (a host gets min(per_host, what is left), as a loop over the
            # hosts would).
            rows = sql.due_rows(conn, [h.id for h in hosts], per_host, now)
            batch = _take_rows(rows, per_host, limit)
            with_work = {row[_HOST] for row in rows}
            stale = [h.id for h in hosts if h.id not in with_work]
            if stale:  # their ready_at had passed, their work had gone: set it right
                refresh_ready(conn, self.db.backend.host_ready, stale)
            if batch.by_host:
                break
            # Nothing but stale hosts: set right the next hosts in ready order too.
            refresh_first_ready(conn, self.db.backend.host_ready, now, _STALE_REPAIR)
        else:
            return []
        by_host = batch.by_host
        lease_ids = sql.take(conn, worker, batch, now, expires)
        return [
            Lease(
                lease_id=lease_ids[host.id],
                worker=worker,
                host_id=host.id,
                origin=host.origin,
                expires_at=expires,
                crawl_delay=host.crawl_delay,
                robots_txt=host.robots_txt,
                robots_status=host.robots_status,
                robots_fetched_at=host.robots_fetched_at,
                robots_expires_at=host.robots_expires_at,
                pages=sql.leased_pages(by_host[host.id]),
                robots_failures=int(host.robots_failures or 0),
                noise_rules=host.noise_rules,
                noise_checked_at=host.noise_checked_at,
            )
            for host in hosts
            if host.id in by_host
        ]

    # -- report ------------------------------------------------------------------------------
    def report(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        *,
        now: datetime | None = None,
        cash_split: CashSplit | None = None,
        discovered: Sequence[tuple[str, str]] = (),
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> ReportOutcome:
        """Record the observations of a lease's pages and update the pages' fetch state.

        Idempotent: a result already recorded for this lease is counted as a duplicate and
        changes nothing. Results for an expired lease are recorded (the fetch happened) but
        do not touch a newer lease of the same page. With ``cash_split``, each page read
        moves its OPIC cash to its ``outlinks`` in the same transaction. ``discovered``
        ``(normalized_url, origin)`` pairs found by the crawl are added first, in the same
        transaction (as :meth:`add_pages` would), so that the cash reaches them; ``blocked``
        ``(normalized_url, origin, check_again_at)`` URLs robots.txt disallows are added as
        unfetchable pages (:func:`store.pages.add_unfetchable`).
        """
        outcome, _ = self._report_in_one(
            lease_id,
            results,
            None,
            now or utcnow(),
            cash_split,
            discovered,
            blocked,
            gives_back=False,
        )
        return outcome

    def finish(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        host: HostUpdate | None = None,
        *,
        now: datetime | None = None,
        cash_split: CashSplit | None = None,
        discovered: Sequence[tuple[str, str]] = (),
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> tuple[ReportOutcome, int]:
        """:meth:`report` then :meth:`release` in one transaction (the usual end of a lease).

        Returns the report's outcome and the number of pages returned unfetched.
        """
        return self._report_in_one(
            lease_id,
            results,
            host,
            now or utcnow(),
            cash_split,
            discovered,
            blocked,
            gives_back=True,
        )

    def _report_in_one(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        host: HostUpdate | None,
        when: datetime,
        cash_split: CashSplit | None,
        discovered: Sequence[tuple[str, str]],
        blocked: Sequence[tuple[str, str, datetime]],
        *,
        gives_back: bool,
    ) -> tuple[ReportOutcome, int]:
        """:meth:`report`, then (``gives_back``) :meth:`release`, in one transaction; the
        report's outcome and the number of pages returned unfetched (0 without release)."""
        found: list[tuple[str, int]] = []

        def work(conn: Connection) -> tuple[ReportOutcome, int]:
            found.clear()  # a retried transaction looks its outlinks up again
            lease = self._lease_row(conn, lease_id)
            # The lease's host first (held against recomputation, store.host_ready), then
            # the hosts of new pages, then pages: a lease's order, host before pages.
            hold_hosts(conn, self.db.backend.host_ready, [lease.host_id])
            lowered: list[tuple[list[int], datetime]] = []
            new_after = _new_after(conn, results) if discovered else None
            added = self._add_discovered(conn, discovered, when, lowered, new_after)
            unfetchable = self._add_blocked(conn, blocked, when, lowered)
            # A give-up writes every page of the host: locked with the report's own.
            giving_up = self._giving_up(conn, lease, host) if gives_back else None
            outcome = self._report(
                conn,
                lease,
                results,
                when,
                cash_split,
                found,
                lowered,
                gives_back=gives_back,
                also_lock=giving_up or (),
            )
            returned = (
                self._release(conn, lease, host, when, pages_locked=True, give_up=giving_up)
                if gives_back
                else 0
            )
            return replace(outcome, discovered=added, unfetchable=unfetchable), returned

        done = self.db.run_write(work)
        self._page_ids.remember(found)  # committed
        return done

    def _add_discovered(
        self,
        conn: Connection,
        pages: Sequence[tuple[str, str]],
        now: datetime,
        lowered: list[tuple[list[int], datetime]],
        new_after: datetime | None = None,
    ) -> int:
        """Add discovered pages in the caller's transaction, new since ``new_after``
        (``pages.new_after``); returns how many were new. The hosts whose ready time they
        lower go to ``lowered`` (lowered after the page locks)."""
        added = 0
        # In URL order (and so each chunk): concurrent reports that discover the same new
        # URLs insert them in the same order, and wait for one another instead of deadlocking.
        pages = sorted(pages)
        for start in range(0, len(pages), PAGES_CHUNK):
            chunk = pages[start : start + PAGES_CHUNK]
            added += add_pages_in(
                self.db,
                conn,
                chunk,
                now=now,
                discovered=True,
                deferred=lowered,
                new_after=new_after,
            )
        return added

    def _add_blocked(
        self,
        conn: Connection,
        pages: Sequence[tuple[str, str, datetime]],
        now: datetime,
        lowered: list[tuple[list[int], datetime]],
    ) -> int:
        """Add unfetchable discovered pages in the caller's transaction, as
        :meth:`_add_discovered` adds candidates; returns how many were new."""
        added = 0
        pages = sorted(pages)
        for start in range(0, len(pages), PAGES_CHUNK):
            chunk = pages[start : start + PAGES_CHUNK]
            added += add_unfetchable_in(self.db, conn, chunk, now=now, deferred=lowered)
        return added

    def _giving_up(
        self, conn: Connection, lease: Row[Any], host: HostUpdate | None
    ) -> list[int] | None:
        """The pages of the lease's host, in id order, when ``host`` gives the host up and
        the lease is still the host's (not released, and no newer lease took the host);
        else None. Read after the host is held, before any page is locked."""
        if host is None or host.given_up_at is None or lease.released_at is not None:
            return None
        q, params = self._sql, {"host": lease.host_id}
        if conn.execute(q.host_lease, params).scalar() != lease.id:
            return None
        return list(conn.execute(q.host_pages, params).scalars())

    def _lease_row(self, conn: Connection, lease_id: int) -> Row[Any]:
        row = conn.execute(self._sql.lease_row, {"lease": lease_id}).one_or_none()
        if row is None:
            raise LeaseNotFoundError(f"lease {lease_id} does not exist: lease a new batch")
        return row

    def _report(
        self,
        conn: Connection,
        lease: Row[Any],
        results: Sequence[FetchResult],
        now: datetime,
        cash_split: CashSplit | None = None,
        found: list[tuple[str, int]] | None = None,
        lowered: Sequence[tuple[list[int], datetime]] = (),
        *,
        gives_back: bool = False,
        also_lock: Sequence[int] = (),
    ) -> ReportOutcome:
        """Record ``results`` in the caller's transaction; outlink ids this report looked up
        in the store go to ``found`` (to remember once the transaction commits); the hosts of
        pages it discovered are lowered to their due times (``lowered``) once its pages are
        locked. ``gives_back``: the caller then gives the lease back (a finish), so the pages
        the lease holds are locked with the others; ``also_lock``: pages the give-back
        writes besides (a host given up: all of its pages)."""
        q = self._sql
        late = lease.released_at is not None or lease.expires_at < now
        unique: dict[int, FetchResult] = {}
        for result in results:
            unique.setdefault(result.page_id, result)
        ids = sorted(unique)
        blocked = {pid for pid, r in unique.items() if r.status == UNFETCHABLE_STATUS}
        link_ids: dict[str, int] | None = None
        if cash_split is not None:
            links = (u for r in unique.values() if r.status in _READ for u in r.outlinks)
            link_ids = outlink_ids(conn, links, self._page_ids, found)
        # Every page this report writes (its own, the pages its cash goes to, and in a finish
        # the lease's pages its give-back returns), locked in id order before any page or
        # host is written: two reports whose pages link to each other's wait for one another
        # instead of deadlocking.
        targets = link_ids.values() if link_ids else ()
        # A directory URL and its index file among the pages read, with their stored alias:
        # locked with the rest, settled once the pages are written (store.duplicates).
        aliases = alias_pairs(conn, [pid for pid in ids if unique[pid].status in _READ])
        held = lease.id if gives_back else None
        lock_pages(
            conn,
            self.db.backend.pages,
            set(ids).union(targets, also_lock, aliases.page_ids),
            lease_id=held,
        )
        for new_hosts, new_due in lowered:
            lower_ready_to(conn, self.db.backend.host_ready, new_hosts, new_due, held=True)
        if not ids:
            return ReportOutcome(0, len(results), 0)
        pages = {row.id: row for row in conn.execute(q.pages_reported, {"ids": ids}).all()}
        strangers = [pid for pid in ids if pid not in pages or pages[pid].host_id != lease.host_id]
        if strangers:
            raise InvalidReportError(
                f"lease {lease.id} holds host {lease.host_id}; pages {strangers[:5]} are not "
                "pages of that host"
            )
        blocked_updates = [
            self._blocked_update(pages[pid], unique[pid], lease.id)
            for pid in sorted(blocked)
            if pages[pid].last_fetch_at is None or unique[pid].fetched_at > pages[pid].last_fetch_at
        ]
        if blocked_updates:
            conn.execute(_BLOCK, blocked_updates)
        if blocked:
            count_blocked(conn, sorted(blocked))  # for their releases' accounting
            conn.execute(q.unqueue, {"ids": sorted(blocked)})
        ids = [pid for pid in ids if pid not in blocked]
        already = set(conn.execute(q.recorded, {"lease": lease.id, "ids": ids}).scalars())
        fresh = [pid for pid in ids if pid not in already]
        planned = bool(fresh) and conn.execute(q.plan_published).first() is not None
        observations = []
        newer_updates: list[dict[str, object]] = []
        older_updates: list[dict[str, object]] = []
        newest: list[int] = []  # the pages whose state this report moved forward
        probes: list[dict[str, object]] = []  # probes' second crawls (store.probes)
        for pid in fresh:
            r, page = unique[pid], pages[pid]
            newer = page.last_fetch_at is None or r.fetched_at > page.last_fetch_at
            previous = (
                page.last_fetch_at
                if newer
                else conn.execute(q.previous_fetch, {"page": pid, "at": r.fetched_at}).scalar()
            )
            observations.append(
                {
                    "page_id": pid,
                    "lease_id": lease.id,
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
            values = self._page_update(page, r, lease.id, newer=newer, planned=planned)
            (newer_updates if newer else older_updates).append(values)
            if newer:
                newest.append(pid)
                pending = values["p_probe_delay"]
                if (page.probe_delay or 0) > 0 and isinstance(pending, float) and pending < 0:
                    # a probe's second crawl is extra work: charged as an urgent one, at
                    # its due time, or now for a report later than that (a release charges
                    # the requests of the period before it; one already made would not)
                    due = values["p_next_due_at"]
                    assert isinstance(due, datetime)
                    probes.append(
                        {"page_id": pid, "requested_at": max(due, now), "source": "probe"}
                    )
        if observations:
            q.insert_observation.execute(conn, observations)
        if newer_updates:
            q.update_newer.execute(conn, newer_updates)
        if probes:
            conn.execute(URGENT_REQUESTS.insert(), probes)
        if older_updates:
            q.update_older.execute(conn, older_updates)
        if fresh:
            conn.execute(q.unqueue, {"ids": fresh})
        revived: dict[int, datetime] = {}
        if aliases.pairs and newest:
            _, revived = settle_duplicates(conn, aliases, newest, due=None if planned else now)
        dues = [u["p_next_due_at"] for u in newer_updates + blocked_updates]
        due = min((d for d in [*dues, *revived.values()] if isinstance(d, datetime)), default=None)
        if due is not None:  # the host's next work may come earlier (once this lease ends)
            # (report and finish hold the lease's host from their start)
            lower_ready(conn, self.db.backend.host_ready, {int(lease.host_id): due}, held=True)
        if cash_split is not None:
            read = [(pid, unique[pid].outlinks) for pid in fresh if unique[pid].status in _READ]
            # the givers' cash as read above (rows locked on PostgreSQL, the write lock held
            # on SQLite): nothing changed it since
            move_cash(
                conn,
                read,
                cash_split,
                known=self._page_ids,
                found=found,
                cash={pid: pages[pid].cash for pid, _ in read},
                ids=link_ids,
            )
        return ReportOutcome(
            recorded=len(fresh),
            duplicates=len(results) - len(fresh) - len(blocked),
            late=len(fresh) if late else 0,
            blocked=len(blocked),
        )

    @staticmethod
    def _blocked_update(page: Row[Any], r: FetchResult, lease_id: int) -> dict[str, object]:
        """Bind values of a blocked page's update (:data:`_BLOCK`): unfetchable, due when the
        worker said (when the rules that blocked it expire)."""
        return {"p_id": page.id, "p_lease": lease_id, "p_next_due_at": r.next_due_at}

    def _page_update(
        self, page: Row[Any], r: FetchResult, lease_id: int, *, newer: bool, planned: bool
    ) -> dict[str, object]:
        """Bind values of the page's update; ``planned``: a plan has been published."""
        changed = bool(r.changed)
        values: dict[str, object] = {"p_id": page.id, "p_lease": lease_id, "p_inc": int(changed)}
        if newer:
            interval = (
                self.policy.revisit_after
                if page.refresh_interval is None
                else timedelta(days=page.refresh_interval)
            )
            scheduled = r.fetched_at + interval
            probe = page.probe_delay  # store.probes: > 0 marked, < 0 second crawl pending
            if r.next_due_at is not None:
                due: datetime | None = r.next_due_at
            elif probe is not None and probe > 0 and r.status == "ok":
                # a probe's first fetch: the second one the probe's delay later
                due, probe = r.fetched_at + timedelta(days=probe), -probe
            else:
                due = None if planned else scheduled
            if probe is not None and r.status in ("redirect", "gone"):
                probe = None  # nothing to learn of a rate here
            elif probe is not None and probe < 0 and page.probe_delay < 0 and r.status == "ok":
                probe = None  # the second crawl: the probe is done
            values.update(
                p_status=r.status,
                p_http_status=r.http_status,
                p_last_fetch_at=r.fetched_at,
                p_last_change_at=r.fetched_at if changed else page.last_change_at,
                p_etag=r.etag if r.etag is not None else page.etag,
                p_last_modified=r.last_modified or page.last_modified,
                p_signature=r.signature if r.signature is not None else page.signature,
                p_next_due_at=due,
                p_scheduled_at=scheduled,
                p_probe_delay=probe,
            )
        return values

    # -- renew / release ---------------------------------------------------------------------
    def add_pages(
        self,
        pages: Iterable[tuple[str, str]],
        *,
        blocked: Sequence[tuple[str, str, datetime]] = (),
        now: datetime | None = None,
    ) -> int:
        """Add discovered ``(normalized_url, origin)`` pages, and ``blocked`` ones as
        unfetchable (:func:`store.pages.add_unfetchable`); returns how many new candidates
        were added."""
        if blocked:
            add_unfetchable(self.db, blocked, now=now)
        return add_pages(self.db, pages, now=now, discovered=True).added

    def add_notifications(
        self,
        notifications: Sequence[tuple[str, str, datetime | None]],
        *,
        now: datetime | None = None,
    ) -> int:
        """Record change notifications ``(normalized_url, origin, changed_at)`` (a sitemap's
        ``lastmod``); returns how many were new."""
        items = [Notification(url, origin, at) for url, origin, at in notifications]
        return record_notifications(self.db, items, now=now).recorded

    def work_remaining(self, *, now: datetime | None = None) -> bool:
        """Whether any page is due now or held by a live lease (released pages included)."""
        when = now or utcnow()
        if work_remaining(self.db, now=when):
            return True
        with self.db.read() as conn:
            for probe in (self._sql.queue_due, self._sql.queue_held):
                if conn.execute(probe, {"now": when}).first() is not None:
                    return True
        return False

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
            until = when + timedelta(seconds=self.policy.lease_seconds)
            params = {"lease": lease_id, "host": lease.host_id, "until": until}
            q = self._sql
            # Its host held, then its pages in id order, as every writer of pages locks them
            # (holding pages while waiting for a host a new lease took would close a cycle
            # with that lease, which locks the pages next).
            hold_hosts(conn, self.db.backend.host_ready, [lease.host_id])
            lock_pages(conn, self.db.backend.pages, (), lease_id=lease_id)
            for stmt in (q.extend_lease, q.extend_host, q.extend_pages):
                conn.execute(stmt, params)
            return until

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
            # The host held first, as a report and a finish hold it (see _release).
            hold_hosts(conn, self.db.backend.host_ready, [lease.host_id])
            giving_up = self._giving_up(conn, lease, host)
            return self._release(conn, lease, host, when, give_up=giving_up)

        return self.db.run_write(work)

    def _release(
        self,
        conn: Connection,
        lease: Row[Any],
        host: HostUpdate | None,
        now: datetime,
        *,
        pages_locked: bool = False,
        give_up: Sequence[int] | None = None,
    ) -> int:
        """Give the lease's host back (the caller holds the host; ``pages_locked``: a finish,
        whose report locked the lease's pages already, and ``give_up`` with them). ``give_up``
        (:meth:`_giving_up`): the host is given up, these are its pages."""
        if lease.released_at is not None:
            return 0
        q = self._sql
        update_ = host or HostUpdate()
        params: dict[str, object] = {
            "host": lease.host_id,
            "lease": lease.id,
            "next_fetch_at": update_.next_fetch_at,
        }
        params.update({name: getattr(update_, name) for name in _HOST_FIELDS})
        # The host held by the caller, the lease's pages (a give-up: all the host's pages)
        # locked in id order (as every writer of pages locks them; a finish has locked them
        # already), then the host written, then the pages (a give-up writes its pages before
        # the host, already locked, so that the host's ready time reads them). Its ready time is
        # recomputed from its due times when no writer holds it, else set to the lower bound
        # its politeness gives (store.host_ready: a lease sets it right if nothing is due).
        if not pages_locked:
            lock_pages(conn, self.db.backend.pages, give_up or (), lease_id=lease.id)
        if give_up is not None:
            # Every page of the host leaves the due set (the pages, then the host's ready
            # time, computed below from what is left: nothing). Its queued pages count as
            # turned away by robots.txt in their releases' accounting (RFC 9309: an
            # unreachable robots.txt is a complete disallow).
            host_params = {"host": lease.host_id}
            queued = list(conn.execute(q.host_queued, host_params).scalars())
            if queued:
                count_blocked(conn, sorted(queued))
                conn.execute(q.unqueue_host, host_params)
            conn.execute(q.give_up_pages, host_params)
        else:
            params["given_up_at"] = None
        exact = bool(take_hosts(conn, self.db.backend.host_ready, [lease.host_id]))
        conn.execute(q.release_host if exact else q.release_host_bound, params)
        conn.execute(q.return_pages, {"lease": lease.id})
        conn.execute(q.close_lease, {"lease": lease.id, "at": now})
        # Returned unfetched: the lease's pages not reported (queued ones are still queued).
        reported = int(conn.execute(q.reported, {"lease": lease.id}).scalar_one())
        return max(int(lease.pages) - reported, 0)


#: Statuses of a page that was read: its OPIC cash moves (an error or a block moves none).
_READ = frozenset({"ok", "redirect", "gone"})

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
    scheduled_at=bindparam("p_scheduled_at", type_=UTCDateTime()),
    probe_delay=bindparam("p_probe_delay"),
)


#: A leased page robots.txt disallowed: unfetchable, due when its worker said; its lease
#: columns clear when the reporting lease still holds it. Fetch state and counters stay.
_BLOCK = (
    update(_pages)
    .where(_pages.c.id == bindparam("p_id"))
    .values(
        status=UNFETCHABLE_STATUS,
        next_due_at=bindparam("p_next_due_at", type_=UTCDateTime()),
        lease_id=case((_ours, None), else_=_pages.c.lease_id),
        leased_until=case((_ours, None), else_=_pages.c.leased_until),
    )
)


def lease_worker(db: Database, lease_id: int) -> str:
    """The worker that holds (or held) lease ``lease_id``; LeaseNotFoundError if none."""
    with db.read() as conn:
        worker = conn.execute(
            select(LEASES.c.worker).where(LEASES.c.id == lease_id)
        ).scalar_one_or_none()
    if worker is None:
        raise LeaseNotFoundError(f"lease {lease_id} does not exist")
    return str(worker)


def _new_after(conn: Connection, results: Sequence[FetchResult]) -> datetime | None:
    """Since when the URLs a report discovered are new (``pages.new_after``), or None.

    A URL the store lacks was linked by none of the pages fetched so far, so the reported
    pages that link to it did not when last fetched: it appeared on them since, and the
    earliest of their previous fetches bounds it. Only when every reported page had been
    fetched before (a report holding a first fetch may owe its URLs to it: pages of an
    existing site found on its first lap, not new ones) and the report read some page.
    """
    ids = sorted({r.page_id for r in results})
    if not ids:
        return None
    pages, fetched, earliest = conn.execute(
        select(
            func.count(), func.count(PAGES.c.last_fetch_at), func.min(PAGES.c.last_fetch_at)
        ).where(PAGES.c.id.in_(ids))
    ).one()
    if pages < len(ids) or fetched < pages:
        return None
    return earliest
