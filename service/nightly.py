"""``crawlplan nightly``: from the crawl's evidence to a published plan and its page schedule.

Stages, each timed (seconds in :attr:`NightlyReport.stages` and in the ``nightly_runs`` row):

1. ``measure``: capacity (configured, else the fetches of the last ``window_days``), the
   seconds per fetch of each bucket, and the discovery rates oldnwt, newnwt, nconst
   (:mod:`store.measurements`, :mod:`estimators.discovery`). First, so that a store with no
   capacity to plan fails before the long stages. A measured capacity and the discovery
   rates are smoothed: each moves from the value the plan in force used half way to the new
   measurement (:func:`estimators.discovery.smoothed`, weight
   :data:`estimators.defaults.SMOOTHING_WEIGHT`; per-period values scaled when the period
   length changed), so one odd cycle does not swing the next plan; the raw measurements are
   recorded in the plan's inputs (``measured``). A run with ``force`` in a cycle already
   planned smooths toward that cycle's own plan.
2. ``estimate``: every fetched page's change rate and bucket from its observations
   (:func:`service.pipeline.estimate_from_store`; skipped with ``estimate`` off, for rates
   written by something else); ``importance``: the OPIC virtual page's cash spread and every
   page's importance stored (:func:`store.importance.spread_virtual_cash`).
3. ``aggregate``: per-bucket pages b, change fraction a per period, obsolete pages y now, and
   the never-fetched pages n (:func:`service.pipeline.aggregates_from_store`); the instance
   over the populated buckets (:func:`planner.cycle.plan_inputs.plan_inputs`). With the
   steady-rate model, also the fetched pages of the hosts whose politeness could bind: a
   polite delay (``crawl.min_delay``, or robots.txt's longer crawl delay) that lets a period
   take fewer crawls than the host has fetched pages (:func:`service.pipeline.
   politeness_bounds`).
4. ``solve``: the steady-rate model (or, ``plan.model = "webfountain"``, the paper's model
   warm-started from the current plan moved on to this cycle) on the populated buckets; a
   host the plan would crawl beyond its cap has its pages split into classes of their own
   and the cycle is planned again within its cap (:func:`planner.cycle.bound_hosts.
   plan_within_caps`). The bound hosts' ids and caps go to the plan's solver record
   (``bound_hosts``), which the release reads to tell a page's class.
5. ``publish``: whole-page quotas within capacity, written and published in one transaction;
   until that commit workers keep leasing from the previous plan.
6. ``schedule``: every page's refresh interval and scheduled time inside its bucket's quota
   (:func:`service.page_schedule.schedule_pages`); periods of the new plan are released only
   after it.

**Idempotent and resumable.** A cycle starts at ``now`` rounded down to a whole period since
the epoch. A run for a cycle whose plan is already published does nothing (``unchanged``),
unless ``force``. A run that finds the current plan's page schedule unfinished (the run that
published it was killed) finishes it first. A killed run leaves the previous plan current; the
next run marks it ``abandoned`` and does the work again. One run at a time
(:func:`store.nightly_runs.start_run`).

``dry_run`` plans from the estimates already in the store, writes nothing, and returns the
new cycle beside the current plan's.

Service edge: wires store, estimators and the planner core; no planning logic here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from estimators.bayes_action import PROBE_HORIZON_PERIODS, PROBE_SHARE
from estimators.buckets import BucketScale
from estimators.capacity import CapacityEstimate, crawl_capacity
from estimators.discovery import DiscoveryRates, discovery_rates, smoothed, smoothed_discovery
from estimators.opic import crawl_virtual_gift
from estimators.reliability import LastModifiedPolicy
from planner.cycle.bound_hosts import plan_within_caps
from planner.cycle.plan_cycle import (
    PAGE_LIFETIME_DAYS,
    PLAN_MODELS,
    CrawlMeasures,
    CycleSettings,
    WarmStart,
)
from planner.cycle.plan_inputs import EXPLORE_REVISITS, PlanInputs, PlannedCycle
from planner.model.instance import InstanceError
from planner.model.steady_rates import STEADY_OBJECTIVES
from planner.schedules.objectives import OBJECTIVES
from service.errors import ConfigError
from service.page_schedule import UNIFORM, schedule_pages
from service.pipeline import (
    ProbeSettings,
    StoreAggregates,
    aggregates_from_store,
    estimate_from_store,
    politeness_bounds,
)
from store import Database, PlanDraft, PlanPeriodDraft, latest_plan, publish_plan
from store.due_times import page_schedule_finished
from store.errors import NightlyRunBusyError
from store.importance import spread_virtual_cash
from store.measurements import CrawlMeasurements, measure_crawl
from store.models import PLANS
from store.nightly_runs import finish_run, heartbeat, run_liveness, start_run
from store.period_use import EndedPeriods, ended_periods
from store.plans import PlanDetail, PlanSummary, plan_detail

if TYPE_CHECKING:
    from service.config import Settings

__all__ = ["NightlyReport", "NightlySettings", "StoreReading", "cycle_start", "run_nightly"]

_DAY = 86_400.0


@dataclass(frozen=True)
class NightlySettings:
    """The ``plan.*`` configuration: period length (days), periods T, the bucket model and
    its objective (also the page schedule's inside the quotas), strategy 1-3 (WebFountain
    model), capacity (crawls per period, 0 = measured), history window (days) and the pages'
    mean lifetime (days)."""

    period_days: float = 1.0
    periods: int = 14
    model: str = "steady"
    strategy: int = 1
    capacity: float = 0.0
    window_days: float = 7.0
    objective: str = "freshness"
    page_lifetime_days: float = PAGE_LIFETIME_DAYS
    stale_after: timedelta = timedelta(minutes=30)
    #: The change-rate buckets' range, changes per day (None: the estimators' defaults).
    scale: BucketScale | None = None
    #: The Last-Modified reliability test's thresholds (None: the estimators' defaults).
    last_modified: LastModifiedPolicy | None = None
    #: The share of a page's main text a change must reach to count (0: any change;
    #: ``estimate.min_change``, :func:`service.pipeline.estimate_from_store`).
    min_change: float = 0.0
    #: ``measured``: a crawl of bucket i costs its measured mean fetch time (the capacity is
    #: crawl time); ``equal``: every crawl costs the same (the capacity is a number of crawls).
    crawl_cost: str = "measured"
    #: Every bucket's pages crawled at least once per this many mean revisit intervals (0:
    #: off; :func:`planner.cycle.plan_inputs.explore`).
    explore: float = EXPLORE_REVISITS
    #: Periods over which what a probe teaches is counted (0: no probes;
    #: ``plan.probe_horizon``, :func:`estimators.bayes_action.choose_probes`); with
    #: ``rates = "bayes"`` only.
    probe_horizon: float = PROBE_HORIZON_PERIODS
    #: Follow-ups, probes whose first crawl is a page's next planned one (``plan.follow_ups``
    #: on; :mod:`store.probes`), where a page's lesson pays for one crawl, not two.
    follow_ups: bool = False
    #: Plan for a growing web (``plan.renewal = "measured"``; ``False``: ``"off"``;
    #: :func:`planner.cycle.plan_cycle.web_renewal`).
    renewal: bool = True
    #: Periods the model looks ahead (0: the cycle;
    #: :func:`planner.cycle.plan_inputs.model_horizon`); the plan publishes the first
    #: ``periods`` of them.
    horizon: int = 0
    #: ``equal``: every page alike; ``importance``: each bucket's objective weighted by its
    #: pages' mean OPIC importance (``plan.weights``; steady-rate model).
    weights: str = "equal"
    #: ``bayes``: plan each page on its Bayes-equivalent rate (its whole posterior, at the
    #: capacity's price; :mod:`estimators.bayes_action`); ``estimates``: on its estimate
    #: (``plan.rates``).
    rates: str = "bayes"
    #: The configured minimum delay between two requests to one host, seconds
    #: (``crawl.min_delay``): with robots.txt's crawl delays, what caps a host's crawls a
    #: period (:func:`service.pipeline.politeness_bounds`).
    min_delay_seconds: float = 1.0
    #: ``False``: the baseline a fixed-schedule crawler follows instead of the optimized plan:
    #: the uniform crawl (every known page equally often, filling capacity) and a round robin
    #: inside each bucket; for comparisons on the same machinery and budget.
    optimize: bool = True
    #: ``False``: skip the estimate stage and plan on the rates and buckets the store holds,
    #: written by something else (the demo's oracle crawl writes the web's true rates there:
    #: :attr:`service.demo.DemoSettings.oracle`). Not a configuration key: a plan that stops
    #: estimating stops learning.
    estimate: bool = True

    def cycle_settings(self, capacity: float) -> CycleSettings:
        """What :func:`planner.cycle.plan_cycle.plan_cycle` needs of these settings, for
        ``capacity`` crawls per period (configured or measured)."""
        return CycleSettings(
            capacity=capacity,
            periods=self.periods,
            model=self.model,
            objective=self.objective if self.objective in STEADY_OBJECTIVES else "freshness",
            strategy=self.strategy,
            page_lifetime=self.page_lifetime_days / self.period_days,
            horizon=self.horizon,
            terminal_value=True,
            explore=self.explore,
            renewal=self.renewal,
            optimize=self.optimize,
            fallback_uniform=False,  # the previous plan stays current
        )

    @classmethod
    def from_config(cls, settings: Settings) -> NightlySettings:
        """The ``plan.*`` values of a loaded configuration."""
        v = settings.values
        return cls(
            period_days=float(v["plan.period_days"]),
            periods=int(v["plan.periods"]),
            model=str(v["plan.model"]),
            page_lifetime_days=float(v["plan.page_lifetime_days"]),
            horizon=int(v["plan.horizon"]),
            crawl_cost=str(v["plan.crawl_cost"]),
            explore=float(v["plan.explore"]),
            probe_horizon=float(v["plan.probe_horizon"]),
            follow_ups=str(v["plan.follow_ups"]) == "on",
            renewal=str(v["plan.renewal"]) == "measured",
            strategy=int(v["plan.strategy"]),
            capacity=float(v["plan.capacity"]),
            window_days=float(v["plan.window_days"]),
            objective=str(v["plan.objective"]),
            scale=settings.bucket_scale,
            last_modified=settings.last_modified_policy,
            min_change=float(v["estimate.min_change"]),
            min_delay_seconds=float(v["crawl.min_delay"]),
            weights=str(v["plan.weights"]),
            rates=str(v["plan.rates"]),
        )

    def __post_init__(self) -> None:
        if self.model not in PLAN_MODELS:
            known = " or ".join(PLAN_MODELS)
            raise ConfigError(f"plan.model must be {known}, got {self.model!r}")
        if not (math.isfinite(self.page_lifetime_days) and self.page_lifetime_days >= 0):
            raise ConfigError(
                f"plan.page_lifetime_days must be >= 0 days, got {self.page_lifetime_days}"
            )
        if self.strategy not in (1, 2, 3):
            raise ConfigError(f"plan.strategy must be 1, 2 or 3, got {self.strategy}")
        if not 0 <= self.min_change <= 1:
            raise ConfigError(
                f"estimate.min_change must be a share from 0 to 1, got {self.min_change}"
            )
        if self.weights not in PLAN_WEIGHTS:
            raise ConfigError(
                f"plan.weights must be {' or '.join(PLAN_WEIGHTS)}, got {self.weights!r}"
            )
        if self.crawl_cost not in ("measured", "equal"):
            raise ConfigError(f"plan.crawl_cost must be measured or equal, got {self.crawl_cost!r}")
        if self.explore < 0:
            raise ConfigError(f"plan.explore must be >= 0 (0: off), got {self.explore}")
        if not (math.isfinite(self.probe_horizon) and self.probe_horizon >= 0):
            raise ConfigError(
                f"plan.probe_horizon must be >= 0 periods (0: no probes), got {self.probe_horizon}"
            )
        if self.horizon < 0:
            raise ConfigError(
                f"plan.horizon must be 0 (the cycle) or a number of periods, got {self.horizon}"
            )
        if self.objective not in (*OBJECTIVES, UNIFORM):
            raise ConfigError(
                f"plan.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )


@dataclass(frozen=True)
class StoreReading:
    """What a run read from store ``db`` to build its plan instance: the crawl measured over
    the window ending at ``until``, the discovery rates fitted to it, and the per-bucket
    aggregates at ``until`` for periods of ``period_days``. A dry run of the same store with
    the same ``until``, window and period reuses it (:func:`run_nightly`'s ``reading``):
    those reads scan the whole store, and only the plan's capacity, strategy and periods
    differ between what-if runs. Valid while the store does not change: the caller's to
    know (``scenario whatif`` runs its two dry runs back to back, writing nothing)."""

    db: Database
    until: datetime
    window_days: float
    period_days: float
    measured: CrawlMeasurements
    discovery: DiscoveryRates
    aggregates: StoreAggregates
    periods: EndedPeriods | None = None

    def fits(self, db: Database, settings: NightlySettings, until: datetime) -> bool:
        """True when a run of ``settings`` on ``db`` at ``until`` would read the same."""
        return self.db is db and (self.until, self.window_days, self.period_days) == (
            until,
            settings.window_days,
            settings.period_days,
        )


@dataclass
class NightlyReport:
    """What a run did. ``status``: ``published``, ``unchanged``, ``resumed`` (finished an
    interrupted run's page schedule and found this cycle already planned), ``failed`` (no
    plan: the previous one stays current), ``dry-run``. ``cycle`` is the new plan's quotas
    (also for a dry run), ``current`` the previous plan's summary, ``reading`` what the run
    read from the store to plan (for a real run, after its estimate)."""

    status: str
    cycle_start: datetime
    run_id: int | None = None
    plan: int | None = None
    message: str = ""
    stages: dict[str, float] = field(default_factory=dict)
    inputs: PlanInputs | None = None
    cycle: PlannedCycle | None = None
    current: PlanSummary | None = None
    current_quotas: dict[tuple[int, int], int] = field(default_factory=dict)
    current_new_pages: dict[int, int] = field(default_factory=dict)
    solver: dict[str, Any] = field(default_factory=dict)
    resumed: int | None = None
    reading: StoreReading | None = None
    #: Pages the estimate stage marked for a probe, and for a follow-up (:mod:`store.probes`).
    probes: int = 0
    follow_ups: int = 0

    @property
    def exit_code(self) -> int:
        """0 when the run left a usable plan in place as intended, 1 when solving failed."""
        return 1 if self.status == "failed" else 0


#: What the plan weights a bucket's objective by (``plan.weights``).
PLAN_WEIGHTS = ("equal", "importance")


def cycle_start(now: datetime, period_days: float) -> datetime:
    """``now`` rounded down to a whole number of periods since the epoch (UTC)."""
    period = period_days * _DAY
    start = (now.timestamp() // period) * period
    return datetime.fromtimestamp(start, UTC)


class _Stages:
    """Times stages and moves the run's heartbeat after each."""

    def __init__(self, db: Database, run_id: int | None, say: Callable[[str], None]) -> None:
        self.db, self.run_id, self.say = db, run_id, say
        self.seconds: dict[str, float] = {}

    def beat(self) -> None:
        """Move the heartbeat now (from inside a long stage)."""
        if self.run_id is not None:
            heartbeat(self.db, self.run_id, self.seconds)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - t0, 3)
        self.say(f"{name}: {self.seconds[name]:.1f} s")
        if self.run_id is not None:
            heartbeat(self.db, self.run_id, self.seconds)


