"""The planning instance, the WebFountain bucket model (Pyomo), its weights, the paper's instances.

Imports: ``planner`` siblings below it (none), ``estimators``, numpy, pyomo.
"""
