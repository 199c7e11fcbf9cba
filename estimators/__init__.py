"""Pure computation on arrays: change-rate estimators, Last-Modified reliability, bucketing,
OPIC and reference PageRank.

Imports: the standard library, numpy, scipy, pandas. No I/O: functions take arrays and return
arrays; reading evidence from the store and writing estimates back is the service edge's job.
"""

from estimators.buckets import (
    BucketAggregates,
    BucketScale,
    assign_buckets,
    bucket_aggregates,
    bucket_edges,
    bucket_rates,
)
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
from estimators.opic_windows import FullHistory, HistoryWindow, InterpolationWindow, VariableWindow
from estimators.pagerank import PageRankResult, pagerank
from estimators.poisson import EmpiricalBayesChangeRate, PoissonChangeMLE
from estimators.prior import LogNormalRatePrior
from estimators.regular import ImprovedRegularRate, NaiveRate
from estimators.reliability import LastModifiedPolicy, LastModifiedReliability, assess_last_modified

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
    "estimate_fetch_table",
    "interest_weights",
    "last_fetch_times",
    "last_modified_evidence_from_fetches",
    "pagerank",
]
