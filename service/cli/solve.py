"""``crawlplan solve``: the plan of one instance file (or a paper instance), either model.

File in, file out: no store. Pyomo and Ipopt are imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.support import err, fail, out, user_errors

if TYPE_CHECKING:
    from planner.model.instance import CrawlInstance
    from planner.model.weights import ObjectiveWeights

__all__ = ["solve"]

#: The steady-rate model's objectives (planner.model.steady_rates.STEADY_OBJECTIVES; listed
#: here so that ``--help`` does not import Pyomo).
_OBJECTIVES = ("freshness", "obsolescence", "harmonic", "binary")


@user_errors
def solve(
    instance_file: Annotated[
        Path | None,
        typer.Argument(help="Instance JSON (see docs/model.md for the keys).", show_default=False),
    ] = None,
    out_file: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the solution JSON.")
    ] = Path("solution.json"),
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="steady (the nightly default) or webfountain (the paper's; the default "
            "with --paper).",
            show_default=False,
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            "--objective", help="The steady-rate model's objective: " + ", ".join(_OBJECTIVES)
        ),
    ] = "freshness",
    strategy: Annotated[
        int,
        typer.Option(
            "--strategy", "-s", min=1, max=3, help="The paper's strategy 1, 2 or 3 (webfountain)."
        ),
    ] = 3,
    paper: Annotated[
        int | None,
        typer.Option(
            "--paper",
            min=1,
            max=3,
            help="Solve the paper's instance v1, v2 or v3 instead.",
            show_default=False,
        ),
    ] = None,
    periods: Annotated[
        int | None,
        typer.Option(
            "--periods", min=1, help="With --paper: periods T (default 14).", show_default=False
        ),
    ] = None,
    starts: Annotated[
        int, typer.Option("--starts", min=1, help="Solve from this many starting points.")
    ] = 1,
    write_instance: Annotated[
        Path | None,
        typer.Option(
            "--write-instance", help="Also write the instance solved (JSON).", show_default=False
        ),
    ] = None,
) -> None:
    """Solve the plan for one instance: per-period quotas per change-rate bucket.

    Exit code 0 when the solver found an optimal (or acceptable) plan, 1 when it did not
    (the solution file still says why).
    """
    from planner.cycle.solution_mapping import solution_mapping, steady_solution_mapping
    from planner.model.steady_rates import SteadySetup
    from planner.solver.plan_solver import PlanSolver
    from planner.solver.steady_solver import solve_steady
    from service.files import write_json

    if (instance_file is None) == (paper is None):
        raise fail("pass an instance file or --paper 1|2|3 (one of them)")
    chosen = model or ("webfountain" if paper is not None else "steady")
    if chosen not in ("steady", "webfountain"):
        raise fail(f"--model: use steady or webfountain, got {chosen!r}")
    if objective not in _OBJECTIVES:
        raise fail(f"--objective: use one of {', '.join(_OBJECTIVES)}, got {objective!r}")
    instance, weights, source = _instance(instance_file, paper, periods, strategy)
    if write_instance is not None:
        write_json(write_instance, instance.to_mapping())
    label = f"steady-rate model, {objective}" if chosen == "steady" else weights.label
    err.print(
        f"solving {source}: B = {instance.buckets} buckets, T = {instance.periods} periods, "
        f"{label} ...",
        markup=False,
    )
    if chosen == "steady":
        steady = solve_steady(instance, SteadySetup(objective=objective))
        write_json(out_file, steady_solution_mapping(instance, steady, objective))
        status, message = steady.status, steady.message
        figures = (steady.objective, steady.iterations, steady.build_seconds)
        solve_seconds = steady.solve_seconds
    else:
        solution = PlanSolver(instance, weights).solve(starts=starts)
        write_json(out_file, solution_mapping(instance, solution))
        status, message = solution.status, solution.message
        figures = (solution.objective, solution.iterations, solution.build_seconds)
        solve_seconds = solution.solve_seconds
    out.print(
        f"{status.value}: objective {figures[0]:.6g} after {figures[1]} iterations (build "
        f"{figures[2]:.1f} s, solve {solve_seconds:.1f} s); written to {out_file}",
        markup=False,
    )
    if not status.ok:
        err.print(f"error: the solver did not find a plan: {message}", markup=False)
        raise typer.Exit(1)


def _instance(
    instance_file: Path | None, paper: int | None, periods: int | None, strategy: int
) -> tuple[CrawlInstance, ObjectiveWeights, str]:
    """The instance to solve, its objective weights and a label saying where it came from."""
    from planner.model.instance import CrawlInstance
    from planner.model.paper_instances import paper_instance
    from planner.model.weights import strategy_weights, weights_from_mapping
    from service.errors import InputFileError
    from service.files import read_json

    if paper is not None:
        instance = paper_instance(paper, **({"periods": periods} if periods else {}))
        weights = strategy_weights(strategy, instance.buckets, instance.periods)
        return instance, weights, f"paper instance v{paper}"
    assert instance_file is not None
    data = read_json(instance_file)
    if not isinstance(data, dict):
        raise InputFileError(f"{instance_file}: expected a JSON object with instance keys")
    instance = CrawlInstance.from_mapping(data)
    return instance, weights_from_mapping(data, instance, strategy), str(instance_file)
