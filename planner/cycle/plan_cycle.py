"""One planning cycle, from bucket aggregates to the published quotas: :func:`plan_cycle`.

The nightly run (``service.nightly``), ``crawlplan scenario whatif`` (a nightly dry run) and
the simulator's planner policy (``scenarios.policies.webfountain``) all plan through this one
function, so a simulation measures the planner that is deployed. What differs between them is
an input, not a code path:

============================  ====================================  ===========================
input                         nightly                               simulator
============================  ====================================  ===========================
``aggregates``                the store's (256 classes, class 0:    the policy's own buckets of
                              fetched, no estimate yet), by the     the same rates
                              pages' plan rates (``plan.rates``)
``CrawlMeasures.bucket_       measured mean fetch time per class    None: every crawl costs 1
seconds``                     (``plan.crawl_cost = "measured"``)
``CrawlMeasures.discovery``   fitted oldnwt, newnwt, nconst         nconst = pages born per
                                                                    period, no link discovery
``CycleSettings.fallback_     False: a failed solve publishes       True: a crawler must crawl,
uniform``                     nothing, the previous plan stays      so the uniform crawl
``warm``                      the current plan, moved on            None
``CrawlMeasures.rate_shape``  None (point estimates)                with ``rates = "posterior"``
                                                                    each class's pooled Gamma
``CrawlMeasures.host_caps``   None                                  the politeness-bound hosts:
                                                                    buckets split by host
============================  ====================================  ===========================

**Politeness-bound hosts** (:class:`HostCaps`, steady-rate model only). A host that accepts
at most K crawls a period cannot take more, and a plan that gives its pages more loses the
surplus. The caller splits the classes: the pages of class c on bound host g form a class of
their own, keyed :func:`host_class` ``(c, g) = c + 256 (g + 1)`` (classes 0..255 hold the
other pages), and gives each class's group (g, or -1) and each host's cap; the model caps the
sum of each group's crawls per period (:mod:`planner.model.steady_rates`, "Host caps"), and
the whole-page quotas give each host its planned crawls, rounded as a whole and within its
cap (rounding class by class would lose a host's many fractional classes). The quotas come
out per split class, keyed as given; :func:`base_class` maps a key back to its change-rate
class. The WebFountain model and the uniform crawl plan without the caps (the paper's model
has none).

Steps: the instance over the populated classes (:func:`planner.cycle.plan_inputs.plan_inputs`);
no fetched page yet: new pages up to capacity (:func:`~planner.cycle.plan_inputs.
cold_start_cycle`); ``optimize = False``: the uniform crawl, a round robin (never-fetched
pages first: :func:`~planner.model.webfountain.round_robin_crawl`); else, over
``model_horizon(periods, horizon)`` periods, the steady-rate model (``model = "steady"``, the
default: :mod:`planner.model.steady_rates`, one convex solve, with the classes' rate beliefs
``CrawlMeasures.rate_shape`` and host caps when given) or the WebFountain model (``model =
"webfountain"``: the strategy's weights plus the terminal value, from the warm start and, when
that fails, from the solver's own starts); then the first ``periods`` periods as whole-page
quotas, spare capacity spent and, with ``explore`` > 0, every bucket explored
(:func:`~planner.cycle.plan_inputs.cycle_from_trajectory`), with the steady-rate model's
marginal values per class and period (:attr:`PlannedCycle.marginal`).

Pure: no store, no file, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from estimators.buckets import BucketAggregates
from estimators.discovery import DiscoveryRates
from planner.cycle.plan_inputs import (
    EXPLORE_REVISITS,
    PlanInputs,
    PlannedCycle,
    cold_start_cycle,
    cycle_from_trajectory,
    model_horizon,
    plan_inputs,
    planning_weights,
    warm_start,
)
from planner.model.instance import CrawlInstance
from planner.model.steady_rates import STEADY_OBJECTIVES, SteadySetup, uniform_start
from planner.model.webfountain import Trajectory, round_robin_crawl
from planner.model.weights import ObjectiveWeights, strategy_weights
from planner.solver.plan_solver import PlanSolution, PlanSolver
from planner.solver.steady_solver import SteadySolution, solve_steady

__all__ = [
    "HOST_CLASS_STRIDE",
    "NO_DISCOVERY",
    "PAGE_LIFETIME_DAYS",
    "PLAN_MODELS",
    "CrawlMeasures",
    "CycleSettings",
    "HostCaps",
    "PlanOutcome",
    "SolverRecord",
    "WarmStart",
    "base_class",
    "class_label",
    "host_class",
    "plan_cycle",
]

#: The bucket models a cycle can be planned with (:class:`CycleSettings` ``model``).
PLAN_MODELS = ("steady", "webfountain")

#: Days a web page lives on average: about a fifth of pages are still there after a year
#: (Ntoulas, Cho & Olston, "What's new on the web?", WWW 2004), a mean life of some 200 days.
PAGE_LIFETIME_DAYS = 200.0

#: No page found by crawling, none from outside (the simulator's crawler, before births).
NO_DISCOVERY = DiscoveryRates(oldnwt=0.0, newnwt=0.0, nconst=0.0, method="none")

#: Keys of the classes split by politeness-bound host: class c of bound host g is
#: ``c + HOST_CLASS_STRIDE * (g + 1)`` (module docstring, "Politeness-bound hosts").
HOST_CLASS_STRIDE = 256


def host_class(cls: int | npt.NDArray[np.int64], group: int | npt.NDArray[np.int64]) -> Any:
    """The key of class ``cls`` (0..255) split to bound host ``group`` (-1: not split, the
    class itself); elementwise on arrays."""
    key = np.asarray(cls, dtype=np.int64) + HOST_CLASS_STRIDE * (
        np.asarray(group, dtype=np.int64) + 1
    )
    return int(key) if key.ndim == 0 else key


def base_class(key: int | npt.NDArray[np.int64]) -> Any:
    """The change-rate class (0..255) of a class key, split or not; elementwise on arrays."""
    return key % HOST_CLASS_STRIDE


def class_label(key: int) -> str:
    """A class key as tables show it: ``"9"`` for bucket 9, ``"9 @host 0"`` for class 9 of
    the plan's bound host 0 (key 265)."""
    if key < HOST_CLASS_STRIDE:
        return str(key)
    return f"{key % HOST_CLASS_STRIDE} @host {key // HOST_CLASS_STRIDE - 1}"