def _model_label(settings: NightlySettings) -> str:
    """How the plan was made, as stored with it: ``steady freshness``, ``strategy 1``..."""
    if settings.model == "webfountain":
        return f"strategy {settings.strategy}"
    return f"steady {settings.cycle_settings(1.0).objective}"


def _objective(settings: NightlySettings) -> str:
    return settings.objective if settings.optimize else UNIFORM


def _measured_capacity(
    settings: NightlySettings,
    measured: CrawlMeasurements,
    periods: EndedPeriods | None,
    previous: float | None,
) -> CapacityEstimate:
    """Crawls per period the crawler can do: read from the plan periods that ended in the
    window (:func:`estimators.capacity.crawl_capacity`: a period that kept up with its
    release is a lower bound, never a measurement), each scaled to periods of
    ``settings.period_days``; with none, the throughput over the window (crawling before
    any plan released work; NaN: nothing measured)."""
    period = settings.period_days * _DAY
    if periods is not None and len(periods):
        scale = [period / s if s > 0 else 0.0 for s in periods.seconds]
        found = crawl_capacity(
            [f * k for f, k in zip(periods.fetched, scale, strict=True)],
            [f * k for f, k in zip(periods.offered, scale, strict=True)],
            [f * k for f, k in zip(periods.left, scale, strict=True)],
            previous=previous,
        )
        if found.method != "none":
            return found
    if measured.fetches == 0 or measured.window_seconds <= 0:
        return CapacityEstimate(math.nan, "none")
    return CapacityEstimate(measured.fetches * period / measured.window_seconds, "throughput")


