"""plan_cycle: one planner for the nightly run and the simulator, and its own guarantees."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import planner.cycle.plan_cycle as plan_cycle_module
from estimators.buckets import BucketAggregates, bucket_aggregates
from estimators.discovery import DiscoveryRates
from planner.cycle.plan_cycle import (
    CrawlMeasures,
    CycleSettings,
    WarmStart,
    plan_cycle,
)
from planner.solver.ipopt import SolveStatus
from planner.solver.plan_solver import PlanSolver
from planner.solver.steady_solver import SteadySolution, solve_steady
from scenarios.policies import RateKnowledge
from scenarios.policies.webfountain import WebFountainPolicy
from scenarios.simulator import SimulationSettings, simulate
from scenarios.world import WorldSpec, build_world
from service.nightly import NightlySettings, StoreReading, run_nightly
from service.pipeline import StoreAggregates
from store import Database
from store.measurements import CrawlMeasurements
from tests.conftest import T0


def _aggregates(seed: int = 3, pages: int = 600, buckets: int = 6) -> BucketAggregates:
    """Pages spread over ``buckets`` classes, rates per period, fetched 0-5 periods ago."""
    rng = np.random.default_rng(seed)
    bucket = rng.integers(1, buckets + 1, pages)
    rate = 0.02 * 2.0**bucket * rng.uniform(0.8, 1.2, pages)
    elapsed = rng.uniform(0.0, 5.0, pages)
    return bucket_aggregates(bucket, rate, elapsed, period=1.0, n_buckets=buckets)


def test_nightly_and_simulator_plan_the_same_quotas(db: Database) -> None:
    """The simulator's planner policy and a nightly dry run on a real store, given the same
    aggregates, budget and settings, plan the same whole-page quotas."""
    world = build_world(WorldSpec(pages=2_000, hosts=20, birth_rate=0.01), 1, 21)
    policy = WebFountainPolicy("wf", RateKnowledge("true"), strategy=3, buckets=8, cycle=7)
    budget = 2_000 // 7
    simulate(world, policy, SimulationSettings(periods=10, budget=budget, oracle=True))
    assert policy.last_inputs is not None and policy.last_plan is not None
    agg, measures = policy.last_inputs
    assert measures.new_pages > 0 and measures.discovery.nconst > 0  # births, new pages

    settings = NightlySettings(
        periods=policy.cycle,
        strategy=3,
        capacity=float(budget),
        crawl_cost="equal",  # the simulator's crawls all cost 1
        explore=policy.explore,
    )
    until = T0 + timedelta(days=30)
    measured = CrawlMeasurements(
        since=until - timedelta(days=settings.window_days),
        until=until,
        fetches=budget * 7,
        seconds_per_fetch=0.25,
        bucket_fetches=[0] * agg.pages.size,
        bucket_seconds=[math.nan] * agg.pages.size,
        bin_seconds=86_400.0,
        old_crawls=[],
        new_crawls=[],
        discovered=[],
    )
    reading = StoreReading(
        db,
        until,
        settings.window_days,
        settings.period_days,
        measured,
        measures.discovery,
        StoreAggregates(agg, measures.new_pages),
    )
    report = run_nightly(db, settings, now=until, dry_run=True, reading=reading)
    assert report.status == "dry-run" and report.cycle is not None
    assert report.solver["status"] in ("optimal", "acceptable")
    simulated = policy.last_plan.cycle
    assert simulated is not None
    assert report.cycle.quotas == simulated.quotas
    assert report.cycle.new_pages == simulated.new_pages
    # ... and they are what the policy crawls by, period by period.
    populated = np.flatnonzero(agg.pages > 0)
    for t in range(policy.cycle):
        assert {int(k): int(policy._old[k, t]) for k in populated} == report.cycle.quotas[t]
        assert int(policy._new[t]) == report.cycle.new_pages[t]
    assert sum(report.cycle.quotas[0].values()) + report.cycle.new_pages[0] == budget


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("strategy", [1, 2, 3])
def test_a_planned_cycle_spends_exactly_the_capacity(optimize: bool, strategy: int) -> None:
    agg = _aggregates()
    settings = CycleSettings(capacity=120.0, periods=5, strategy=strategy, optimize=optimize)
    outcome = plan_cycle(agg, settings, CrawlMeasures(new_pages=200))
    assert outcome.cycle is not None
    assert outcome.solver.status == ("optimal" if optimize else "uniform")
    assert len(outcome.cycle.quotas) == len(outcome.cycle.new_pages) == 5
    for quotas, new in zip(outcome.cycle.quotas, outcome.cycle.new_pages, strict=True):
        assert min(quotas.values()) >= 0 and new >= 0
        assert sum(quotas.values()) + new == 120
    assert sorted(outcome.cycle.quotas[0]) == [1, 2, 3, 4, 5, 6]


def test_a_cold_start_fetches_new_pages_up_to_capacity() -> None:
    empty = bucket_aggregates(np.zeros(0, int), np.zeros(0), np.zeros(0), period=1.0)
    discovery = DiscoveryRates(0.0, 0.5, 10.0, "pooled")
    outcome = plan_cycle(
        empty,
        CycleSettings(capacity=100.0, periods=4),
        CrawlMeasures(new_pages=150, discovery=discovery),
    )
    assert outcome.solver.status == "cold start" and outcome.inputs.instance is None
    assert outcome.cycle is not None
    # Every period plans the whole capacity: the seeds reveal pages as they are crawled (the
    # pool projected from the fitted rates, 150 -> 110 -> 70 -> 45, would idle the crawl).
    assert outcome.cycle.new_pages == [100, 100, 100, 100]
    assert outcome.cycle.quotas == [{}, {}, {}, {}]
    assert outcome.solver.as_dict() == {"status": "cold start", "note": "no page fetched yet"}


def _failing(when: str) -> type[PlanSolver]:
    """A PlanSolver whose solves report an iteration limit from a warm start (``"warm"``)
    or from every start (``"always"``)."""

    class Failing(PlanSolver):
        def solve(self, warm_start=None, *, starts=1, seed=0):  # type: ignore[no-untyped-def]
            solution = super().solve(warm_start, starts=starts, seed=seed)
            if when == "always" or warm_start is not None:
                return replace(solution, status=SolveStatus.ITERATION_LIMIT, message="limit")
            return solution

    return Failing


def _warm(settings: CycleSettings) -> WarmStart:
    first = plan_cycle(_aggregates(), settings, CrawlMeasures(new_pages=200))
    assert first.cycle is not None
    fractions = {
        (t + 1, k): f for t, period in enumerate(first.cycle.fractions) for k, f in period.items()
    }
    new = {t + 1: n for t, n in enumerate(first.cycle.new_pages)}
    return WarmStart(fractions, new, shift=1)


def test_a_warm_start_is_used_and_a_failed_one_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = CycleSettings(capacity=120.0, periods=5, model="webfountain", strategy=1)
    warm = _warm(settings)
    used = plan_cycle(_aggregates(seed=4), settings, CrawlMeasures(new_pages=180), warm=warm)
    assert used.solver.warm_start == "used" and used.solver.starts[0] == "warm"
    monkeypatch.setattr(plan_cycle_module, "PlanSolver", _failing("warm"))
    failed = plan_cycle(_aggregates(seed=4), settings, CrawlMeasures(new_pages=180), warm=warm)
    assert failed.solver.warm_start == "failed" and "warm" not in failed.solver.starts
    assert failed.solver.status == "optimal" and failed.cycle is not None
    cold = plan_cycle(_aggregates(seed=4), settings, CrawlMeasures(new_pages=180))
    assert cold.cycle is not None and failed.cycle.quotas == cold.cycle.quotas


def _failed_steady(instance: Any, setup: Any = None) -> SteadySolution:
    solved = solve_steady(instance, setup)
    return replace(solved, status=SolveStatus.ITERATION_LIMIT, message="limit")


@pytest.mark.parametrize("model", ["steady", "webfountain"])
def test_a_failed_solve_plans_nothing_or_the_uniform_crawl(
    monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    monkeypatch.setattr(plan_cycle_module, "PlanSolver", _failing("always"))
    monkeypatch.setattr(plan_cycle_module, "solve_steady", _failed_steady)
    settings = CycleSettings(capacity=120.0, periods=5, model=model)
    nothing = plan_cycle(_aggregates(), settings, CrawlMeasures(new_pages=200))
    assert nothing.cycle is None and not nothing.ok
    assert nothing.solver.status == "iteration_limit" and nothing.solver.message == "limit"
    uniform = plan_cycle(
        _aggregates(), replace(settings, fallback_uniform=True), CrawlMeasures(new_pages=200)
    )
    baseline = plan_cycle(
        _aggregates(), replace(settings, optimize=False), CrawlMeasures(new_pages=200)
    )
    assert uniform.solver.fallback and uniform.cycle == baseline.cycle


def test_measured_costs_weigh_on_the_capacity() -> None:
    """A class whose fetches take twice as long costs twice the crawl time: with measured
    costs the plan's crawl time (not its crawl count) equals capacity x mean cost."""
    agg = _aggregates()
    seconds = np.full(agg.pages.size, 1.0)
    seconds[6] = 2.0
    settings = CycleSettings(capacity=120.0, periods=3, optimize=False)
    outcome = plan_cycle(
        agg, settings, CrawlMeasures(new_pages=0, bucket_seconds=seconds, seconds_per_fetch=1.0)
    )
    assert outcome.cycle is not None
    for quotas in outcome.cycle.quotas:
        time = sum(q * (2.0 if k == 6 else 1.0) for k, q in quotas.items())
        assert 119.0 <= time <= 120.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("capacity", 0.0), ("periods", 0), ("strategy", 4), ("horizon", -1), ("explore", -0.5)],
)
def test_settings_refuse_values_that_cannot_plan(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"^{field}"):
        CycleSettings(**{"capacity": 10.0, "periods": 3, field: value})  # type: ignore[arg-type]