@dataclass(frozen=True)
class HostCaps:
    """Politeness-bound hosts, for the steady-rate model (module docstring).

    Attributes
    ----------
    group : array_like of int, shape like the aggregates'
        The bound host (0..H-1) whose pages each class holds, -1 for a class of unbound
        pages (keys: :func:`host_class`).
    cap : array_like of float, shape (H,) or (H, k)
        Re-crawls per period each bound host accepts, >= 0 (inf: no cap); with k columns,
        period t takes column ``min(t, k - 1)``, as ``CycleSettings.capacity_by_period``.
        New pages are not split by host: a caller that will crawl a bound host's new pages
        leaves room for them in its cap.
    """

    group: npt.ArrayLike
    cap: npt.ArrayLike

    def groups(self, bucket_ids: npt.NDArray[np.int64], periods: int) -> list[tuple[Any, Any]]:
        """(rows, cap [periods]) per bound host with pages among the instance's rows
        (``bucket_ids``: the class of each row).

        Raises
        ------
        ValueError
            A group or cap that does not fit the aggregates or the hosts.
        """
        group = np.asarray(self.group, dtype=np.int64)
        cap = np.asarray(self.cap, dtype=float)
        if cap.ndim == 1:
            cap = cap[:, None]
        if cap.ndim != 2 or cap.shape[1] == 0 or np.any(np.isnan(cap)) or np.any(cap < 0):
            raise ValueError("host_caps.cap: give crawls per period >= 0 per bound host")
        if bucket_ids.size and int(bucket_ids.max()) >= group.size:
            raise ValueError("host_caps.group: give one group per class of the aggregates")
        if group.size and (group.min() < -1 or group.max() >= cap.shape[0]):
            raise ValueError(f"host_caps.group: give -1 or a bound host 0..{cap.shape[0] - 1}")
        row_group = group[bucket_ids]
        columns = np.minimum(np.arange(periods), cap.shape[1] - 1)
        out = []
        for g in range(cap.shape[0]):
            rows = np.flatnonzero(row_group == g)
            if rows.size:
                out.append((rows, cap[g, columns]))
        return out


