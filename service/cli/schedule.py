"""``crawlplan schedule``: each page's optimal refresh rate and interval for a bandwidth.

File in, file out: pages (and optionally hosts and bounds) in, the schedule out. The
schedule itself is :func:`planner.schedules.optimal.refresh_schedule`; the files are
:mod:`service.schedule_files`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from service.cli.options import OBJECTIVE_NAMES
from service.cli.support import err, fail, out, user_errors

__all__ = ["schedule"]


# The command's options, declared once each, so that its signature reads at a glance.
PagesOption = Annotated[
    Path | None,
    typer.Option(
        "--pages",
        "-i",
        help="CSV or Parquet, one row per page: page, rate (changes per period), optional "
        "importance (>= 0) and host.",
        show_default=False,
    ),
]
BandwidthOption = Annotated[
    float | None,
    typer.Option(
        "--bandwidth", "-g", help="Crawls per period (G), 1e-12 to 1e15.", show_default=False
    ),
]
ObjectiveOption = Annotated[
    str,
    typer.Option("--objective", help=f"What to optimize: {', '.join(OBJECTIVE_NAMES)}."),
]
HostsOption = Annotated[
    Path | None,
    typer.Option(
        "--hosts",
        help="CSV or Parquet, one row per host: host, capacity (crawls per period; empty: "
        "no limit), optional min_interval, max_interval (periods). Pages without a host "
        "column are on their URL's origin scheme://host[:port].",
        show_default=False,
    ),
]
BoundsOption = Annotated[
    Path | None,
    typer.Option(
        "--bounds",
        help="CSV or Parquet: pattern (a glob on the page URL: * any run, ? one "
        "character), optional min_interval, max_interval (periods). The first matching "
        "pattern wins and overrides the host's bounds.",
        show_default=False,
    ),
]
DiscoveryShareOption = Annotated[
    float,
    typer.Option("--discovery-share", help="Share of the bandwidth kept for new pages, in [0, 1)."),
]
OutFileOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="CSV or Parquet: page, refresh_rate (crawls per period), interval (periods; "
        "inf: never refreshed), host.",
        show_default=False,
    ),
]


@user_errors
def schedule(
    pages: PagesOption = None,
    bandwidth: BandwidthOption = None,
    objective: ObjectiveOption = "obsolescence",
    hosts: HostsOption = None,
    bounds: BoundsOption = None,
    discovery_share: DiscoveryShareOption = 0.0,
    out_file: OutFileOption = None,
) -> None:
    """Optimal refresh rate and interval of every page for a bandwidth (Xyleme's schedule
    and its freshness, harmonic and binary variants), within host capacities and bounds.

    Prints one summary line: the bandwidth multiplier, the objective's value, the hosts whose
    capacity binds (with their multipliers) and the bandwidth left unspent. Hosts whose
    capacity cannot meet their pages' max intervals get a warning; the schedule is written.
    """
    from planner.schedules.objectives import OBJECTIVES
    from planner.schedules.optimal import refresh_schedule
    from service.files import write_table
    from service.schedule_files import describe_schedule, read_schedule_inputs, schedule_table

    if pages is None or out_file is None or bandwidth is None:
        raise fail("pass --pages FILE, --bandwidth G and --out FILE (.csv or .parquet)")
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise fail(
            f"--bandwidth must be a finite number > 0 (crawls per period), got {bandwidth:g}"
        )
    if objective not in OBJECTIVES:
        raise fail(f"unknown --objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    if not (0.0 <= discovery_share < 1.0):
        raise fail(f"--discovery-share must be in [0, 1), got {discovery_share:g}")
    if out_file.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise fail(f"{out_file}: the output must end in .csv or .parquet")
    inputs = read_schedule_inputs(pages, hosts, bounds)
    result = refresh_schedule(
        inputs.rate,
        bandwidth,
        objective=objective,
        importance=inputs.importance,
        host=inputs.host,
        host_capacity=inputs.capacity,
        min_interval=inputs.min_interval,
        max_interval=inputs.max_interval,
        discovery_share=discovery_share,
    )
    if not _finite(result.refresh_rate, result.value):
        # Never a file of NaN with exit 0: the arithmetic failed for these inputs.
        raise fail(
            f"the schedule's arithmetic failed (NaN) for bandwidth {bandwidth:g} and these "
            f"rates; {out_file} was not written: try a bandwidth nearer the pages' total rate",
            code=1,
        )
    write_table(schedule_table(inputs, result), out_file)
    summary, warnings = describe_schedule(inputs, result, out_file)
    out.print(summary, markup=False)
    for line in warnings:
        err.print(line, markup=False)


def _finite(refresh_rate: object, value: float) -> bool:
    """Whether a schedule's rates and objective value are numbers (an interval may be inf)."""
    import numpy as np

    return not (np.isnan(np.asarray(refresh_rate, dtype=float)).any() or math.isnan(value))