def _capacity(settings: NightlySettings, measured: float, previous: float | None) -> float:
    """The capacity to plan with: configured, else the measured one smoothed toward the plan
    in force's (that one alone when nothing was measured)."""
    if settings.capacity > 0:
        return settings.capacity
    if math.isnan(measured):
        if previous is not None and previous > 0:
            return previous
        raise ConfigError(
            "no crawl throughput has been measured yet: set plan.capacity (crawls per period) "
            "in crawlplan.toml or $CRAWLPLAN_CAPACITY, or crawl first"
        )
    return smoothed(previous, measured)


@dataclass(frozen=True)
class _Previous:
    """What the plan in force used, per period of the new plan's length: capacity (crawls)
    and discovery rates (None: no plan, or it recorded none)."""

    capacity: float | None = None
    discovery: DiscoveryRates | None = None


def _previous(db: Database, current: PlanSummary | None, settings: NightlySettings) -> _Previous:
    """The capacity and discovery rates recorded in the plan in force's inputs, scaled to
    periods of ``settings.period_days`` (both are per period; oldnwt and newnwt per crawl)."""
    if current is None:
        return _Previous()
    with db.read() as conn:
        inputs = conn.execute(
            select(PLANS.c.inputs).where(PLANS.c.id == current.version)
        ).scalar_one_or_none()
    if not isinstance(inputs, dict):
        return _Previous()
    scale = settings.period_days / current.period_days
    capacity = inputs.get("capacity_crawls")
    found = inputs.get("discovery")
    discovery = None
    if isinstance(found, dict) and {"oldnwt", "newnwt", "nconst"} <= found.keys():
        discovery = DiscoveryRates(
            float(found["oldnwt"]),
            float(found["newnwt"]),
            float(found["nconst"]) * scale,
            str(found.get("method", "")),
        )
    return _Previous(
        float(capacity) * scale if isinstance(capacity, int | float) else None, discovery
    )


