"""Solver benchmark: the WebFountain model at the paper's size, beside a plain formulation.

Run as a script (``python tests/benchmarks/bench_solver.py``). For B = 255, T = 14 and each
strategy it prints the median over ``--runs`` of build + compile + start + solve with the
planner (:class:`planner.solver.plan_solver.PlanSolver`: the model of
:mod:`planner.model.webfountain`, its
scaling, the priced start of :mod:`planner.solver.start_point` and
:data:`planner.solver.ipopt.NEAR_START_OPTIONS`), the iterations, status and
objective, and the same for a *plain* solve measured in the same run: the paper's equations
written as they stand (variables x, y, b, n, z, every one >= 0, b >= b0 to keep the division
away from zero; :func:`build_plain_model` below), compiled by the same bridge, solved with
Ipopt's default options, no user scaling, started from all zeros. Then T = 28 and T = 56 once
per strategy with the planner, to show that they solve to optimality.

Options: ``--runs N`` (default 3), ``--buckets B`` (default 255), ``--strategies 1,2,3``,
``--skip-plain``, ``--skip-long``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import pyomo.environ as pyo

from planner.model.instance import CrawlInstance
from planner.model.paper_instances import paper_instance
from planner.model.weights import ObjectiveWeights, Strategy, strategy_weights
from planner.solver.compiler import compile_model
from planner.solver.ipopt import DEFAULT_OPTIONS, solve_nlp
from planner.solver.plan_solver import PlanSolver


def build_plain_model(instance: CrawlInstance, weights: ObjectiveWeights) -> pyo.ConcreteModel:
    """The paper's model (sec. 4) written as it stands, data as plain numbers."""
    B, T = instance.buckets, instance.periods
    m = pyo.ConcreteModel(name="webfountain-plain")
    m.I = pyo.RangeSet(B)
    m.T = pyo.RangeSet(T)
    nonneg = pyo.NonNegativeReals
    m.x = pyo.Var(m.I, m.T, within=nonneg)
    m.y = pyo.Var(m.I, m.T, within=nonneg)
    m.b = pyo.Var(m.I, m.T, within=nonneg)
    m.n = pyo.Var(m.T, within=nonneg)
    m.z = pyo.Var(m.T, within=nonneg)
    b0, y0, a, p = instance.b0, instance.y0, instance.a, instance.p
    c, d, cap = instance.crawl_cost, instance.new_crawl_cost, instance.capacity
    for i in m.I:
        for t in m.T:
            m.b[i, t].setlb(float(b0[i - 1]))

    def b_prev(i: int, t: int) -> Any:
        return float(b0[i - 1]) if t == 1 else m.b[i, t - 1]

    def y_prev(i: int, t: int) -> Any:
        return float(y0[i - 1]) if t == 1 else m.y[i, t - 1]

    def n_prev(t: int) -> Any:
        return instance.n0 if t == 1 else m.n[t - 1]

    m.crawl_time = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(float(c[i - 1, t - 1]) * m.x[i, t] for i in m.I) + float(d[t - 1]) * m.z[t]
            <= float(cap[t - 1])
        ),
    )
    m.obsolete = pyo.Constraint(
        m.I,
        m.T,
        rule=lambda m, i, t: (
            m.y[i, t]
            == (1 - m.x[i, t] / b_prev(i, t))
            * ((1 - float(a[i - 1, t - 1])) * y_prev(i, t) + float(a[i - 1, t - 1]) * b_prev(i, t))
        ),
    )
    m.new_pages = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            m.n[t]
            == n_prev(t)
            + sum(float(instance.oldnwt[i - 1, t - 1]) * m.x[i, t] for i in m.I)
            + (float(instance.newnwt[t - 1]) - 1) * m.z[t]
            + instance.nconst
        ),
    )
    m.growth = pyo.Constraint(
        m.I, m.T, rule=lambda m, i, t: m.b[i, t] == b_prev(i, t) + float(p[i - 1]) * m.z[t]
    )
    m.old_limit = pyo.Constraint(m.I, m.T, rule=lambda m, i, t: m.x[i, t] <= b_prev(i, t))
    m.new_limit = pyo.Constraint(m.T, rule=lambda m, t: m.z[t] <= n_prev(t))
    oldwt, newwt = weights.oldwt, weights.newwt
    m.objective = pyo.Objective(
        expr=sum(float(oldwt[i - 1, t - 1]) * m.y[i, t] for i in m.I for t in m.T)
        + sum(float(newwt[t - 1]) * m.n[t] for t in m.T)
    )
    return m


def _planner(
    periods: int, buckets: int, strategy: Strategy
) -> tuple[float, str, int, float, float, str]:
    """Wall seconds, status, iterations, objective, CPU seconds, the start Ipopt began at."""
    t0, c0 = time.perf_counter(), time.process_time()
    solver = PlanSolver(paper_instance(1, periods, buckets), strategy)
    sol = solver.solve()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, sol.status.value, sol.iterations, sol.objective, cpu, sol.starts[0].name


def _plain(periods: int, buckets: int, strategy: Strategy) -> tuple[float, str, int, float]:
    t0 = time.perf_counter()
    instance = paper_instance(1, periods, buckets)
    model = build_plain_model(instance, strategy_weights(strategy, buckets, periods))
    nlp = compile_model(model)
    out = solve_nlp(nlp, np.zeros(nlp.n), DEFAULT_OPTIONS, use_scaling=False)
    return time.perf_counter() - t0, out.status.value, out.iterations, out.objective


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--buckets", type=int, default=255)
    parser.add_argument("--strategies", default="1,2,3")
    parser.add_argument("--skip-plain", action="store_true")
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args()
    B = args.buckets
    strategies = [Strategy.parse(s) for s in args.strategies.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} (machine has {os.cpu_count()} CPUs)")
    print(f"B={B}, T=14, median of {args.runs} runs (build + compile + start + solve), seconds")
    print(
        f"{'strategy':<9}{'planner s':>10}{'iters':>7}{'status':>9}{'objective':>16}"
        f"{'plain s':>9}{'iters':>7}{'status':>17}{'objective':>16}{'speed-up':>9}"
    )
    for strategy in strategies:
        runs = [_planner(14, B, strategy) for _ in range(args.runs)]
        median = statistics.median(r[0] for r in runs)
        _, status, iters, objective, _, _ = runs[0]
        line = f"{strategy.value:<9}{median:>10.2f}{iters:>7}{status:>9}{objective:>16.8e}"
        if not args.skip_plain:
            seconds, p_status, p_iters, p_obj = _plain(14, B, strategy)
            line += f"{seconds:>9.1f}{p_iters:>7}{p_status:>17}{p_obj:>16.8e}"
            line += f"{seconds / median:>8.1f}x"
        print(line, flush=True)
        if args.runs > 1:
            print(
                f"{'':<9}runs: "
                + ", ".join(f"{r[0]:.2f} (CPU {r[4]:.2f})" for r in runs)
                + f"; start: {runs[0][5]}; load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    if not args.skip_long:
        for periods in (28, 56):
            for strategy in strategies:
                seconds, status, iters, objective, cpu, start = _planner(periods, B, strategy)
                print(
                    f"T={periods}, strategy {strategy.value}: {seconds:.2f} s (CPU {cpu:.2f}),"
                    f" {iters} iterations from the {start} start, {status},"
                    f" objective {objective:.8e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
