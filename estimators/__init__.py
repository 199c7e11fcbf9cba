"""Pure computation on arrays: change-rate estimators, Last-Modified reliability, bucketing,
OPIC and reference PageRank.

Imports: the standard library, numpy, scipy, pandas. No I/O: functions take arrays and return
arrays; reading evidence from the store and writing estimates back is the service edge's job.

The Python API is exported here, lazily: ``import estimators`` is cheap (scipy.stats alone
takes most of a second to import), and a name's module is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from estimators.buckets import (
        BucketAggregates,
        BucketScale,
        assign_buckets,
        bucket_aggregates,
        bucket_edges,
        bucket_rates,
        combine_aggregates,
    )
    from estimators.discovery import DiscoveryRates, discovery_rates
    from estimators.estimator_choice import ESTIMATORS, ChangeRateEstimator
    from estimators.evidence import (
        ChangeIntervals,
        LastModifiedEvidence,
        change_intervals_from_fetches,
        last_fetch_times,
        last_modified_evidence_from_fetches,
    )
    from estimators.fetch_table import FetchTableEstimate, Problem, estimate_fetch_table
    from estimators.last_modified import (
        ChoLastModifiedRate,
        EmpiricalBayesLastModifiedRate,
        XylemeLastModifiedRate,
    )
    from estimators.opic import OPIC, OpicState, interest_weights
    from estimators.opic_graph import EmptyGraphError, GraphError, LinkGraph, UnknownPageError
    from estimators.opic_selection import (
        STRATEGIES,
        CycleSelection,
        GreedySelection,
        PageSelection,
        RandomSelection,
    )
    from estimators.opic_windows import (
        FullHistory,
        HistoryWindow,
        InterpolationWindow,
        VariableWindow,
    )
    from estimators.pagerank import PageRankResult, pagerank
    from estimators.poisson import EmpiricalBayesChangeRate, PoissonChangeMLE
    from estimators.prior import LogNormalRatePrior
    from estimators.regular import ImprovedRegularRate, NaiveRate
    from estimators.reliability import (
        LastModifiedPolicy,
        LastModifiedReliability,
        assess_last_modified,
    )

__all__ = [
    "ESTIMATORS",
    "OPIC",
    "STRATEGIES",
    "BucketAggregates",
    "BucketScale",
    "ChangeIntervals",
    "ChangeRateEstimator",
    "ChoLastModifiedRate",
    "CycleSelection",
    "DiscoveryRates",
    "EmpiricalBayesChangeRate",
    "EmpiricalBayesLastModifiedRate",
    "EmptyGraphError",
    "FetchTableEstimate",
    "FullHistory",
    "GraphError",
    "GreedySelection",
    "HistoryWindow",
    "ImprovedRegularRate",
    "InterpolationWindow",
    "LastModifiedEvidence",
    "LastModifiedPolicy",
    "LastModifiedReliability",
    "LinkGraph",
    "LogNormalRatePrior",
    "NaiveRate",
    "OpicState",
    "PageRankResult",
    "PageSelection",
    "PoissonChangeMLE",
    "Problem",
    "RandomSelection",
    "UnknownPageError",
    "VariableWindow",
    "XylemeLastModifiedRate",
    "assess_last_modified",
    "assign_buckets",
    "bucket_aggregates",
    "bucket_edges",
    "bucket_rates",
    "change_intervals_from_fetches",
    "combine_aggregates",
    "discovery_rates",
    "estimate_fetch_table",
    "interest_weights",
    "last_fetch_times",
    "last_modified_evidence_from_fetches",
    "pagerank",
]

_EXPORTS = {
    "BucketAggregates": "estimators.buckets",
    "BucketScale": "estimators.buckets",
    "assign_buckets": "estimators.buckets",
    "bucket_aggregates": "estimators.buckets",
    "bucket_edges": "estimators.buckets",
    "bucket_rates": "estimators.buckets",
    "combine_aggregates": "estimators.buckets",
    "DiscoveryRates": "estimators.discovery",
    "discovery_rates": "estimators.discovery",
    "ChangeRateEstimator": "estimators.estimator_choice",
    "ESTIMATORS": "estimators.estimator_choice",
    "ChangeIntervals": "estimators.evidence",
    "LastModifiedEvidence": "estimators.evidence",
    "change_intervals_from_fetches": "estimators.evidence",
    "last_fetch_times": "estimators.evidence",
    "last_modified_evidence_from_fetches": "estimators.evidence",
    "FetchTableEstimate": "estimators.fetch_table",
    "Problem": "estimators.fetch_table",
    "estimate_fetch_table": "estimators.fetch_table",
    "ChoLastModifiedRate": "estimators.last_modified",
    "EmpiricalBayesLastModifiedRate": "estimators.last_modified",
    "XylemeLastModifiedRate": "estimators.last_modified",
    "OPIC": "estimators.opic",
    "OpicState": "estimators.opic",
    "interest_weights": "estimators.opic",
    "EmptyGraphError": "estimators.opic_graph",
    "GraphError": "estimators.opic_graph",
    "LinkGraph": "estimators.opic_graph",
    "UnknownPageError": "estimators.opic_graph",
    "CycleSelection": "estimators.opic_selection",
    "GreedySelection": "estimators.opic_selection",
    "PageSelection": "estimators.opic_selection",
    "RandomSelection": "estimators.opic_selection",
    "STRATEGIES": "estimators.opic_selection",
    "FullHistory": "estimators.opic_windows",
    "HistoryWindow": "estimators.opic_windows",
    "InterpolationWindow": "estimators.opic_windows",
    "VariableWindow": "estimators.opic_windows",
    "PageRankResult": "estimators.pagerank",
    "pagerank": "estimators.pagerank",
    "EmpiricalBayesChangeRate": "estimators.poisson",
    "PoissonChangeMLE": "estimators.poisson",
    "LogNormalRatePrior": "estimators.prior",
    "ImprovedRegularRate": "estimators.regular",
    "NaiveRate": "estimators.regular",
    "LastModifiedPolicy": "estimators.reliability",
    "LastModifiedReliability": "estimators.reliability",
    "assess_last_modified": "estimators.reliability",
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