def _warm(
    db: Database, current: PlanSummary | None, start: datetime
) -> tuple[WarmStart | None, PlanDetail | None]:
    """The current plan moved on to the cycle starting at ``start``, and its detail."""
    if current is None:
        return None, None
    detail = plan_detail(db, current.version)
    shift = round((start - current.starts_at).total_seconds() / (current.period_days * _DAY))
    return WarmStart(detail.fractions, detail.new_pages, shift=max(shift, 0)), detail


def _finite(value: float | None) -> float | None:
    """A marginal value the store keeps: None for none, or for one not finite."""
    return None if value is None or not math.isfinite(value) else float(value)


def _finite_values(values: Mapping[int, float]) -> dict[int, float]:
    """The finite marginal values of a period (a bucket without one spills last)."""
    return {b: float(v) for b, v in values.items() if math.isfinite(v)}


def _draft(
    start: datetime,
    settings: NightlySettings,
    inputs: PlanInputs,
    cycle: PlannedCycle,
    solver: dict[str, Any],
    measured: dict[str, Any] | None = None,
) -> PlanDraft:
    period = timedelta(days=settings.period_days)
    instance = inputs.instance
    recorded: dict[str, Any] = {
        # The raw measurements, before smoothing (the values above them are what was planned).
        "measured": measured or {},
        "buckets": inputs.bucket_ids.tolist(),
        "capacity_crawls": inputs.capacity_crawls,
        "seconds_per_fetch": inputs.seconds_per_fetch,
        "new_pages": inputs.new_pages,
        "discovery": {
            "oldnwt": inputs.discovery.oldnwt,
            "newnwt": inputs.discovery.newnwt,
            "nconst": inputs.discovery.nconst,
            "method": inputs.discovery.method,
        },
    }
    if instance is not None:
        recorded.update(
            b0=instance.b0.tolist(),
            y0=instance.y0.tolist(),
            a=instance.a[:, 0].tolist(),
            horizon=instance.periods,
        )
    return PlanDraft(
        starts_at=start,
        period_days=settings.period_days,
        strategy=_model_label(settings),
        periods=[
            PlanPeriodDraft(
                period=t + 1,
                starts_at=start + t * period,
                ends_at=start + (t + 1) * period,
                capacity=inputs.capacity_crawls,
                new_pages=cycle.new_pages[t],
                quotas=cycle.quotas[t],
                fractions=cycle.fractions[t],
                marginal=_finite_values(cycle.marginal[t] if t < len(cycle.marginal) else {}),
                new_marginal=_finite(
                    cycle.new_marginal[t] if t < len(cycle.new_marginal) else None
                ),
            )
            for t in range(settings.periods)
        ],
        inputs=recorded,
        solver=solver,
        objective=solver.get("objective"),
        solver_status=str(solver.get("status")),
        note=f"nightly run for the cycle starting {start:%Y-%m-%d %H:%M:%S} UTC",
    )


