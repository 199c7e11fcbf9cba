"""The planner: pure optimization, from bucket aggregates to a cycle's quotas and page schedules.

Subpackages, in the order data flows through them:

- :mod:`planner.model`: the planning instance, the WebFountain bucket model, objective weights,
  the paper's instances;
- :mod:`planner.solver`: the Pyomo-to-cyipopt compiler, the Ipopt call, the priced start,
  :class:`~planner.solver.plan_solver.PlanSolver`;
- :mod:`planner.cycle`: plan inputs, quotas, due-URL selection and :func:`plan_cycle`;
- :mod:`planner.schedules`: page-level refresh schedules and their multipliers.

Imports: the standard library, ``estimators``, numpy, scipy, pandas, pyomo and cyipopt. Never
``store``, ``crawler``, ``scenarios`` or ``service``, and never a database, a socket or a file
it was not handed (an import-linter contract in ``pyproject.toml`` enforces the direction).

The Python API is exported here, lazily: ``import planner`` is cheap, and a name's
module (with pyomo) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.cycle.due_urls import select_due_pages
    from planner.cycle.plan_cycle import (
        CrawlMeasures,
        CycleSettings,
        PlanOutcome,
        SolverRecord,
        WarmStart,
        plan_cycle,
    )
    from planner.cycle.plan_inputs import PlanInputs, PlannedCycle, plan_inputs
    from planner.model.instance import CrawlInstance, InstanceError
    from planner.model.paper_instances import paper_instance
    from planner.model.weights import ObjectiveWeights, Strategy, strategy_weights
    from planner.schedules.optimal import (
        Schedule,
        ScheduleError,
        bucket_intervals,
        refresh_schedule,
    )
    from planner.solver.ipopt import SolveStatus
    from planner.solver.plan_solver import PlanSolution, PlanSolver, solve_plan

__all__ = [
    "CrawlInstance",
    "CrawlMeasures",
    "CycleSettings",
    "InstanceError",
    "ObjectiveWeights",
    "PlanInputs",
    "PlanOutcome",
    "PlanSolution",
    "PlanSolver",
    "PlannedCycle",
    "Schedule",
    "ScheduleError",
    "SolveStatus",
    "SolverRecord",
    "Strategy",
    "WarmStart",
    "bucket_intervals",
    "paper_instance",
    "plan_cycle",
    "plan_inputs",
    "refresh_schedule",
    "select_due_pages",
    "solve_plan",
    "strategy_weights",
]

_EXPORTS = {
    "CrawlMeasures": "planner.cycle.plan_cycle",
    "CycleSettings": "planner.cycle.plan_cycle",
    "PlanOutcome": "planner.cycle.plan_cycle",
    "SolverRecord": "planner.cycle.plan_cycle",
    "WarmStart": "planner.cycle.plan_cycle",
    "plan_cycle": "planner.cycle.plan_cycle",
    "PlanInputs": "planner.cycle.plan_inputs",
    "PlannedCycle": "planner.cycle.plan_inputs",
    "plan_inputs": "planner.cycle.plan_inputs",
    "select_due_pages": "planner.cycle.due_urls",
    "CrawlInstance": "planner.model.instance",
    "InstanceError": "planner.model.instance",
    "paper_instance": "planner.model.paper_instances",
    "ObjectiveWeights": "planner.model.weights",
    "Strategy": "planner.model.weights",
    "strategy_weights": "planner.model.weights",
    "PlanSolution": "planner.solver.plan_solver",
    "PlanSolver": "planner.solver.plan_solver",
    "solve_plan": "planner.solver.plan_solver",
    "SolveStatus": "planner.solver.ipopt",
    "bucket_intervals": "planner.schedules.optimal",
    "refresh_schedule": "planner.schedules.optimal",
    "Schedule": "planner.schedules.optimal",
    "ScheduleError": "planner.schedules.optimal",
}


def __getattr__(name: str) -> Any:
    """Import an exported name's module on first use (module docstring)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
