"""Run a scenario: every variant x policy x seed through the simulator, and tabulate (no I/O).

:func:`run_scenario` returns a :class:`ScenarioRun` whose tables the reports write:

* ``metrics``: one row per variant, policy, seed and period, every metric of
  :data:`scenarios.simulator.METRICS`;
* ``summary``: one row per variant and policy, each metric averaged over the measured periods
  and the seeds, with ``rates`` ("true" for oracle runs, "estimated" or "-" for policies that
  use no rates); the oracle optima for the true rates of the initial pages at the budget, at
  most one crawl per page per period: ``freshness_bound`` (Cho & Garcia-Molina's
  freshness-optimal periodic schedule) and ``obsolescence_bound`` (Xyleme's sqrt schedule);
  and each policy's gaps to them, ``freshness_gap`` (negative: below the optimum) and
  ``obsolescence_gap`` (positive: above it). The optima are exact for a Poisson world without
  rhythms, births or deaths, and references otherwise;
* ``crawls_by_rate``: crawls per cycle per page by true change rate (log-spaced classes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from planner.schedules.optimal import refresh_schedule
from scenarios.policies.registry import make_policy
from scenarios.scenario_files import Scenario, Variant
from scenarios.simulator import METRICS, SimulationResult, SimulationSettings, simulate
from scenarios.world import World, build_world

__all__ = [
    "ScenarioRun",
    "crawls_by_rate",
    "freshness_bound",
    "obsolescence_bound",
    "run_scenario",
]

#: Change-rate classes (changes per period) of the crawls-per-cycle table.
RATE_CLASSES = np.logspace(-4, 1, 11)


@dataclass(frozen=True)
class ScenarioRun:
    """The tables of one scenario run (see the module docstring) and its wall time, s."""

    scenario: Scenario
    metrics: pd.DataFrame
    summary: pd.DataFrame
    crawls_by_rate: pd.DataFrame
    seconds: float


def freshness_bound(rate: np.ndarray, budget: int) -> float:
    """Expected freshness of the freshness-optimal periodic schedule for ``rate`` (changes per
    period, shape (n,)) and ``budget`` crawls per period, at most one crawl per period each."""
    lam = np.maximum(np.asarray(rate, dtype=float), 1e-12)
    if budget >= lam.size:
        f = np.ones(lam.size)
    else:
        schedule = refresh_schedule(lam, float(budget), objective="freshness", min_interval=1.0)
        f = schedule.refresh_rate
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.where(f > 0, -np.expm1(-lam / np.maximum(f, 1e-300)) * f / lam, 0.0)
    return float(fresh.mean())


def obsolescence_bound(rate: np.ndarray, budget: int) -> float:
    """Mean obsolescence per page (expected missed changes, time-averaged) of Xyleme's optimal
    periodic schedule for ``rate`` (changes per period, shape (n,)) and ``budget`` crawls per
    period, at most one crawl per page per period: ``lambda / (2 f)`` per page."""
    lam = np.maximum(np.asarray(rate, dtype=float), 1e-12)
    if budget >= lam.size:
        f = np.ones(lam.size)
    else:
        schedule = refresh_schedule(lam, float(budget), objective="obsolescence", min_interval=1.0)
        f = schedule.refresh_rate
    return float(np.mean(lam / (2.0 * np.maximum(f, 1e-300))))


def crawls_by_rate(result: SimulationResult, cycle: int) -> pd.DataFrame:
    """Mean crawls per cycle of the pages in each true-rate class (pages alive throughout)."""
    alive = result.lifetime > 0
    per_cycle = np.where(alive, result.crawls / np.maximum(result.lifetime, 1) * cycle, np.nan)
    cls = np.clip(np.searchsorted(RATE_CLASSES, result.rate) - 1, 0, RATE_CLASSES.size - 2)
    rows = []
    for k in range(RATE_CLASSES.size - 1):
        mask = alive & (cls == k)
        if mask.any():
            rows.append(
                {
                    "rate_low": float(RATE_CLASSES[k]),
                    "rate_high": float(RATE_CLASSES[k + 1]),
                    "pages": int(mask.sum()),
                    "crawls_per_cycle": float(np.nanmean(per_cycle[mask])),
                }
            )
    return pd.DataFrame(rows)


def _rates_kind(policy: dict[str, Any]) -> str:
    if policy["kind"] in ("uniform", "random", "nutch", "stormcrawler", "sampling"):
        return "-"
    return str(policy.get("rates", "estimated"))


def run_scenario(scenario: Scenario, progress: Callable[[str], None] | None = None) -> ScenarioRun:
    """Run every variant, policy and seed of ``scenario``; ``progress`` gets one line per run."""
    t0 = time.perf_counter()
    frames: list[pd.DataFrame] = []
    summaries: list[dict[str, Any]] = []
    crawl_tables: list[pd.DataFrame] = []
    for variant in scenario.variants:
        bounds: list[float] = []
        obs_bounds: list[float] = []
        for seed in scenario.seeds:
            world = build_world(variant.world, seed, scenario.warmup + variant.periods)
            initial = world.rate[world.born == 0]
            bounds.append(freshness_bound(initial, variant.budget))
            obs_bounds.append(obsolescence_bound(initial, variant.budget))
            for policy_spec in scenario.policies:
                result = _run_one(scenario, variant, policy_spec, world, seed)
                if progress is not None:
                    progress(
                        f"{variant.name or scenario.name} / {result.policy} / seed {seed}: "
                        f"freshness {result.summary()['freshness']:.4f} "
                        f"({result.seconds:.1f} s)"
                    )
                frame = result.metrics.copy()
                frame.insert(0, "seed", seed)
                frame.insert(0, "policy", result.policy)
                frame.insert(0, "variant", variant.name)
                frames.append(frame)
                entry: dict[str, Any] = {
                    "variant": variant.name,
                    "policy": result.policy,
                    "seed": seed,
                    "rates": _rates_kind(policy_spec),
                    **result.summary(),
                    "seconds": result.seconds,
                }
                summaries.append(entry)
                table = crawls_by_rate(result, scenario.cycle)
                table.insert(0, "seed", seed)
                table.insert(0, "policy", result.policy)
                table.insert(0, "variant", variant.name)
                crawl_tables.append(table)
        for s in summaries:
            if s["variant"] == variant.name:
                s["freshness_bound"] = float(np.mean(bounds))
                s["obsolescence_bound"] = float(np.mean(obs_bounds))
    metrics = pd.concat(frames, ignore_index=True)
    per_seed = pd.DataFrame(summaries)
    keys = ["variant", "policy", "rates"]
    summary = per_seed.groupby(keys, sort=False)[
        [*METRICS, "seconds", "freshness_bound", "obsolescence_bound"]
    ].mean()
    summary = summary.reset_index()
    summary["freshness_gap"] = summary["freshness"] - summary["freshness_bound"]
    summary["obsolescence_gap"] = summary["obsolescence"] - summary["obsolescence_bound"]
    crawl_table = pd.concat(crawl_tables, ignore_index=True)
    crawl_table = (
        crawl_table.groupby(["variant", "policy", "rate_low", "rate_high"], sort=False)[
            ["pages", "crawls_per_cycle"]
        ]
        .mean()
        .reset_index()
    )
    return ScenarioRun(scenario, metrics, summary, crawl_table, time.perf_counter() - t0)


def _run_one(
    scenario: Scenario, variant: Variant, policy_spec: dict[str, Any], world: World, seed: int
) -> SimulationResult:
    policy = make_policy(policy_spec, period_days=variant.world.period_days)
    settings = SimulationSettings(
        periods=variant.periods,
        budget=variant.budget,
        warmup=scenario.warmup,
        warm_start=scenario.warm_start,
        oracle=policy_spec.get("rates") == "true",
        seed=seed,
        importance=scenario.importance,
    )
    return simulate(world, policy, settings)
