"""The planner on its own estimates, across worlds and budgets: issue 25's table.

Run as a script::

    python tests/benchmarks/estimated_shares.py [--worlds NAME ...] [--budgets 28 20 14 7 3]
        [--seeds 1 2] [--pages 10000]

For every world, budget (every page once in N periods) and seed it simulates, on the same
world and changes: the uniform recrawl, the freshness-optimal page schedule with the true
rates (the scale), the planner with its default settings on the rates it estimates itself
(``webfountain``: Bayes-equivalent rates, checked Last-Modified dates, the revisit ceiling,
the release as deployed; ``--variants estimates`` adds it on its point estimates),
and Apache Nutch's and StormCrawler's adaptive schedules. It prints, per world and budget,
the means over the seeds: freshness, the share of the optimum's gain over uniform,
``(planner - uniform) / (optimum - uniform)``, and the planner's margin over the best of
uniform, Nutch and StormCrawler (negative: behind one of them), then one line per world
saying whether issue 25's bars hold (share >= 70 % from 1/14 up, >= 50 % at 1/20 and 1/28,
never behind uniform, Nutch or StormCrawler).

The worlds: the shipped ``gap-mixture``, ``gap-lifetimes`` and ``gap-births`` worlds, and
four built here to differ from them (:data:`GENERATED`): Last-Modified honest, missing,
lying and random in different mixes; a log-uniform box; a two-cluster mixture with strong
section correlation; WebFountain lifetimes (version 2) with births and deaths; and a web
that sends no dates at all. Warm-up and measured periods are the shipped scenarios' (21 and
28). Pure simulation: about 15 s per world, budget and seed at 10,000 pages.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from estimators.bayes_action import PROBE_HORIZON_PERIODS
from scenarios.policies import Policy, make_policy
from scenarios.policies.knowledge import ORACLE_RATES
from scenarios.scenario_files import load_scenario
from scenarios.simulator import SimulationSettings, simulate
from scenarios.world import World, WorldSpec, build_world

WARMUP = 21
PERIODS = 28

POLICIES: dict[str, dict[str, Any]] = {
    "uniform": {"kind": "uniform"},
    "optimum": {"kind": "freshness", "rates": "true"},
    "planner": {"kind": "webfountain"},
    "Nutch": {"kind": "nutch"},
    "StormCrawler": {"kind": "stormcrawler"},
}

#: Planner variants to set beside the default one (``--variants``), printed as extra columns.
VARIANTS: dict[str, dict[str, Any]] = {
    "estimates": {"kind": "webfountain", "rates": "estimated"},
    "posterior": {"kind": "webfountain", "rates": "posterior"},
    "dates ignored": {"kind": "webfountain", "last_modified": "ignore"},
    "no revisit ceiling": {"kind": "webfountain", "explore": 0.0},
    "no renewal": {"kind": "webfountain", "renewal": False},
    "freshness schedule": {"kind": "freshness"},
    "no probes": {"kind": "webfountain", "probe_horizon": 0.0},
    "follow-ups": {"kind": "webfountain", "follow_ups": True},
    "probes": {"kind": "webfountain", "probe_horizon": PROBE_HORIZON_PERIODS},
    "true rates": {"kind": "webfountain", "rates": "true"},
    "true prior": {"kind": "webfountain", "rates": "bayes, true prior"},
    "true section prior": {"kind": "webfountain", "rates": "bayes, true section prior"},
}

#: Worlds built to differ from the shipped ones (WorldSpec fields).
GENERATED: dict[str, dict[str, Any]] = {
    "box, dates mixed": {
        "rate_model": "loguniform",
        "rate_low": 0.002,
        "rate_high": 2.0,
        "section_sigma": 0.0,
        "last_modified": {"honest": 0.4, "missing": 0.3, "now": 0.15, "random": 0.15},
    },
    "mixture, sections": {
        "rate_model": "mixture",
        "fast_share": 0.5,
        "fast_median": 2.0,
        "fast_sigma": 0.8,
        "slow_median": 0.02,
        "slow_sigma": 1.0,
        "section_sigma": 1.2,
        "last_modified": {"honest": 0.5, "static": 0.25, "missing": 0.25},
    },
    "lifetimes v2, births": {
        "rate_model": "webfountain",
        "webfountain_version": 2,
        "section_sigma": 0.0,
        "birth_rate": 0.02,
        "death_rate": 0.01,
        "last_modified": {"honest": 0.4, "missing": 0.6},
    },
    "no dates": {
        "rate_model": "lognormal",
        "fast_median": 0.1,
        "fast_sigma": 2.0,
        "section_sigma": 0.5,
        "last_modified": {"missing": 1.0},
    },
}

SHIPPED = ("gap-mixture", "gap-lifetimes", "gap-births")


def world_spec(name: str, pages: int) -> WorldSpec:
    """The world ``name``: a shipped scenario's or one of :data:`GENERATED`."""
    if name in GENERATED:
        return WorldSpec(pages=pages, hosts=max(1, pages // 100), **GENERATED[name])
    spec = load_scenario(name).variants[0].world
    return replace(spec, pages=pages, hosts=max(1, pages // 100))


def run(
    spec: WorldSpec,
    every: int,
    seed: int,
    variants: list[str],
    warmup: int = WARMUP,
    periods: int = PERIODS,
) -> dict[str, float]:
    """Freshness of every policy of :data:`POLICIES` and of the ``variants`` at a budget of
    every page once in ``every`` periods, measured over ``periods`` after ``warmup``."""
    world = build_world(spec, seed, warmup + periods)
    budget = max(1, round(spec.pages / every))
    out: dict[str, float] = {}
    for name, policy_spec in [*POLICIES.items(), *((v, VARIANTS[v]) for v in variants)]:
        policy = make_policy({**policy_spec, "name": name}, period_days=spec.period_days)
        out[name] = freshness(world, policy, policy_spec, budget, warmup, periods, seed)
    return out


def freshness(
    world: World,
    policy: Policy,
    policy_spec: dict[str, Any],
    budget: int,
    warmup: int,
    periods: int,
    seed: int,
) -> float:
    """Mean freshness of ``policy`` (built from ``policy_spec``; an oracle run if its rates
    read the truth) on ``world``, ``budget`` crawls a period, over ``periods`` after
    ``warmup``."""
    settings = SimulationSettings(
        periods=periods,
        budget=budget,
        warmup=warmup,
        oracle=policy_spec.get("rates") in ORACLE_RATES,
        seed=seed,
    )
    return float(simulate(world, policy, settings).summary()["freshness"])


def parse_world_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The command line, with ``--worlds`` checked against the shipped and generated worlds
    (one error line naming the unknown ones and the known)."""
    args = parser.parse_args()
    unknown = sorted(set(args.worlds) - set(SHIPPED) - set(GENERATED))
    if unknown:
        parser.error(f"unknown worlds {unknown}: use {[*SHIPPED, *GENERATED]}")
    return args


def mean_over_seeds(
    label: str, seeds: list[int], run_seed: Callable[[int], dict[str, float]]
) -> dict[str, float]:
    """``run_seed`` for each of ``seeds``, each run's figures printed as an HTML comment
    headed ``label`` (kept in the Markdown table, unseen), and their means."""
    runs = []
    for seed in seeds:
        t0 = time.perf_counter()
        runs.append(run_seed(seed))
        each = ", ".join(f"{k} {v:.4f}" for k, v in runs[-1].items())
        print(
            f"<!-- {label} seed {seed}: {each} ({time.perf_counter() - t0:.0f} s) -->", flush=True
        )
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def share_of_gain(m: dict[str, float], name: str) -> float:
    """``name``'s share of the optimum's gain over uniform in the run means ``m``."""
    return (m[name] - m["uniform"]) / (m["optimum"] - m["uniform"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="+", default=[*SHIPPED, *GENERATED])
    parser.add_argument("--budgets", nargs="+", type=int, default=[28, 20, 14, 7, 3])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--variants", nargs="*", default=[], choices=list(VARIANTS))
    parser.add_argument(
        "--warmup", type=int, default=WARMUP, help="periods before the measure (issue 25: 21)"
    )
    parser.add_argument(
        "--periods", type=int, default=PERIODS, help="periods measured (issue 25: 28)"
    )
    args = parse_world_args(parser)
    extra = "".join(f" {v} (share) |" for v in args.variants)
    print(
        "| world, budget | uniform | Nutch | StormCrawler | planner (share) | optimum | margin |"
        + extra
    )
    print("|---" * (7 + len(args.variants)) + "|")
    verdicts = []
    for name in args.worlds:
        spec = world_spec(name, args.pages)
        held = True
        for every in args.budgets:
            m = mean_over_seeds(
                f"{name} 1/{every}",
                args.seeds,
                partial(
                    run,
                    spec,
                    every,
                    variants=args.variants,
                    warmup=args.warmup,
                    periods=args.periods,
                ),
            )
            share = share_of_gain(m, "planner")
            margin = m["planner"] - max(m["uniform"], m["Nutch"], m["StormCrawler"])
            held &= share >= (0.7 if every <= 14 else 0.5) and margin >= 0
            print(
                f"| {name} 1/{every} | {m['uniform']:.4f} | {m['Nutch']:.4f} | "
                f"{m['StormCrawler']:.4f} | {m['planner']:.4f} ({share:.0%}) | "
                f"{m['optimum']:.4f} | {margin:+.4f} |"
                + "".join(f" {m[v]:.4f} ({share_of_gain(m, v):.0%}) |" for v in args.variants),
                flush=True,
            )
        verdicts.append(f"{name}: {'bars hold' if held else 'bars not met'}")
    print()
    for line in verdicts:
        print(f"- {line}")


if __name__ == "__main__":
    main()
