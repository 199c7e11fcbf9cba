"""SQLAlchemy 2.0 models: hosts, pages, observations, leases, plans, plan periods, quotas.

Units: times are aware UTC datetimes; durations and delays are seconds; change rates are
changes per day (``rate``, ``rate_low``, ``rate_high``); ``bucket`` is 0..255 with 0 meaning
"no change-rate estimate yet" (WebFountain: one byte per page).

Who writes what: workers write observations and the fetch-state columns of pages and hosts
(through :mod:`store.leases`); the nightly estimators write the estimate columns of pages; the
planner writes plans. Observations are append-only: one row per fetch (or pushed change
notification), never updated.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from store.types import UTCDateTime

__all__ = [
    "DUPLICATE_STATUS",
    "HOSTS",
    "LEASES",
    "NIGHTLY_RUNS",
    "NIGHTLY_STATUSES",
    "OBSERVATIONS",
    "OBSERVATION_KINDS",
    "PAGES",
    "PAGE_SCHEDULES",
    "PAGE_STATUSES",
    "PERIOD_RELEASES",
    "PLANS",
    "PLAN_PERIODS",
    "QUOTAS",
    "RELEASED_PAGES",
    "UNFETCHABLE_STATUS",
    "UNPLANNED_STATUSES",
    "URGENT_REQUESTS",
    "URGENT_SOURCES",
    "Base",
    "Host",
    "Lease",
    "NightlyRun",
    "Observation",
    "Page",
    "PageSchedule",
    "PeriodRelease",
    "Plan",
    "PlanPeriod",
    "Quota",
    "ReleasedPage",
    "UrgentRequest",
    "planned_rate",
]

#: Integer primary keys: BIGINT on PostgreSQL, the rowid alias INTEGER on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")

#: Page statuses. ``new``: known, never fetched. ``ok``: last fetch succeeded (2xx or 304).
#: ``gone``: 404/410. ``redirect``: the URL redirects elsewhere (the target is its own page).
#: ``blocked``: unfetchable, robots.txt disallows it (found so when discovered, or when leased;
#: :data:`UNFETCHABLE_STATUS`), or its host was given up (robots.txt unreachable, RFC 9309's
#: "complete disallow", too many times in a row: ``hosts.given_up_at``). ``error``: the last
#: fetch failed (5xx, timeout, ...). ``duplicate``: a directory's index file
#: (``X/index.html``) that answered as its directory URL ``X/`` does, one document under two
#: URLs (:data:`DUPLICATE_STATUS`, :mod:`store.duplicates`, migration 0018).
PAGE_STATUSES = ("new", "ok", "gone", "redirect", "blocked", "error", "duplicate")
#: The status of an unfetchable page: never a candidate, never released, not in the pool of
#: new pages n, not a fetched page of any bucket; due again only to check robots.txt anew.
UNFETCHABLE_STATUS = "blocked"
#: The status of a page that is another URL of a page the crawl keeps (its canonical page: a
#: directory URL, for its index file): never a candidate, never released, not in n, not a
#: fetched page of any bucket, its fetches not evidence for the estimates; no due time.
DUPLICATE_STATUS = "duplicate"
#: The statuses of pages the plan never crawls: no candidates, in no bucket.
UNPLANNED_STATUSES = (UNFETCHABLE_STATUS, DUPLICATE_STATUS)

#: Observation kinds. ``fetch``: a worker fetched the page. ``notification``: the site pushed a
#: change notification (API call or sitemap lastmod) without us fetching.
OBSERVATION_KINDS = ("fetch", "notification")

#: The rows of the partial index ``ix_pages_new_cash``: never-fetched pages (a query must
#: repeat this condition word for word for SQLite to use the index).
NEW_PAGE_CONDITION = "status = 'new'"
#: The rows of the partial indexes ``ix_pages_host_due`` and ``ix_pages_lease``: pages with a
#: due time, pages held by a lease (queries compare the column, which implies the condition).
DUE_PAGE_CONDITION = "next_due_at IS NOT NULL"
LEASED_PAGE_CONDITION = "lease_id IS NOT NULL"
#: The rows of the partial index ``ix_hosts_ready``: hosts that may have work.
READY_HOST_CONDITION = "ready_at IS NOT NULL"
#: The rows of the partial index ``ix_pages_probe``: pages marked for a probe or waiting for
#: its second crawl (:mod:`store.probes`), a handful in a store of millions.
PROBE_PAGE_CONDITION = "probe_delay IS NOT NULL"


#: The columns due-URL selection reads and filters on, besides ``bucket`` and
#: ``last_fetch_at``: ``ix_pages_bucket_fetched`` holds them (a covering index; ``id`` last,
#: for PostgreSQL's index-only scans: SQLite's indexes end with the rowid anyway).
CANDIDATE_COLUMNS = (
    "status",
    "host_id",
    "importance",
    "fetches",
    "next_due_at",
    "leased_until",
    "id",
)
#: The columns a release copies into the release queue: ``ix_pages_bucket_fetched`` and
#: ``ix_pages_new_cash`` hold them too, so that a release reads its pages from the index
#: entries its candidate queries just read (neighbours), not from 100,000 scattered rows of
#: the table (see :mod:`store.releases`). On PostgreSQL, whose B-tree entries hold at most
#: 2,704 bytes, a page keeps no ETag whose URL, ETag and signature pass 2,400 bytes (trigger
#: ``pages_fit_index_row``, migration 0010).
RELEASE_COLUMNS = ("url", "last_fetch_at", "etag", "last_modified", "signature")


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    """Declarative base; ``type_annotation_map`` maps ``datetime`` to aware UTC timestamps."""

    type_annotation_map: dict[Any, Any] = {datetime: UTCDateTime()}  # noqa: RUF012


class Host(Base):
    """A host: the unit of politeness and of robots.txt (scheme, name and port: an origin).

    ``origin`` is ``scheme://host[:port]`` with default ports removed, as RFC 9309 scopes
    robots.txt. A host is leased to at most one worker at a time (``lease_id``/``leased_until``);
    ``next_fetch_at`` is the earliest time its next request is polite. ``ready_at`` is the
    earliest time a lease may find one of its pages to fetch (its earliest due page, not
    before ``next_fetch_at``, ``backoff_until`` nor the end of its live lease; NULL: nothing
    due), never later than that:
    leases pick hosts in ``(ready_at, id)`` order through the partial index ``ix_hosts_ready``
    (:mod:`store.host_ready` keeps it).

    ``robots_failures`` counts the host's consecutive robots.txt fetches that found it
    unreachable (network error, timeout, 5xx; a reachable robots.txt resets it to 0), as the
    workers hand it back with the host. ``given_up_at`` is when the crawl gave the host up
    (``robots_failures`` reached ``crawl.robots_give_up_after``; NULL: not given up): every
    page of it is unfetchable (status ``blocked``) with no due time, so it is never leased,
    released or planned, until a user adds one of its URLs again (:mod:`store.pages`).

    ``noise_rules`` names the elements of the host's pages whose text changes from request
    to request (``crawler.noise``: one ``tag#id`` or ``tag.class`` per line; '' none; NULL
    never checked), learned by a twin fetch at ``noise_checked_at``; signatures leave their
    text out.
    """

    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    origin: Mapped[str] = mapped_column(String(300), unique=True)
    first_seen: Mapped[datetime]
    robots_txt: Mapped[str | None] = mapped_column(Text)
    robots_status: Mapped[int | None] = mapped_column(SmallInteger)
    robots_fetched_at: Mapped[datetime | None]
    robots_expires_at: Mapped[datetime | None]
    crawl_delay: Mapped[float | None] = mapped_column(Float, doc="seconds, from robots.txt")
    next_fetch_at: Mapped[datetime] = mapped_column(doc="earliest polite time of next request")
    backoff_until: Mapped[datetime | None]
    consecutive_errors: Mapped[int] = mapped_column(Integer, default=0)
    lease_id: Mapped[int | None] = mapped_column(BigId)
    leased_until: Mapped[datetime | None]
    ready_at: Mapped[datetime | None] = mapped_column(doc="earliest time it may have work")
    robots_failures: Mapped[int] = mapped_column(
        Integer, default=0, server_default=text("0"), doc="consecutive unreachable robots.txt"
    )
    given_up_at: Mapped[datetime | None] = mapped_column(doc="when the crawl gave it up")
    noise_rules: Mapped[str | None] = mapped_column(
        Text, doc="noise rules, one per line ('' none; NULL unchecked)"
    )
    noise_checked_at: Mapped[datetime | None] = mapped_column(doc="when its twin fetch ran")

    __table_args__ = (
        Index(
            "ix_hosts_ready",
            "ready_at",
            "id",
            postgresql_where=text(READY_HOST_CONDITION),
            sqlite_where=text(READY_HOST_CONDITION),
        ),
    )


class Page(Base):
    """A page: one normalized URL, its fetch state, change-rate estimate, bucket and importance.

    ``next_due_at`` is when the lease queue may hand the page out outside the plan's releases
    (before the first plan, a worker's retry time, the urgent lane; NULL: none); the queue
    reads it through the ``(host_id, next_due_at)`` index (partial: due pages only). Once a
    plan is published a fetched page waits for the release of a plan period, which queues
    it in ``released_pages`` (:class:`ReleasedPage`).
    ``refresh_interval`` (days) is the page's optimal refresh interval from the page-level
    schedule (NULL: none yet);
    ``scheduled_at`` is when that schedule wants the page re-crawled (last fetch + interval);
    due-URL selection reads pages of a bucket longest unvisited first (``last_fetch_at``
    order) through the covering index ``(bucket, last_fetch_at, ...)``, as the planning
    model assumes, and never-fetched pages by OPIC cash through the
    partial index ``ix_pages_new_cash``. ``lease_id``/``leased_until`` mark a page handed to a
    worker through ``next_due_at`` and not yet reported.
    """

    __tablename__ = "pages"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    url: Mapped[str] = mapped_column(String(2048), unique=True)
    host_id: Mapped[int] = mapped_column(BigId, ForeignKey("hosts.id"))
    status: Mapped[str] = mapped_column(String(16), default="new")
    first_seen: Mapped[datetime]
    #: True when the page was found by the crawl (an outlink or a redirect target), False
    #: when a user or a sitemap added it: the discovery rates count only the former.
    discovered: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    #: For a page discovered on re-crawls of pages read before without its link: the earliest
    #: of their previous fetches. It was most likely created between then and ``first_seen``,
    #: so a first Last-Modified in that window is its creation, not a change (migration 0019).
    new_after: Mapped[datetime | None]
    next_due_at: Mapped[datetime | None]
    last_fetch_at: Mapped[datetime | None]
    last_change_at: Mapped[datetime | None]
    http_status: Mapped[int | None] = mapped_column(SmallInteger)
    etag: Mapped[str | None] = mapped_column(String(512))
    last_modified: Mapped[datetime | None]
    signature: Mapped[str | None] = mapped_column(String(64))
    fetches: Mapped[int] = mapped_column(Integer, default=0)
    changes: Mapped[int] = mapped_column(Integer, default=0)
    rate: Mapped[float | None] = mapped_column(Float, doc="estimated changes per day")
    rate_low: Mapped[float | None] = mapped_column(Float)
    rate_high: Mapped[float | None] = mapped_column(Float)
    estimator: Mapped[str | None] = mapped_column(String(32))
    estimated_at: Mapped[datetime | None]
    #: The rate the plan uses where it is not ``rate``: the page's Bayes-equivalent rate
    #: (:mod:`estimators.bayes_action`), which makes the planner crawl the page as its whole
    #: posterior is worth; its ``bucket`` is then this rate's (migration 0022). NULL: ``rate``.
    #: A page fetched once with no date believed has one without a ``rate``: the prior's.
    plan_rate: Mapped[float | None] = mapped_column(Float, doc="changes per day")
    #: A probe's delay (migration 0023, :mod:`store.probes`): the nightly run found this page's
    #: rate worth learning, and the report of its next fetch makes it due again this much
    #: later (then clears it), so that two fetches tell whether it changed in a short time.
    probe_delay: Mapped[float | None] = mapped_column(Float, doc="days")
    bucket: Mapped[int] = mapped_column(SmallInteger, default=0)
    importance: Mapped[float | None] = mapped_column(Float)
    refresh_interval: Mapped[float | None] = mapped_column(Float, doc="days, from the schedule")
    scheduled_at: Mapped[datetime | None] = mapped_column(doc="last fetch + refresh_interval")
    cash: Mapped[float] = mapped_column(Float, default=0.0, doc="OPIC cash")
    history: Mapped[float] = mapped_column(Float, default=0.0, doc="OPIC history")
    lease_id: Mapped[int | None] = mapped_column(BigId)
    leased_until: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("bucket BETWEEN 0 AND 255", name="ck_pages_bucket"),
        CheckConstraint(_in("status", PAGE_STATUSES), name="ck_pages_status"),
        Index(
            "ix_pages_probe",
            "id",
            postgresql_where=text(PROBE_PAGE_CONDITION),
            sqlite_where=text(PROBE_PAGE_CONDITION),
        ),
        Index(
            "ix_pages_host_due",
            "host_id",
            "next_due_at",
            postgresql_where=text(DUE_PAGE_CONDITION),
            sqlite_where=text(DUE_PAGE_CONDITION),
        ),
        # Covering: due-URL selection reads candidates, and a release the pages it queues,
        # from the index alone, without a lookup of each page's row in the (large) table.
        Index(
            "ix_pages_bucket_fetched",
            "bucket",
            "last_fetch_at",
            *CANDIDATE_COLUMNS,
            *(c for c in RELEASE_COLUMNS if c != "last_fetch_at"),
        ),
        Index(
            "ix_pages_new_cash",
            "cash",
            "id",
            *CANDIDATE_COLUMNS[:-1],
            *RELEASE_COLUMNS,
            postgresql_where=text(NEW_PAGE_CONDITION),
            sqlite_where=text(NEW_PAGE_CONDITION),
        ),
        # A host's pages in id order, due or not (giving a host up, store.leases).
        Index("ix_pages_host", "host_id", "id"),
        Index(
            "ix_pages_lease",
            "lease_id",
            postgresql_where=text(LEASED_PAGE_CONDITION),
            sqlite_where=text(LEASED_PAGE_CONDITION),
        ),
    )


class Observation(Base):
    """Append-only evidence of one fetch (or one pushed change notification) of a page.

    ``changed`` is True/False when the content signature was compared with the previous
    fetch's, NULL when unknown (first fetch, error). ``previous_fetch_at`` is the page's
    latest earlier fetch known when this row was recorded, so that change/no-change intervals
    usually come from one row; reports that arrive out of order can leave it short, so
    estimators that need exact intervals order a page's rows by ``fetched_at``. A fetch made under a
    lease is recorded once per ``(lease_id, page_id)``, however often it is reported.
    """

    __tablename__ = "observations"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    page_id: Mapped[int] = mapped_column(BigId, ForeignKey("pages.id"))
    lease_id: Mapped[int | None] = mapped_column(BigId)
    worker: Mapped[str | None] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16), default="fetch")
    fetched_at: Mapped[datetime]
    previous_fetch_at: Mapped[datetime | None]
    recorded_at: Mapped[datetime]
    http_status: Mapped[int | None] = mapped_column(SmallInteger)
    changed: Mapped[bool | None] = mapped_column(Boolean)
    last_modified: Mapped[datetime | None]
    etag: Mapped[str | None] = mapped_column(String(512))
    signature: Mapped[str | None] = mapped_column(String(64))
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    duration: Mapped[float | None] = mapped_column(Float, doc="seconds")
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("lease_id", "page_id", name="uq_observations_lease_page"),
        CheckConstraint(_in("kind", OBSERVATION_KINDS), name="ck_observations_kind"),
        Index("ix_observations_page_time", "page_id", "fetched_at"),
        Index("ix_observations_fetched_at", "fetched_at"),
        # One notification per (page, time) (store.notifications).
        Index(
            "uq_observations_notification",
            "page_id",
            "fetched_at",
            unique=True,
            postgresql_where=text("kind = 'notification'"),
            sqlite_where=text("kind = 'notification'"),
        ),
    )


class Lease(Base):
    """One host handed to one worker until ``expires_at`` (politeness lives with the lease)."""

    __tablename__ = "leases"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    worker: Mapped[str] = mapped_column(String(128))
    host_id: Mapped[int] = mapped_column(BigId, ForeignKey("hosts.id"))
    plan_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    released_at: Mapped[datetime | None]
    pages: Mapped[int] = mapped_column(Integer)

    __table_args__ = (Index("ix_leases_host", "host_id", "created_at"),)


class Plan(Base):
    """A plan version. Immutable once published (``published_at`` set): publish a new one.

    ``inputs`` holds what the planner was given (bucket aggregates, capacity, weights) and
    ``solver`` the solver's statistics, so that an audit or a what-if run can replay it.
    """

    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime]
    published_at: Mapped[datetime | None]
    starts_at: Mapped[datetime]
    period_days: Mapped[float] = mapped_column(Float)
    periods: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(64))
    objective: Mapped[float | None] = mapped_column(Float)
    solver_status: Mapped[str | None] = mapped_column(String(64))
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    solver: Mapped[dict[str, Any]] = mapped_column(JSON)
    note: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint("periods >= 1", name="ck_plans_periods"),
        CheckConstraint("period_days > 0", name="ck_plans_period_days"),
    )


class PlanPeriod(Base):
    """Period t of a plan: its time window, crawl capacity and quota of new pages (z_t)."""

    __tablename__ = "plan_periods"

    plan_id: Mapped[int] = mapped_column(Integer, ForeignKey("plans.id"), primary_key=True)
    period: Mapped[int] = mapped_column(Integer, primary_key=True)
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    capacity: Mapped[float] = mapped_column(Float, doc="crawls this period")
    new_pages: Mapped[int] = mapped_column(Integer, doc="quota of never-fetched pages")
    new_marginal: Mapped[float | None] = mapped_column(
        Float, nullable=True, doc="the plan's value of one more new page this period"
    )

    __table_args__ = (CheckConstraint("new_pages >= 0", name="ck_plan_periods_new"),)


class Quota(Base):
    """How many pages of class i to re-crawl in period t of a plan (x_it), and x_it/b_i,t-1.

    ``bucket``: the change-rate class 0..255, or a politeness-bound host's class ``c + 256
    (g + 1)`` (:func:`planner.cycle.plan_cycle.host_class`; g indexes the plan's solver
    record's ``bound_hosts``)."""

    __tablename__ = "quotas"

    plan_id: Mapped[int] = mapped_column(Integer, ForeignKey("plans.id"), primary_key=True)
    period: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    pages: Mapped[int] = mapped_column(Integer)
    fraction: Mapped[float] = mapped_column(Float)
    marginal: Mapped[float | None] = mapped_column(
        Float, nullable=True, doc="the plan's value of one more crawl of this bucket this period"
    )

    __table_args__ = (
        CheckConstraint("bucket >= 0", name="ck_quotas_bucket"),
        CheckConstraint("pages >= 0", name="ck_quotas_pages"),
    )


class PeriodRelease(Base):
    """A plan period whose work was released: chosen pages queued in ``released_pages``.

    One row per ``(plan_id, period)``, inserted in the same transaction as the queued pages:
    the primary key makes a release happen once, even when two processes try at the same
    time. ``pages`` is the number of pages the release queued, ``new_pages`` how many of them
    were never fetched (the rest are re-crawls); ``carried_over`` the pages of earlier
    releases still queued when it ran, ``carried_backed_off`` those of them on hosts backed
    off then (429, 503, unreachable robots.txt). The last three are NULL in releases made
    before migration 0015. ``blocked`` counts its pages robots.txt turned away when a worker
    leased them (each report adds its own; NULL before migration 0016).
    """

    __tablename__ = "period_releases"

    plan_id: Mapped[int] = mapped_column(Integer, ForeignKey("plans.id"), primary_key=True)
    period: Mapped[int] = mapped_column(Integer, primary_key=True)
    released_at: Mapped[datetime]
    pages: Mapped[int] = mapped_column(Integer)
    new_pages: Mapped[int | None] = mapped_column(Integer)
    carried_over: Mapped[int | None] = mapped_column(Integer)
    carried_backed_off: Mapped[int | None] = mapped_column(Integer)
    blocked: Mapped[int | None] = mapped_column(Integer)


class ReleasedPage(Base):
    """A page released for a plan period and not fetched since: the release queue.

    A period release appends its chosen pages here (one bulk insert into a small table)
    instead of writing ``next_due_at`` of as many scattered rows of ``pages``; the lease queue
    hands them out by host in ``due_at`` order (its primary key) without
    marking them (the host's lease is the mark: no other lease takes the host while it is
    live); a report of the page deletes its row, and a page not reported is still queued when
    its host is given back or the lease expires. A row stays until the page is fetched,
    whatever later releases do: an earlier period's unleased pages are carried over, and come
    first in their host's next lease (their due time is older).

    ``url``, ``status`` and the validators (``last_fetch_at``, ``etag``, ``last_modified``,
    ``signature``) are the page's as the release read them, so that a lease reads this table
    only; the page has not been fetched since (a report deletes the row). ``page_id`` is the
    page's id, once in the queue (no foreign key: a release inserts 100,000 rows at once, read
    from ``pages`` in the same statement). The primary key ``(host_id, due_at, page_id)`` is
    the order a lease reads a host's pages in; on SQLite the table is stored in that order
    (``WITHOUT ROWID``), so that a release appends (it inserts in host then due order) and a
    lease reads a host's pages from neighbouring table pages.
    """

    __tablename__ = "released_pages"

    host_id: Mapped[int] = mapped_column(BigId)
    due_at: Mapped[datetime] = mapped_column(doc="when the lease queue may hand the page out")
    page_id: Mapped[int] = mapped_column(BigId, unique=True)
    plan_id: Mapped[int] = mapped_column(Integer)
    period: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(String(2048))
    status: Mapped[str] = mapped_column(String(16))
    last_fetch_at: Mapped[datetime | None]
    etag: Mapped[str | None] = mapped_column(String(512))
    last_modified: Mapped[datetime | None]
    signature: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        PrimaryKeyConstraint("host_id", "due_at", "page_id", name="pk_released_pages"),
        {"sqlite_with_rowid": False},
    )


class PageSchedule(Base):
    """A plan whose page schedule is written in full (every page's interval and due time).

    Periods of a plan are released only once this row exists (see
    :mod:`store.due_times`); ``pages`` counts the pages given an interval.
    """

    __tablename__ = "page_schedules"

    plan_id: Mapped[int] = mapped_column(Integer, ForeignKey("plans.id"), primary_key=True)
    finished_at: Mapped[datetime]
    objective: Mapped[str] = mapped_column(String(32))
    pages: Mapped[int] = mapped_column(Integer)


#: Nightly run outcomes. ``running``: in progress (or killed: a later run marks it
#: ``abandoned``). ``published``: a new plan version was published. ``unchanged``: this cycle's
#: plan was already published, nothing done. ``resumed``: finished an interrupted run's page
#: schedule. ``failed``: the solver found no plan; the previous plan stays current.
NIGHTLY_STATUSES = ("running", "published", "unchanged", "resumed", "failed", "abandoned")


class NightlyRun(Base):
    """One ``crawlplan nightly`` run: when, for which cycle, what it published, stage timings.

    ``heartbeat_at`` moves at every stage, so a run whose heartbeat is old was killed;
    ``stages`` maps stage name to seconds; ``message`` says why a run failed.
    """

    __tablename__ = "nightly_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    cycle_start: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(16))
    plan_id: Mapped[int | None] = mapped_column(Integer)
    stages: Mapped[dict[str, Any]] = mapped_column(JSON)
    message: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(_in("status", NIGHTLY_STATUSES), name="ck_nightly_runs_status"),
    )


