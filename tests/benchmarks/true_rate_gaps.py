"""Issue 24's bar: the planner told every true rate against the freshness-optimal page
schedule, on the shipped gap worlds and the generated ones.

Run as a script::

    python tests/benchmarks/true_rate_gaps.py [--worlds NAME ...] [--budgets 28 20 14 7 3 2]
        [--seed 1] [--pages 10000] [--variants "no renewal"]

On issue 25's worlds (:mod:`estimated_shares`: the shipped gap worlds and four generated
ones), at each budget (every page once in N periods), it simulates the uniform recrawl, the
freshness-optimal page schedule with the true rates (the optimum) and the planner as deployed
but told the true rates, and prints a markdown table of freshness and the planner's gap to
the optimum (issue 24 asks for at least -0.003 at every budget from 1/28 to 1/2). Variants
(``--variants``) add planner columns: ``no renewal`` plans as if no page were new
(:mod:`planner.model.steady_rates`, "A growing web"). Pure simulation: about 15 s per world,
budget and planner column at 10,000 pages.
"""

from __future__ import annotations

import argparse
from typing import Any

from estimated_shares import GENERATED, PERIODS, SHIPPED, WARMUP, parse_world_args, world_spec

from scenarios.policies import make_policy
from scenarios.simulator import SimulationSettings, simulate
from scenarios.world import build_world

POLICIES: dict[str, dict[str, Any]] = {
    "uniform": {"kind": "uniform"},
    "optimum": {"kind": "freshness", "rates": "true"},
    "planner": {"kind": "webfountain", "rates": "true"},
}

VARIANTS: dict[str, dict[str, Any]] = {
    "no renewal": {"kind": "webfountain", "rates": "true", "renewal": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="+", default=[*SHIPPED, *GENERATED])
    parser.add_argument("--budgets", nargs="+", type=int, default=[28, 20, 14, 7, 3, 2])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--variants", nargs="*", default=[], choices=list(VARIANTS))
    args = parse_world_args(parser)
    policies = {**POLICIES, **{v: VARIANTS[v] for v in args.variants}}
    extra = "".join(f" {v} (gap) |" for v in args.variants)
    print("| world, budget | uniform | optimum | planner, true rates (gap) |" + extra)
    print("|---" * (4 + len(args.variants)) + "|")
    worst = 0.0
    for name in args.worlds:
        spec = world_spec(name, args.pages)
        world = build_world(spec, args.seed, WARMUP + PERIODS)
        for every in args.budgets:
            budget = max(1, round(spec.pages / every))
            m: dict[str, float] = {}
            for key, policy_spec in policies.items():
                policy = make_policy({**policy_spec, "name": key}, period_days=spec.period_days)
                settings = SimulationSettings(
                    periods=PERIODS,
                    budget=budget,
                    warmup=WARMUP,
                    oracle=policy_spec.get("rates") == "true",
                    seed=args.seed,
                )
                m[key] = float(simulate(world, policy, settings).summary()["freshness"])
            worst = min(worst, m["planner"] - m["optimum"])
            columns = "".join(
                f" {m[k]:.4f} ({m[k] - m['optimum']:+.4f}) |" for k in ["planner", *args.variants]
            )
            print(
                f"| {name} 1/{every} | {m['uniform']:.4f} | {m['optimum']:.4f} |{columns}",
                flush=True,
            )
    print(f"\nlargest shortfall of the planner: {worst:+.4f} (issue 24's bar: -0.003)")


if __name__ == "__main__":
    main()
