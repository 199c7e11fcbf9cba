"""``crawlplan scenario``: list and run what-if scenarios, and what-if the live plan.

* ``crawlplan scenario list`` shows the shipped scenarios.
* ``crawlplan scenario run NAME|FILE --out DIR [--quick]`` runs a shipped scenario or a
  scenario file and writes its report (:mod:`scenarios.reports`).
* ``crawlplan scenario whatif --capacity ... --strategy ... --periods ...`` plans the next
  cycle as the nightly run would, with changed parameters, and prints the difference against
  the published plan, without writing anything.

Wiring only: the simulation is :mod:`scenarios`, the plan :mod:`service.nightly`'s dry run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.support import err, fail, out, user_errors

if TYPE_CHECKING:
    from planner.cycle.plan_inputs import PlannedCycle
    from service.nightly import NightlyReport, NightlySettings
    from store import Database
    from store.plans import PlanDetail, PlanSummary

__all__ = ["scenario_app"]

scenario_app = typer.Typer(
    help="What-if scenarios: simulate policies on synthetic webs with known ground truth.",
    no_args_is_help=True,
)


@scenario_app.command("list")
@user_errors
def list_scenarios() -> None:
    """Show the shipped scenarios (run one with `crawlplan scenario run NAME --out DIR`)."""
    from scenarios.runner import reference_policies
    from scenarios.scenario_files import ScenarioError, shipped_scenarios

    try:
        scenarios = shipped_scenarios()
    except ScenarioError as error:
        raise fail(str(error)) from None
    for scenario in scenarios:
        policies = reference_policies(scenario)[0]  # with the reference runs added
        runs = len(scenario.variants) * len(policies) * len(scenario.seeds)
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
    from scenarios.policies import PolicyError
    from scenarios.reports import key_table, write_report
    from scenarios.runner import run_scenario
    from scenarios.scenario_files import ScenarioError, load_scenario
    from scenarios.simulator import SimulationError

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
    for note in result.notes:
        out.print(f"note: {note}", markup=False)
    out.print(f"report: {paths[0]} ({result.seconds:.1f} s)", markup=False)


def _strategy_number(label: str) -> int | None:
    digits = [c for c in label if c.isdigit()]
    return int(digits[-1]) if digits and digits[-1] in "123" else None


def _outcome(report: NightlyReport) -> str:
    """The solve's status line: what the cycle leaves behind, and its crawls."""
    solver, cycle = report.solver, report.cycle
    assert cycle is not None
    parts = [str(solver.get("status", "?"))]
    if "objective" in solver:
        parts.append(f"objective {solver['objective']:,.1f}")
    if "obsolete_at_cycle_end" in solver:
        parts.append(
            f"obsolete pages at the cycle's end {solver['obsolete_at_cycle_end']:,.0f}, new pages "
            f"left {solver['new_left_at_cycle_end']:,.0f}"
        )
    recrawls = sum(sum(q.values()) for q in cycle.quotas)
    parts.append(f"{recrawls:,} re-crawls and {sum(cycle.new_pages):,} new pages over the cycle")
    return ", ".join(parts)


def _dry_run(db: Database, settings: NightlySettings, now: datetime) -> NightlyReport:
    """The nightly run's plan for ``settings`` at ``now``, on the store as it is (estimates,
    importance and aggregates as the last nightly run left them); nothing written."""
    from service.nightly import run_nightly

    report = run_nightly(db, settings, dry_run=True, now=now)
    if report.status == "failed":
        raise fail(report.message, code=1)  # as `crawlplan nightly` exits when the solve fails
    if report.inputs is None or report.inputs.instance is None:
        raise fail(
            "no page has a change-rate bucket yet: run `crawlplan estimate` (or a nightly "
            "run) first"
        )
    return report