#: Where an urgent crawl request came from: ``cli`` (crawlplan seed --now), ``api`` (the
#: worker API), ``notification`` (a site said the page changed).
URGENT_SOURCES = ("cli", "api", "notification", "probe")


class UrgentRequest(Base):
    """A page put ahead of the plan (WebFountain's immediate-crawl queue).

    The page's ``next_due_at`` is set to :data:`store.urgent.URGENT_DUE`, before any planned
    due time, so that its host's next lease takes it first (politeness still applies). The
    requests are charged to the plan: those made during a period reduce the next period's
    release by as many crawls.
    """

    __tablename__ = "urgent_requests"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    page_id: Mapped[int] = mapped_column(BigId, ForeignKey("pages.id"))
    requested_at: Mapped[datetime]
    source: Mapped[str] = mapped_column(String(16))

    __table_args__ = (
        CheckConstraint(_in("source", URGENT_SOURCES), name="ck_urgent_requests_source"),
        Index("ix_urgent_requests_time", "requested_at"),
    )


#: The tables as Core ``Table`` objects, for bulk statements (typed for mypy).
HOSTS = cast(Table, Host.__table__)
PAGES = cast(Table, Page.__table__)
OBSERVATIONS = cast(Table, Observation.__table__)
LEASES = cast(Table, Lease.__table__)
PLANS = cast(Table, Plan.__table__)
PLAN_PERIODS = cast(Table, PlanPeriod.__table__)
QUOTAS = cast(Table, Quota.__table__)
PERIOD_RELEASES = cast(Table, PeriodRelease.__table__)
RELEASED_PAGES = cast(Table, ReleasedPage.__table__)
PAGE_SCHEDULES = cast(Table, PageSchedule.__table__)
NIGHTLY_RUNS = cast(Table, NightlyRun.__table__)
URGENT_REQUESTS = cast(Table, UrgentRequest.__table__)


def planned_rate() -> ColumnElement[float | None]:
    """The rate the plan uses of a page, changes per day: ``plan_rate`` where the nightly run
    wrote one, else the estimate ``rate`` (None for both: a page fetched once, with no
    estimate and no plan rate). Every estimate rewrites both columns of the pages it reads,
    so a plan rate never outlives the evidence it was read from; a page fetched once with
    no date believed has a plan rate without an estimate: the population's."""
    p = PAGES
    return func.coalesce(p.c.plan_rate, p.c.rate)