def test_importance_weights_a_class_as_its_pages_worth() -> None:
    """Two classes alike but for importance (4 against 1, centered): the important one gets
    more crawls per page, by the freshness optimum's own condition (its marginal value of a
    crawl equal to the other's at 1/4 the weight); no weights plan them alike, and unknown
    importance (NaN) counts as 1."""
    n = 400
    bucket = np.repeat([1, 2], n)
    rate = np.full(2 * n, 0.3)
    elapsed = np.tile(np.linspace(0.0, 6.0, n), 2)
    aggregates = bucket_aggregates(bucket, rate, elapsed, period=1.0, n_buckets=2)
    settings = CycleSettings(capacity=120.0, periods=4, explore=0, renewal=False)

    def crawls(importance: Any) -> np.ndarray:
        outcome = plan_cycle(aggregates, settings, CrawlMeasures(0, importance=importance))
        assert outcome.cycle is not None
        return np.array([sum(q[c] for q in outcome.cycle.quotas) for c in (1, 2)], dtype=float)

    alike = crawls(None)
    assert abs(alike[0] - alike[1]) <= 2
    weighted = crawls(np.array([np.nan, 1.6, 0.4]))
    assert weighted[0] > 1.5 * weighted[1]
    assert weighted.sum() == alike.sum()
    assert np.allclose(crawls(np.array([np.nan, np.nan, np.nan])), alike)
