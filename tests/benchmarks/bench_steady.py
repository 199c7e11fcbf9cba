"""Steady-rate model benchmark: the nightly default beside the WebFountain NLP it replaced.

Run as a script (``python tests/benchmarks/bench_steady.py``; ``make bench`` runs it). On the
paper's instance v1 (:func:`planner.model.paper_instances.paper_instance`, B = 255, T = 14)
it measures, in one run and for each objective of the steady-rate model:

* the baseline: :class:`planner.solver.plan_solver.PlanSolver` (build, compile, priced start,
  Ipopt) with the default strategy, as nightly solved until issue 24;
* :func:`planner.solver.steady_solver.solve_steady` (build, compile, Ipopt from the uniform
  crawl), with the time-averaged freshness each plan promises by the steady-rate values;
  and freshness on a growing web (the instance's own renewal, and 2 % a period).

Options: ``--runs N`` (median, default 1), ``--periods T``, ``--buckets B``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from planner.cycle.plan_cycle import web_renewal
from planner.model.instance import CrawlInstance
from planner.model.paper_instances import paper_instance
from planner.model.steady_rates import STEADY_OBJECTIVES, SteadySetup
from planner.solver.plan_solver import PlanSolver
from planner.solver.steady_solver import SteadySolution, solve_steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--buckets", type=int, default=255)
    parser.add_argument("--periods", type=int, default=14)
    args = parser.parse_args()
    B, T = args.buckets, args.periods
    instance = paper_instance(1, T, B)
    print(f"load average {os.getloadavg()[0]:.2f} (machine has {os.cpu_count()} CPUs)")
    print(f"paper instance v1, B={B}, T={T}; seconds, median of {args.runs} run(s)")
    times, solution = [], None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        solution = PlanSolver(instance).solve()
        times.append(time.perf_counter() - t0)
    assert solution is not None
    base = statistics.median(times)
    print(
        f"baseline PlanSolver (WebFountain NLP): {base:.2f} s, {solution.status.value}, "
        f"{solution.iterations} iterations",
        flush=True,
    )
    for objective in STEADY_OBJECTIVES:
        total, steady = _timed(
            instance, SteadySetup(objective=objective, lifetime=200.0), args.runs
        )
        print(
            f"steady-rate {objective}: {total:.2f} s = {total / base:.2f}x baseline (build + "
            f"compile {steady.build_seconds:.2f} s, Ipopt {steady.solve_seconds:.2f} s, "
            f"{steady.iterations} iterations, {steady.status.value}); freshness "
            f"{steady.freshness:.4f}",
            flush=True,
        )
    # A growing web (planner.model.steady_rates, "A growing web"): the instance's own new
    # pages as the plan measures them, and 2 % of the pages held a period.
    for renewal in (web_renewal(instance), 0.02):
        total, steady = _timed(instance, SteadySetup(lifetime=200.0, renewal=renewal), args.runs)
        print(
            f"steady-rate freshness, growing web (renewal {renewal:.4f}): {total:.2f} s = "
            f"{total / base:.2f}x baseline ({steady.iterations} iterations, "
            f"{steady.status.value}); freshness {steady.freshness:.4f}",
            flush=True,
        )


def _timed(instance: CrawlInstance, setup: SteadySetup, runs: int) -> tuple[float, SteadySolution]:
    """The median wall time (s) of ``runs`` builds, compiles and solves, and the first
    solution."""
    results = []
    for _ in range(runs):
        t0 = time.perf_counter()
        solution = solve_steady(instance, setup)
        results.append((time.perf_counter() - t0, solution))
    return statistics.median(r[0] for r in results), results[0][1]


if __name__ == "__main__":
    main()
