"""One line of a crawl's counters, for the CLI's progress display and the demo's.

Kept apart from :mod:`service.demo` so that ``crawlplan crawl`` and ``crawlplan worker``
print it without importing the demo (and with it the planner, the plots and the web server).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawler.worker import CrawlStats

__all__ = ["progress_line"]


def progress_line(stats: CrawlStats) -> str:
    """One line of crawl counters."""
    return (
        f"fetched {stats.fetched:,} ({stats.pages_per_second():.1f} pages/s), "
        f"changed {stats.changed:,}, not modified {stats.not_modified:,}, "
        f"errors {stats.errors:,}, blocked {stats.blocked:,}, discovered {stats.discovered:,} "
        f"(+{stats.unfetchable:,} unfetchable, {stats.out_of_scope:,} out of scope), "
        + (f"refused {stats.refused:,} (private addresses), " if stats.refused else "")
        + (
            f"given up {stats.given_up:,} hosts (robots.txt unreachable), "
            if stats.given_up
            else ""
        )
        + f"hosts active {stats.active_hosts}"
    )
