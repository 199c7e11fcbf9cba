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
from estimators.poisson import EmpiricalBayesChangeRate, PoissonChangeMLE
from estimators.prior import LogNormalRatePrior
from estimators.regular import ImprovedRegularRate, NaiveRate
from estimators.reliability import LastModifiedPolicy, LastModifiedReliability, assess_last_modified
from estimators.selection import ESTIMATORS, ChangeRateEstimator

__all__ = [
    "ESTIMATORS",
    "BucketAggregates",
    "BucketScale",
    "ChangeIntervals",
    "ChangeRateEstimator",
    "ChoLastModifiedRate",
    "EmpiricalBayesChangeRate",
    "EmpiricalBayesLastModifiedRate",
    "FetchTableEstimate",
    "ImprovedRegularRate",
    "LastModifiedEvidence",
    "LastModifiedPolicy",
    "LastModifiedReliability",
    "LogNormalRatePrior",
    "NaiveRate",
    "PoissonChangeMLE",
    "Problem",
    "XylemeLastModifiedRate",
    "assess_last_modified",
    "assign_buckets",
    "bucket_aggregates",
    "bucket_edges",
    "bucket_rates",
    "change_intervals_from_fetches",
    "estimate_fetch_table",
    "last_fetch_times",
    "last_modified_evidence_from_fetches",
]
