"""Where the planner's own estimates lose freshness: the planner told the true rates of one
group of pages at a time.

Run as a script::

    python tests/benchmarks/knowledge_split.py [--worlds NAME ...] [--budgets 28 14 7]
        [--seeds 1] [--pages 10000]

On issue 25's worlds (``estimated_shares.py``: the shipped gap worlds and the generated
ones), at each budget (every page once in N periods) and seed, it simulates the uniform
recrawl, the freshness-optimal page schedule with the true rates (the scale), the planner
as deployed on its own estimates, and the same planner whose estimates are replaced by the
true rates for one group of pages:

* ``dated``: the pages of hosts whose Last-Modified is honest;
* ``undated``: every other page (hosts that send no date, the fetch time, a random or a
  static date);
* ``born``: the pages born during the run;
* ``all``: every page (the plan's own limit, with perfect knowledge).

It prints freshness and the share of the optimum's gain over uniform,
``(policy - uniform) / (optimum - uniform)``. The gap a group closes is what better
estimates of that group could win at most; a group whose rates no evidence the crawler
collects can tell (a page without dates fetched twice) bounds what any estimator can reach.
Pure simulation: about 2 minutes per world, budget and seed at 10,000 pages.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt
from estimated_shares import GENERATED, PERIODS, SHIPPED, WARMUP, world_spec

from scenarios.policies import make_policy
from scenarios.policies.knowledge import RateKnowledge
from scenarios.policies.webfountain import WebFountainPolicy
from scenarios.simulator import CrawlLog, SimulationSettings, simulate
from scenarios.world import LAST_MODIFIED_MODES, World, build_world

GROUPS = ("dated", "undated", "born", "all")


class PartlyTrue(RateKnowledge):
    """Estimated rates, except the true rates of the pages in ``told`` (shape (n,) of the
    world's pages; pages past it, none)."""

    def __init__(self, told: npt.NDArray[np.bool_]) -> None:
        super().__init__("estimated")
        self.told = told

    def rate(self, log: CrawlLog, period: int) -> npt.NDArray[np.float64]:
        rate = np.array(super().rate(log, period), dtype=float)
        assert log.true_rate is not None  # an oracle run
        told = np.zeros(rate.size, dtype=bool)
        told[: min(rate.size, self.told.size)] = self.told[: rate.size]
        rate[told] = log.true_rate[told]
        return rate


def group_masks(world: World) -> dict[str, npt.NDArray[np.bool_]]:
    """Each group's pages, shape (n,) each."""
    dated = world.last_modified_mode() == LAST_MODIFIED_MODES.index("honest")
    return {
        "dated": dated,
        "undated": ~dated,
        "born": world.born > 0,
        "all": np.ones(world.n_pages, dtype=bool),
    }


def run(name: str, pages: int, every: int, seed: int) -> dict[str, float]:
    """Freshness of uniform, the optimum, the planner and the planner told each group."""
    spec = world_spec(name, pages)
    world = build_world(spec, seed, WARMUP + PERIODS)
    budget = max(1, round(spec.pages / every))
    policies = {
        "uniform": make_policy({"kind": "uniform", "name": "uniform"}),
        "optimum": make_policy({"kind": "freshness", "rates": "true", "name": "optimum"}),
        "planner": make_policy({"kind": "webfountain", "name": "planner"}),
    }
    for group, told in group_masks(world).items():
        policies[group] = WebFountainPolicy(group, PartlyTrue(told), period_days=spec.period_days)
    out = {}
    for label, policy in policies.items():
        settings = SimulationSettings(
            periods=PERIODS,
            budget=budget,
            warmup=WARMUP,
            oracle=label not in ("uniform", "planner"),
            seed=seed,
        )
        out[label] = float(simulate(world, policy, settings).summary()["freshness"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="+", default=[*SHIPPED, *GENERATED])
    parser.add_argument("--budgets", nargs="+", type=int, default=[28, 14, 7])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--pages", type=int, default=10_000)
    args = parser.parse_args()
    unknown = sorted(set(args.worlds) - set(SHIPPED) - set(GENERATED))
    if unknown:
        parser.error(f"unknown worlds {unknown}: use {[*SHIPPED, *GENERATED]}")
    print(
        "| world, budget | pages: dated / born | uniform | optimum | planner |"
        + "".join(f" told {g} |" for g in GROUPS)
    )
    print("|---" * (5 + len(GROUPS)) + "|")
    for name in args.worlds:
        world = build_world(world_spec(name, args.pages), args.seeds[0], WARMUP + PERIODS)
        masks = group_masks(world)
        for every in args.budgets:
            t0 = time.perf_counter()
            runs = [run(name, args.pages, every, seed) for seed in args.seeds]
            m = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
            gain = m["optimum"] - m["uniform"]

            def cell(label: str, m: dict[str, float] = m, gain: float = gain) -> str:
                return f"{m[label]:.4f} ({(m[label] - m['uniform']) / gain:.0%})"

            print(
                f"| {name} 1/{every} | {masks['dated'].mean():.0%} / {masks['born'].mean():.0%} "
                f"| {m['uniform']:.4f} | {m['optimum']:.4f} | {cell('planner')} |"
                + "".join(f" {cell(g)} |" for g in GROUPS)
                + f" <!-- {time.perf_counter() - t0:.0f} s -->",
                flush=True,
            )


if __name__ == "__main__":
    main()
