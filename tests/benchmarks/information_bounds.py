"""What the planner would gain from better knowledge of the pages it sees change at every fetch.

Run as a script::

    python tests/benchmarks/information_bounds.py [--scenarios gap-mixture ...] [--budgets 28 7]
        [--seeds 1 2]
        [--policies NAME ...] [--periods N] [--probe-share S]

On the shipped scenarios' worlds (their warm-up and periods), at each budget (every page once
in N periods) and seed, it simulates:

* ``uniform`` and the ``freshness-optimal`` page schedule with the true rates (the scale);
* the planner as deployed (``Bayes``: Bayes-equivalent rates, the default), on its point
  estimates (``estimated``) and on Gamma rate posteriors (``posterior``: expected freshness
  per class);
* ``censored oracle``: the planner as deployed, except that every page whose every
  change/no-change interval so far held a change gets its true rate. Such a page's
  likelihood is flat above about one change per interval, so no estimator can place it; a
  probe policy that resolved it (re-fetches at shorter intervals) could gain at most this,
  before paying for its probes;
* the planner with every true rate (``true rates``);
* on request (``--policies``), ``probes``: a prototype of exploration, not the planner's.
  Up to ``--probe-share`` of each period's budget re-fetches censored pages one period after
  a fetch, each page at most once at that scale (:func:`_probes`).

It prints freshness and the share of the optimum's gain over uniform,
``(policy - uniform) / (optimum - uniform)``, per run, and the mean over seeds. ``--periods``
measures longer than the scenario does (exploration pays, if ever, over a long horizon).
Pure simulation: no store, no server; about 5 s a run at 10,000 pages and 28 periods.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from scenarios.policies import make_policy
from scenarios.scenario_files import Scenario, load_scenario
from scenarios.simulator import CrawlLog, SimulationSettings, simulate
from scenarios.world import World, build_world

POLICIES: dict[str, dict[str, Any]] = {
    "uniform": {"kind": "uniform"},
    "freshness-optimal (true)": {"kind": "freshness", "rates": "true"},
    "planner, Bayes": {"kind": "webfountain"},
    "planner, estimated": {"kind": "webfountain", "rates": "estimated"},
    "planner, posterior": {"kind": "webfountain", "rates": "posterior"},
    "planner, censored oracle": {"kind": "webfountain"},
    "planner, probes": {"kind": "webfountain"},
    "planner, true rates": {"kind": "webfountain", "rates": "true"},
}

#: Most of a period's budget the probes may take (``--probe-share``).
PROBE_SHARE = 0.4


def _censored_oracle(policy: Any, world: World) -> None:
    """Give the pages seen changing at every fetch their true rates in ``policy``'s knowledge."""
    estimate = policy.knowledge.rate

    def rate(log: CrawlLog, period: int) -> np.ndarray:
        known = np.array(estimate(log, period), dtype=float)
        intervals = log.change_intervals()
        censored = (intervals.n_intervals > 0) & (intervals.n_changes == intervals.n_intervals)
        known[censored] = world.rate[censored]
        return known

    policy.knowledge.rate = rate


def _probes(policy: Any, share: float) -> None:
    """Make ``policy`` probe censored pages: a prototype of exploration, not the planner's.

    Each period, up to ``share`` of the budget re-fetches pages fetched in the period before
    whose every interval held a change, whose shortest interval is over two periods (so a
    probe one period on says something new: each page is probed at most once at that
    scale) and whose estimate lies at or below the fastest rate of a class the plan crawls
    (a page already placed above it is left alone); drawn at random when there are more. The
    rest of the budget is the plan's. Reads the policy's plan through its private state.
    """
    select = policy.select

    def probing(period: int, budget: int, log: CrawlLog) -> np.ndarray:
        if policy._cycle_start < 0:  # no plan yet
            return np.asarray(select(period, budget, log))
        intervals = log.change_intervals()
        censored = (intervals.n_intervals > 0) & (intervals.n_changes == intervals.n_intervals)
        shortest = np.full(log.n_pages, np.inf)
        np.minimum.at(shortest, intervals.page, intervals.length)
        recent = (log.last_fetch >= period - 1) & (log.last_fetch < period)
        candidates = np.flatnonzero(censored & recent & log.eligible & (shortest > 2.0))
        crawled = [b for b in range(1, policy._old.shape[0]) if policy._old[b].sum() > 0]
        rates = [policy._rate[policy._bucket == b] for b in crawled]
        cut = max((float(np.nanmax(r)) for r in rates if r.size), default=0.0)
        candidates = candidates[policy._rate[candidates] <= cut]
        cap = int(share * budget)
        if candidates.size > cap:
            candidates = np.random.default_rng(period).choice(candidates, cap, replace=False)
        chosen = np.asarray(select(period, budget - candidates.size, log))
        return np.concatenate([chosen, np.setdiff1d(candidates, chosen)])

    policy.select = probing


