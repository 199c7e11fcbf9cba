"""Plans that hold steady (issue 28): consecutive cycles' plans on an unchanged world.

The measure is the share of a cycle's planned crawls that move between pages from one plan
to the next: ``sum |r_k - r_(k-1)| / sum r_k`` over the pages, r the crawls per page and cycle
the plan gives each page (its bucket's quota over the bucket's pages). With the true rates a
world whose pages neither appear nor vanish gets the same plan every cycle; with estimated
rates the plan moves as the estimates change: at most :data:`ESTIMATED_DRIFT` of the
crawls per cycle once the estimators have four cycles of evidence.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scenarios.policies import RateKnowledge
from scenarios.policies.webfountain import WebFountainPolicy
from scenarios.simulator import CrawlLog, SimulationSettings, simulate
from scenarios.world import WorldSpec, build_world

#: Most share of a cycle's crawls a plan may move from the previous one, estimated rates.
#: (0.2 until the release took due pages, which changes what is observed: the mixture world
#: then drifted 0.206, 0.163, 0.174, 0.123 over four cycles.)
ESTIMATED_DRIFT = 0.25


class _Recording(WebFountainPolicy):
    """The planner policy, keeping each plan's crawls per page and cycle."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plans: list[tuple[int, np.ndarray, int]] = []

    def _plan(self, log: CrawlLog, period: int, budget: int) -> None:
        super()._plan(log, period, budget)
        pages = np.bincount(self._bucket, minlength=self.buckets + 1)
        per_bucket = self._old.sum(axis=1) / np.maximum(pages, 1)
        per_page = np.where(self._bucket > 0, per_bucket[self._bucket], 0.0)
        self.plans.append((period, per_page, int(self._new.sum())))


def _drift(policy: _Recording, after: int) -> list[float]:
    out = []
    for (start, before, _), (_, now, _) in zip(policy.plans, policy.plans[1:], strict=False):
        if start >= after:
            out.append(float(np.abs(now - before).sum() / max(now.sum(), 1e-9)))
    return out


@pytest.mark.parametrize("rate_model", ["mixture", "webfountain"])
def test_consecutive_plans_hold_steady(rate_model: str) -> None:
    spec = WorldSpec(pages=2_000, hosts=20, rate_model=rate_model, section_sigma=1.0)
    budget = 2_000 // 7
    oracle = _Recording("true", RateKnowledge("true"), cycle=7)
    # Two drifts from the second plan on show that the plan repeats; each plan is an NLP
    # solve of about a second, so the oracle runs no longer than that (it ran four).
    settings = SimulationSettings(periods=21, budget=budget, warmup=7, oracle=True)
    simulate(build_world(spec, 1, 42), oracle, settings)
    oracle_drift = _drift(oracle, after=7)
    assert len(oracle_drift) >= 2
    assert oracle_drift == pytest.approx([0.0] * len(oracle_drift))

    estimated = _Recording("estimated", RateKnowledge("estimated", refit_every=7), cycle=7)
    settings = SimulationSettings(periods=56, budget=budget, warmup=7)
    simulate(build_world(spec, 1, 63), estimated, settings)
    drift = _drift(estimated, after=28)
    assert len(drift) >= 4
    assert max(drift) < ESTIMATED_DRIFT, drift
    # every plan keeps the crawl busy: the whole budget planned in each cycle
    for _, per_page, new in estimated.plans[1:]:
        assert per_page.sum() + new == pytest.approx(7 * budget, abs=7)
