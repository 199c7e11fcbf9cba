"""What-if scenarios: synthetic webs with ground truth, the simulator, baseline policies,
scenario files, reports and the synthetic web server.

Imports: the standard library, ``estimators``, the planner's core modules (never its edge:
``service.cli.app``, ``service.config``, ...), numpy, scipy, pandas, plotting libraries.

The Python API is exported here, lazily: ``import scenarios`` is cheap, and a name's
module (with pyomo, pandas and matplotlib) is imported on first use.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
