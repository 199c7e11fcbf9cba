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
  rhythms, births or deaths, and references otherwise; and each policy's **share of the
  optimum's gain over uniform**, ``(policy - uniform) / (optimum - uniform)`` per variant
  (:func:`gain_shares`): ``freshness_share`` against the simulated freshness-optimal schedule
  with true rates, ``obsolescence_share`` against the simulated Xyleme sqrt schedule with true
  rates (1: the optimum's gain, 0: no better than uniform, below 0: worse than uniform);
* ``crawls_by_rate``: crawls per cycle per page by true change rate (log-spaced classes);
* ``accuracy``: for each policy that estimates rates from its own crawls, how well the
  crawl's evidence at the end of the run tells each known page's rate, by the page's number
  of fetches, pooled over the seeds (:mod:`scenarios.estimate_accuracy`).

**Reference runs.** The shares need a uniform run and the optimum's run in every variant:
:func:`reference_policies` adds to the scenario's policies those it does not list
(``uniform``; ``freshness`` with ``rates = "true"``; ``xyleme`` with ``rates = "true"`` when the
key table shows obsolescence), and the run's ``notes`` say which were added.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.schedules.optimal import refresh_schedule
from scenarios.estimate_accuracy import accuracy_table, page_errors
from scenarios.policies.knowledge import ORACLE_RATES
from scenarios.policies.registry import make_policy
from scenarios.policies.webfountain import DEFAULT_RATES
from scenarios.scenario_files import Scenario, Variant
from scenarios.simulator import METRICS, SimulationResult, SimulationSettings, simulate
from scenarios.world import World, build_world

__all__ = [
    "REFERENCES",
    "ScenarioRun",
    "crawls_by_rate",
    "freshness_bound",
    "gain_shares",
    "obsolescence_bound",
    "reference_policies",
    "run_scenario",
]

#: Change-rate classes (changes per period) of the crawls-per-cycle table.
RATE_CLASSES = np.logspace(-4, 1, 11)


#: The reference runs: role -> (the policy entry a scenario gets when it lists none, the
#: metric whose share of the gain it anchors). ``optimum_*`` are the optima of that metric.
REFERENCES: dict[str, dict[str, Any]] = {
    "uniform": {"kind": "uniform", "name": "uniform"},
    "optimum": {"kind": "freshness", "rates": "true", "name": "freshness-optimal (true)"},
    "optimum_obsolescence": {"kind": "xyleme", "rates": "true", "name": "Xyleme sqrt (true)"},
}
#: metric -> the role of the run that is its optimum.
_OPTIMUM_OF = {"freshness": "optimum", "obsolescence": "optimum_obsolescence"}


@dataclass(frozen=True)
class ScenarioRun:
    """The tables of one scenario run (see the module docstring) and its wall time, s.

    ``policies`` are the entries run (the scenario's plus the reference runs added),
    ``references`` maps each role of :data:`REFERENCES` to the name of the policy that played
    it, and ``notes`` says which reference runs were added.
    """

    scenario: Scenario
    metrics: pd.DataFrame
    summary: pd.DataFrame
    crawls_by_rate: pd.DataFrame
    seconds: float
    policies: tuple[dict[str, Any], ...] = ()
    references: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    accuracy: pd.DataFrame = field(default_factory=pd.DataFrame)


def _plays(role: str, entry: Mapping[str, Any]) -> bool:
    """Whether a scenario's policy entry is the reference run ``role`` (no setting that
    changes what the reference means: max_interval, importance)."""
    want = REFERENCES[role]
    if entry.get("kind") != want["kind"]:
        return False
    if want.get("rates") != entry.get("rates", "estimated" if "rates" in want else None):
        return False
    return entry.get("max_interval") is None and not entry.get("importance", False)


def reference_policies(
    scenario: Scenario,
) -> tuple[tuple[dict[str, Any], ...], dict[str, str], tuple[str, ...]]:
    """The scenario's policies plus the reference runs it lacks (see the module docstring).

    Returns the policy entries to run, role -> policy name, and one note per run added.
    """
    policies = [dict(p) for p in scenario.policies]
    names = {str(p.get("name", p["kind"])) for p in policies}
    roles: dict[str, str] = {}
    notes: list[str] = []
    wanted = ["uniform", "optimum"]
    if "obsolescence" in scenario.metrics:
        wanted.append("optimum_obsolescence")
    for role in wanted:
        found = next((p for p in policies if _plays(role, p)), None)
        if found is None:
            found = dict(REFERENCES[role])
            if found["name"] in names:
                found["name"] = f"{found['name']} (reference)"
            names.add(found["name"])
            policies.append(found)
            notes.append(
                f"added the reference run {found['name']!r} (not in the scenario file): the "
                "share of the optimum's gain over uniform needs it"
            )
        roles[role] = str(found.get("name", found["kind"]))
    return tuple(policies), roles, tuple(notes)


def gain_shares(summary: pd.DataFrame, references: Mapping[str, str]) -> pd.DataFrame:
    """``summary`` with ``METRIC_share`` = (policy - uniform) / (optimum - uniform), per
    variant, for freshness and obsolescence (NaN where the reference runs are missing or the
    optimum gains nothing over uniform, ``|optimum - uniform| < 1e-9``).

    ``summary`` has one row per variant and policy (columns ``variant``, ``policy`` and the
    metrics); ``references`` maps roles of :data:`REFERENCES` to policy names.
    """
    out = summary.copy()
    for metric, role in _OPTIMUM_OF.items():
        column = f"{metric}_share"
        out[column] = np.nan
        uniform, optimum = references.get("uniform"), references.get(role)
        if uniform is None or optimum is None or metric not in out.columns:
            continue
        for _, rows in out.groupby("variant", sort=False):
            by_policy = rows.set_index("policy")[metric]
            if uniform not in by_policy.index or optimum not in by_policy.index:
                continue
            base = float(by_policy[uniform])
            gain = float(by_policy[optimum]) - base
            if abs(gain) < 1e-9:
                continue
            share = (rows[metric] - base) / gain
            out.loc[rows.index, column] = share.where(share != 0, 0.0)  # no -0.0
    return out


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
    default = DEFAULT_RATES if policy["kind"] == "webfountain" else "estimated"
    return str(policy.get("rates", default))


def run_scenario(scenario: Scenario, progress: Callable[[str], None] | None = None) -> ScenarioRun:
    """Run every variant, policy and seed of ``scenario``; ``progress`` gets one line per run."""
    t0 = time.perf_counter()
    policies, references, notes = reference_policies(scenario)
    frames: list[pd.DataFrame] = []
    summaries: list[dict[str, Any]] = []
    crawl_tables: list[pd.DataFrame] = []
    errors: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for variant in scenario.variants:
        bounds: list[float] = []
        obs_bounds: list[float] = []
        for seed in scenario.seeds:
            world = build_world(variant.world, seed, scenario.warmup + variant.periods)
            initial = world.rate[world.born == 0]
            bounds.append(freshness_bound(initial, variant.budget))
            obs_bounds.append(obsolescence_bound(initial, variant.budget))
            for policy_spec in policies:
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
                if (
                    _rates_kind(policy_spec) in ("estimated", "posterior", "bayes")
                    and result.log is not None
                ):
                    log = result.log
                    errors.setdefault((variant.name, result.policy), []).append(
                        page_errors(
                            log.change_intervals(),
                            log.fetches,
                            result.rate,
                            log.known,
                            log.host,
                            log.section,
                        )
                    )
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
    summary = gain_shares(summary, references)
    crawl_table = pd.concat(crawl_tables, ignore_index=True)
    crawl_table = (
        crawl_table.groupby(["variant", "policy", "rate_low", "rate_high"], sort=False)[
            ["pages", "crawls_per_cycle"]
        ]
        .mean()
        .reset_index()
    )
    return ScenarioRun(
        scenario,
        metrics,
        summary,
        crawl_table,
        time.perf_counter() - t0,
        policies=policies,
        references=references,
        notes=notes,
        accuracy=_accuracy(errors),
    )


def _accuracy(errors: Mapping[tuple[str, str], list[pd.DataFrame]]) -> pd.DataFrame:
    """The accuracy tables of every variant and estimating policy, seeds pooled."""
    tables = []
    for (variant, policy), frames in errors.items():
        table = accuracy_table(pd.concat(frames, ignore_index=True))
        table.insert(0, "policy", policy)
        table.insert(0, "variant", variant)
        tables.append(table)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def _run_one(
    scenario: Scenario, variant: Variant, policy_spec: dict[str, Any], world: World, seed: int
) -> SimulationResult:
    policy = make_policy(policy_spec, period_days=variant.world.period_days)
    settings = SimulationSettings(
        periods=variant.periods,
        budget=variant.budget,
        warmup=scenario.warmup,
        warm_start=scenario.warm_start,
        oracle=policy_spec.get("rates") in ORACLE_RATES,
        seed=seed,
        importance=scenario.importance,
        budget_profile=scenario.budget_profile,
    )
    return simulate(world, policy, settings)
