"""The errors a user can cause, and the one place that knows them all.

Each package raises its own user-facing errors; the CLI treats every class in
:data:`USER_ERRORS` as a mistake the user can fix and prints ``error: <message>`` on one line
with exit code 2, never a traceback::

    CrawlplanError (here)                 edge: configuration and input files
    ├── ConfigError                       a bad option, environment variable or crawlplan.toml
    └── InputFileError                    an input file that is missing or unreadable
    store.errors.StoreError               the database: URL, reachability, schema, leases, plans
    crawler.urls.InvalidURLError          a URL that cannot be crawled (ValueError)
    planner.model.instance.InstanceError  a plan instance with a missing or bad key
    planner.schedules.optimal.ScheduleError       refresh-schedule input that cannot be scheduled
"""

from __future__ import annotations

from crawler.urls import InvalidURLError
from planner.model.instance import InstanceError
from planner.schedules.optimal import ScheduleError
from store.errors import StoreError

__all__ = ["USER_ERRORS", "ConfigError", "CrawlplanError", "InputFileError"]


class CrawlplanError(Exception):
    """Root of the service edge's errors; ``str(err)`` is a complete one-line message."""


class ConfigError(CrawlplanError):
    """A configuration value is malformed or out of range."""


class InputFileError(CrawlplanError):
    """An input file is missing, unreadable or not in a format crawlplan reads."""


USER_ERRORS: tuple[type[Exception], ...] = (
    CrawlplanError,
    StoreError,
    InvalidURLError,
    InstanceError,
    ScheduleError,
)
