"""The nightly plan's instance, warm start and quotas, from what the store measured.

Pure computation between the store's numbers and the WebFountain model
(:mod:`planner.model.webfountain`): no I/O.

**Buckets solved.** The store has 256 change-rate classes (0 = fetched but no estimate yet,
1..255 by rate). The instance holds only the classes that have pages, in class order; its
``bucket_ids`` map row i of the instance back to the class. Class 0 is planned like the others
with the population's mean change rate and obsolete share (its pages have one fetch: their
rate is unknown, the population's is the best guess).

**Units.** Pages are counts; rates per day in the aggregates become change fractions per
period of ``period_days``; crawl time is seconds: the capacity C[t] is the crawls a period
allows times the mean measured seconds per fetch, and c[i] is bucket i's mean measured fetch
duration (the overall mean where a bucket has none measured), so a bucket of slow pages costs
more of the period than a bucket of fast ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from estimators.buckets import BucketAggregates
from estimators.discovery import DiscoveryRates
from planner.cycle.quotas import Quotas, integer_quotas
from planner.model.instance import CrawlInstance, InstanceError
from planner.model.webfountain import Trajectory, simulate, uniform_crawl
from planner.model.weights import ObjectiveWeights, Strategy, strategy_weights, with_terminal_value

__all__ = [
    "PlanInputs",
    "PlannedCycle",
    "cold_start_cycle",
    "cycle_from_trajectory",
    "explore",
    "fill_spare_capacity",
    "mean_revisit_periods",
    "model_horizon",
    "plan_inputs",
    "planning_weights",
    "trajectory_quotas",
    "warm_start",
]

#: Seconds per fetch assumed before any fetch was timed (only the ratio of costs matters).
DEFAULT_SECONDS_PER_FETCH = 1.0


def model_horizon(periods: int, setting: int = 0) -> int:
    """Periods the model looks ahead when it plans a cycle of ``periods`` periods: the
    operator's ``setting`` (``plan.horizon``) when it is longer than the cycle, else the cycle.

    Over a longer horizon the nightly run solves the model and publishes the first
    ``periods`` periods (a receding horizon: the next run plans again from what the crawl
    saw). It is not the default: every crawl adds the measured discovery rate (oldnwt,
    newnwt) to the uncrawled pages n of every later period, so over a long horizon a crawl's
    discoveries can outweigh its freshness and the model idles (docs/model.md, "Horizon").
    The terminal value (:func:`planning_weights`) carries a crawl's worth past the cycle
    instead.
    """
    return max(int(setting), periods)


def mean_revisit_periods(instance: CrawlInstance, capacity_crawls: float) -> float:
    """R: periods between two crawls of a page on average, known pages (b0 + n0) / crawls a
    period (0 without capacity)."""
    pages = float(instance.b0.sum() + instance.n0)
    return pages / capacity_crawls if capacity_crawls > 0 else 0.0


def planning_weights(
    instance: CrawlInstance, strategy: Strategy | int, capacity_crawls: float
) -> ObjectiveWeights:
    """The strategy's weights over the instance's periods, plus the worth of the pages left
    fresh at the horizon's end (:func:`planner.model.weights.with_terminal_value`): until their
    next crawl, one mean revisit interval on (known pages / ``capacity_crawls`` periods); new
    pages left uncrawled are valued alike, with the change fraction of the buckets they join
    (the instance's p)."""
    weights = strategy_weights(strategy, instance.buckets, instance.periods)
    a = instance.a[:, -1]
    return with_terminal_value(
        weights,
        a,
        mean_revisit_periods(instance, capacity_crawls),
        new_page_change=float(np.dot(instance.p, a) / max(instance.p.sum(), 1e-300)),
    )


@dataclass(frozen=True)
class PlanInputs:
    """An instance of the model over the populated classes, and where each row came from.

    ``bucket_ids`` [B] is the class (0..255) of each instance row; ``capacity_crawls`` is
    the crawls per period the capacity was computed from; ``seconds_per_fetch`` the mean
    cost of one crawl, seconds.
    """

    instance: CrawlInstance | None
    bucket_ids: npt.NDArray[np.int64]
    capacity_crawls: float
    seconds_per_fetch: float
    new_pages: int
    discovery: DiscoveryRates


def _population(agg: BucketAggregates) -> tuple[float, float]:
    """Pages-weighted mean change fraction per period and obsolete share of estimated pages."""
    pages = agg.pages[1:].astype(float)
    known = pages > 0
    if not known.any():
        return 0.5, 0.5
    a = float(np.average(agg.change_fraction[1:][known], weights=pages[known]))
    share = float(agg.obsolete[1:][known].sum() / pages[known].sum())
    return a, min(max(share, 0.0), 1.0)


def plan_inputs(
    agg: BucketAggregates,
    *,
    new_pages: int,
    periods: int,
    capacity_crawls: float,
    bucket_seconds: npt.ArrayLike,
    seconds_per_fetch: float,
    discovery: DiscoveryRates,
    capacity_by_period: npt.ArrayLike | None = None,
) -> PlanInputs:
    """The instance for the next cycle.

    Parameters
    ----------
    agg : BucketAggregates
        Pages, change fraction a per period, obsolete pages now; shape (256,) each.
    new_pages : int
        n0, never-fetched pages known.
    periods : int
        T.
    capacity_crawls : float
        Crawls a period allows (> 0).
    bucket_seconds : array_like, shape (256,)
        Measured mean seconds per fetch of each class (NaN: not measured).
    seconds_per_fetch : float
        Measured mean seconds per fetch overall (NaN: not measured).
    discovery : DiscoveryRates
        oldnwt, newnwt, nconst.
    capacity_by_period : array_like of float, optional
        Crawls each period allows when they differ by period (shape (k,), k >= 1, each >= 0;
        period t takes entry ``min(t, k - 1)``); None: ``capacity_crawls`` in every period.
    """
    if not capacity_crawls > 0:
        raise InstanceError(f"capacity must be > 0 crawls per period, got {capacity_crawls}")
    mean_cost = (
        seconds_per_fetch
        if np.isfinite(seconds_per_fetch) and seconds_per_fetch > 0
        else (DEFAULT_SECONDS_PER_FETCH)
    )
    cost = np.asarray(bucket_seconds, dtype=float)
    cost = np.where(np.isfinite(cost) & (cost > 0), cost, mean_cost)
    ids = np.flatnonzero(agg.pages > 0).astype(np.int64)
    empty = PlanInputs(None, ids[:0], capacity_crawls, mean_cost, new_pages, discovery)
    if ids.size == 0:
        return empty
    a_pop, obsolete_share = _population(agg)
    b0 = agg.pages[ids].astype(float)
    a = agg.change_fraction[ids].astype(float)
    y0 = agg.obsolete[ids].astype(float)
    if ids[0] == 0:
        a[0], y0[0] = a_pop, obsolete_share * b0[0]
    a = np.clip(np.nan_to_num(a, nan=a_pop), 0.0, 1.0)
    y0 = np.clip(np.nan_to_num(y0, nan=0.0), 0.0, b0)
    instance = CrawlInstance.from_mapping(
        {
            "periods": periods,
            "buckets": int(ids.size),
            "b0": b0.tolist(),
            "y0": y0.tolist(),
            "n0": float(new_pages),
            "a": np.repeat(a[:, None], periods, axis=1).tolist(),
            "capacity": _capacity(capacity_crawls, capacity_by_period, periods, mean_cost),
            "crawl_cost": cost[ids].tolist(),
            "new_crawl_cost": float(cost[0]),
            "oldnwt": discovery.oldnwt,
            "newnwt": discovery.newnwt,
            "nconst": discovery.nconst,
        }
    )
    return PlanInputs(instance, ids, capacity_crawls, mean_cost, new_pages, discovery)


def _capacity(
    crawls: float, by_period: npt.ArrayLike | None, periods: int, mean_cost: float
) -> float | list[float]:
    """C[t] in seconds: the crawls of each period at the mean cost per crawl."""
    if by_period is None:
        return float(crawls * mean_cost)
    profile = np.asarray(by_period, dtype=float).ravel()
    if profile.size == 0 or not np.all(np.isfinite(profile)) or np.any(profile < 0):
        raise InstanceError("capacity_by_period: give one finite count >= 0 per period")
    index = np.minimum(np.arange(periods), profile.size - 1)
    return (profile[index] * mean_cost).tolist()


def warm_start(
    instance: CrawlInstance,
    bucket_ids: npt.NDArray[np.int64],
    fractions: Mapping[tuple[int, int], float],
    new_quotas: Mapping[int, int],
    *,
    shift: int,
) -> Trajectory | None:
    """The previous plan's crawl, moved ``shift`` periods on, as a start for this cycle.

    ``fractions`` maps (period, class) of the previous plan to its crawl fraction x/b,
    ``new_quotas`` period to its new-page quota. Period t of this cycle takes the previous
    plan's period t + shift, or its last period when that is past its end. Classes the
    previous plan did not have take the uniform crawl's fraction. None when there is no
    previous period to take from.
    """
    if not fractions:
        return None
    last = max(p for p, _ in fractions)
    uniform = uniform_crawl(instance)
    before, _ = uniform.before(instance)
    f = uniform.x / np.maximum(before, 1e-300)
    z = uniform.z.copy()
    for t in range(instance.periods):
        source = min(t + 1 + shift, last)
        for row, bucket in enumerate(bucket_ids.tolist()):
            value = fractions.get((source, bucket))
            if value is not None:
                f[row, t] = value
        if source in new_quotas:
            z[t] = float(new_quotas[source])
    return simulate(instance, f * before, z)


@dataclass(frozen=True)
class PlannedCycle:
    """Whole-page quotas of one cycle: ``quotas`` [T] maps class to pages, ``new_pages`` [T],
    ``fractions`` [T] maps class to x/b.

    ``marginal`` [T] maps class to the plan's value of one more crawl of that class in the
    period, and ``new_marginal`` [T] that of one more new page, in the objective's units per
    crawl (larger: more worth it). A release that cannot fill a class's quota (too few
    fetchable pages) spends the rest on the classes, or new pages, with the next highest
    values. Empty lists: the plan has no values (cold start, uniform crawl); the release then
    spends left-over crawls oldest first.
    """

    quotas: list[dict[int, int]]
    new_pages: list[int]
    fractions: list[dict[int, float]]
    marginal: list[dict[int, float]] = field(default_factory=list)
    new_marginal: list[float] = field(default_factory=list)


def trajectory_quotas(
    instance: CrawlInstance,
    trajectory: Trajectory,
    x: np.ndarray | None = None,
    z: np.ndarray | None = None,
) -> Quotas:
    """Whole-page quotas within capacity of the crawls ``x`` [B, T], ``z`` [T] (default the
    trajectory's own), never more than the pages there are at each period's start."""
    b_before, n_before = trajectory.before(instance)
    return integer_quotas(
        trajectory.x if x is None else x,
        trajectory.z if z is None else z,
        instance.crawl_cost,
        instance.new_crawl_cost,
        instance.capacity,
        available=b_before,
        new_available=n_before,
    )


def fill_spare_capacity(
    instance: CrawlInstance, trajectory: Trajectory
) -> tuple[np.ndarray, np.ndarray]:
    """The plan's crawls ``x`` [B, T] and ``z`` [T] with any capacity it left idle spent.

    The model may leave crawl time unused in a period when, by its discovery rates, crawling
    would find more uncrawled pages than it refreshes (each found page weighs on the
    objective). A crawler never idles for that: the spare time goes to re-crawls in
    proportion to each bucket's expected changed pages (a * b), up to the bucket's size, and
    what is left to new pages, up to the pool.
    """
    x, z = trajectory.x.copy(), trajectory.z.copy()
    b_before, n_before = trajectory.before(instance)
    taken = 0.0  # new pages the fill took in earlier periods: the pool is that much smaller
    for t in range(instance.periods):
        cost, new_cost = instance.crawl_cost[:, t], float(instance.new_crawl_cost[t])
        spare = float(instance.capacity[t]) - float(cost @ x[:, t]) - new_cost * z[t]
        room = np.clip(b_before[:, t] - x[:, t], 0.0, None)
        want = instance.a[:, t] * b_before[:, t] * (room > 0)
        if spare > 1e-9 * float(instance.capacity[t]) and want.sum() > 0:
            # crawls per bucket in proportion to want, all within spare time and room
            scale = spare / float(cost @ want)
            extra = np.minimum(want * scale, room)
            x[:, t] += extra
            spare -= float(cost @ extra)
        if spare > 0 and new_cost > 0:
            extra_z = min(spare / new_cost, max(float(n_before[t]) - taken - z[t], 0.0))
            z[t] += extra_z
            taken += extra_z
    return x, z


#: Every bucket's pages are re-crawled at least once per this many mean revisit intervals
#: (``plan.explore``; docs/model.md, "Exploration"): a revisit ceiling that binds only on the
#: buckets the plan starves, so that a page one unlucky fetch made look fast is measured
#: again. At 8, on the live demo's web over 336 periods, 65 % of the optimum's gain against
#: 54 % without; level (within 0.0003) on the shipped worlds; a floor at 2 flattened the plan
#: and cost up to 0.002 (docs/benchmarks.md, "What limits the share on estimated rates").
EXPLORE_REVISITS = 8.0


def explore(
    instance: CrawlInstance,
    b_before: np.ndarray,
    x: np.ndarray,
    capacity_crawls: float,
    revisits: float = EXPLORE_REVISITS,
) -> np.ndarray:
    """The crawls ``x`` [B, T] with every bucket crawled at least a little.

    The model gives a bucket that looks fast no crawl at all. With estimated rates some of
    its pages are slow pages whose few fetches happened to see changes: never fetched again,
    their estimates are never corrected. So each bucket gets at least ``b / (revisits * R)``
    crawls a period (its pages once per ``revisits`` mean revisit intervals, R = known pages /
    ``capacity_crawls`` periods), the crawl time taken from the buckets above their floor in
    proportion to their excess, so a period's crawl time is unchanged. ``b_before`` [B, T]:
    pages of each bucket at each period's start.
    """
    revisit = mean_revisit_periods(instance, capacity_crawls)
    if not revisit > 0 or revisits <= 0:
        return x
    share = min(1.0 / (revisits * revisit), 1.0)
    out = x.copy()
    for t in range(instance.periods):
        cost = instance.crawl_cost[:, t]
        floor = share * b_before[:, t]
        need = np.clip(floor - out[:, t], 0.0, None)
        excess = np.clip(out[:, t] - floor, 0.0, None)
        need_time, excess_time = float(cost @ need), float(cost @ excess)
        if need_time <= 0 or excess_time <= 0:
            continue
        scale = min(1.0, excess_time / need_time)
        out[:, t] += need * scale - excess * (need_time * scale / excess_time)
    return out


def cycle_from_trajectory(
    inputs: PlanInputs,
    trajectory: Trajectory,
    periods: int | None = None,
    *,
    explore_revisits: float = 0.0,
) -> PlannedCycle:
    """Integer quotas within capacity (largest remainders) from a solved trajectory, with
    idle capacity spent (:func:`fill_spare_capacity`) and, if ``explore_revisits`` > 0, every
    bucket crawled at least once per that many mean revisit intervals (:func:`explore`); the
    first ``periods`` periods (default all the instance's: the rest of a longer horizon is not
    published)."""
    instance = inputs.instance
    assert instance is not None
    count = instance.periods if periods is None else min(periods, instance.periods)
    b_before, _ = trajectory.before(instance)
    x, z = fill_spare_capacity(instance, trajectory)
    if explore_revisits > 0:
        x = explore(instance, b_before, x, inputs.capacity_crawls, explore_revisits)
    q = trajectory_quotas(instance, trajectory, x, z)
    frac = x / np.maximum(b_before, 1e-300)
    ids = inputs.bucket_ids.tolist()
    return PlannedCycle(
        quotas=[{b: int(q.old[row, t]) for row, b in enumerate(ids)} for t in range(count)],
        new_pages=[int(v) for v in q.new[:count]],
        fractions=[{b: float(frac[row, t]) for row, b in enumerate(ids)} for t in range(count)],
    )


def cold_start_cycle(inputs: PlanInputs, periods: int) -> PlannedCycle:
    """No page fetched yet: every period crawls new pages up to capacity (nothing else to do).

    The quota is the whole capacity in every period, not the pages known now: the seeds reveal
    the pages behind them as they are crawled, and before a first crawl nothing says how many
    (the discovery rates are fitted from crawls). Planning only the known pages left the crawl
    idle for a whole cycle after the seeds (issue 28). The release takes the new pages known
    when a period begins and never more, so a small site costs nothing.
    """
    capacity = int(np.floor(inputs.capacity_crawls))
    new_pages = [capacity] * periods
    return PlannedCycle([{} for _ in range(periods)], new_pages, [{} for _ in range(periods)])
