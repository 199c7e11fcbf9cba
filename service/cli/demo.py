"""``crawlplan demo``: the whole service on a synthetic web, scored against ground truth.

Wiring only: the demo itself is :func:`service.demo.run_demo`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli.support import fail, out, user_errors

__all__ = ["demo"]


@user_errors
def demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the stores and the report go (recreated).")
    ] = Path("demo-out"),
    steady: Annotated[
        bool,
        typer.Option(
            "--steady",
            help="A smaller web crawled for longer, so that the steady state rests on pages "
            "fetched many times: 40 hosts x 25 pages, 50 crawls per 2.5 s period, 6 periods a "
            "cycle, 40 cycles (12 fetches a page, about 10 minutes). Other options override it.",
        ),
    ] = False,
    hosts: Annotated[
        int | None, typer.Option(min=1, max=400, help="Synthetic hosts [default: 120].")
    ] = None,
    pages: Annotated[int | None, typer.Option(min=2, help="Pages per host [default: 50].")] = None,
    period: Annotated[
        float | None, typer.Option(min=0.5, help="Seconds per plan period [default: 8].")
    ] = None,
    periods: Annotated[
        int | None, typer.Option(min=1, help="Periods per plan cycle [default: 3].")
    ] = None,
    cycles: Annotated[
        int | None, typer.Option(min=1, help="Cycles (nightly plans) to run [default: 8].")
    ] = None,
    capacity: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Crawls per period of each crawl [default: half of the pages per cycle].",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Worker threads per crawl.")] = 8,
    world: Annotated[
        str,
        typer.Option(
            help="The web: demo (its own), robots (links into robots.txt-disallowed paths, "
            "Crawl-delay hosts), fast-lying (fast pages, lying Last-Modified) or crawl-delay "
            "(a quarter of the hosts at 2 s between requests)."
        ),
    ] = "demo",
    seed: Annotated[int, typer.Option(help="Seed of the web's shape and changes.")] = 7,
) -> None:
    """The whole service on the embedded default, scored against ground truth.

    Starts a synthetic web on loopback (one port per host, ground truth kept) and crawls it
    twice side by side with the same budget: crawlplan (nightly plans, period releases) and a
    uniform recrawl. Prints repository freshness per period and cycle for both, the steady
    state after a warm-up beside the optimum computed from the true rates, the plan's quotas
    by bucket, politeness, robots.txt and change-detection checks; writes report.md,
    freshness.csv and freshness.png to --dir. The defaults take about 3.5 minutes; --steady
    runs longer, on a smaller web, to a steady state of well-known pages.
    """
    from service.demo import WORLDS, DemoSettings, run_demo

    if world not in WORLDS:
        raise fail(f"unknown --world {world!r}; pass one of: {', '.join(WORLDS)}")

    given = {
        "hosts": hosts,
        "pages": pages,
        "period": period,
        "periods": periods,
        "cycles": cycles,
        "capacity": capacity,
    }
    changes: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    preset = DemoSettings.steady if steady else DemoSettings
    run_demo(
        preset(directory, workers=workers, world=world, seed=seed, **changes),
        say=lambda line: out.print(line, markup=False),
    )
