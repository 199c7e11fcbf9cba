"""The planner: the WebFountain model and refresh schedules (core), and the service edge.

Core modules (pure optimization: the Pyomo model, the Pyomo-to-Ipopt bridge, refresh
schedules, quota construction) may import ``estimators``, numpy, pyomo and cyipopt, and never
open a database, a socket or a file they were not handed.

Edge modules, listed in :data:`EDGE_MODULES` (the CLI, configuration, the nightly pipeline,
the worker API), are the composition root: the only code that wires ``store``, ``crawler``,
``estimators``, the planner core and ``scenarios`` together. They read configuration, build
objects and call them; they hold no planning logic of their own.
"""

from __future__ import annotations

#: Modules of the service edge; every other ``planner`` module is core (tests enforce this).
EDGE_MODULES = frozenset(
    {
        "planner.__main__",
        "planner.cli",
        "planner.cli_support",
        "planner.importance_command",
        "planner.scenario_command",
        "planner.config",
        "planner.demo",
        "planner.errors",
        "planner.files",
        "planner.nightly",
        "planner.page_schedule",
        "planner.api",
        "planner.pipeline",
        "planner.schedule_files",
    }
)
