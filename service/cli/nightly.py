"""``crawlplan nightly``: measure, estimate, aggregate, solve, publish and schedule a plan.

Wiring and printing only: the pipeline is :func:`service.nightly.run_nightly`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.options import ConfigOption, DbOption
from service.cli.support import (
    counted,
    err,
    fail,
    freeze_start_up,
    open_checked,
    out,
    settings_from,
    user_errors,
)

if TYPE_CHECKING:
    from rich.table import Table

    from service.nightly import NightlyReport, NightlySettings

__all__ = ["nightly"]


@user_errors
def nightly(
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Plan from the estimates in the store and print how the new plan differs "
            "from the current one; write nothing.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Plan again even if this cycle already has a plan.")
    ] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Nightly plan generation: measure, estimate, importance, aggregate, solve, publish,
    schedule pages.

    Publishes the new plan version atomically (workers lease from the previous plan until
    then). Safe to re-run: a cycle already planned is left alone, and a run killed half-way is
    completed by the next. Exit code 0 when a plan is in place, 1 when the solver found none
    (the previous plan stays current), 2 on a user error such as a missing capacity, 75 when
    another nightly run is still running (try again later).
    [plan] settings in crawlplan.toml: period_days, periods, strategy, capacity, window_days,
    objective (`crawlplan config` lists them).
    """
    from service.nightly import NightlySettings, run_nightly
    from store.errors import NightlyRunBusyError

    freeze_start_up()

    settings = settings_from(db, config)
    nightly_settings = NightlySettings.from_config(settings)
    database = open_checked(settings)
    try:
        report = run_nightly(
            database,
            nightly_settings,
            dry_run=dry_run,
            force=force,
            say=lambda line: err.print(f"  {line}", markup=False),
        )
    except NightlyRunBusyError as error:
        raise fail(str(error), code=75) from None
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in report.stages.items())
    if report.resumed is not None:
        out.print(f"finished the page schedule of plan {report.resumed} (an interrupted run)")
    if report.status in ("unchanged", "resumed"):
        out.print(f"{report.message}; nothing to do (--force plans again)", markup=False)
        return
    if report.status == "failed":
        err.print(f"error: {report.message}; the current plan stays in place", markup=False)
        raise typer.Exit(1)
    _print_cycle(report, nightly_settings)
    assert report.cycle is not None
    if report.status == "dry-run":
        out.print(_cycle_table(report, nightly_settings.periods))
        out.print(f"dry run: nothing written ({timings})", markup=False)
        return
    recrawls = sum(sum(q.values()) for q in report.cycle.quotas)
    probes = f", {counted(report.probes, 'page')} probed" if report.probes else ""
    if report.follow_ups:
        probes += f", {counted(report.follow_ups, 'page')} to follow up"
    out.print(
        f"published plan {report.plan}: {recrawls:,} "
        f"re-crawls and {sum(report.cycle.new_pages):,} new pages over the cycle{probes} "
        f"({timings})",
        markup=False,
    )


def _print_cycle(report: NightlyReport, settings: NightlySettings) -> None:
    """The planned cycle's inputs (periods, buckets, capacity, discovery) and the solver."""
    inputs = report.inputs
    assert inputs is not None and report.cycle is not None
    solver = report.solver
    d = inputs.discovery
    out.print(
        f"cycle from {report.cycle_start:%Y-%m-%d %H:%M:%S} UTC: "
        f"{counted(settings.periods, 'period')} of "
        f"{counted(settings.period_days, 'day')}, "
        f"{counted(len(inputs.bucket_ids), 'bucket')} with pages, "
        f"{inputs.new_pages:,} new pages; capacity {inputs.capacity_crawls:,.0f} crawls per "
        f"period at {inputs.seconds_per_fetch:.3f} s each; discovery per crawl: old "
        f"{d.oldnwt:.3g}, new {d.newnwt:.3g}, outside {d.nconst:.3g} per period ({d.method})",
        markup=False,
    )
    if "objective" in solver:
        out.print(
            f"solver: {solver['status']}, objective {solver['objective']:.6g}, "
            f"{solver.get('iterations', 0)} iterations",
            markup=False,
        )
    else:
        out.print(f"solver: not needed ({solver.get('note', solver.get('status'))})", markup=False)


def _cycle_table(report: NightlyReport, periods: int) -> Table:
    """Per bucket: pages per period in the current plan and in the new cycle."""
    from rich.table import Table

    from planner.cycle.plan_cycle import class_label

    assert report.cycle is not None
    new: dict[int, float] = {}
    for quotas in report.cycle.quotas:
        for bucket, pages in quotas.items():
            new[bucket] = new.get(bucket, 0.0) + pages / periods
    old: dict[int, float] = {}
    current_periods = report.current.periods if report.current else 1
    for (_period, bucket), pages in report.current_quotas.items():
        old[bucket] = old.get(bucket, 0.0) + pages / current_periods
    table = Table("bucket", "current /period", "new /period", "change", box=None)
    changes = sorted(set(new) | set(old), key=lambda b: -abs(new.get(b, 0) - old.get(b, 0)))
    for bucket in sorted(changes[:15]):
        a, b = old.get(bucket, 0.0), new.get(bucket, 0.0)
        table.add_row(class_label(bucket), f"{a:,.1f}", f"{b:,.1f}", f"{b - a:+,.1f}")
    cur_new = sum(report.current_new_pages.values()) / current_periods
    new_new = sum(report.cycle.new_pages) / periods
    table.add_row("new", f"{cur_new:,.1f}", f"{new_new:,.1f}", f"{new_new - cur_new:+,.1f}")
    return table
