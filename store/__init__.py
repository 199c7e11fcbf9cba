"""Persistence for crawlplan: models, migrations, sessions, the lease queue, plan versions.

The store keeps pages, hosts, observations (append-only evidence of every fetch), plans with
their per-period quotas, and leases. The same code runs on an embedded SQLite file (the
default, WAL mode) and on PostgreSQL (``postgresql://...``), where leasing uses
``FOR UPDATE SKIP LOCKED`` so that many workers lease concurrently.

Imports: the standard library, ``sqlalchemy`` and its drivers, ``alembic``. Nothing from
``planner``, ``estimators``, ``crawler`` or ``scenarios``: the store holds no planning or
crawling logic, it persists what those packages compute and hands it back.
"""

from __future__ import annotations

from store.database import Database, open_database
from store.errors import (
    DatabaseUnreachableError,
    InvalidDatabaseURLError,
    InvalidPlanError,
    InvalidReportError,
    LeaseNotFoundError,
    SchemaMissingError,
    SchemaOutdatedError,
    StoreError,
)
from store.host_ready import recompute_ready
from store.leases import (
    FetchResult,
    HostUpdate,
    Lease,
    LeasedPage,
    LeasePolicy,
    LeaseQueue,
    ReportOutcome,
)
from store.measurements import CrawlMeasurements, measure_crawl
from store.models import PAGE_STATUSES, Host, Observation, Page, Plan
from store.models import Lease as LeaseRow
from store.pages import SeedOutcome, add_pages
from store.plans import (
    PlanDetail,
    PlanDraft,
    PlanPeriodDraft,
    PlanSummary,
    latest_plan,
    plan_detail,
    plan_quotas,
    publish_plan,
)
from store.schema import check_schema, upgrade_schema
from store.status import StoreStatus, read_status, work_remaining
from store.urgent import UrgentOutcome, request_urgent

__all__ = [
    "PAGE_STATUSES",
    "CrawlMeasurements",
    "Database",
    "DatabaseUnreachableError",
    "FetchResult",
    "Host",
    "HostUpdate",
    "InvalidDatabaseURLError",
    "InvalidPlanError",
    "InvalidReportError",
    "Lease",
    "LeaseNotFoundError",
    "LeasePolicy",
    "LeaseQueue",
    "LeaseRow",
    "LeasedPage",
    "Observation",
    "Page",
    "Plan",
    "PlanDetail",
    "PlanDraft",
    "PlanPeriodDraft",
    "PlanSummary",
    "ReportOutcome",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SeedOutcome",
    "StoreError",
    "StoreStatus",
    "UrgentOutcome",
    "add_pages",
    "check_schema",
    "latest_plan",
    "measure_crawl",
    "open_database",
    "plan_detail",
    "plan_quotas",
    "publish_plan",
    "read_status",
    "recompute_ready",
    "request_urgent",
    "upgrade_schema",
    "work_remaining",
]
