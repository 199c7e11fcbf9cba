"""Type stub of the exports; lazy_loader reads it to load each name's module on first use."""

from .policies import (
    POLICY_KINDS as POLICY_KINDS,
)
from .policies import (
    Policy as Policy,
)
from .policies import (
    PolicyError as PolicyError,
)
from .policies import (
    make_policy as make_policy,
)
from .reports import write_report as write_report
from .runner import ScenarioRun as ScenarioRun
from .runner import run_scenario as run_scenario
from .scenario_files import (
    Scenario as Scenario,
)
from .scenario_files import (
    ScenarioError as ScenarioError,
)
from .scenario_files import (
    load_scenario as load_scenario,
)
from .scenario_files import (
    parse_scenario as parse_scenario,
)
from .scenario_files import (
    shipped_scenarios as shipped_scenarios,
)
from .simulator import (
    METRICS as METRICS,
)
from .simulator import (
    SimulationError as SimulationError,
)
from .simulator import (
    SimulationResult as SimulationResult,
)
from .simulator import (
    SimulationSettings as SimulationSettings,
)
from .simulator import (
    simulate as simulate,
)
from .world import World as World
from .world import WorldSpec as WorldSpec
from .world import build_world as build_world