@dataclass(frozen=True)
class CycleSettings:
    """How to plan a cycle.

    Attributes
    ----------
    capacity : float
        Crawls a period allows, > 0 (the mean, when ``capacity_by_period`` is given).
    capacity_by_period : tuple of float
        Crawls each period of the horizon allows, when they differ (empty: ``capacity`` in
        every period; a shorter tuple repeats its last entry).
    periods : int
        T, periods of the published cycle, >= 1.
    model : str
        ``"steady"`` (the default): the steady-rate bucket model
        (:mod:`planner.model.steady_rates`), which values each period at the time-averaged
        objective of pages visited longest-unvisited-first; ``"webfountain"``: the paper's
        model with equation (2) and the strategy's weights, for reproducing the paper.
    objective : str
        The steady-rate model's objective: freshness, obsolescence, harmonic or binary.
    strategy : int
        1, 2 or 3: the WebFountain objective weights (:mod:`planner.model.weights`); the
        ``"webfountain"`` model only.
    horizon : int
        Periods the model looks ahead (0: the cycle; :func:`planner.cycle.plan_inputs.
        model_horizon`); only the first ``periods`` are published.
    terminal_value : bool
        Value what the plan leaves at the horizon's end: the pages left fresh
        (:func:`planner.cycle.plan_inputs.planning_weights`, WebFountain model) or the new
        pages crawled, which live on (steady-rate model); ``False`` is the objective over
        the horizon alone.
    page_lifetime : float
        Periods a page lives on the web on average, after the horizon (the steady-rate
        model's value of a crawled new page, :mod:`planner.model.steady_rates`).
    explore : float
        Every bucket crawled at least once per this many mean revisit intervals (0: off).
    renewal : bool
        Plan for a growing web (steady-rate model, freshness): the pages new this cycle are
        crawled at once, so many pages were crawled recently and a bucket's crawls go to its
        older pages (:func:`web_renewal`; :mod:`planner.model.steady_rates`, "A growing
        web"). ``False``: plan as if every page were old.
    optimize : bool
        ``False``: the uniform crawl (every known page equally often, filling capacity),
        the baseline a fixed-schedule crawler follows.
    fallback_uniform : bool
        When the solver fails: ``True`` plans the uniform crawl instead, ``False`` plans
        nothing (:attr:`PlanOutcome.cycle` is None).
    """

    capacity: float
    periods: int
    capacity_by_period: tuple[float, ...] = ()
    model: str = "steady"
    objective: str = "freshness"
    strategy: int = 1
    horizon: int = 0
    terminal_value: bool = True
    page_lifetime: float = PAGE_LIFETIME_DAYS
    explore: float = EXPLORE_REVISITS
    renewal: bool = True
    optimize: bool = True
    fallback_uniform: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.capacity) and self.capacity > 0):
            raise ValueError(f"capacity must be > 0 crawls per period, got {self.capacity}")
        if self.periods < 1:
            raise ValueError(f"periods must be >= 1, got {self.periods}")
        if self.model not in PLAN_MODELS:
            known = ", ".join(PLAN_MODELS)
            raise ValueError(f"model must be one of {known}, got {self.model!r}")
        if self.objective not in STEADY_OBJECTIVES:
            known = ", ".join(STEADY_OBJECTIVES)
            raise ValueError(f"objective must be one of {known}, got {self.objective!r}")
        if self.strategy not in (1, 2, 3):
            raise ValueError(f"strategy must be 1, 2 or 3, got {self.strategy}")
        if not (math.isfinite(self.page_lifetime) and self.page_lifetime >= 0):
            raise ValueError(f"page_lifetime must be >= 0 periods, got {self.page_lifetime}")
        if self.horizon < 0:
            raise ValueError(f"horizon must be >= 0 (0: the cycle), got {self.horizon}")
        if self.explore < 0:
            raise ValueError(f"explore must be >= 0 (0: off), got {self.explore}")


