"""Type stub of the exports; lazy_loader reads it to load each name's module on first use."""

from .bayes_action import BayesPlanPrior as BayesPlanPrior
from .bayes_action import BayesRefresh as BayesRefresh
from .bayes_action import Probes as Probes
from .bayes_action import bayes_equivalent_rates as bayes_equivalent_rates
from .bayes_action import bayes_refresh as bayes_refresh
from .bayes_action import bayes_refresh_at as bayes_refresh_at
from .bayes_action import choose_probes as choose_probes
from .bayes_action import evidence_grid as evidence_grid
from .bayes_action import fit_bayes_plan as fit_bayes_plan
from .bayes_action import fit_grid_prior as fit_grid_prior
from .bayes_action import fit_group_grid_priors as fit_group_grid_priors
from .bayes_action import grid_log_likelihood as grid_log_likelihood
from .bayes_action import grid_posterior as grid_posterior
from .bayes_action import plan_chunk as plan_chunk
from .bayes_action import plan_rates as plan_rates
from .bayes_action import plug_in_refresh as plug_in_refresh
from .bayes_action import probe_gains as probe_gains
from .bayes_action import rate_grid as rate_grid
from .bayes_action import straddling as straddling
from .buckets import (
    BucketAggregates as BucketAggregates,
)
from .buckets import (
    BucketScale as BucketScale,
)
from .buckets import (
    assign_buckets as assign_buckets,
)
from .buckets import (
    bucket_aggregates as bucket_aggregates,
)
from .buckets import (
    bucket_edges as bucket_edges,
)
from .buckets import (
    bucket_rates as bucket_rates,
)
from .buckets import (
    combine_aggregates as combine_aggregates,
)
from .capacity import CapacityEstimate as CapacityEstimate
from .capacity import crawl_capacity as crawl_capacity
from .discovery import DiscoveryRates as DiscoveryRates
from .discovery import discovery_rates as discovery_rates
from .estimator_choice import ESTIMATORS as ESTIMATORS
from .estimator_choice import ChangeRateEstimator as ChangeRateEstimator
from .evidence import (
    ChangeIntervals as ChangeIntervals,
)
from .evidence import (
    LastModifiedEvidence as LastModifiedEvidence,
)
from .evidence import (
    change_intervals_from_fetches as change_intervals_from_fetches,
)
from .evidence import (
    last_fetch_times as last_fetch_times,
)
from .evidence import (
    last_modified_evidence_from_fetches as last_modified_evidence_from_fetches,
)
from .expected_freshness import (
    expected_fresh_probability as expected_fresh_probability,
)
from .expected_freshness import (
    expected_periodic_freshness as expected_periodic_freshness,
)
from .fetch_table import (
    FetchTableEstimate as FetchTableEstimate,
)
from .fetch_table import (
    Problem as Problem,
)
from .fetch_table import (
    estimate_fetch_table as estimate_fetch_table,
)
from .gamma_updates import RatePosterior as RatePosterior
from .gamma_updates import pooled_gamma as pooled_gamma
from .group_prior import GroupLevelPrior as GroupLevelPrior
from .last_modified import (
    ChoLastModifiedRate as ChoLastModifiedRate,
)
from .last_modified import (
    EmpiricalBayesLastModifiedRate as EmpiricalBayesLastModifiedRate,
)
from .last_modified import (
    XylemeLastModifiedRate as XylemeLastModifiedRate,
)
from .opic import OPIC as OPIC
from .opic import OpicState as OpicState
from .opic import interest_weights as interest_weights
from .opic_graph import (
    EmptyGraphError as EmptyGraphError,
)
from .opic_graph import (
    GraphError as GraphError,
)
from .opic_graph import (
    LinkGraph as LinkGraph,
)
from .opic_graph import (
    UnknownPageError as UnknownPageError,
)
from .opic_selection import (
    STRATEGIES as STRATEGIES,
)
from .opic_selection import (
    CycleSelection as CycleSelection,
)
from .opic_selection import (
    GreedySelection as GreedySelection,
)
from .opic_selection import (
    PageSelection as PageSelection,
)
from .opic_selection import (
    RandomSelection as RandomSelection,
)
from .opic_windows import (
    FullHistory as FullHistory,
)
from .opic_windows import (
    HistoryWindow as HistoryWindow,
)
from .opic_windows import (
    InterpolationWindow as InterpolationWindow,
)
from .opic_windows import (
    VariableWindow as VariableWindow,
)
from .pagerank import PageRankResult as PageRankResult
from .pagerank import pagerank as pagerank
from .poisson import (
    EmpiricalBayesChangeRate as EmpiricalBayesChangeRate,
)
from .poisson import (
    PoissonChangeMLE as PoissonChangeMLE,
)
from .posterior import GammaRatePosterior as GammaRatePosterior
from .prior import LogNormalRatePrior as LogNormalRatePrior
from .regular import ImprovedRegularRate as ImprovedRegularRate
from .regular import NaiveRate as NaiveRate
from .reliability import (
    LastModifiedPolicy as LastModifiedPolicy,
)
from .reliability import (
    LastModifiedReliability as LastModifiedReliability,
)
from .reliability import (
    assess_last_modified as assess_last_modified,
)
