"""A solved plan as the JSON-able mapping that ``crawlplan solve --out`` writes.

Keys (B buckets, T periods), both models: ``model``, ``status``, ``message``, ``objective``,
``x``, ``y``, ``b`` ([B][T] pages), ``n``, ``z`` ([T] pages), ``fractions`` ([B][T],
x[i,t] / b[i,t-1]), ``quota`` ([B][T] whole pages) and ``new_quota`` ([T]), which fit the
capacity of every period exactly, ``iterations``, ``build_seconds``, ``solve_seconds``.

The steady-rate model (``model = "steady"``) adds ``goal`` (its objective's name),
``freshness`` (time-averaged, by the plan's own values), ``marginal`` ([B][T], the value of
one more crawl) and ``new_marginal`` ([T]); ``y`` holds the pages expected stale. The
WebFountain model (``model = "webfountain"``) adds ``weights`` and ``starts`` (every start
tried, best first) with their ``spread``.
"""

from __future__ import annotations

from typing import Any

from planner.cycle.plan_inputs import trajectory_quotas
from planner.cycle.quotas import crawl_fractions
from planner.model.instance import CrawlInstance
from planner.solver.plan_solver import PlanSolution
from planner.solver.steady_solver import SteadySolution

__all__ = ["solution_mapping", "steady_solution_mapping"]


def solution_mapping(instance: CrawlInstance, solution: PlanSolution) -> dict[str, Any]:
    """The solution file's content for ``solution`` of ``instance``."""
    tr = solution.trajectory
    quotas = trajectory_quotas(instance, tr)
    return {
        "model": "webfountain",
        "status": solution.status.value,
        "message": solution.message,
        "objective": solution.objective,
        "x": tr.x.tolist(),
        "y": tr.y.tolist(),
        "b": tr.b.tolist(),
        "n": tr.n.tolist(),
        "z": tr.z.tolist(),
        "fractions": solution.crawl_fractions(instance).tolist(),
        "quota": quotas.old.tolist(),
        "new_quota": quotas.new.tolist(),
        "iterations": solution.iterations,
        "build_seconds": solution.build_seconds,
        "solve_seconds": solution.solve_seconds,
        "weights": solution.weights,
        "starts": [
            {
                "start": s.name,
                "status": s.status.value,
                "objective": s.objective,
                "iterations": s.iterations,
            }
            for s in solution.starts
        ],
        "spread": solution.spread,
    }


def steady_solution_mapping(
    instance: CrawlInstance, solution: SteadySolution, objective: str
) -> dict[str, Any]:
    """The solution file's content for a steady-rate ``solution`` of ``instance``."""
    tr = solution.trajectory
    quotas = trajectory_quotas(instance, tr)
    return {
        "model": "steady",
        "goal": objective,
        "status": solution.status.value,
        "message": solution.message,
        "objective": solution.objective,
        "freshness": solution.freshness,
        "x": tr.x.tolist(),
        "y": tr.y.tolist(),
        "b": tr.b.tolist(),
        "n": tr.n.tolist(),
        "z": tr.z.tolist(),
        "fractions": crawl_fractions(tr.x, instance.b0, tr.b).tolist(),
        "quota": quotas.old.tolist(),
        "new_quota": quotas.new.tolist(),
        "marginal": solution.marginal.tolist(),
        "new_marginal": solution.new_marginal.tolist(),
        "iterations": solution.iterations,
        "build_seconds": solution.build_seconds,
        "solve_seconds": solution.solve_seconds,
    }
