"""Refresh policies behind one interface, for the simulator.

The policies (``kind`` in a scenario file; :func:`make_policy` builds one from its entry):

* ``uniform``, ``random`` (:mod:`~scenarios.policies.baselines`): round robin, and ``budget``
  pages drawn at random each period.
* ``proportional``, ``xyleme``, ``freshness``, ``harmonic``
  (:mod:`~scenarios.policies.rate_schedules`): due order for target refresh rates from the
  known change rates (proportional, or the optimal page-level schedules).
* ``nutch``, ``stormcrawler`` (:mod:`~scenarios.policies.adaptive`): the open-source crawlers'
  adaptive revisit intervals with their defaults.
* ``webfountain`` (:mod:`~scenarios.policies.webfountain`): the planner as deployed
  (:func:`planner.cycle.plan_cycle.plan_cycle`) plus due-URL selection.
* ``sampling`` (:mod:`~scenarios.policies.sampling`): Cho & Ntoulas sampling per host or
  section.

What they share is in :mod:`~scenarios.policies.base` (the :class:`Policy` interface, due
order) and :mod:`~scenarios.policies.knowledge` (:class:`RateKnowledge`: the true rates in an
oracle run, or the project's estimators on the policy's own observations); the kind -> policy
table in :mod:`~scenarios.policies.registry`.

Imports, top down (an import-linter contract in ``pyproject.toml`` holds it): registry, then
the policy modules side by side, then knowledge, then base, then :mod:`scenarios.simulator`.
The planner policy and the sampling policy are exported lazily: the planner brings the solver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scenarios.policies.adaptive import (
    AdaptiveIntervalPolicy,
    AdaptiveRule,
    nutch_policy,
    stormcrawler_policy,
)
from scenarios.policies.base import Policy, PolicyError, overdue_priority, top_pages
from scenarios.policies.baselines import RandomPolicy, UniformPolicy
from scenarios.policies.knowledge import RateKnowledge, filled_rates
from scenarios.policies.rate_schedules import RatePolicy
from scenarios.policies.registry import POLICY_KINDS, make_policy

if TYPE_CHECKING:
    from scenarios.policies.sampling import SamplingPolicy
    from scenarios.policies.webfountain import WebFountainPolicy, section_rates

__all__ = [
    "POLICY_KINDS",
    "AdaptiveIntervalPolicy",
    "AdaptiveRule",
    "Policy",
    "PolicyError",
    "RandomPolicy",
    "RateKnowledge",
    "RatePolicy",
    "SamplingPolicy",
    "UniformPolicy",
    "WebFountainPolicy",
    "filled_rates",
    "make_policy",
    "nutch_policy",
    "overdue_priority",
    "section_rates",
    "stormcrawler_policy",
    "top_pages",
]

_LAZY = {
    "WebFountainPolicy": "scenarios.policies.webfountain",
    "section_rates": "scenarios.policies.webfountain",
    "SamplingPolicy": "scenarios.policies.sampling",
}


def __getattr__(name: str) -> Any:
    """The planner and sampling policies, imported on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
