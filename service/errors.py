"""The errors a user can cause, and the one place that knows them all.

Each package raises its own user-facing errors; the CLI treats every class in
:func:`user_error_types` as a mistake the user can fix and prints ``error: <message>`` on one
line with exit code 2, never a traceback::

    CrawlplanError (here)                 edge: configuration and input files
    ├── ConfigError                       a bad option, environment variable or crawlplan.toml
    └── InputFileError                    an input file that is missing or unreadable
    store.errors.StoreError               the database: URL, reachability, schema, leases, plans
    crawler.urls.InvalidURLError          a URL that cannot be crawled (ValueError)
    planner.model.instance.InstanceError  a plan instance with a missing or bad key
    planner.schedules.optimal.ScheduleError       refresh-schedule input that cannot be scheduled

The other packages' classes are imported by :func:`user_error_types`, not at module level:
every command imports this module, and importing ``store`` or ``planner`` here would make
``crawlplan --help`` pay for SQLAlchemy and numpy.
"""

from __future__ import annotations

import functools

__all__ = ["ConfigError", "CrawlplanError", "InputFileError", "user_error_types"]


class CrawlplanError(Exception):
    """Root of the service edge's errors; ``str(err)`` is a complete one-line message."""


class ConfigError(CrawlplanError):
    """A configuration value is malformed or out of range."""


class InputFileError(CrawlplanError):
    """An input file is missing, unreadable or not in a format crawlplan reads."""


@functools.cache
def user_error_types() -> tuple[type[Exception], ...]:
    """Every error class whose message the CLI prints as one ``error:`` line (exit code 2)."""
    from crawler.urls import InvalidURLError
    from planner.model.instance import InstanceError
    from planner.schedules.optimal import ScheduleError
    from store.errors import StoreError

    return (CrawlplanError, StoreError, InvalidURLError, InstanceError, ScheduleError)
