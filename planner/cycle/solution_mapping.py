"""A solved plan as the JSON-able mapping that ``crawlplan solve --out`` writes.

Keys (B buckets, T periods): ``status``, ``message``, ``objective``, ``x``, ``y``, ``b``
([B][T] pages), ``n``, ``z`` ([T] pages), ``fractions`` ([B][T], x[i,t] / b[i,t-1]),
``quota`` ([B][T] whole pages) and ``new_quota`` ([T]), which fit the capacity of every
period exactly, ``iterations``, ``build_seconds``, ``solve_seconds``, ``weights``, and
``starts`` (every start tried, best first) with their ``spread``.
"""

from __future__ import annotations

from typing import Any

from planner.cycle.plan_inputs import trajectory_quotas
from planner.model.instance import CrawlInstance
from planner.solver.plan_solver import PlanSolution

__all__ = ["solution_mapping"]


def solution_mapping(instance: CrawlInstance, solution: PlanSolution) -> dict[str, Any]:
    """The solution file's content for ``solution`` of ``instance``."""
    tr = solution.trajectory
    quotas = trajectory_quotas(instance, tr)
    return {
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
