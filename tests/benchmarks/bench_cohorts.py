"""Cohort LP benchmark: HiGHS and Ipopt on the cohort model, beside today's WebFountain solve.

Run as a script (``python tests/benchmarks/bench_cohorts.py``). On the paper's instance v1
(:func:`planner.model.paper_instances.paper_instance`, B = 255, T = 14) it measures, in one run:

* the baseline: :class:`planner.solver.plan_solver.PlanSolver` (build, compile, priced start,
  Ipopt) with the default strategy, as nightly solves today;
* the cohort LP of :mod:`planner.model.cohorts` (freshness, planning from cohorts spread as if
  every page were crawled once per cycle) for each K in ``--cohorts``: Pyomo build, then
  HiGHS through Pyomo's appsi interface (loading the model into HiGHS included), then the same
  model compiled by the project's bridge (:mod:`planner.solver.compiler`) and solved by Ipopt
  (:func:`planner.solver.ipopt.solve_nlp`, the model's scaling factors, from all zeros), with
  the objectives side by side.

Options: ``--cohorts 30,40``, ``--runs N`` (median, default 1), ``--skip-ipopt``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from planner.model.cohorts import build_cohort_model, even_cohorts, solve_with_highs
from planner.model.paper_instances import paper_instance
from planner.solver.compiler import compile_model
from planner.solver.ipopt import solve_nlp
from planner.solver.plan_solver import PlanSolver

#: Ipopt on the LP: the model's scaling (pages in units of their bucket; unscaled, B = 16 took
#: 2976 iterations and 209 s, scaled 70 and 5.6 s), the adaptive barrier rule, from all zeros.
IPOPT_LP_OPTIONS = {
    "tol": 1e-8,
    "max_iter": 3000,
    "linear_solver": "mumps",
    "nlp_scaling_method": "user-scaling",
    "mu_strategy": "adaptive",
}


def _baseline(buckets: int, periods: int) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    solution = PlanSolver(paper_instance(1, periods, buckets)).solve()
    return time.perf_counter() - t0, solution.status.value, solution.iterations


def _cohorts(buckets: int, periods: int, cohorts: int, ipopt: bool) -> dict[str, float | str | int]:
    instance = paper_instance(1, periods, buckets)
    interval = float(instance.b0.sum() / instance.capacity.mean())  # periods per visit today
    initial = even_cohorts(instance.b0, cohorts, min(interval, cohorts))
    t0 = time.perf_counter()
    model = build_cohort_model(instance, cohorts=cohorts, initial=initial)
    out: dict[str, float | str | int] = {"build": time.perf_counter() - t0}
    t0 = time.perf_counter()
    plan = solve_with_highs(model)
    out |= {"highs": time.perf_counter() - t0, "highs_status": plan.status}
    out["highs_objective"] = plan.objective
    out["freshness"] = plan.objective / float(periods * instance.b0.sum())
    out["variables"] = model.nvariables()
    out["constraints"] = model.nconstraints()
    if ipopt:
        t0 = time.perf_counter()
        nlp = compile_model(model)
        out["compile"] = time.perf_counter() - t0
        result = solve_nlp(nlp, np.zeros(nlp.n), IPOPT_LP_OPTIONS, use_scaling=True)
        out |= {"ipopt": result.seconds, "ipopt_status": result.status.value}
        out |= {"ipopt_iterations": result.iterations, "ipopt_objective": result.objective}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cohorts", default="30,40")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--buckets", type=int, default=255)
    parser.add_argument("--skip-ipopt", action="store_true")
    args = parser.parse_args()
    B, T = args.buckets, 14
    print(f"load average {os.getloadavg()[0]:.2f} (machine has {os.cpu_count()} CPUs)")
    print(f"paper instance v1, B={B}, T={T}; seconds, median of {args.runs} run(s)")
    runs = [_baseline(B, T) for _ in range(args.runs)]
    base = statistics.median(r[0] for r in runs)
    print(
        f"baseline PlanSolver (WebFountain NLP, Ipopt): {base:.2f} s "
        f"(build + compile + start + solve), {runs[0][1]}, {runs[0][2]} iterations",
        flush=True,
    )
    for K in (int(k) for k in args.cohorts.split(",")):
        results = [_cohorts(B, T, K, not args.skip_ipopt) for _ in range(args.runs)]

        def med(key: str, results: list[dict[str, float | str | int]] = results) -> float:
            return statistics.median(float(r[key]) for r in results)

        r = results[0]
        highs_total = med("build") + med("highs")
        print(
            f"cohorts K={K}: {r['variables']} variables, {r['constraints']} constraints; "
            f"build {med('build'):.2f} s; HiGHS (appsi) {med('highs'):.2f} s, "
            f"{r['highs_status']}, objective {float(r['highs_objective']):.10e} "
            f"(freshness {float(r['freshness']):.5f}); build + HiGHS {highs_total:.2f} s = "
            f"{highs_total / base:.1f}x baseline",
            flush=True,
        )
        if not args.skip_ipopt:
            ipopt_total = med("build") + med("compile") + med("ipopt")
            gap = abs(float(r["ipopt_objective"]) - float(r["highs_objective"]))
            print(
                f"  Ipopt (bridge): compile {med('compile'):.2f} s, solve {med('ipopt'):.2f} s, "
                f"{r['ipopt_iterations']} iterations, {r['ipopt_status']}, objective "
                f"{float(r['ipopt_objective']):.10e} (relative gap to HiGHS "
                f"{gap / abs(float(r['highs_objective'])):.1e}); build + compile + solve "
                f"{ipopt_total:.2f} s = {ipopt_total / base:.1f}x baseline",
                flush=True,
            )


if __name__ == "__main__":
    main()