def run(
    scenario: Scenario,
    every: int,
    seed: int,
    names: list[str],
    periods: int | None = None,
    probe_share: float = PROBE_SHARE,
) -> dict[str, float]:
    """Freshness of every policy of :data:`POLICIES` on ``scenario``'s world at a budget of
    every page once in ``every`` periods."""
    variant = scenario.variants[0]
    spec = variant.world
    periods = periods or variant.periods
    world = build_world(spec, seed, scenario.warmup + periods)
    budget = max(1, round(spec.pages / every))
    out: dict[str, float] = {}
    for name in names:
        spec_policy = POLICIES[name]
        policy = make_policy({**spec_policy, "name": name}, period_days=spec.period_days)
        if name == "planner, censored oracle":
            _censored_oracle(policy, world)
        if name == "planner, probes":
            _probes(policy, probe_share)
        settings = SimulationSettings(
            periods=periods,
            budget=budget,
            warmup=scenario.warmup,
            warm_start=scenario.warm_start,
            oracle=spec_policy.get("rates") == "true",
            seed=seed,
            importance=scenario.importance,
            budget_profile=scenario.budget_profile,
        )
        out[name] = float(simulate(world, policy, settings).summary()["freshness"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios", nargs="+", default=["gap-mixture", "gap-lifetimes", "gap-births"]
    )
    parser.add_argument("--budgets", nargs="+", type=int, default=[28, 7])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument(
        "--policies",
        nargs="+",
        default=[p for p in list(POLICIES)[2:] if p != "planner, probes"],
        help="the planner runs to make, beside uniform and the optimum (default: all)",
    )
    parser.add_argument(
        "--periods", type=int, default=None, help="measured periods (default: the scenario's)"
    )
    parser.add_argument("--probe-share", type=float, default=PROBE_SHARE)
    args = parser.parse_args()
    unknown = sorted(set(args.policies) - set(POLICIES))
    if unknown:
        parser.error(f"unknown policies {unknown}: use {list(POLICIES)[2:]}")
    names = [*list(POLICIES)[:2], *[p for p in list(POLICIES)[2:] if p in args.policies]]
    print("| world, budget | " + " | ".join(names[2:]) + " | uniform | optimum |")
    print("|---" * (len(names) + 1) + "|")
    for scenario_name in args.scenarios:
        scenario = load_scenario(scenario_name)
        for every in args.budgets:
            runs = []
            for seed in args.seeds:
                t0 = time.perf_counter()
                runs.append(run(scenario, every, seed, names, args.periods, args.probe_share))
                each = ", ".join(f"{k} {v:.4f}" for k, v in runs[-1].items())
                print(
                    f"<!-- {scenario_name} 1/{every} seed {seed}: {each} "
                    f"({time.perf_counter() - t0:.0f} s) -->",
                    flush=True,
                )
            mean = {k: float(np.mean([r[k] for r in runs])) for k in names}
            low, high = mean["uniform"], mean["freshness-optimal (true)"]
            cells = [f"{mean[k]:.4f} ({(mean[k] - low) / (high - low):.0%})" for k in names[2:]]
            print(
                f"| {scenario_name} 1/{every} | "
                + " | ".join(cells)
                + f" | {low:.4f} | {high:.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
