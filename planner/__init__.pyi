"""Type stub of the exports; lazy_loader reads it to load each name's module on first use."""

from .cycle.due_urls import select_due_pages as select_due_pages
from .cycle.plan_cycle import (
    CrawlMeasures as CrawlMeasures,
)
from .cycle.plan_cycle import (
    CycleSettings as CycleSettings,
)
from .cycle.plan_cycle import (
    PlanOutcome as PlanOutcome,
)
from .cycle.plan_cycle import (
    SolverRecord as SolverRecord,
)
from .cycle.plan_cycle import (
    WarmStart as WarmStart,
)
from .cycle.plan_cycle import (
    plan_cycle as plan_cycle,
)
from .cycle.plan_inputs import (
    PlanInputs as PlanInputs,
)
from .cycle.plan_inputs import (
    PlannedCycle as PlannedCycle,
)
from .cycle.plan_inputs import (
    plan_inputs as plan_inputs,
)
from .model.instance import CrawlInstance as CrawlInstance
from .model.instance import InstanceError as InstanceError
from .model.paper_instances import paper_instance as paper_instance
from .model.steady_rates import (
    SteadySetup as SteadySetup,
)
from .model.weights import (
    ObjectiveWeights as ObjectiveWeights,
)
from .model.weights import (
    Strategy as Strategy,
)
from .model.weights import (
    strategy_weights as strategy_weights,
)
from .schedules.optimal import (
    Schedule as Schedule,
)
from .schedules.optimal import (
    ScheduleError as ScheduleError,
)
from .schedules.optimal import (
    bucket_intervals as bucket_intervals,
)
from .schedules.optimal import (
    refresh_schedule as refresh_schedule,
)
from .solver.ipopt import SolveStatus as SolveStatus
from .solver.plan_solver import (
    PlanSolution as PlanSolution,
)
from .solver.plan_solver import (
    PlanSolver as PlanSolver,
)
from .solver.plan_solver import (
    solve_plan as solve_plan,
)
from .solver.steady_solver import (
    SteadySolution as SteadySolution,
)
from .solver.steady_solver import (
    solve_steady as solve_steady,
)
