"""When a running crawl or worker API next checks for a plan period to release.

A period's work is released by the first check after the period begins
(:func:`service.pipeline.release_period`), so the checks decide how late a release is. A
fixed poll (it was every 5 s) is late by up to the poll, the whole period when periods are a
few seconds long. :class:`ReleaseTimer` instead waits until the current period's end, the next
period's start, so the release comes within milliseconds of it, and between boundaries checks
every 1 % of a period (``POLL_SHARE``) for what it cannot foresee: a plan newly published by
``nightly`` (its first period has begun already), a page schedule just finished, a plan that
ran out. Either way a period is released within about 1 % of its length after it begins
(plus the release's own work), whatever that length. Waits are bounded below by
``MIN_WAIT_SECONDS`` (no busy loop on periods of a fraction of a second) and above by the
caller's ``max_wait`` (a day-long period is still checked every few seconds).

Pure timing: the caller runs the release and sleeps; nothing here touches the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.pipeline import ReleaseSummary

__all__ = [
    "BOUNDARY_MARGIN_SECONDS",
    "MAX_WAIT_SECONDS",
    "MIN_WAIT_SECONDS",
    "POLL_SHARE",
    "ReleaseTimer",
]

#: Shortest wait between two checks, seconds.
MIN_WAIT_SECONDS = 0.01
#: Longest wait between two checks by default, seconds.
MAX_WAIT_SECONDS = 5.0
#: Share of a period between two checks inside it (a new plan is seen within it).
POLL_SHARE = 0.01
#: Seconds past a boundary to wake, so that the check reads the new period, not the old one
#: (timers may wake a little early).
BOUNDARY_MARGIN_SECONDS = 0.002


@dataclass
class ReleaseTimer:
    """Seconds to wait before the next release check, from the last check's outcome.

    ``period_seconds``: the length of a plan period, seconds, as last seen in a release
    summary (or configured; None: unknown, then checks come every ``max_wait`` seconds until
    a plan is seen).
    """

    max_wait: float = MAX_WAIT_SECONDS
    period_seconds: float | None = None

    def wait_after(self, summary: ReleaseSummary, now: datetime) -> float:
        """Seconds from ``now`` (after the check that returned ``summary``) to the next check:
        a poll of 1 % of a period (at most ``max_wait``), or, within two polls of the current
        period's end, that end plus a small margin; never less than ``MIN_WAIT_SECONDS``."""
        wait = self.max_wait
        if self.period_seconds is not None and self.period_seconds > 0:
            wait = min(wait, POLL_SHARE * self.period_seconds)
        if summary.starts_at is not None and summary.ends_at is not None:
            self.period_seconds = (summary.ends_at - summary.starts_at).total_seconds()
            wait = min(self.max_wait, POLL_SHARE * self.period_seconds)
            until_end = (summary.ends_at - now).total_seconds() + BOUNDARY_MARGIN_SECONDS
            # Within two polls of the boundary: wait for it, rather than poll once more and
            # have that check run across the boundary (it would read the ending period).
            if until_end < 2 * wait:
                wait = until_end
        return max(MIN_WAIT_SECONDS, wait)
