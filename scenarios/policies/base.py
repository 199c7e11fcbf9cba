"""What every refresh policy shares: the :class:`Policy` interface, its error, due order.

A :class:`Policy` is asked each period for the pages to crawl (:meth:`Policy.select`, at most
``budget`` distinct known pages) and is told what they showed (:meth:`Policy.observe`). Every
policy spends its whole budget whenever it knows enough pages: a rule that would leave crawls
unused (a Nutch page not due yet) takes the most overdue pages instead, as a crawler with a
fixed fetch list size does; that makes policies comparable at equal budget
(:func:`overdue_priority`, :func:`top_pages`). Times are periods, rates changes per period.

Imports: :mod:`scenarios.simulator` (the crawl log a policy sees), numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scenarios.simulator import CrawlLog, Observations, within_host_cap

__all__ = ["Policy", "PolicyError", "overdue_priority", "top_pages"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class PolicyError(ValueError):
    """A policy setting that cannot work; ``str(err)`` names it and the fix."""


class Policy:
    """One refresh policy. Subclasses override :meth:`select` and, if they learn, the others."""

    name: str = "policy"

    def start(self, log: CrawlLog) -> None:
        """Called once before the first period with the crawler's initial knowledge."""

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        """At most ``budget`` distinct known page ids to crawl in ``period``."""
        raise NotImplementedError

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        """What this period's crawls observed (``log`` is already updated)."""


def top_pages(
    priority: FloatArray,
    count: int,
    log: CrawlLog | None = None,
    taken: IntArray | None = None,
) -> IntArray:
    """The ``count`` pages of highest priority (NaN or -inf: not eligible), highest first.

    Ties go to the lower page id, so selections are deterministic. Given the ``log``, no
    host gets more pages than its politeness cap (:attr:`CrawlLog.host_cap`), less the pages
    of ``taken`` (already chosen this period) on it: a page whose host is full is skipped
    for the next one, as a polite fetch list is built, so the budget is spent on other hosts.
    """
    ok = np.flatnonzero(~np.isnan(priority) & (priority > -np.inf))
    if log is not None and np.isfinite(log.host_cap).any():
        cap = log.host_cap
        if taken is not None and taken.size:
            cap = cap - np.bincount(log.host[taken], minlength=cap.size)
        ranked = ok[np.lexsort((ok, -priority[ok]))]
        fits = within_host_cap(ranked, log.host, cap)
        return np.asarray(ranked[fits][:count], dtype=np.int64)
    if ok.size <= count:
        chosen = ok
    else:
        part = np.argpartition(-priority[ok], count - 1)[:count]
        chosen = ok[part]
    order = np.lexsort((chosen, -priority[chosen]))
    return np.asarray(chosen[order], dtype=np.int64)


def overdue_priority(log: CrawlLog, now: float, refresh_rate: FloatArray) -> FloatArray:
    """Due order for target refresh rates (crawls per period): periods since the last fetch
    times the rate (1 = exactly due), never-fetched pages first; a page with rate 0 comes
    after every page with a rate, oldest first, so the budget is always spent."""
    elapsed = log.elapsed(now)
    finite = np.isfinite(elapsed)
    spread = np.where(finite, elapsed, 0.0)
    tie = spread / (1.0 + float(spread.max(initial=0.0)))  # in [0, 1): oldest first
    ratio = np.where(refresh_rate > 0, spread * refresh_rate, 0.0)
    base = np.where(refresh_rate > 0, 1.0 + ratio, tie)
    priority = np.where(finite, base, np.inf)
    return np.where(log.eligible, priority, -np.inf)
