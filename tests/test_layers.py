"""The direction of imports (ARCHITECTURE.md), checked by import-linter's contracts.

``pyproject.toml`` holds the contracts: service over scenarios and crawler, over planner,
over estimators and store; inside the planner, cycle over solver over model and schedules;
inside the store, the generic modules over the engines' SQL (``store.dialects``) over the
database; pure computation imports no database, HTTP or CLI library. These tests run
``lint-imports`` on the tree as it is, and on a copy with one breach planted, to show the
check can fail.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("service", "scenarios", "crawler", "planner", "estimators", "store")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _copy_of_the_tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    run = _lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "BROKEN" not in run.stdout
    assert run.stdout.count("KEPT") >= 4


@pytest.mark.parametrize(
    ("module", "line", "says"),
    [
        ("store/breach.py", "import service.nightly\n", "store is not allowed to import service"),
        (
            "planner/model/breach.py",
            "from planner.cycle import quotas\n",
            "planner.model is not allowed to import planner.cycle",
        ),
        ("estimators/breach.py", "import sqlalchemy\n", "estimators is not allowed to import"),
        ("crawler/breach.py", "import scenarios.world\n", "crawler is not allowed to import"),
        (
            "store/database.py",
            "import store.leases\n",
            "store.database is not allowed to import store.leases",
        ),
        (
            "store/dialects/breach.py",
            "from store.pages import lock_pages\n",
            "store.dialects is not allowed to import store.pages",
        ),
    ],
)
def test_a_lower_layer_importing_a_higher_one_fails(
    tmp_path: Path, module: str, line: str, says: str
) -> None:
    root = _copy_of_the_tree(tmp_path)
    (root / module).write_text(f'"""A planted breach."""\n\n{line}')
    run = _lint_imports(root)
    assert run.returncode != 0
    assert "BROKEN" in run.stdout
    assert says in run.stdout, run.stdout


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_docstring_states_its_imports(package: str) -> None:
    doc = (importlib.import_module(package).__doc__ or "").lower()
    assert "import" in doc, f"{package}/__init__.py must say what it may import"
