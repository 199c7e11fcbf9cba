"""The cohort LP as a simulated policy: plan bucket crawl rates from the true change rates, then
crawl longest-unvisited-first within each bucket.

Every ``cycle`` periods (and when the crawler learns of new pages) :class:`CohortPolicy`

1. puts the known pages into ``buckets`` change-rate classes, log-spaced between the smallest
   and the largest true rate (an oracle run: the rates are the world's), and takes each
   bucket's pages b and mean rate;
2. solves the cohort LP of :mod:`planner.model.cohorts` in its cyclic steady state (freshness,
   ``cycle`` periods, ``cohorts`` cohorts, capacity = the budget, every crawl costing 1) with
   HiGHS, and reads each bucket's crawls per page per period over the cycle;
3. in each period, crawls in due order for those rates (:func:`overdue_priority`): inside a
   bucket every page has the same rate, so the longest unvisited goes first, as the model
   assumes; across buckets, the page most overdue for its bucket's interval. Buckets the plan
   starves are crawled only with crawls nothing else wants, oldest first.

This is the standalone model's measurement (issue 24 groundwork), not the deployed planner:
nightly still plans with :mod:`planner.model.webfountain`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.model.cohorts import build_cohort_model, solve_with_highs
from planner.model.instance import CrawlInstance
from scenarios.policies.base import Policy, PolicyError, overdue_priority, top_pages
from scenarios.simulator import CrawlLog

__all__ = ["CohortPolicy"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_MIN_RATE = 1e-6  # changes per period: a page that "never" changes, for the log-spaced edges


class CohortPolicy(Policy):
    """Plan with the cohort LP from the true rates; crawl longest-unvisited-first per bucket.

    Parameters
    ----------
    name : label.
    buckets : change-rate classes (B), >= 1.
    cohorts : K >= 2, the longest interval the LP describes (periods).
    cycle : T, periods of the steady-state cycle and between two plans.
    """

    def __init__(self, name: str, *, buckets: int = 32, cohorts: int = 40, cycle: int = 7) -> None:
        if buckets < 1:
            raise PolicyError("buckets: give at least 1")
        if cohorts < 2:
            raise PolicyError("cohorts: give at least 2 (the last cohort absorbs)")
        if cycle < 1:
            raise PolicyError("cycle: give at least 1 period")
        self.name = name
        self.buckets = buckets
        self.cohorts = cohorts
        self.cycle = cycle
        self._target: FloatArray | None = None
        self._planned_at = -(10**9)
        self._known = -1

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> CohortPolicy:
        """From a scenario file's entry (settings ``buckets``, ``cycle``; ``rates``
        must be ``"true"``: the scenario runner then makes the run an oracle run)."""
        if spec.get("rates", "true") != "true":
            raise PolicyError("rates: kind 'cohorts' plans from the true rates; set rates = 'true'")
        settings = {k: spec[k] for k in ("buckets", "cycle") if k in spec}
        for key, value in settings.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise PolicyError(f"{key}: give a whole number, got {value!r}")
        return cls(name, **settings)

    def targets(self, log: CrawlLog, budget: int) -> FloatArray:
        """Crawls per period of every page from the plan (0 where not eligible), shape (n,)."""
        if log.true_rate is None:
            raise PolicyError("kind 'cohorts' plans from the true rates: it needs an oracle run")
        pages = np.flatnonzero(log.eligible)
        target = np.zeros(log.n_pages)
        if pages.size == 0:
            return target
        rate = np.maximum(log.true_rate[pages], _MIN_RATE)
        edges = np.geomspace(rate.min(), rate.max() * (1 + 1e-12), self.buckets + 1)
        bucket = np.clip(np.searchsorted(edges, rate, side="right") - 1, 0, self.buckets - 1)
        used, bucket = np.unique(bucket, return_inverse=True)
        size = np.bincount(bucket).astype(float)
        mean_rate = np.bincount(bucket, weights=rate) / size
        instance = CrawlInstance.from_mapping(
            {
                "periods": self.cycle,
                "buckets": int(used.size),
                "b0": size,
                "y0": np.zeros(used.size),
                "n0": 0.0,
                "change_rate": mean_rate,
                "capacity": float(min(budget, pages.size)),
                "crawl_cost": 1.0,
                "new_crawl_cost": 1.0,
                "oldnwt": 0.0,
                "newnwt": 0.0,
                "nconst": 0.0,
            }
        )
        model = build_cohort_model(instance, cohorts=self.cohorts, cyclic=True)
        plan = solve_with_highs(model)
        if plan.status != "optimal":  # pragma: no cover - an LP this small solves
            raise PolicyError(f"the cohort LP ended {plan.status}")
        per_page = plan.crawls.sum(axis=1) / (self.cycle * size)
        target[pages] = per_page[bucket]
        return target

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        known = int(log.known.sum())
        if self._target is None or period - self._planned_at >= self.cycle or known != self._known:
            self._target = self.targets(log, budget)
            self._planned_at, self._known = period, known
        return top_pages(overdue_priority(log, float(period), self._target), budget)
