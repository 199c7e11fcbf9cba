"""The planner as deployed, as a simulated policy: estimate, bucket, plan the cycle, select.

Every ``cycle`` periods :class:`WebFountainPolicy`

1. takes the change rates it knows (:class:`scenarios.policies.knowledge.RateKnowledge`: by
   default, as the nightly run's ``plan.rates = "bayes"``, each page's Bayes-equivalent rate
   (:mod:`estimators.bayes_action`); its own point estimates (``rates = "estimated"``),
   its own Gamma posteriors (``rates = "posterior"``: the steady-rate model then
   values freshness in expectation over each class's pooled belief), or the true rates in an
   oracle run); a page fetched but without an estimate yet
   gets the median estimate, or with ``cold_start = "section"`` the pooled estimate of its
   site section (all its section's change/no-change intervals as one page's: the seed paper's
   correlated groups, here sections);
2. puts the fetched pages into ``buckets`` change-rate classes: with the steady-rate model
   by default the nightly run's (``bucket_range = "fixed"``: 255 classes over 1e-3..1e5
   changes a day), with the paper's 16 log-spaced between the smallest and the largest rate
   (``"observed"``), and computes the aggregates
   (:func:`estimators.buckets.bucket_aggregates`: pages b, expected obsolete pages y, change
   fraction a); never-fetched pages are the model's n. With the steady-rate model, the
   fetched pages of each host whose politeness cap could bind (fewer crawls a period than
   it has pages) and the host's cap, less room for its never-fetched pages spread over the
   cycle, go to the planner, which splits off the hosts the plan would crawl beyond their
   caps, as the nightly run does (:func:`planner.cycle.bound_hosts.plan_within_caps`):
   class c of bound host g keyed :func:`planner.cycle.plan_cycle.host_class` ``(c, g)``
   (:data:`planner.cycle.bound_hosts.HOST_CLASS_MERGE` classes as one); the plan gives the
   host no more crawls than it accepts, spent on its pages by their rates, and the rest of
   the budget to the other hosts' pages (a crawler knows its hosts' politeness limits:
   robots.txt Crawl-delay, its configured delays);
3. plans the cycle with :func:`planner.cycle.plan_cycle.plan_cycle`, the function the
   nightly run deploys: ``model`` (``"steady"``, the steady-rate model with ``objective``,
   or ``"webfountain"``, the paper's with ``strategy``), the budget as capacity (every crawl
   costs 1), the pages born per period as the only discovery, ``horizon`` periods (0: the
   cycle), the terminal value (``terminal_value``), spare capacity spent, and with
   ``explore`` > 0 every bucket explored; with ``importance`` (steady-rate model) each
   class weighted by its fetched pages' mean importance (the simulation's: true or OPIC),
   as the nightly run's ``plan.weights = "importance"``; a failed solve plans the uniform
   crawl (a simulated crawler has no previous plan to keep);
4. in each period, chooses the pages with the deployed due-URL selection
   (:func:`planner.cycle.due_urls.select_due_pages`): by default the period's quotas pooled
   and spent on the pages most overdue for their class's planned interval (``release_order``),
   a page being due at its last fetch plus half that interval. With ``within_bucket =
   "longest-unvisited"`` (the steady-rate model's default, what it assumes) every page of a
   bucket has the same interval, so inside a bucket the page unvisited longest goes first;
   with an objective's name, the page-level schedule inside the bucket
   (:func:`planner.schedules.optimal.bucket_intervals`, e.g. Xyleme's sqrt rule);
   never-fetched pages by importance (the OPIC cash stand-in) or, with ``cold_start =
   "section"``, by their section's observed change ratio (sampling for pages with no history).

Crawls the plan leaves unused (rounding, a bucket with fewer due pages than its quota, a
strategy that leaves capacity idle early in the cycle) go to the pages most overdue for their
page-level interval (the plan's next crawls, pulled forward), so the budget is spent.

With the steady-rate model (the default) and the nightly run's 255 buckets, a plan takes
about a second (only the populated buckets enter the model); the paper's model at B = 255,
T = 14 takes about a minute per solve, so its scenarios use 16 buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from estimators.bayes_action import PROBE_HORIZON_PERIODS, PROBE_SHARE
from estimators.buckets import (
    N_BUCKETS,
    BucketAggregates,
    BucketScale,
    assign_buckets,
    bucket_aggregates,
    bucket_edges,
)
from estimators.discovery import DiscoveryRates
from estimators.evidence import ChangeIntervals
from estimators.gamma_updates import pooled_gamma
from estimators.poisson import EmpiricalBayesChangeRate
from planner.cycle.bound_hosts import HostPages, plan_within_caps, split_key
from planner.cycle.due_urls import select_due_pages
from planner.cycle.plan_cycle import (
    HOST_CLASS_STRIDE,
    PLAN_MODELS,
    CrawlMeasures,
    CycleSettings,
    PlanOutcome,
)
from planner.cycle.plan_inputs import EXPLORE_REVISITS
from planner.cycle.quotas import charge_spent
from planner.model.steady_rates import STEADY_OBJECTIVES, revisit_interval
from planner.model.weights import Strategy
from planner.schedules.objectives import OBJECTIVES
from planner.schedules.optimal import bucket_intervals
from scenarios.policies.base import Policy, PolicyError, overdue_priority, top_pages
from scenarios.policies.knowledge import RateKnowledge, filled_rates
from scenarios.simulator import CrawlLog, Observations

__all__ = ["DEFAULT_RATES", "WebFountainPolicy", "section_rates"]

#: What the planner takes the rates to be unless a scenario says (``rates``): what the nightly
#: run plans on by default (``plan.rates``).
DEFAULT_RATES = "bayes"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Buckets of the paper's model when a scenario names none (its solve takes a minute at 255).
PAPER_MODEL_BUCKETS = 16

#: ``release_order`` values (``within_bucket = "longest-unvisited"``): ``"overdue"`` (the
#: default), what the service's releases do: the period's quotas pooled, their total to the
#: pages due for their class's planned interval (pages / planned crawls), most overdue for it
#: first whatever their class (a bound host's classes keep their own quotas), the rest
#: spilled by value; ``"due"``: each quota from its own class's due pages, oldest first, the
#: rest spilled by value to due pages, then to pages not due yet; ``"oldest"``: the service's
#: releases with ``due = False``, every page of a class eligible, the longest unvisited first,
#: a quota that cannot be filled spilled by the plan's values. With estimated rates "due" kept
#: 0.005-0.008 more freshness than "oldest" on gap-mixture's world at 1/28 and 1/7, and
#: "overdue" 0.001-0.013 more than "due" on most shipped worlds (docs/benchmarks.md,
#: "Estimated rates: the release order", "Pooled quotas"): quotas rounded the same way
#: every period starve small classes.
RELEASE_ORDERS = ("oldest", "due", "overdue")

#: ``bucket_range`` values: ``"fixed"``, the nightly run's buckets (the estimators' default
#: scale, rates per day, so a simulation plans on the deployed buckets and pages keep their
#: bucket while estimates settle); ``"observed"``, log-spaced between the smallest and the
#: largest rate known.
BUCKET_RANGES = ("fixed", "observed")

#: ``within_bucket`` value: inside a bucket, the page unvisited longest first (what the
#: steady-rate model assumes).
LONGEST_UNVISITED = "longest-unvisited"

#: Seconds per period on the selection's clock (any common clock works).
_SECONDS = 86_400.0


def section_rates(log: CrawlLog) -> FloatArray:
    """Pooled change rate of each section, from all its pages' intervals, shape (sections,).

    A section's intervals are treated as one page's (empirical Bayes across sections, so a
    section with little evidence is shrunk toward the others); NaN for a section without any.
    """
    intervals = log.change_intervals()
    out = np.full(log.n_sections, np.nan)
    if intervals.page.size == 0:
        return out
    pooled = ChangeIntervals(
        log.section[intervals.page], intervals.length, intervals.changed, log.n_sections
    )
    return np.asarray(EmpiricalBayesChangeRate().fit(pooled).rate_, dtype=float)


class WebFountainPolicy(Policy):
    """The WebFountain NLP on estimated buckets plus due-URL selection (module docstring)."""

    def __init__(
        self,
        name: str,
        knowledge: RateKnowledge,
        *,
        model: str = "steady",
        objective: str = "freshness",
        strategy: int = 3,
        buckets: int | None = None,
        bucket_range: str | None = None,
        period_days: float = 1.0,
        cycle: int = 7,
        cold_start: str = "median",
        within_bucket: str | None = None,
        release_order: str = "overdue",
        horizon: int = 0,
        terminal_value: bool = True,
        explore: float = EXPLORE_REVISITS,
        renewal: bool = True,
        importance: bool = False,
    ) -> None:
        if model not in PLAN_MODELS:
            raise PolicyError(f"model: use {' or '.join(PLAN_MODELS)}, got {model!r}")
        if objective not in STEADY_OBJECTIVES:
            known = ", ".join(STEADY_OBJECTIVES)
            raise PolicyError(f"objective: use one of {known}, got {objective!r}")
        steady = model == "steady"
        if buckets is None:  # the paper's model takes a minute at 255: it keeps 16
            buckets = N_BUCKETS if steady else PAPER_MODEL_BUCKETS
        if bucket_range is None:
            bucket_range = "fixed" if steady else "observed"
        if within_bucket is None:
            within_bucket = LONGEST_UNVISITED if model == "steady" else "obsolescence"
        if within_bucket != LONGEST_UNVISITED and within_bucket not in OBJECTIVES:
            known = ", ".join([LONGEST_UNVISITED, *OBJECTIVES])
            raise PolicyError(f"within_bucket: use one of {known}, got {within_bucket!r}")
        if strategy not in (1, 2, 3):
            raise PolicyError(f"strategy: use 1, 2 or 3, got {strategy!r}")
        if release_order not in RELEASE_ORDERS:
            known = " or ".join(RELEASE_ORDERS)
            raise PolicyError(f"release_order: use {known}, got {release_order!r}")
        if bucket_range not in BUCKET_RANGES:
            known = " or ".join(BUCKET_RANGES)
            raise PolicyError(f"bucket_range: use {known}, got {bucket_range!r}")
        if not 1 <= buckets <= 255:
            raise PolicyError(f"buckets: give 1..255 buckets, got {buckets!r}")
        if cycle < 1:
            raise PolicyError(f"cycle: give at least 1 period, got {cycle!r}")
        if explore < 0:
            raise PolicyError(f"explore: give revisit intervals (0: off), got {explore!r}")
        if horizon < 0:
            raise PolicyError(f"horizon: give periods (0: the cycle), got {horizon!r}")
        if cold_start not in ("median", "section"):
            raise PolicyError(f"cold_start: use 'median' or 'section', got {cold_start!r}")
        self.name = name
        self.knowledge = knowledge
        self.model = model
        self.objective = objective
        self.strategy = Strategy(strategy)
        self.buckets = buckets
        self.bucket_range = bucket_range
        self.release_order = release_order
        self.period_days = period_days
        self.cycle = cycle
        self.cold_start = cold_start
        self.within_bucket = within_bucket
        self.horizon = horizon
        self.terminal_value = terminal_value
        self.explore = explore
        self.renewal = renewal
        self.importance = importance
        self.solves: list[float] = []
        #: The last plan's inputs and outcome (for inspection: the same as the nightly run's).
        self.last_inputs: tuple[BucketAggregates, CrawlMeasures] | None = None
        self._host_pages = HostPages.none()
        self.last_plan: PlanOutcome | None = None
        self._cycle_start = -1
        #: Pages queued for a probe (:meth:`_queue_probes`); the pages waiting for a probe's
        #: first crawl, best first; by period the probes' second crawls due then; the delay.
        self.probes_queued = 0
        #: Pages marked for a follow-up (:meth:`_queue_probes`): their next crawl is a probe's
        #: first, its second due the probe's delay later; and how many were marked in all.
        self.follow_ups_queued = 0
        self._follow = np.zeros(0, dtype=np.int64)
        self._probe_first = np.zeros(0, dtype=np.int64)
        self._probe_second: dict[int, IntArray] = {}
        self._probe_delay = 1
        self._old = np.zeros((0, 0), dtype=np.int64)
        self._new = np.zeros(0, dtype=np.int64)
        self._bucket = np.zeros(0, dtype=np.int64)
        self._interval = np.zeros(0)
        self._rate = np.zeros(0)
        self._marginal: list[dict[int, float]] = []
        self._new_marginal: list[float] = []
        self._known_at_start = 0

    @classmethod
    def from_spec(
        cls, name: str, spec: Mapping[str, Any], *, period_days: float = 1.0
    ) -> WebFountainPolicy:
        """From a scenario file's policy entry (see :mod:`scenarios.policies.registry`);
        ``period_days``: the world's period, for the fixed bucket range (rates per day)."""
        cycle = int(spec.get("cycle", 7))
        knowledge = RateKnowledge(
            str(spec.get("rates", DEFAULT_RATES)),
            refit_every=cycle,
            last_modified=str(spec.get("last_modified", "checked")),
            probe_horizon=float(spec.get("probe_horizon", PROBE_HORIZON_PERIODS)),
            follow_ups=bool(spec.get("follow_ups", False)),
        )
        return cls(
            name,
            knowledge,
            model=str(spec.get("model", "steady")),
            objective=str(spec.get("objective", "freshness")),
            strategy=int(spec.get("strategy", 3)),
            buckets=None if "buckets" not in spec else int(spec["buckets"]),
            bucket_range=None if "bucket_range" not in spec else str(spec["bucket_range"]),
            period_days=period_days,
            cycle=cycle,
            cold_start=str(spec.get("cold_start", "median")),
            within_bucket=None if "within_bucket" not in spec else str(spec["within_bucket"]),
            release_order=str(spec.get("release_order", "overdue")),
            horizon=int(spec.get("horizon", 0)),
            terminal_value=bool(spec.get("terminal_value", True)),
            explore=float(spec.get("explore", EXPLORE_REVISITS)),
            renewal=bool(spec.get("renewal", True)),
            importance=bool(spec.get("importance", False)),
        )

    # -- planning ------------------------------------------------------------------------

    def _rates(self, log: CrawlLog, period: int) -> FloatArray:
        rate = np.array(self.knowledge.rate(log, period), dtype=float)
        if self.cold_start == "section":
            pooled = section_rates(log)
            rate = np.where(np.isfinite(rate), rate, pooled[log.section])
        return filled_rates(rate, log)

    def cycle_settings(self, budget: int) -> CycleSettings:
        """What :func:`planner.cycle.plan_cycle.plan_cycle` needs of this policy, for a budget
        of ``budget`` crawls per period. A failed solve plans the uniform crawl: a simulated
        crawler has no previous plan to keep."""
        return CycleSettings(
            capacity=float(budget),
            periods=self.cycle,
            model=self.model,
            objective=self.objective,
            strategy=self.strategy.value,
            horizon=self.horizon,
            terminal_value=self.terminal_value,
            explore=self.explore,
            renewal=self.renewal,
            fallback_uniform=True,
        )

    def aggregates(
        self, log: CrawlLog, period: int
    ) -> tuple[BucketAggregates, CrawlMeasures, FloatArray, IntArray]:
        """The planner's inputs at the start of ``period``, from the log alone.

        Returns the bucket aggregates of the fetched pages (``buckets + 1`` classes, or with
        bound hosts split (module docstring) ``256 (G + 1)`` classes for G bound hosts;
        rates and times in periods), what the crawl measured (never-fetched pages; every
        crawl costs 1; no link discovery, the pages born per period of the last cycle as
        ``nconst``; the bound hosts' caps), and every page's rate and class, shape
        (n_pages,) each (class 0: not fetched). Moves the births counter on: call once per
        plan.
        """
        rate = self._rates(log, period)
        fetched = log.eligible & (log.fetches > 0)
        pages = np.flatnonzero(fetched)
        new_count = int(np.count_nonzero(log.eligible & (log.fetches == 0)))
        bucket = np.zeros(log.n_pages, dtype=np.int64)
        if pages.size:
            r = np.maximum(rate[pages], 1e-9)
            if self.bucket_range == "fixed":
                scale = BucketScale(n_buckets=self.buckets)
                edges = bucket_edges(
                    scale.min_rate * self.period_days,
                    scale.max_rate * self.period_days,
                    self.buckets,
                )
            else:
                lo, hi = float(r.min()), float(r.max())
                edges = bucket_edges(lo, max(hi, lo * 1.0001), self.buckets)
            bucket[pages] = assign_buckets(r, edges).astype(np.int64)
        classes = self.buckets
        elapsed = np.where(fetched, period - np.nan_to_num(log.last_fetch), 0.0)
        agg = bucket_aggregates(
            bucket[pages],
            rate[pages],
            np.maximum(elapsed[pages], 0.0),
            period=1.0,
            n_buckets=classes,
        )
        self._host_pages = self._candidate_hosts(log, pages, bucket, rate, elapsed)
        known = int(log.known.sum())
        births = max(0, known - self._known_at_start) / max(1, self.cycle)
        self._known_at_start = known
        discovery = DiscoveryRates(0.0, 0.0, float(births), "none")
        shape = None
        if self.knowledge.rates == "posterior" and pages.size:
            belief = self.knowledge.posterior(log, period)
            shape, _ = pooled_gamma(
                belief.alpha[pages], belief.beta[pages], bucket[pages], classes + 1
            )
        weights = None
        if self.importance and pages.size:
            # each class's mean importance over the fetched pages', as the nightly run's
            # ``plan.weights = "importance"`` (service.pipeline.aggregates_from_store)
            w = np.maximum(np.nan_to_num(log.importance[pages], nan=1.0), 0.0)
            count = np.bincount(bucket[pages], minlength=classes + 1)
            total = np.bincount(bucket[pages], weights=w, minlength=classes + 1)
            with np.errstate(invalid="ignore", divide="ignore"):
                weights = np.where(count > 0, total / count, np.nan) / max(w.mean(), 1e-300)
        measures = CrawlMeasures(
            new_pages=new_count, discovery=discovery, rate_shape=shape, importance=weights
        )
        return agg, measures, rate, bucket

    def _candidate_hosts(
        self,
        log: CrawlLog,
        pages: IntArray,
        bucket: IntArray,
        rate: FloatArray,
        elapsed: FloatArray,
    ) -> HostPages:
        """The fetched ``pages`` of the hosts whose politeness cap can bind, for the
        steady-rate model (a cap below the host's pages the crawler may fetch, else it could
        take every page every period), with their caps less room for their never-fetched
        pages over the cycle; none for the paper's model, which plans without caps. The
        planner splits off those the plan would crawl beyond their caps
        (:func:`planner.cycle.bound_hosts.plan_within_caps`, as the nightly run does)."""
        if self.model != "steady" or not np.isfinite(log.host_cap).any():
            return HostPages.none()
        held = np.bincount(log.host[log.eligible], minlength=log.n_hosts)
        hosts = np.flatnonzero(log.host_cap < held).astype(np.int64)
        if hosts.size == 0:
            return HostPages.none()
        new_on_host = np.bincount(
            log.host[log.eligible & (log.fetches == 0)], minlength=log.n_hosts
        )[hosts]
        cap = log.host_cap[hosts]
        index = np.full(log.n_hosts, -1, dtype=np.int64)
        index[hosts] = np.arange(hosts.size)
        on = pages[index[log.host[pages]] >= 0]
        return HostPages(
            host=hosts,
            cap=np.maximum(cap - np.minimum(cap, new_on_host / self.cycle), 0.0),
            page_host=index[log.host[on]],
            page_class=bucket[on],
            rate=np.maximum(rate[on], 0.0),
            elapsed=np.maximum(elapsed[on], 0.0),
        )

    def _plan(self, log: CrawlLog, period: int, budget: int) -> None:
        agg, measures, rate, bucket = self.aggregates(log, period)
        settings = self.cycle_settings(budget)
        ahead = np.asarray(log.budgets[period : period + self.cycle], dtype=float)
        if ahead.size and np.any(ahead != budget):  # capacity that varies, known ahead
            settings = replace(settings, capacity_by_period=tuple(ahead.tolist()))
        planned = plan_within_caps(agg, settings, measures, self._host_pages)
        outcome, agg = planned.outcome, planned.aggregates
        if planned.bound.size:  # the bound hosts' pages: their host's classes
            hp = self._host_pages
            on = np.isin(hp.page_host, planned.bound) & (hp.page_class > 0)
            group = np.searchsorted(planned.bound, hp.page_host[on])
            ids = np.flatnonzero(log.eligible & (log.fetches > 0))
            at = ids[np.isin(log.host[ids], hp.host[planned.bound])]
            at = at[bucket[at] > 0]
            bucket = bucket.copy()
            # pages of the bound hosts, in the order HostPages holds them (ascending ids)
            bucket[at] = split_key(hp.page_class[on], group)
        self.last_inputs, self.last_plan = (agg, planned.measures), outcome
        if outcome.solver.solve_seconds is not None:
            self.solves.append(outcome.solver.solve_seconds)
        cycle = outcome.cycle
        assert cycle is not None  # fallback_uniform: always a cycle
        T = self.cycle
        old = np.zeros((agg.pages.size, T), dtype=np.int64)
        for t, quotas in enumerate(cycle.quotas):
            for cls, count in quotas.items():
                old[cls, t] = count
        new = np.asarray(cycle.new_pages, dtype=np.int64)
        fetched = log.eligible & (log.fetches > 0)
        pages = np.flatnonzero(fetched)
        populated = np.flatnonzero(agg.pages[1:] > 0) + 1
        # Inside each bucket: the page-level schedule for the bucket's crawls per period.
        interval = np.full(log.n_pages, np.inf)
        # The release's due interval per class, as the service computes it from the plan's
        # crawl fractions x/b averaged over the cycle (store.releases.PeriodWork).
        mean_fraction: dict[int, float] = {}
        for fractions in cycle.fractions:
            for cls, f in fractions.items():
                mean_fraction[cls] = mean_fraction.get(cls, 0.0) + f / T
        # On a growing web the interval of the plan's crawls per page (steady_rates, "A
        # growing web"), as the service's release reads it from the plan's solver record.
        classes = [int(c) for c, f in mean_fraction.items() if f > 0]
        fraction = np.array([mean_fraction[c] for c in classes], dtype=float)
        renewal = outcome.solver.renewal or 0.0
        periods = revisit_interval(fraction, np.ones_like(fraction), renewal)
        self._class_interval = dict(zip(classes, periods.tolist(), strict=True))
        for k in populated:
            members = pages[bucket[pages] == k]
            crawls = float(old[k].sum()) / T
            if self.within_bucket == LONGEST_UNVISITED:
                # one interval for the bucket: due order is last-fetch order
                interval[members] = members.size / crawls if crawls > 0 else np.inf
                continue
            interval[members] = bucket_intervals(
                rate[members],
                log.importance[members],
                crawls,
                objective=self.within_bucket,
            )
        self._old, self._new, self._bucket = old, new, bucket
        self._marginal, self._new_marginal = list(cycle.marginal), list(cycle.new_marginal)
        self._interval, self._rate = interval, rate
        self._cycle_start = period
        self._queue_probes(period, budget)

    def _queue_probes(self, period: int, budget: int) -> None:
        """The pages the last refit found worth a probe, best first, replace those not yet
        crawled (as a nightly run replaces the marks, :mod:`store.probes`); a probe's second
        crawl, once its first is done, stays due."""
        probes = self.knowledge.probes
        self.knowledge.probes = replace(
            probes,
            page=probes.page[:0],
            net=probes.net[:0],
            follow=probes.follow[:0],
            follow_net=probes.follow_net[:0],
            as_follow_up=probes.as_follow_up[:0],
        )
        self._probe_first = probes.page.astype(np.int64)
        # a page whose probe's second crawl is pending keeps it (as store.probes does)
        follow = probes.follow.astype(np.int64)
        pending = [*self._probe_second.values(), follow[:0]]
        self._follow = follow[~np.isin(follow, np.concatenate(pending))]
        marked = probes.page.size + self._follow.size
        self._probe_delay = max(1, round(probes.delay)) if marked else self._probe_delay
        self.probes_queued += int(probes.page.size)
        self.follow_ups_queued += int(self._follow.size)

    def _probe_crawls(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        """This period's probe crawls, ahead of the plan (the urgent lane): the second crawls
        due now, then first crawls, best first, up to ``PROBE_SHARE`` of the budget in all;
        each first crawl's second is due the probe's delay later (whole periods, at least
        one). Pages no longer eligible (dead) are dropped."""
        second = self._probe_second.pop(period, np.zeros(0, np.int64))
        second = second[log.eligible[second]]
        room = max(int(PROBE_SHARE * budget) - second.size, 0)
        first = self._probe_first[log.eligible[self._probe_first]]
        first = first[~np.isin(first, second)][:room]
        self._probe_first = self._probe_first[~np.isin(self._probe_first, first)]
        if first.size:
            later = period + self._probe_delay
            self._probe_second[later] = np.union1d(self._probe_second.get(later, first[:0]), first)
        return np.concatenate([second, first])[:budget]

    # -- the policy ----------------------------------------------------------------------

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        if self._cycle_start < 0 or period - self._cycle_start >= self.cycle:
            self._plan(log, period, budget)
        k = period - self._cycle_start
        fetched = log.eligible & (log.fetches > 0)
        candidates = np.flatnonzero(fetched & (self._bucket > 0))
        fresh_pages = np.flatnonzero(log.eligible & (log.fetches == 0))
        if self.cold_start == "section":
            ratio = self._section_change_ratio(log)
            order = np.lexsort((-log.importance[fresh_pages], -ratio[log.section[fresh_pages]]))
        else:
            order = np.argsort(-log.importance[fresh_pages], kind="stable")
        fresh_pages = fresh_pages[order]
        quotas = {int(b): int(self._old[b, k]) for b in range(1, self._old.shape[0])}
        # Probes first (the urgent lane), charged to the plan's quotas as the service's
        # period release charges urgent crawls: each quota, the new pages' too, gives up
        # crawls in proportion to its size, so the plan's mix is kept.
        probing = self._probe_crawls(period, budget, log)
        quotas, new_quota = charge_spent(quotas, int(self._new[k]), int(probing.size))
        hosts = np.arange(log.n_hosts, dtype=np.int64)
        ranking: dict[str, Any]
        if self.within_bucket == LONGEST_UNVISITED and self.release_order != "oldest":
            # what the service's releases do: only pages due for their class's planned
            # interval, oldest first; the rest of a quota spilled by the plan's values to due
            # pages, then to pages not due yet
            has_values = k < len(self._marginal)
            ranking = {
                "last_fetch": log.last_fetch[candidates] * _SECONDS,
                "due_interval": {b: v * _SECONDS for b, v in self._class_interval.items()},
                "spill": True,
                "marginal": self._marginal[k] if has_values else None,
                "new_marginal": self._new_marginal[k] if has_values else None,
                "pooled": self.release_order == "overdue",
                # a bound host's classes keep their quotas: its capacity unused is lost
                "kept": [b for b in quotas if b >= HOST_CLASS_STRIDE],
            }
        elif self.within_bucket == LONGEST_UNVISITED:
            # the service's releases with ``due = False``: longest unvisited first in every
            # class, every page eligible, and a quota that cannot be filled spilled by the
            # plan's values
            has_values = k < len(self._marginal)
            ranking = {
                "last_fetch": log.last_fetch[candidates] * _SECONDS,
                "spill": True,
                "marginal": self._marginal[k] if has_values else None,
                "new_marginal": self._new_marginal[k] if has_values else None,
            }
        else:
            scheduled = log.last_fetch[candidates] + self._interval[candidates]
            scheduled = np.where(np.isfinite(scheduled), scheduled, 1e12)
            # A bound host's classes: longest unvisited first, every page eligible (as the
            # service's releases take pages), so the host's quotas are spent.
            split = self._bucket[candidates] >= HOST_CLASS_STRIDE
            scheduled[split] = log.last_fetch[candidates[split]]
            ranking = {"scheduled_at": scheduled * _SECONDS}
        selection = select_due_pages(
            page_id=candidates,
            host_id=log.host[candidates],
            bucket=self._bucket[candidates],
            **ranking,
            quotas=quotas,
            new_page_id=fresh_pages,
            new_host_id=log.host[fresh_pages],
            new_quota=new_quota,
            host_ids=hosts,
            host_delay=np.where(np.isfinite(log.host_cap), _SECONDS / log.host_cap, 0.0),
            start=period * _SECONDS,
            end=(period + 1) * _SECONDS,
            now=period * _SECONDS,
            importance=log.importance[candidates],
        )
        chosen = np.asarray(selection.page_id, dtype=np.int64)
        chosen = np.concatenate([probing, chosen[~np.isin(chosen, probing)]])[:budget]
        left = budget - chosen.size
        if left > 0:
            # pull the plan's next crawls forward: most overdue for its page-level interval
            with np.errstate(divide="ignore"):
                planned = np.where(np.isfinite(self._interval), 1.0 / self._interval, 0.0)
            priority = overdue_priority(log, float(period), planned)
            priority[chosen] = -np.inf
            chosen = np.concatenate([chosen, top_pages(priority, left, log, taken=chosen)])
        self._follow_up(period, chosen[probing.size :])
        return chosen

    def _follow_up(self, period: int, crawled: IntArray) -> None:
        """The marked pages among ``crawled`` (this period's crawls but the probe lane's)
        have had their follow-up's first crawl: each one's second is due the probe's delay
        later, in the probe lane (as a service report of a marked page makes it due, an
        urgent request)."""
        first = crawled[np.isin(crawled, self._follow)]
        if not first.size:
            return
        self._follow = self._follow[~np.isin(self._follow, first)]
        later = period + self._probe_delay
        self._probe_second[later] = np.union1d(self._probe_second.get(later, first[:0]), first)

    def _section_change_ratio(self, log: CrawlLog) -> FloatArray:
        """Share of each section's re-crawls that saw a change (0.5 where none yet)."""
        intervals = log.change_intervals()
        section = log.section[intervals.page]
        seen = np.bincount(section, minlength=log.n_sections).astype(float)
        changed = np.bincount(section, weights=intervals.changed, minlength=log.n_sections)
        return np.where(seen > 0, changed / np.maximum(seen, 1.0), 0.5)

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        """Nothing per fetch: the plan is re-made from the log every cycle."""
