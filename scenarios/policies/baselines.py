"""The baselines that know nothing of change rates: round robin and random refresh.

* ``uniform``: round robin, the page fetched longest ago first.
* ``random``: ``budget`` pages drawn at random each period (Poisson-like refresh: the same
  bandwidth as uniform in the worst execution order, REFERENCE.md sec. 3).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scenarios.policies.base import Policy, overdue_priority, top_pages
from scenarios.simulator import CrawlLog

__all__ = ["RandomPolicy", "UniformPolicy"]

IntArray = npt.NDArray[np.int64]


class UniformPolicy(Policy):
    """Round robin: the page fetched longest ago first (never-fetched pages before all)."""

    def __init__(self, name: str = "uniform") -> None:
        self.name = name

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        rate = np.ones(log.n_pages)
        return top_pages(overdue_priority(log, float(period), rate), budget, log)


class RandomPolicy(Policy):
    """``budget`` known pages drawn uniformly at random every period (seeded)."""

    def __init__(self, name: str = "random", seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        pages = np.flatnonzero(log.eligible)
        if pages.size <= budget:
            return pages.astype(np.int64)
        return np.sort(self.rng.choice(pages, budget, replace=False)).astype(np.int64)