def run_nightly(
    db: Database,
    settings: NightlySettings,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    force: bool = False,
    say: Callable[[str], None] = lambda _line: None,
    reading: StoreReading | None = None,
) -> NightlyReport:
    """Run the nightly stages; see the module docstring. A dry run given the ``reading`` of
    an earlier dry run (:attr:`NightlyReport.reading`) that :meth:`StoreReading.fits` it
    skips the measure and aggregate stages' reads of the store. A real run holds the
    nightly run lock throughout (:func:`store.nightly_runs.run_liveness`), so that a run
    killed with SIGKILL is taken over by the next one at once."""
    if reading is not None and not dry_run:
        raise ValueError("only a dry run reuses a reading: a real run estimates in between")
    if dry_run:
        return _run_nightly(db, settings, now, True, force, say, reading, alone=None)
    with run_liveness(db) as alone:
        return _run_nightly(db, settings, now, False, force, say, reading, alone=alone)


def _run_nightly(
    db: Database,
    settings: NightlySettings,
    now: datetime | None,
    dry_run: bool,
    force: bool,
    say: Callable[[str], None],
    reading: StoreReading | None,
    *,
    alone: bool | None,
) -> NightlyReport:
    when = now or datetime.now(UTC)
    start = cycle_start(when, settings.period_days)
    run_id = (
        None
        if dry_run
        else start_run(
            db,
            cycle_start=start,
            stale_after=settings.stale_after,
            now=now,
            others_dead=alone,
        )
    )
    stages = _Stages(db, run_id, say)
    report = NightlyReport("running", start, run_id=run_id, stages=stages.seconds)
    try:
        _run(db, settings, report, stages, when, dry_run=dry_run, force=force, reading=reading)
    except NightlyRunBusyError:
        raise  # taken over: the run that took over owns the record now
    except BaseException as error:
        if run_id is not None:
            finish_run(db, run_id, status="failed", stages=stages.seconds, message=repr(error))
        raise
    if run_id is not None:
        finish_run(
            db,
            run_id,
            status=report.status,
            stages=stages.seconds,
            plan_id=report.plan,
            message=report.message or None,
        )
    return report


