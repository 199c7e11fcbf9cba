"""Adaptive revisit intervals, as the open-source crawlers schedule: Nutch and StormCrawler.

* ``nutch``: Apache Nutch AdaptiveFetchSchedule with its defaults (interval x 0.8 after a
  change, x 1.4 after none, within [60 s, 365 days], initial 30 days, SYNC_DELTA at rate 0.3
  from the Last-Modified date the server sends).
* ``stormcrawler``: StormCrawler AdaptiveScheduler with its defaults (after a change the
  interval moves half way to the minimum, after none x 1.5, within [1 h, 14 days], initial
  1 day).

Intervals are in periods: minutes and days are converted with the world's ``period_days``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scenarios.policies.base import Policy, top_pages
from scenarios.simulator import CrawlLog, Observations

__all__ = ["AdaptiveIntervalPolicy", "AdaptiveRule", "nutch_policy", "stormcrawler_policy"]

IntArray = npt.NDArray[np.int64]

#: Minutes in a day, to convert the peers' minute settings to periods.
MINUTES_PER_DAY = 1440.0


@dataclass(frozen=True)
class AdaptiveRule:
    """An adaptive revisit rule in periods: bounds, initial interval and its two updates."""

    initial: float
    minimum: float
    maximum: float
    changed_factor: float  # Nutch: x (1 - dec); StormCrawler: toward the minimum by this share
    unchanged_factor: float
    toward_minimum: bool
    sync_delta: float | None  # Nutch SYNC_DELTA rate, None: off


class AdaptiveIntervalPolicy(Policy):
    """Per-page intervals adapted to what each fetch saw (the peers' rules), made to spend the
    budget: the pages most due (periods since the reference time over the interval) first."""

    def __init__(self, name: str, rule: AdaptiveRule) -> None:
        self.name = name
        self.rule = rule
        self.interval = np.zeros(0)
        self.reference = np.zeros(0)

    def start(self, log: CrawlLog) -> None:
        self.interval = np.full(log.n_pages, self.rule.initial)
        self.reference = np.where(np.isnan(log.last_fetch), -np.inf, log.last_fetch)

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        due = (period - self.reference) / self.interval
        priority = np.where(log.eligible, np.where(np.isfinite(due), due, np.inf), -np.inf)
        return top_pages(priority, budget, log)

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        ok = ~obs.gone
        page = obs.page[ok]
        changed = obs.changed[ok]
        again = ~obs.first[ok]
        rule = self.rule
        interval = self.interval[page]
        if rule.toward_minimum:
            shrunk = interval - (interval - rule.minimum) * rule.changed_factor
        else:
            shrunk = interval * rule.changed_factor
        new = np.where(changed, shrunk, interval * rule.unchanged_factor)
        new = np.where(again, new, interval)
        reference = obs.fetched_at[ok]
        if rule.sync_delta is not None:
            # Nutch SYNC_DELTA: the page changed delta ago (Last-Modified, else the fetch
            # time); an interval shorter than delta is raised to it, and the next fetch is
            # counted from sync_delta * delta before this one.
            modified = np.where(np.isnan(obs.last_modified[ok]), reference, obs.last_modified[ok])
            delta = np.where(changed, np.maximum(reference - modified, 0.0), 0.0)
            new = np.where(changed & (delta > new), delta, new)
            reference = reference - np.round(delta * rule.sync_delta, 12)
        self.interval[page] = np.clip(new, rule.minimum, rule.maximum)
        self.reference[page] = reference


def nutch_policy(period_days: float, name: str = "nutch") -> AdaptiveIntervalPolicy:
    """Apache Nutch AdaptiveFetchSchedule with its default settings, in periods."""
    day = 1.0 / period_days
    rule = AdaptiveRule(
        initial=30.0 * day,
        minimum=60.0 / 86_400.0 * day,
        maximum=365.0 * day,
        changed_factor=1.0 - 0.2,
        unchanged_factor=1.0 + 0.4,
        toward_minimum=False,
        sync_delta=0.3,
    )
    return AdaptiveIntervalPolicy(name, rule)


def stormcrawler_policy(period_days: float, name: str = "stormcrawler") -> AdaptiveIntervalPolicy:
    """StormCrawler AdaptiveScheduler with its default settings, in periods."""
    day = 1.0 / period_days
    rule = AdaptiveRule(
        initial=1.0 * day,
        minimum=60.0 / MINUTES_PER_DAY * day,
        maximum=14.0 * day,
        changed_factor=0.5,
        unchanged_factor=1.5,
        toward_minimum=True,
        sync_delta=None,
    )
    return AdaptiveIntervalPolicy(name, rule)
