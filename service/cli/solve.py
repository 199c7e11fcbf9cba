"""``crawlplan solve``: the WebFountain plan of one instance file (or a paper instance).

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


@user_errors
def solve(
    instance_file: Annotated[
        Path | None,
        typer.Argument(help="Instance JSON (see docs/model.md for the keys).", show_default=False),
    ] = None,
    out_file: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the solution JSON.")
    ] = Path("solution.json"),
    strategy: Annotated[
        int, typer.Option("--strategy", "-s", min=1, max=3, help="The paper's strategy 1, 2 or 3.")
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
    """Solve the WebFountain plan for one instance: per-period quotas per change-rate bucket.

    Exit code 0 when the solver found an optimal (or acceptable) plan, 1 when it did not
    (the solution file still says why).
    """
    from planner.cycle.solution_mapping import solution_mapping
    from planner.solver.plan_solver import PlanSolver
    from service.files import write_json

    if (instance_file is None) == (paper is None):
        raise fail("pass an instance file or --paper 1|2|3 (one of them)")
    instance, weights, source = _instance(instance_file, paper, periods, strategy)
    if write_instance is not None:
        write_json(write_instance, instance.to_mapping())
    err.print(
        f"solving {source}: B = {instance.buckets} buckets, T = {instance.periods} periods, "
        f"{weights.label} ...",
        markup=False,
    )
    solution = PlanSolver(instance, weights).solve(starts=starts)
    write_json(out_file, solution_mapping(instance, solution))
    out.print(
        f"{solution.status.value}: objective {solution.objective:.6g} after "
        f"{solution.iterations} iterations (build {solution.build_seconds:.1f} s, solve "
        f"{solution.solve_seconds:.1f} s); written to {out_file}",
        markup=False,
    )
    if not solution.status.ok:
        err.print(f"error: the solver did not find a plan: {solution.message}", markup=False)
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
