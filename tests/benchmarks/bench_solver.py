"""Solver benchmark: the WebFountain model at the paper's size, beside a plain formulation.

Run as a script (``python tests/benchmarks/bench_solver.py``). For B = 255, T = 14 and each
strategy it prints the median over ``--runs`` of build + compile + solve, the iterations, and
the same for a *plain* solve measured in the same run: the same model and bridge, Ipopt's
default options, no user scaling, started from all zeros. Then T = 28 and T = 56 (strategy 1)
once each, to show that they solve to optimality. Options: ``--runs N`` (default 3),
``--buckets B`` (default 255), ``--skip-plain``, ``--skip-long``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from planner.ipopt_solver import DEFAULT_OPTIONS, solve_nlp
from planner.paper_instances import paper_instance
from planner.plan_solver import PlanSolver
from planner.strategies import Strategy


def _planner(
    version: int, periods: int, buckets: int, strategy: Strategy
) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    solver = PlanSolver(paper_instance(version, periods, buckets), strategy)
    sol = solver.solve()
    return time.perf_counter() - t0, sol.status.value, sol.iterations


def _plain(periods: int, buckets: int, strategy: Strategy) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    solver = PlanSolver(paper_instance(1, periods, buckets), strategy)
    out = solve_nlp(solver.nlp, np.zeros(solver.nlp.n), DEFAULT_OPTIONS, use_scaling=False)
    return time.perf_counter() - t0, out.status.value, out.iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--buckets", type=int, default=255)
    parser.add_argument("--skip-plain", action="store_true")
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args()
    B = args.buckets
    print(f"B={B}, T=14, median of {args.runs} runs (build + compile + solve)")
    print(
        f"{'strategy':<10}{'planner s':>11}{'iters':>7}{'status':>10}"
        f"{'plain s':>10}{'iters':>7}{'status':>18}{'speed-up':>10}"
    )
    for strategy in Strategy:
        runs = [_planner(1, 14, B, strategy) for _ in range(args.runs)]
        median = statistics.median(r[0] for r in runs)
        line = f"{strategy.value:<10}{median:>11.2f}{runs[0][2]:>7}{runs[0][1]:>10}"
        if not args.skip_plain:
            plain = _plain(14, B, strategy)
            line += f"{plain[0]:>10.2f}{plain[2]:>7}{plain[1]:>18}{plain[0] / median:>9.1f}x"
        print(line, flush=True)
    if not args.skip_long:
        for periods in (28, 56):
            seconds, status, iters = _planner(1, periods, B, Strategy.EVERY_PERIOD)
            print(f"T={periods}, strategy 1: {seconds:.2f} s, {iters} iterations, {status}")


if __name__ == "__main__":
    main()