def _run(
    db: Database,
    settings: NightlySettings,
    report: NightlyReport,
    stages: _Stages,
    when: datetime,
    *,
    dry_run: bool,
    force: bool,
    reading: StoreReading | None = None,
) -> None:
    start = report.cycle_start
    current = latest_plan(db)
    report.current = current
    if not dry_run and _finish_current(db, settings, report, stages, force=force):
        return
    reuse = reading if reading is not None and reading.fits(db, settings, when) else None
    with stages.stage("measure"):
        if reuse is not None:
            measured, fitted, periods = reuse.measured, reuse.discovery, reuse.periods
        else:
            measured, fitted = _measure(db, settings, when)
            periods = ended_periods(
                db, since=when - timedelta(days=settings.window_days), until=when
            )
        previous = _previous(db, current, settings)
        found = _measured_capacity(settings, measured, periods, previous.capacity)
        raw_capacity = found.crawls
        capacity = _capacity(settings, raw_capacity, previous.capacity)
        discovery = smoothed_discovery(fitted, previous.discovery)
    if not dry_run:
        report.probes, report.follow_ups = _estimate(
            db, settings, stages, capacity, _periods_since(current, start)
        )
    with stages.stage("aggregate"):
        try:
            if reuse is not None:
                aggregates = reuse.aggregates
            else:
                hosts = None
                if settings.model == "steady" and settings.optimize:
                    hosts = politeness_bounds(
                        db,
                        period_days=settings.period_days,
                        periods=settings.periods,
                        min_delay_seconds=settings.min_delay_seconds,
                    )
                aggregates = aggregates_from_store(
                    db, period_days=settings.period_days, now=when, hosts=hosts
                )
        except InstanceError as error:
            raise ConfigError(f"the store's data make no valid plan instance: {error}") from None
        report.reading = StoreReading(
            db,
            when,
            settings.window_days,
            settings.period_days,
            measured,
            fitted,
            aggregates,
            periods,
        )
    measures = CrawlMeasures(
        new_pages=aggregates.new_pages,
        bucket_seconds=measured.bucket_seconds if settings.crawl_cost == "measured" else None,
        seconds_per_fetch=measured.seconds_per_fetch,
        discovery=discovery,
        importance=aggregates.importance if settings.weights == "importance" else None,
    )
    warm, detail = _warm(db, current, start)
    with stages.stage("solve"):
        try:
            capped = plan_within_caps(
                aggregates.buckets,
                settings.cycle_settings(capacity),
                measures,
                aggregates.host_pages,
                warm=warm,
            )
        except InstanceError as error:
            raise ConfigError(f"the store's data make no valid plan instance: {error}") from None
    outcome = capped.outcome
    report.inputs, cycle = outcome.inputs, outcome.cycle
    solver = outcome.solver.as_dict()
    if capped.bound.size:
        solver["bound_hosts"] = {
            "host_id": aggregates.host_pages.host[capped.bound].tolist(),
            "cap": capped.cap.tolist(),
            "solves": capped.solves,
        }
    report.solver = solver
    if detail is not None:
        report.current_quotas, report.current_new_pages = detail.quotas, detail.new_pages
    if cycle is None:
        report.status = "failed"
        report.message = f"the solver found no plan ({solver['status']}): {outcome.solver.message}"
        return
    report.cycle = cycle
    if dry_run:
        report.status = "dry-run"
        return
    with stages.stage("publish"):
        raw = {
            "capacity_crawls": None if math.isnan(raw_capacity) else raw_capacity,
            "capacity_method": found.method,
            "capacity_periods": {"saturated": found.saturated, "kept_up": found.kept_up},
            "discovery": {
                "oldnwt": fitted.oldnwt,
                "newnwt": fitted.newnwt,
                "nconst": fitted.nconst,
                "method": fitted.method,
            },
        }
        report.plan = publish_plan(
            db, _draft(start, settings, outcome.inputs, cycle, solver, measured=raw)
        )
    with stages.stage("schedule"):
        schedule_pages(db, objective=_objective(settings))
    report.status = "published"


