"""``crawlplan release``: release the current plan period's work to the workers."""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli.options import OBJECTIVE_NAMES, ConfigOption, DbOption
from service.cli.progress import release_line
from service.cli.support import fail, open_checked, out, settings_from, user_errors

__all__ = ["release"]


@user_errors
def release(
    reschedule: Annotated[
        bool,
        typer.Option(
            "--reschedule",
            help="First give every fetched page its refresh interval from the current plan "
            "(the nightly page schedule), then release.",
        ),
    ] = False,
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="Page-level schedule inside each bucket's quota (with --reschedule): "
            + ", ".join(OBJECTIVE_NAMES)
            + ".",
        ),
    ] = "obsolescence",
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Release the current plan period's work to the workers (once per period).

    Spends the period's re-crawl quotas, pooled, on the pages most overdue for their
    bucket's planned revisit interval, and the new-page quota on new pages by OPIC cash,
    within each host's polite capacity; crawls the due pages cannot use go to new pages and
    pages not due yet by the plan's marginal values. Gives each a due time inside the
    period. `crawlplan crawl` does this by itself when a period begins.
    """
    from planner.schedules.objectives import OBJECTIVES
    from service.page_schedule import schedule_pages
    from service.pipeline import release_period

    if objective not in OBJECTIVES:
        raise fail(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    settings = settings_from(db, config)
    database = open_checked(settings)
    if reschedule:
        done = schedule_pages(database, objective=objective)
        if done.plan is None:
            raise fail("no plan has been published yet: publish one first (crawlplan nightly)")
        out.print(
            f"scheduled {done.scheduled:,} pages of plan {done.plan} ({objective}); "
            f"{done.unscheduled:,} in buckets without a quota this cycle ({done.seconds:.1f} s)"
        )
    summary = release_period(database, min_delay_seconds=float(settings.values["crawl.min_delay"]))
    if summary.status == "released":
        release_line(summary, out)
    elif summary.status == "no plan":
        raise fail("no plan has been published yet: nothing to release")
    elif summary.status == "not scheduled yet":
        raise fail(
            f"plan {summary.plan} has no page schedule yet: run `crawlplan release "
            "--reschedule` (the nightly pipeline runs it after publishing a plan)"
        )
    else:
        out.print(
            f"plan {summary.plan}: {summary.status}"
            + (f" (period {summary.period})" if summary.period else "")
        )
