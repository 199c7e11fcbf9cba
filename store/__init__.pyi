"""Type stub of the exports; lazy_loader reads it to load each name's module on first use."""

from .database import Database as Database
from .errors import (
    DatabaseUnreachableError as DatabaseUnreachableError,
)
from .errors import (
    InvalidDatabaseURLError as InvalidDatabaseURLError,
)
from .errors import (
    InvalidPlanError as InvalidPlanError,
)
from .errors import (
    InvalidReportError as InvalidReportError,
)
from .errors import (
    LeaseNotFoundError as LeaseNotFoundError,
)
from .errors import (
    SchemaMissingError as SchemaMissingError,
)
from .errors import (
    SchemaOutdatedError as SchemaOutdatedError,
)
from .errors import (
    StoreError as StoreError,
)
from .host_ready import recompute_ready as recompute_ready
from .leases import (
    FetchResult as FetchResult,
)
from .leases import (
    HostUpdate as HostUpdate,
)
from .leases import (
    Lease as Lease,
)
from .leases import (
    LeasedPage as LeasedPage,
)
from .leases import (
    LeasePolicy as LeasePolicy,
)
from .leases import (
    LeaseQueue as LeaseQueue,
)
from .leases import (
    ReportOutcome as ReportOutcome,
)
from .measurements import CrawlMeasurements as CrawlMeasurements
from .measurements import measure_crawl as measure_crawl
from .models import (
    PAGE_STATUSES as PAGE_STATUSES,
)
from .models import (
    Host as Host,
)
from .models import (
    Observation as Observation,
)
from .models import (
    Page as Page,
)
from .models import (
    Plan as Plan,
)
from .open import open_database as open_database
from .pages import SeedOutcome as SeedOutcome
from .pages import add_pages as add_pages
from .pages import add_unfetchable as add_unfetchable
from .plans import (
    PlanDetail as PlanDetail,
)
from .plans import (
    PlanDraft as PlanDraft,
)
from .plans import (
    PlanPeriodDraft as PlanPeriodDraft,
)
from .plans import (
    PlanSummary as PlanSummary,
)
from .plans import (
    latest_plan as latest_plan,
)
from .plans import (
    plan_detail as plan_detail,
)
from .plans import (
    plan_quotas as plan_quotas,
)
from .plans import (
    publish_plan as publish_plan,
)
from .schema import check_schema as check_schema
from .schema import upgrade_schema as upgrade_schema
from .status import (
    StoreStatus as StoreStatus,
)
from .status import (
    read_status as read_status,
)
from .status import (
    work_remaining as work_remaining,
)
from .urgent import UrgentOutcome as UrgentOutcome
from .urgent import request_urgent as request_urgent
