"""What-if scenarios: synthetic webs with ground truth, the simulator, baseline policies,
scenario files, reports and the synthetic web server.

Imports: the standard library, ``estimators``, the planner's core modules (never its edge:
``service.cli.app``, ``service.config``, ...), numpy, scipy, pandas, plotting libraries.

The Python API is exported here, lazily: ``import scenarios`` is cheap, and a name's
module (with pyomo, pandas and matplotlib) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scenarios.policies import POLICY_KINDS, Policy, PolicyError, make_policy
    from scenarios.reports import write_report
    from scenarios.runner import ScenarioRun, run_scenario
    from scenarios.scenario_files import (
        Scenario,
        ScenarioError,
        load_scenario,
        parse_scenario,
        shipped_scenarios,
    )
    from scenarios.simulator import (
        METRICS,
        SimulationError,
        SimulationResult,
        SimulationSettings,
        simulate,
    )
    from scenarios.world import World, WorldSpec, build_world

__all__ = [
    "METRICS",
    "POLICY_KINDS",
    "Policy",
    "PolicyError",
    "Scenario",
    "ScenarioError",
    "ScenarioRun",
    "SimulationError",
    "SimulationResult",
    "SimulationSettings",
    "World",
    "WorldSpec",
    "build_world",
    "load_scenario",
    "make_policy",
    "parse_scenario",
    "run_scenario",
    "shipped_scenarios",
    "simulate",
    "write_report",
]

_EXPORTS = {
    "Scenario": "scenarios.scenario_files",
    "ScenarioError": "scenarios.scenario_files",
    "load_scenario": "scenarios.scenario_files",
    "parse_scenario": "scenarios.scenario_files",
    "shipped_scenarios": "scenarios.scenario_files",
    "ScenarioRun": "scenarios.runner",
    "run_scenario": "scenarios.runner",
    "write_report": "scenarios.reports",
    "SimulationResult": "scenarios.simulator",
    "SimulationSettings": "scenarios.simulator",
    "simulate": "scenarios.simulator",
    "METRICS": "scenarios.simulator",
    "SimulationError": "scenarios.simulator",
    "POLICY_KINDS": "scenarios.policies",
    "Policy": "scenarios.policies",
    "PolicyError": "scenarios.policies",
    "make_policy": "scenarios.policies",
    "World": "scenarios.world",
    "WorldSpec": "scenarios.world",
    "build_world": "scenarios.world",
}


def __getattr__(name: str) -> Any:
    """Import an exported name's module on first use (module docstring)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