def _finish_current(
    db: Database, settings: NightlySettings, report: NightlyReport, stages: _Stages, *, force: bool
) -> bool:
    """Finish the plan in force's page schedule if a killed run left it half done; True when
    that plan already covers this cycle (and ``force`` is off), so nothing is left to do."""
    current, start = report.current, report.cycle_start
    if current is None:
        return False
    if not page_schedule_finished(db, current.version):
        with stages.stage("schedule (resumed)"):
            schedule_pages(db, objective=_objective(settings))
        report.resumed = current.version
    if current.starts_at != start or force:
        return False
    report.status = "resumed" if report.resumed else "unchanged"
    report.plan = current.version
    report.message = (
        f"plan {current.version} already covers the cycle starting {start:%Y-%m-%d %H:%M:%S} UTC"
    )
    return True


def _measure(
    db: Database, settings: NightlySettings, when: datetime
) -> tuple[CrawlMeasurements, DiscoveryRates]:
    """The crawl's recent fetches over the window, and the discovery rates fitted to them."""
    window = timedelta(days=settings.window_days)
    period_seconds = settings.period_days * _DAY
    bin_seconds = min(period_seconds, window.total_seconds()) / 4
    measured = measure_crawl(db, until=when, window=window, bin_seconds=bin_seconds)
    discovery = discovery_rates(
        measured.old_crawls,
        measured.new_crawls,
        measured.discovered,
        bin_seconds=bin_seconds,
        period_seconds=period_seconds,
    )
    return measured, discovery


