"""``crawlplan scenario``: list and run what-if scenarios, and what-if the live plan.

* ``crawlplan scenario list`` shows the shipped scenarios.
* ``crawlplan scenario run NAME|FILE --out DIR [--quick]`` runs a shipped scenario or a
  scenario file and writes its report (:mod:`scenarios.reports`).
* ``crawlplan scenario whatif --capacity ... --strategy ... --periods ...`` re-solves the
  plan from the live store's current bucket aggregates with changed parameters and prints the
  difference against the published plan's inputs, without writing anything.

Wiring only: the simulation is :mod:`scenarios`, the solve :mod:`planner.plan_solver`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from planner.cli_support import err, fail, out, user_errors
from planner.crawl_instance import CrawlInstance
from planner.plan_inputs import model_horizon, planning_weights
from planner.plan_solver import solve_plan
from planner.quotas import integer_quotas
from scenarios.policies import PolicyError
from scenarios.reports import key_table, write_report
from scenarios.runner import run_scenario
from scenarios.scenario_files import ScenarioError, load_scenario, shipped_scenarios
from scenarios.simulator import SimulationError

__all__ = ["scenario_app", "whatif_instance"]

scenario_app = typer.Typer(
    help="What-if scenarios: simulate policies on synthetic webs with known ground truth.",
    no_args_is_help=True,
)


@scenario_app.command("list")
@user_errors
def list_scenarios() -> None:
    """Show the shipped scenarios (run one with `crawlplan scenario run NAME --out DIR`)."""
    try:
        scenarios = shipped_scenarios()
    except ScenarioError as error:
        raise fail(str(error)) from None
    for scenario in scenarios:
        runs = len(scenario.variants) * len(scenario.policies) * len(scenario.seeds)
        pages = max(v.world.pages for v in scenario.variants)
        out.print(
            f"{scenario.name:<22} {scenario.title} "
            f"({runs} runs, {pages:,} pages, {scenario.warmup}+{scenario.periods} periods)",
            markup=False,
        )


@scenario_app.command("run")
@user_errors
def run(
    scenario: Annotated[str, typer.Argument(help="A shipped scenario's name or a .toml file.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for the report.")],
    quick: Annotated[
        bool, typer.Option("--quick", help="At most 4,000 pages and the first seed only.")
    ] = False,
) -> None:
    """Run a scenario and write its report: markdown, CSV of every metric, PNG plots."""
    try:
        loaded = load_scenario(scenario)
        if quick:
            loaded = loaded.quick_version()
        result = run_scenario(loaded, progress=lambda line: err.print(line, markup=False))
        paths = write_report(result, out_dir)
    except (ScenarioError, PolicyError, SimulationError) as error:
        raise fail(str(error)) from None
    except OSError as error:
        raise fail(f"{out_dir}: cannot write the report: {error.strerror or error}") from None
    table = key_table(result)
    out.print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"), markup=False)
    out.print(f"report: {paths[0]} ({result.seconds:.1f} s)", markup=False)


def whatif_instance(
    pages: np.ndarray,
    change_fraction: np.ndarray,
    obsolete: np.ndarray,
    new_pages: int,
    *,
    periods: int,
    capacity: float,
) -> CrawlInstance:
    """A planning instance from bucket aggregates (index 0 = no estimate, as in
    :class:`estimators.buckets.BucketAggregates`), over the populated buckets only, one second
    per crawl. Pages without an estimate count as new uncrawled pages."""
    populated = np.flatnonzero(pages[1:] > 0) + 1
    if populated.size == 0:
        raise ValueError("no page has a change-rate bucket yet: run `crawlplan estimate` first")
    b0 = pages[populated].astype(float)
    a = np.clip(np.nan_to_num(change_fraction[populated]), 0.0, 1.0)
    return CrawlInstance.from_mapping(
        {
            "periods": periods,
            "buckets": int(populated.size),
            "b0": b0,
            "y0": np.minimum(np.nan_to_num(obsolete[populated]), b0),
            "n0": float(new_pages + int(pages[0])),
            "a": np.repeat(a[:, None], periods, axis=1),
            "capacity": float(capacity),
            "crawl_cost": 1.0,
            "new_crawl_cost": 1.0,
            "oldnwt": 0.0,
            "newnwt": 0.0,
            "nconst": 0.0,
        }
    )


def _strategy_number(label: str) -> int | None:
    digits = [c for c in label if c.isdigit()]
    return int(digits[-1]) if digits and digits[-1] in "123" else None


def _cycle_quotas(
    instance: CrawlInstance, strategy: int, periods: int, capacity: float
) -> tuple[np.ndarray, int, str]:
    """Crawls per bucket over the first ``periods`` periods (the cycle) of the instance's
    horizon (B,), new pages over the cycle, and a status line; weighted as the nightly run
    weighs (:func:`planner.plan_inputs.planning_weights`)."""
    solution = solve_plan(instance, planning_weights(instance, strategy, capacity))
    before, _ = solution.trajectory.before(instance)
    quotas = integer_quotas(
        solution.trajectory.x,
        solution.trajectory.z,
        instance.crawl_cost,
        instance.new_crawl_cost,
        instance.capacity,
        available=before,
    )
    line = (
        f"{solution.status.name}, objective {solution.objective:,.1f}, obsolete pages at the "
        f"cycle's end {float(solution.trajectory.y[:, periods - 1].sum()):,.0f}, new pages left "
        f"{max(float(solution.trajectory.n[periods - 1]), 0.0):,.0f} (objectives of different "
        "strategies are not comparable; obsolete pages are)"
    )
    return quotas.old[:, :periods].sum(axis=1), int(quotas.new[:periods].sum()), line


@scenario_app.command("whatif")
@user_errors
def whatif(
    capacity: Annotated[
        float, typer.Option("--capacity", help="Crawls per period to plan with.", min=1)
    ],
    strategy: Annotated[int, typer.Option("--strategy", help="1, 2 or 3.", min=1, max=3)] = 3,
    periods: Annotated[int, typer.Option("--periods", help="Periods T.", min=1, max=56)] = 14,
) -> None:
    """Re-solve the plan from the live store's bucket aggregates with changed parameters and
    print what changes against the published plan; nothing is written."""
    from planner.config import load_settings
    from planner.pipeline import aggregates_from_store
    from store import open_database
    from store.plans import latest_plan, plan_detail

    settings = load_settings()
    db = open_database(settings.db_url)
    published = latest_plan(db)
    period_days = published.period_days if published else float(settings.values["plan.period_days"])
    aggregates = aggregates_from_store(db, period_days=period_days)
    agg = aggregates.buckets
    try:
        instance = whatif_instance(
            agg.pages,
            agg.change_fraction,
            agg.obsolete,
            aggregates.new_pages,
            periods=model_horizon(periods, int(settings.values["plan.horizon"])),
            capacity=capacity,
        )
    except ValueError as error:
        raise fail(str(error)) from None
    populated = np.flatnonzero(agg.pages[1:] > 0) + 1
    old, new, line = _cycle_quotas(instance, strategy, periods, capacity)
    out.print(
        f"what-if (capacity {capacity:g}/period, strategy {strategy}, {periods} periods of "
        f"{period_days:g} days; {int(instance.b0.sum()):,} pages in {instance.buckets} "
        f"buckets, {instance.n0:,.0f} new): {line}",
        markup=False,
    )
    if published is None:
        out.print("no published plan to compare with", markup=False)
        return
    detail = plan_detail(db, published.version)
    by_bucket: dict[int, int] = {}
    for (_, bucket), pages in detail.quotas.items():
        by_bucket[bucket] = by_bucket.get(bucket, 0) + pages
    published_capacity = (published.total_quota + published.total_new_pages) / published.periods
    number = _strategy_number(published.strategy) or 3
    same = whatif_instance(
        agg.pages,
        agg.change_fraction,
        agg.obsolete,
        aggregates.new_pages,
        periods=model_horizon(published.periods, int(settings.values["plan.horizon"])),
        capacity=max(published_capacity, 1.0),
    )
    _, _, same_line = _cycle_quotas(same, number, published.periods, max(published_capacity, 1.0))
    out.print(
        f"published plan v{published.version} (capacity {published_capacity:,.0f}/period, "
        f"{published.strategy}, {published.periods} periods), re-solved on today's "
        f"aggregates: {same_line}",
        markup=False,
    )
    out.print("bucket  pages  published crawls/cycle  what-if crawls/cycle  change", markup=False)
    for k, bucket_id in enumerate(populated.tolist()):
        was = by_bucket.get(bucket_id, 0)
        now = int(old[k])
        out.print(
            f"{bucket_id:>6} {int(agg.pages[bucket_id]):>6} {was:>23} {now:>21} {now - was:>+7}",
            markup=False,
        )
    out.print(
        f"{'new':>6} {'':>6} {published.total_new_pages:>23} {new:>21} "
        f"{new - published.total_new_pages:>+7}",
        markup=False,
    )