@scenario_app.command("whatif")
@user_errors
def whatif(
    capacity: Annotated[
        float, typer.Option("--capacity", help="Crawls per period to plan with.", min=1)
    ],
    strategy: Annotated[int, typer.Option("--strategy", help="1, 2 or 3.", min=1, max=3)] = 3,
    periods: Annotated[int, typer.Option("--periods", help="Periods T.", min=1, max=56)] = 14,
) -> None:
    """Plan the next cycle as the nightly run would (same inputs, solver, spare-capacity fill
    and exploration), with changed capacity, strategy or periods, and print what changes
    against the published plan; nothing is written."""
    from service.config import load_settings
    from service.nightly import NightlySettings
    from store import open_database
    from store.plans import latest_plan, plan_detail

    settings = load_settings()
    base = NightlySettings.from_config(settings)
    db = open_database(settings.db_url)
    published = latest_plan(db)
    if published is not None:
        base = replace(base, period_days=published.period_days)
    asked = replace(base, capacity=capacity, strategy=strategy, periods=periods)
    at = datetime.now(UTC)
    report = _dry_run(db, asked, at)
    assert report.inputs is not None and report.inputs.instance is not None
    instance = report.inputs.instance
    out.print(
        f"what-if (capacity {capacity:g}/period, strategy {strategy}, {periods} periods of "
        f"{asked.period_days:g} days; {int(instance.b0.sum()):,} pages in {instance.buckets} "
        f"buckets, {report.inputs.new_pages:,} new): {_outcome(report)}",
        markup=False,
    )
    if published is None:
        out.print("no published plan to compare with", markup=False)
        return
    detail = plan_detail(db, published.version)
    published_capacity, again = _replan_published(db, base, published, detail, at, report)
    replanned = again.cycle if again.status == "dry-run" else None
    out.print(
        f"published plan v{published.version} (capacity {published_capacity:,.0f}/period, "
        f"{published.strategy}, {published.periods} periods), planned again on today's "
        f"store: {_outcome(again) if replanned is not None else again.message}",
        markup=False,
    )
    _print_comparison(report, published, detail, replanned)


def _replan_published(
    db: Database,
    base: NightlySettings,
    published: PlanSummary,
    detail: PlanDetail,
    at: datetime,
    report: NightlyReport,
) -> tuple[float, NightlyReport]:
    """The published plan's own parameters planned again on today's store (a dry run that
    reuses the what-if's reading): the what-if's changes against it are the parameters'
    alone, as the published quotas were planned on older estimates. Returns the published
    plan's capacity (crawls per period) and the dry run's report."""
    from service.nightly import run_nightly

    capacities = [c for c in detail.capacity.values() if c > 0]
    published_capacity = (
        sum(capacities) / len(capacities)
        if capacities
        else max((published.total_quota + published.total_new_pages) / published.periods, 1.0)
    )
    again = run_nightly(
        db,
        replace(
            base,
            capacity=published_capacity,
            strategy=_strategy_number(published.strategy) or base.strategy,
            periods=published.periods,
        ),
        dry_run=True,
        now=at,
        reading=report.reading,  # the same store at the same time: read once
    )
    return published_capacity, again


def _print_comparison(
    report: NightlyReport,
    published: PlanSummary,
    detail: PlanDetail,
    replanned: PlannedCycle | None,
) -> None:
    """Crawls per cycle and bucket: published, re-planned, what-if, and the change."""
    from planner.cycle.plan_cycle import class_label

    assert report.cycle is not None and report.inputs is not None
    assert report.inputs.instance is not None
    instance = report.inputs.instance
    was = _per_bucket(detail.quotas.items())
    now = _per_bucket(((t, b), n) for t, q in enumerate(report.cycle.quotas) for b, n in q.items())
    redo = (
        _per_bucket(((t, b), n) for t, q in enumerate(replanned.quotas) for b, n in q.items())
        if replanned is not None
        else None
    )
    out.print(
        "crawls per cycle: published (in force), re-planned (its parameters, today's store), "
        "what-if; change: what-if against re-planned (against published if that failed)",
        markup=False,
    )
    out.print(
        f"{'bucket':>6} {'pages':>7} {'published':>10} {'re-planned':>10} {'what-if':>8} "
        f"{'change':>7}",
        markup=False,
    )
    rows: list[tuple[str, str, int, int | None, int]] = [
        (
            class_label(bucket),
            str(int(instance.b0[k])),
            was.get(bucket, 0),
            None if redo is None else redo.get(bucket, 0),
            now.get(bucket, 0),
        )
        for k, bucket in enumerate(report.inputs.bucket_ids.tolist())
    ]
    # Buckets the plan in force crawls that hold no page today (their pages moved).
    gone = sorted(set(was) - set(report.inputs.bucket_ids.tolist()))
    rows += [
        (class_label(b), "0", was[b], None if redo is None else redo.get(b, 0), now.get(b, 0))
        for b in gone
    ]
    rows.append(
        (
            "new",
            "",
            published.total_new_pages,
            None if replanned is None else sum(replanned.new_pages),
            sum(report.cycle.new_pages),
        )
    )
    for label, pages, before, again_n, after in rows:
        versus = before if again_n is None else again_n
        shown = "-" if again_n is None else str(again_n)
        out.print(
            f"{label:>6} {pages:>7} {before:>10} {shown:>10} {after:>8} {after - versus:>+7}",
            markup=False,
        )


def _per_bucket(quotas: Iterable[tuple[tuple[int, int], int]]) -> dict[int, int]:
    """Crawls per bucket over a cycle, from ``((period, bucket), pages)`` pairs."""
    total: dict[int, int] = {}
    for (_, bucket), pages in quotas:
        total[bucket] = total.get(bucket, 0) + pages
    return total