def _periods_since(current: PlanSummary | None, start: datetime) -> int | None:
    """Whole periods from the current plan's start to ``start`` (None without a plan)."""
    if current is None:
        return None
    return round((start - current.starts_at).total_seconds() / (current.period_days * _DAY))


def _probe_settings(
    settings: NightlySettings, capacity: float, periods_since: int | None
) -> ProbeSettings:
    """The probes' horizon (``plan.probe_horizon`` periods, in days), shortest delay (the
    least delay between two requests to a host) and most probes a run: ``PROBE_SHARE`` of the
    capacity (crawls a period) of the periods since the last run (one at least, the cycle at
    most: a run a period probes a period's share), two crawls each. A limit of 0 (probes off,
    or a plan not on Bayes-equivalent rates) clears the last run's marks."""
    periods = min(max(periods_since or settings.periods, 1), settings.periods)
    return ProbeSettings(
        horizon_days=settings.probe_horizon * settings.period_days,
        shortest_days=settings.min_delay_seconds / _DAY,
        limit=int(PROBE_SHARE * capacity * periods / 2) if settings.probe_horizon else 0,
        follow_ups=settings.follow_ups and settings.probe_horizon > 0,
    )


def _estimate(
    db: Database,
    settings: NightlySettings,
    stages: _Stages,
    capacity: float,
    periods_since: int | None = None,
) -> tuple[int, int]:
    """The estimate and importance stages: change rates and buckets (by the Bayes-equivalent
    rates at ``capacity`` crawls per period, with ``plan.rates = "bayes"``, and the probes
    and follow-ups; none with ``estimate`` off), then OPIC importance. Returns the pages
    marked for a probe and for a follow-up."""
    bayes = settings.rates == "bayes" and settings.optimize and capacity > 0
    probes = _probe_settings(settings, capacity, periods_since)
    marked = (0, 0)
    if settings.estimate:
        with stages.stage("estimate"):
            # A heartbeat every chunk: a long estimate is alive, not killed.
            done = estimate_from_store(
                db,
                scale=settings.scale,
                policy=settings.last_modified,
                min_change=settings.min_change,
                progress=lambda _pages: stages.beat(),
                plan_budget=capacity / settings.period_days if bayes else None,
                probes=probes if bayes else replace(probes, limit=0, follow_ups=False),
            )
            marked = (done.probes_queued, done.follow_ups_marked)
    with stages.stage("importance"):
        # OPIC: the virtual page's cash to every page, and every page's importance
        # (H + C) / (G + 1) stored for the page schedule.
        spread_virtual_cash(db, crawl_virtual_gift)
    return marked
