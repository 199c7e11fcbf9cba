"""The policies a scenario file names: kind -> settings, and :func:`make_policy` from a spec.

Imports: the policy modules of :mod:`scenarios.policies` (the planner policy only when a
scenario uses it: it imports the solver).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scenarios.policies.adaptive import nutch_policy, stormcrawler_policy
from scenarios.policies.base import Policy, PolicyError
from scenarios.policies.baselines import RandomPolicy, UniformPolicy
from scenarios.policies.knowledge import RateKnowledge
from scenarios.policies.rate_schedules import RatePolicy

__all__ = ["POLICY_KINDS", "make_policy"]


#: Policy kinds and the settings each accepts besides ``name`` and ``kind``.
POLICY_KINDS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "random": (),
    "proportional": ("rates", "refit_every", "last_modified"),
    "nutch": (),
    "stormcrawler": (),
    "xyleme": ("rates", "refit_every", "last_modified", "max_interval", "importance"),
    "freshness": ("rates", "refit_every", "last_modified", "max_interval", "importance"),
    "harmonic": ("rates", "refit_every", "last_modified", "max_interval", "importance"),
    "webfountain": (
        "rates",
        "last_modified",
        "model",
        "objective",
        "strategy",
        "buckets",
        "bucket_range",
        "cycle",
        "cold_start",
        "within_bucket",
        "release_order",
        "horizon",
        "terminal_value",
        "explore",
        "probe_horizon",
        "follow_ups",
        "renewal",
        "importance",
    ),
    "sampling": ("group", "cycle", "sample_share"),
    "cohorts": ("rates", "buckets", "cycle"),
}

_OBJECTIVE = {"xyleme": "obsolescence", "freshness": "freshness", "harmonic": "harmonic"}


def make_policy(spec: Mapping[str, Any], *, period_days: float = 1.0) -> Policy:
    """Build a policy from a scenario file's ``[[policies]]`` entry.

    ``spec`` holds ``kind`` (a key of :data:`POLICY_KINDS`), optional ``name`` and the kind's
    settings. Raises :class:`PolicyError` naming a bad setting.
    """
    kind = spec.get("kind")
    if kind not in POLICY_KINDS:
        raise PolicyError(f"kind: use one of {', '.join(POLICY_KINDS)}, got {kind!r}")
    name = str(spec.get("name", kind))
    extra = sorted(set(spec) - {"kind", "name", *POLICY_KINDS[kind]})
    if extra:
        allowed = ", ".join(POLICY_KINDS[kind]) or "none"
        raise PolicyError(f"{extra[0]}: not a setting of kind {kind!r} (settings: {allowed})")
    knowledge_args = {k: spec[k] for k in ("rates", "refit_every", "last_modified") if k in spec}
    if kind == "uniform":
        return UniformPolicy(name)
    if kind == "random":
        return RandomPolicy(name)
    if kind == "nutch":
        return nutch_policy(period_days, name)
    if kind == "stormcrawler":
        return stormcrawler_policy(period_days, name)
    if kind == "proportional":
        return RatePolicy(name, "proportional", RateKnowledge(**knowledge_args))
    if kind in _OBJECTIVE:
        max_interval = spec.get("max_interval")
        if max_interval is not None and not (
            isinstance(max_interval, int | float) and math.isfinite(max_interval)
        ):
            raise PolicyError("max_interval: give a number of periods")
        if max_interval is not None and max_interval <= 0:
            raise PolicyError("max_interval: give a number of periods > 0")
        return RatePolicy(
            name,
            _OBJECTIVE[kind],
            RateKnowledge(**knowledge_args),
            max_interval=None if max_interval is None else float(max_interval),
            use_importance=bool(spec.get("importance", False)),
        )
    if kind == "webfountain":
        # Imported when a scenario uses it: the planner brings the solver (pyomo) along.
        from scenarios.policies.webfountain import WebFountainPolicy

        return WebFountainPolicy.from_spec(name, spec, period_days=period_days)
    if kind == "cohorts":  # imported when used: the cohort LP brings pyomo and HiGHS
        from scenarios.policies.cohorts import CohortPolicy

        return CohortPolicy.from_spec(name, spec)
    from scenarios.policies.sampling import SamplingPolicy

    return SamplingPolicy.from_spec(name, spec)
