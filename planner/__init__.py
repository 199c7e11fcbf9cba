"""The planner: pure optimization, from bucket aggregates to a cycle's quotas and page schedules.

Subpackages, in the order data flows through them:

- :mod:`planner.model`: the planning instance, the bucket models (the steady-rate model, the
  nightly default, and the paper's WebFountain model), objective weights, the paper's
  instances;
- :mod:`planner.solver`: the Pyomo-to-cyipopt compiler, the Ipopt call,
  :func:`~planner.solver.steady_solver.solve_steady`, the priced start,
  :class:`~planner.solver.plan_solver.PlanSolver`;
- :mod:`planner.cycle`: plan inputs, quotas, due-URL selection and :func:`plan_cycle`;
- :mod:`planner.schedules`: page-level refresh schedules and their multipliers.

Imports: the standard library, ``estimators``, numpy, scipy, pandas, pyomo and cyipopt. Never
``store``, ``crawler``, ``scenarios`` or ``service``, and never a database, a socket or a file
it was not handed (an import-linter contract in ``pyproject.toml`` enforces the direction).

The Python API is exported here, lazily: ``import planner`` is cheap, and a name's
module (with pyomo) is imported on first use.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