@dataclass(frozen=True)
class CrawlMeasures:
    """What the crawl measured besides the bucket aggregates.

    Attributes
    ----------
    new_pages : int
        n0: pages known but never fetched.
    bucket_seconds : array_like of float, shape like the aggregates', or None
        Mean seconds per fetch of each class (NaN: not measured, the overall mean is used);
        None: every crawl costs the same.
    seconds_per_fetch : float
        Mean seconds per fetch overall (NaN: not measured; only cost ratios matter).
    discovery : DiscoveryRates
        New pages found per old-page crawl, per new-page crawl, and per period.
    host_caps : HostCaps or None
        The politeness-bound hosts and the classes split by them (module docstring); None:
        no host caps.
    rate_shape : array_like of float, shape like the aggregates', or None
        The Gamma shape of each class's change-rate belief, whose mean is the class's rate
        (inf or NaN: known; None: every rate known); the steady-rate model values freshness
        in expectation over it (:mod:`planner.model.steady_rates`, "Uncertain rates").
    importance : array_like of float, shape like the aggregates', or None
        The mean importance of each class's pages (OPIC), centered on 1 over the fetched
        pages (NaN: unknown, taken as 1; None: every page alike): the steady-rate model
        weights each class's objective by it (``w[i]``), as the page schedules weight each
        page's; the WebFountain model ignores it.
    """

    new_pages: int
    bucket_seconds: npt.ArrayLike | None = None
    seconds_per_fetch: float = math.nan
    discovery: DiscoveryRates = NO_DISCOVERY
    host_caps: HostCaps | None = None
    rate_shape: npt.ArrayLike | None = None
    importance: npt.ArrayLike | None = None


@dataclass(frozen=True)
class WarmStart:
    """The previous plan, as a start: ``fractions`` maps (period, class) to its crawl
    fraction x/b, ``new_pages`` period to its new-page quota; ``shift`` periods between its
    start and this cycle's (>= 0)."""

    fractions: Mapping[tuple[int, int], float]
    new_pages: Mapping[int, int]
    shift: int = 0


@dataclass(frozen=True)
class SolverRecord:
    """How the cycle was planned, as stored with a published plan.

    ``status``: a :class:`planner.solver.ipopt.SolveStatus` value, ``"cold start"`` (no page
    fetched yet) or ``"uniform"`` (``optimize = False``). The solver's figures (objective,
    iterations, seconds of model build and of all Ipopt runs, starts tried best first, weights
    label) are None for a cycle planned without the solver. ``warm_start``: ``"used"``,
    ``"failed"`` (the solver's own starts were tried next) or None (no warm start given).
    ``fallback``: the solve failed and the uniform crawl was planned instead.
    ``obsolete_at_cycle_end``, ``new_left_at_cycle_end``: what the solved cycle leaves behind,
    pages (comparable across strategies, unlike the objective). ``renewal``: the growing
    web's beta the steady-rate model planned for (new pages per page held and period,
    :func:`web_renewal`; None: 0), which the release's due intervals use too.
    """

    status: str
    buckets: int = 0
    objective: float | None = None
    iterations: int | None = None
    build_seconds: float | None = None
    solve_seconds: float | None = None
    starts: tuple[str, ...] = ()
    weights: str | None = None
    warm_start: str | None = None
    fallback: bool = False
    obsolete_at_cycle_end: float | None = None
    new_left_at_cycle_end: float | None = None
    renewal: float | None = None
    message: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The fields that say something, as JSON-ready values: no None, no empty text or
        starts, no ``fallback`` unless taken, no ``buckets`` for a cycle without buckets."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if value is None or (isinstance(value, str | tuple) and not value):
                continue
            if (key == "fallback" and not value) or (key == "buckets" and not value):
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class PlanOutcome:
    """The planned cycle (None when the solver failed and ``fallback_uniform`` is off), the
    instance it was planned on, and how."""

    inputs: PlanInputs
    cycle: PlannedCycle | None
    solver: SolverRecord

    @property
    def ok(self) -> bool:
        """True when there is a cycle to publish."""
        return self.cycle is not None


