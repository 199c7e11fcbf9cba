"""One planning cycle: inputs from bucket aggregates, the solved quotas, due-URL selection.

Imports: :mod:`planner.model`, :mod:`planner.solver`, ``estimators``, numpy.
"""
