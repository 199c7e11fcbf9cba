"""The CLI starts without the heavy libraries: a behavioural check of what an import loads.

``crawlplan --help``, ``status`` and ``seed`` must not pay for Pyomo, pandas, FastAPI or SciPy;
each command imports those inside its function. These tests run a fresh interpreter, import the
CLI and list the heavy modules it loaded: no timing, so they fail only if an import moved.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Libraries that only some commands need, never the CLI's start-up.
HEAVY = (
    "pyomo",
    "cyipopt",
    "pandas",
    "numpy",
    "scipy",
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "matplotlib",
    "aiohttp",
    "requests",
    "lxml",
)


def _loaded_after(code: str) -> list[str]:
    """The top-level packages of :data:`HEAVY` loaded after running ``code`` in a fresh process."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import service.cli.app") == []


def test_help_loads_no_heavy_library() -> None:
    code = (
        "import sys\nfrom service.cli.app import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(code) == []


@pytest.mark.parametrize("command", ["seed", "status", "solve", "serve", "scenario", "demo"])
def test_command_help_loads_no_heavy_library(command: str) -> None:
    code = (
        "import sys\nfrom service.cli.app import app\n"
        f"try:\n    app([{command!r}, '--help'])\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(code) == []


def test_status_loads_the_store_but_not_the_planner_or_pandas(tmp_path: object) -> None:
    """``status`` needs SQLAlchemy (the store), nothing for planning, tables or the web."""
    code = (
        "from service.cli.app import app\n"
        f"db = 'sqlite:///{tmp_path}/s.db'\n"
        "for args in (['init', '--db', db], ['status', '--db', db]):\n"
        "    try:\n        app(args)\n    except SystemExit as e:\n        assert e.code == 0, e\n"
    )
    assert _loaded_after(code) == ["sqlalchemy"]


def test_values_written_for_start_up_match_their_owners() -> None:
    """Help texts and defaults the CLI states without importing their owners agree with them."""
    from estimators.opic import DEFAULT_DAMPING
    from planner.schedules.objectives import OBJECTIVES
    from service.cli import importance, options

    assert options.OBJECTIVE_NAMES == OBJECTIVES
    assert importance.DEFAULT_DAMPING == DEFAULT_DAMPING
