"""The options that several ``crawlplan`` commands share, declared once (Typer ``Annotated``).

Only ``typer`` and the standard library here: every command module imports this at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = [
    "OBJECTIVE_NAMES",
    "AllowPrivateOption",
    "ConfigOption",
    "DbOption",
    "ProcessesOption",
    "SecondsOption",
    "UntilIdleOption",
    "WorkersOption",
]

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL: sqlite:///PATH (default sqlite:///crawlplan.db) or "
        "postgresql://USER@HOST:PORT/DBNAME. Also $CRAWLPLAN_DB_URL or [store] db in "
        "crawlplan.toml.",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Configuration file (default: $CRAWLPLAN_CONFIG, else ./crawlplan.toml if present).",
        show_default=False,
    ),
]
# Options of the commands that run a worker pool (crawl, worker).
WorkersOption = Annotated[
    int | None,
    typer.Option("--workers", "-w", min=1, help="Worker threads.", show_default=False),
]
ProcessesOption = Annotated[
    int | None,
    typer.Option(
        "--processes",
        "-p",
        min=1,
        help="Processes, each with --workers threads: a process uses one core at most.",
        show_default=False,
    ),
]
SecondsOption = Annotated[
    float | None,
    typer.Option("--seconds", min=0.1, help="Stop after this many seconds.", show_default=False),
]
UntilIdleOption = Annotated[
    bool, typer.Option("--until-idle", help="Stop when no page is due or leased.")
]
AllowPrivateOption = Annotated[
    bool,
    typer.Option(
        "--allow-private",
        help="Allow private and loopback addresses (off by default: URLs come from "
        "untrusted pages). The synthetic web on loopback needs it.",
    ),
]

#: The page-level refresh objectives, for help texts: the same names as
#: ``planner.schedules.objectives.OBJECTIVES`` (which imports numpy), checked by
#: tests/test_cli_startup.py. Commands validate against the planner's own tuple.
OBJECTIVE_NAMES = ("obsolescence", "freshness", "harmonic", "binary")
