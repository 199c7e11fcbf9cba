"""Refresh in due order for target rates computed from the known change rates.

* ``proportional``: refresh rate proportional to the change rate.
* ``xyleme``, ``freshness``, ``harmonic``: the page-level optimal refresh schedules of
  :func:`planner.schedules.optimal.refresh_schedule` (objectives obsolescence, freshness,
  harmonic).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from planner.schedules.optimal import refresh_schedule
from scenarios.policies.base import Policy, overdue_priority, top_pages
from scenarios.policies.knowledge import RateKnowledge, filled_rates
from scenarios.simulator import CrawlLog

__all__ = ["RatePolicy"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class RatePolicy(Policy):
    """Crawl in due order for target refresh rates computed from the known change rates.

    Parameters
    ----------
    name : label.
    objective : ``"proportional"`` or an objective of
        :func:`planner.schedules.optimal.refresh_schedule`
        (``"obsolescence"`` is Xyleme's sqrt schedule, ``"freshness"``, ``"harmonic"``,
        ``"binary"``).
    knowledge : RateKnowledge.
    max_interval : periods; a floor on every page's refresh rate (None: no floor).
    use_importance : weight pages by importance.
    """

    def __init__(
        self,
        name: str,
        objective: str,
        knowledge: RateKnowledge,
        *,
        max_interval: float | None = None,
        use_importance: bool = False,
    ) -> None:
        self.name = name
        self.objective = objective
        self.knowledge = knowledge
        self.max_interval = max_interval
        self.use_importance = use_importance
        self._target: FloatArray | None = None

    def targets(self, log: CrawlLog, period: int, budget: int) -> FloatArray:
        """Target crawls per period of every page (0 where not eligible), shape (n,)."""
        rate = filled_rates(self.knowledge.rate(log, period), log)
        pages = np.flatnonzero(log.eligible)
        target = np.zeros(log.n_pages)
        if pages.size == 0:
            return target
        lam = np.maximum(rate[pages], 1e-9)
        if self.objective == "proportional":
            f = lam * budget / lam.sum()
        else:
            w = log.importance[pages] if self.use_importance else None
            bound = self.max_interval
            if bound is not None and pages.size / bound > budget:
                bound = None  # the floor alone would need more than the budget
            schedule = refresh_schedule(
                lam, float(budget), objective=self.objective, importance=w, max_interval=bound
            )
            f = schedule.refresh_rate
        target[pages] = f
        return target

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        refit = self.knowledge.rates == "true" and self._target is None
        if refit or self.knowledge.due(period) or log.known.sum() != getattr(self, "_known", -1):
            # a stationary schedule: the mean capacity, not this period's (budget_profile)
            self._target = self.targets(log, period, log.mean_budget)
            self._known = int(log.known.sum())
        assert self._target is not None
        return top_pages(overdue_priority(log, float(period), self._target), budget, log)
