"""What-if scenarios: synthetic webs with ground truth, the simulator, baseline policies,
scenario files, reports and the synthetic web server.

Imports: the standard library, ``estimators``, the planner's core modules (never its edge:
``service.cli.app``, ``service.config``, ...), numpy, scipy, pandas, plotting libraries.
"""
