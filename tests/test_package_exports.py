"""``planner`` and ``scenarios`` export their Python API, and importing them stays cheap."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["planner", "scenarios"])
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None, name
    with pytest.raises(AttributeError, match="nothing_here"):
        module.nothing_here  # noqa: B018


def test_exports_are_the_defining_modules_objects() -> None:
    import planner
    import scenarios
    from planner.cycle.plan_cycle import plan_cycle
    from planner.solver.plan_solver import PlanSolver
    from scenarios.policies.registry import make_policy
    from scenarios.world import build_world

    assert planner.plan_cycle is plan_cycle and planner.PlanSolver is PlanSolver
    assert scenarios.make_policy is make_policy and scenarios.build_world is build_world


def test_importing_the_packages_loads_no_solver_and_no_plotting() -> None:
    """The CLI imports these packages to start: the solver (pyomo), pandas and matplotlib
    load only when a name that needs them is used."""
    code = (
        "import sys, planner, scenarios; "
        "print(sorted(m for m in ('pyomo', 'pandas', 'matplotlib', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