def plan_cycle(
    aggregates: BucketAggregates,
    settings: CycleSettings,
    measures: CrawlMeasures,
    *,
    warm: WarmStart | None = None,
) -> PlanOutcome:
    """Plan one cycle (module docstring).

    Parameters
    ----------
    aggregates : BucketAggregates
        Per class (index 0: fetched pages without an estimate yet): pages b, change fraction
        a per period, obsolete pages y now; any number of classes, shape (classes,) each.
    settings : CycleSettings
    measures : CrawlMeasures
    warm : WarmStart, optional
        The previous plan; a solve from it that fails is repeated from the solver's own
        starts (always feasible).

    Raises
    ------
    planner.model.instance.InstanceError
        The aggregates make no valid instance.
    """
    horizon = model_horizon(settings.periods, settings.horizon)
    cost = (
        np.full(aggregates.pages.shape, np.nan)
        if measures.bucket_seconds is None
        else measures.bucket_seconds
    )
    inputs = plan_inputs(
        aggregates,
        new_pages=int(measures.new_pages),
        periods=horizon,
        capacity_crawls=float(settings.capacity),
        bucket_seconds=cost,
        seconds_per_fetch=float(measures.seconds_per_fetch),
        discovery=measures.discovery,
        capacity_by_period=settings.capacity_by_period or None,
    )
    instance = inputs.instance
    if instance is None:
        cycle = cold_start_cycle(inputs, settings.periods)
        return PlanOutcome(inputs, cycle, SolverRecord("cold start", note="no page fetched yet"))
    buckets = int(instance.buckets)
    if not settings.optimize:
        cycle = cycle_from_trajectory(inputs, round_robin_crawl(instance), settings.periods)
        return PlanOutcome(inputs, cycle, SolverRecord("uniform", buckets=buckets))
    if settings.model == "steady":
        return _plan_steady(
            inputs, settings, measures.host_caps, measures.rate_shape, measures.importance
        )
    solver = PlanSolver(instance, _weights(inputs, settings))
    start = None
    if warm is not None:
        start = warm_start(
            instance, inputs.bucket_ids, warm.fractions, warm.new_pages, shift=max(warm.shift, 0)
        )
    solution = solver.solve(start)
    warm_used = None if start is None else "used"
    if not solution.status.ok and start is not None:
        solution = solver.solve(None)  # the solver's own starts (always feasible)
        warm_used = "failed"
    record = _record(solution, inputs, settings, warm_used)
    if solution.status.ok:
        cycle = cycle_from_trajectory(
            inputs, solution.trajectory, settings.periods, explore_revisits=settings.explore
        )
        return PlanOutcome(inputs, cycle, record)
    return _failed(inputs, settings, record)


def _failed(inputs: PlanInputs, settings: CycleSettings, record: SolverRecord) -> PlanOutcome:
    """A failed solve: the uniform crawl with ``fallback_uniform``, else no cycle."""
    instance = inputs.instance
    assert instance is not None
    if settings.fallback_uniform:
        cycle = cycle_from_trajectory(inputs, round_robin_crawl(instance), settings.periods)
        note = "the solve failed: the uniform crawl instead"
        return PlanOutcome(inputs, cycle, replace(record, fallback=True, note=note))
    return PlanOutcome(inputs, None, record)


def web_renewal(instance: CrawlInstance) -> float:
    """New pages crawled per known page and period, beta of the steady-rate model's growing
    web (:mod:`planner.model.steady_rates`): the new pages the cycle expects per period (those
    known now spread over the cycle, those found at a constant rate, and those the uniform
    crawl's re-crawls would find), as many as the mean capacity can crawl, over the pages
    held. 0 for a web that finds no new pages."""
    held = float(np.sum(instance.b0))
    if held <= 0:
        return 0.0
    periods = max(int(instance.periods), 1)
    found = float(
        np.sum(np.asarray(instance.oldnwt, dtype=float)[:, 0] * uniform_start(instance)[:, 0])
    )
    expected = float(instance.n0) / periods + float(instance.nconst) + found
    cost = max(float(np.mean(instance.new_crawl_cost)), 1e-12)
    crawlable = float(np.mean(instance.capacity)) / cost
    return max(min(expected, crawlable), 0.0) / held


