"""Errors the store raises.

Every error here is a user-facing condition with a message that names what is wrong and how to
fix it; the CLI prints ``str(error)`` as one line and exits non-zero::

    StoreError
    ├── InvalidDatabaseURLError   --db or CRAWLPLAN_DB_URL is malformed or unsupported
    ├── DatabaseUnreachableError  the server does not answer, or the file cannot be opened
    ├── SchemaMissingError        the database exists but `crawlplan init` was never run on it
    ├── SchemaOutdatedError       the schema is older (or newer) than this version of crawlplan
    ├── LeaseNotFoundError        a report or release names a lease the store never issued
    ├── InvalidReportError        a report names pages that the lease it cites did not hold
    └── InvalidPlanError          a plan to publish is inconsistent (periods, buckets, quotas)
"""

from __future__ import annotations

__all__ = [
    "DatabaseUnreachableError",
    "InvalidDatabaseURLError",
    "InvalidPlanError",
    "InvalidReportError",
    "LeaseNotFoundError",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "StoreError",
]


class StoreError(Exception):
    """Root of the store's errors; ``str(err)`` is a complete one-line message for the user."""


class InvalidDatabaseURLError(StoreError):
    """The database URL is malformed or names a backend crawlplan does not support."""


class DatabaseUnreachableError(StoreError):
    """The database could not be reached or opened."""


class SchemaMissingError(StoreError):
    """The database has no crawlplan schema yet."""


class SchemaOutdatedError(StoreError):
    """The schema revision differs from the one this version of crawlplan expects."""


class LeaseNotFoundError(StoreError):
    """A lease id that the store never issued."""


class InvalidPlanError(StoreError):
    """A plan handed to :func:`store.plans.publish_plan` is inconsistent."""


class InvalidReportError(StoreError):
    """A report names pages that were not part of the lease it cites."""


class NightlyRunBusyError(StoreError):
    """Another nightly run is in progress (its heartbeat is recent)."""
