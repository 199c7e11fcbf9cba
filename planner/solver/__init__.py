"""Solving the bucket model: Pyomo expressions compiled to exact-derivative callbacks for Ipopt.

Imports: :mod:`planner.model`, numpy, scipy, pyomo, cyipopt.
"""
