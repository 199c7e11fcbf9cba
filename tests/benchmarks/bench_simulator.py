"""Simulator benchmark: page-periods per second on a 1,000,000-page world, and peak memory.

Run with ``make bench`` (or ``.venv/bin/python tests/benchmarks/bench_simulator.py``). The
world (default 1,000,000 pages on 10,000 hosts, two-cluster change rates, 0.1% births and
deaths per period) runs 56 periods under one policy (default ``uniform``, budget one seventh
of the pages per period). Timed beside a baseline measured in the same run: drawing the
world's changes for the same pages and periods (:meth:`scenarios.world.World.period_changes`,
the ground truth every policy run needs), so ``ratio`` is what the simulation itself adds.
Peak memory is the process's maximum resident set size.

Options: ``--pages N``, ``--periods T``, ``--policy KIND`` (any kind of
:data:`scenarios.policies.registry.POLICY_KINDS`; estimating policies refit every 7 periods).
"""

from __future__ import annotations

import argparse
import resource
import time

from scenarios.policies import make_policy
from scenarios.simulator import SimulationSettings, simulate
from scenarios.world import WorldSpec, build_world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--periods", type=int, default=56)
    parser.add_argument("--policy", default="uniform")
    args = parser.parse_args()
    pages, periods = args.pages, args.periods
    spec = WorldSpec(pages=pages, hosts=max(1, pages // 100), birth_rate=0.001, death_rate=0.001)

    t0 = time.perf_counter()
    world = build_world(spec, seed=1, periods=periods)
    build = time.perf_counter() - t0

    t0 = time.perf_counter()
    for t in range(periods):
        world.period_changes(t, seed=1)
    baseline = time.perf_counter() - t0

    settings = SimulationSettings(periods=periods, budget=max(1, pages // 7), seed=1)
    policy = make_policy({"kind": args.policy})
    t0 = time.perf_counter()
    result = simulate(world, policy, settings)
    run = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    page_periods = world.n_pages * periods
    summary = result.summary()
    print(
        f"simulator: {pages:,} pages (+{world.n_pages - pages:,} born), {periods} periods, "
        f"policy {args.policy}, budget {settings.budget:,}/period"
    )
    print(f"  build world            {build:8.2f} s")
    print(
        f"  baseline (changes)     {baseline:8.2f} s  {page_periods / baseline:12,.0f} "
        "page-periods/s"
    )
    print(
        f"  simulate               {run:8.2f} s  {page_periods / run:12,.0f} page-periods/s"
        f"  ratio to baseline {run / baseline:.2f}"
    )
    print(f"  peak memory (RSS)      {peak_mib:8.0f} MiB")
    print(
        f"  freshness {summary['freshness']:.4f}, age {summary['age']:.3f} periods, "
        f"obsolescence {summary['obsolescence']:.3f}"
    )


if __name__ == "__main__":
    main()