def _plan_steady(
    inputs: PlanInputs,
    settings: CycleSettings,
    host_caps: HostCaps | None = None,
    rate_shape: npt.ArrayLike | None = None,
    importance: npt.ArrayLike | None = None,
) -> PlanOutcome:
    """The steady-rate model's cycle: quotas from its crawls, with its marginal values."""
    instance = inputs.instance
    assert instance is not None
    lifetime = float(settings.page_lifetime) if settings.terminal_value else 0.0
    groups = [] if host_caps is None else host_caps.groups(inputs.bucket_ids, instance.periods)
    shape = None
    if rate_shape is not None:
        shape = np.asarray(rate_shape, dtype=float)[inputs.bucket_ids]
        shape = np.where(np.isfinite(shape) & (shape > 0), shape, np.inf)
    # The growing web's value is freshness's with known rates (steady_rates, "A growing web").
    applies = settings.renewal and settings.objective == "freshness" and shape is None
    renewal = web_renewal(instance) if applies else 0.0
    weights = None
    if importance is not None:
        weights = np.asarray(importance, dtype=float)[inputs.bucket_ids]
        weights = np.where(np.isfinite(weights) & (weights >= 0), weights, 1.0)
    setup = SteadySetup(
        objective=settings.objective,
        importance=weights,
        lifetime=lifetime,
        host_caps=groups,
        rate_shape=shape,
        renewal=renewal,
    )
    solution = solve_steady(instance, setup)
    record = _steady_record(solution, inputs, settings)
    if renewal > 0:
        record = replace(record, renewal=renewal)
    if solution.status.ok:
        cycle = cycle_from_trajectory(
            inputs, solution.trajectory, settings.periods, explore_revisits=settings.explore
        )
        if groups:
            cycle = _within_host_caps(cycle, inputs, solution.trajectory, groups)
        count = len(cycle.quotas)
        ids = inputs.bucket_ids.tolist()
        marginal = [
            {b: float(solution.marginal[row, t]) for row, b in enumerate(ids)} for t in range(count)
        ]
        new_marginal = [float(v) for v in solution.new_marginal[:count]]
        cycle = replace(cycle, marginal=marginal, new_marginal=new_marginal)
        return PlanOutcome(inputs, cycle, record)
    return _failed(inputs, settings, record)


