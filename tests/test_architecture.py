"""The direction of imports between packages (ARCHITECTURE.md), checked on the source itself.

Each package may import the standard library, the project packages and third-party
distributions listed here, and nothing else. A new import that breaks the layering fails this
test; so does a planner core module that imports the store or the crawler.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import planner

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"planner", "estimators", "crawler", "store", "scenarios"}
PURE_NUMERIC = {"numpy", "scipy", "pandas"}

#: What each package (or the planner's edge) may import besides the standard library.
ALLOWED: dict[str, set[str]] = {
    "estimators": {"estimators", *PURE_NUMERIC},
    "store": {"store", "sqlalchemy", "alembic", "psycopg"},
    "crawler": {
        "crawler",
        "store",
        "estimators",
        "requests",
        "urllib3",
        "w3lib",
        "protego",
        "lxml",
        *PURE_NUMERIC,
    },
    "planner": {"planner", "estimators", "pyomo", "cyipopt", *PURE_NUMERIC},
    "scenarios": {"scenarios", "estimators", "planner", "matplotlib", "aiohttp", *PURE_NUMERIC},
    "planner-edge": PROJECT
    | {
        "typer",
        "rich",
        "sqlalchemy",
        "requests",
        "fastapi",
        "pydantic",
        "starlette",
        "uvicorn",
        "prometheus_client",
        *PURE_NUMERIC,
    },
}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for package in sorted(PROJECT):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found.append((".".join(parts), path))
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _rule(module: str) -> str:
    if module in planner.EDGE_MODULES:
        return "planner-edge"
    return module.split(".")[0]


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_imports_follow_the_architecture(module: str, path: Path) -> None:
    rule = _rule(module)
    allowed = ALLOWED[rule]
    bad = set()
    for name in _imports(path):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            continue
        if top not in allowed:
            bad.add(name)
        edge = any(name == e or name.startswith(e + ".") for e in planner.EDGE_MODULES)
        if rule == "scenarios" and top == "planner" and edge:
            bad.add(name)
    assert not bad, f"{module} ({rule}) may not import {sorted(bad)}"


def test_planner_core_does_not_import_the_edge() -> None:
    for module, path in _modules():
        if module.startswith("planner") and module not in planner.EDGE_MODULES:
            edge = {n for n in _imports(path) if n in planner.EDGE_MODULES}
            assert not edge, f"planner core module {module} imports edge modules {edge}"


def test_every_package_docstring_states_its_imports() -> None:
    for package in PROJECT:
        doc = (__import__(package).__doc__ or "").lower()
        assert "import" in doc, f"{package}/__init__.py must say what it may import"


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import sqlalchemy\nfrom crawler.urls import normalize_url\n")
    assert {"sqlalchemy", "crawler.urls"} <= _imports(bad) - ALLOWED["estimators"]