def _within_host_caps(
    cycle: PlannedCycle,
    inputs: PlanInputs,
    trajectory: Trajectory,
    groups: list[tuple[Any, Any]],
) -> PlannedCycle:
    """The cycle's quotas with every host group's crawls per period what the plan gives it,
    in whole crawls, and never more than its cap.

    Rounding is per period over all classes (largest remainders): a bound host's many small
    classes (a fraction of a crawl each) lose their crawls to the other classes' remainders,
    the same classes in every period of a steady plan, and spare capacity spent or
    exploration can put a group over its cap. So each group gets ``min(floor(cap), rint(sum
    of its planned crawls))`` a period (planned: the cycle's fractions, after the spare
    capacity and exploration), one crawl at a time to its class owed most over the cycle so
    far (planned crawls less quotas, from the first period on), so a class of 0.3 crawls a
    period gets about 2 in 7 periods; the crawl time this adds or frees is taken from, or
    given to, the unbound classes furthest above, or below, their plan in the period (within
    their pages), so a period stays within its capacity. The fractions of the classes
    changed are re-computed.
    """
    instance = inputs.instance
    assert instance is not None
    ids = inputs.bucket_ids.tolist()
    b_before, _ = trajectory.before(instance)
    free = np.ones(len(ids), dtype=bool)
    for rows, _ in groups:
        free[rows] = False
    quotas = [dict(q) for q in cycle.quotas]
    fractions = [dict(f) for f in cycle.fractions]
    owed = np.zeros(len(ids))  # each class's planned crawls so far less its quotas so far
    for t, period in enumerate(quotas):
        q = np.array([period[b] for b in ids], dtype=np.int64)
        plan = np.array([fractions[t][b] for b in ids]) * b_before[:, t]
        room = np.floor(b_before[:, t] + 1e-6)
        cost = instance.crawl_cost[:, t]
        added = 0.0  # crawl time the groups gained (negative: freed)
        for rows, cap in groups:
            target = np.rint(plan[rows].sum())
            if np.isfinite(cap[t]):
                target = min(target, np.floor(float(cap[t]) + 1e-6))
            owed[rows] += plan[rows]
            added -= float(cost[rows] @ q[rows])
            q[rows] = 0
            for _ in range(int(target)):  # one crawl at a time, the class owed most first
                gap = np.where(q[rows] < room[rows], owed[rows] - q[rows], -np.inf)
                if not np.isfinite(gap.max()):
                    break
                j = rows[int(np.argmax(gap))]
                q[j], added = q[j] + 1, added + float(cost[j])
            owed[rows] -= q[rows]
        room -= q
        while added > 1e-9:  # the unbound classes give the time back, furthest above first
            excess = np.where(free & (q > 0), q - plan, -np.inf)
            j = int(np.argmax(excess))
            if not np.isfinite(excess[j]):
                break
            q[j], room[j], added = q[j] - 1, room[j] + 1, added - float(cost[j])
        while added < -1e-9:  # and take the time freed, furthest below the plan first
            fits = free & (room > 0) & (cost <= -added * (1 + 1e-9))
            short = np.where(fits, plan - q, -np.inf)
            j = int(np.argmax(short))
            if not np.isfinite(short[j]):
                break  # no unbound page left to crawl: the crawl time stays idle
            q[j], room[j], added = q[j] + 1, room[j] - 1, added + float(cost[j])
        for row, b in enumerate(ids):
            if q[row] != period[b]:
                period[b] = int(q[row])
                fractions[t][b] = float(q[row] / max(b_before[row, t], 1e-300))
    return replace(cycle, quotas=quotas, fractions=fractions)


def _steady_record(
    solution: SteadySolution, inputs: PlanInputs, settings: CycleSettings
) -> SolverRecord:
    instance = inputs.instance
    assert instance is not None
    obsolete = new_left = None
    if solution.status.ok:
        last = min(settings.periods, instance.periods) - 1
        obsolete = float(solution.trajectory.y[:, last].sum())
        new_left = float(solution.trajectory.n[last])
    return SolverRecord(
        status=solution.status.value,
        buckets=int(instance.buckets),
        objective=float(solution.objective),
        iterations=int(solution.iterations),
        build_seconds=round(solution.build_seconds, 3),
        solve_seconds=round(solution.solve_seconds, 3),
        starts=("uniform",),
        weights=f"steady {settings.objective}",
        obsolete_at_cycle_end=obsolete,
        new_left_at_cycle_end=new_left,
        message="" if solution.status.ok else solution.message,
    )


def _weights(inputs: PlanInputs, settings: CycleSettings) -> ObjectiveWeights:
    """The strategy's weights over the instance, with the terminal value when asked."""
    instance = inputs.instance
    assert instance is not None
    if settings.terminal_value:
        return planning_weights(instance, settings.strategy, inputs.capacity_crawls)
    return strategy_weights(settings.strategy, instance.buckets, instance.periods)


def _record(
    solution: PlanSolution, inputs: PlanInputs, settings: CycleSettings, warm: str | None
) -> SolverRecord:
    instance = inputs.instance
    assert instance is not None
    obsolete = new_left = None
    if solution.status.ok:
        last = min(settings.periods, instance.periods) - 1
        obsolete = float(solution.trajectory.y[:, last].sum())
        new_left = max(float(solution.trajectory.n[last]), 0.0)
    return SolverRecord(
        status=solution.status.value,
        buckets=int(instance.buckets),
        objective=float(solution.objective),
        iterations=int(solution.iterations),
        build_seconds=round(solution.build_seconds, 3),
        solve_seconds=round(solution.solve_seconds, 3),
        starts=tuple(s.name for s in solution.starts),
        weights=solution.weights,
        warm_start=warm,
        obsolete_at_cycle_end=obsolete,
        new_left_at_cycle_end=new_left,
        message="" if solution.status.ok else solution.message,
    )
