"""Which hosts' politeness binds the plan, and their classes split off: :func:`plan_within_caps`.

A host that accepts at most K crawls a period (its polite delay between two requests, over
the period's length) cannot take more. The steady-rate model can plan within such caps
(:class:`planner.cycle.plan_cycle.HostCaps`), but every host split off multiplies the
model's rows: a host's pages become classes of their own, :data:`HOST_CLASS_MERGE` change-
rate classes as one. Most hosts never come near their cap, so the nightly run splits only
those the plan would crawl beyond it:

1. plan with no caps;
2. a host whose pages the plan crawls more than its cap a period (the cycle's mean, each
   page at its class's planned crawls per page) is bound: its pages leave their classes for
   classes of their own (:func:`split_classes`), and the cycle is planned again with the
   bound hosts' caps;
3. with the caps' crawls moved elsewhere, another host may cross its cap: repeat, at most
   :data:`SPLIT_ROUNDS` times.

A plan over split classes keys its quotas by :func:`~planner.cycle.plan_cycle.host_class`
``(c, g)`` for class c of bound host g (g indexes :attr:`CapsPlan.bound`, the bound hosts'
ids, which the release needs to tell a page's class from its bucket and host).

Only the steady-rate model plans within caps; the paper's WebFountain model and the uniform
crawl are planned once, unsplit. The simulator's planner policy splits every host whose cap
is below its pages instead (a few hosts, known to the scenario).

Pure: numpy and the planner; no store, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from estimators.buckets import BucketAggregates, bucket_aggregates
from planner.cycle.due_urls import host_capacity
from planner.cycle.plan_cycle import (
    HOST_CLASS_STRIDE,
    CrawlMeasures,
    CycleSettings,
    HostCaps,
    PlanOutcome,
    WarmStart,
    base_class,
    host_class,
    plan_cycle,
)

__all__ = [
    "HOST_CLASS_MERGE",
    "MAX_SPLIT_ROWS",
    "SPLIT_ROUNDS",
    "CapsPlan",
    "HostPages",
    "host_caps",
    "host_load",
    "plan_within_caps",
    "split_classes",
    "split_key",
    "wide_class",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Change-rate classes merged into one class of a bound host (rates within a factor 1.34 of
#: each other at the 255 fixed classes): its few crawls a period would be a fraction of a
#: crawl in each of a hundred classes, and every class is a row of the model. In the
#: simulator's polite-host scenario (seed 1) 4 left freshness within 0.002 of the fine
#: classes (true rates 0.8095 against 0.8096, estimated 0.7876 against 0.7860) and took
#: about half the solve time.
HOST_CLASS_MERGE = 4

#: Plans made at most: the first, unsplit, and this many more as hosts are found bound.
SPLIT_ROUNDS = 3

#: Split classes at most, over all bound hosts: every one is a row of the model, and a
#: row under a host cap costs more to solve than a free one (40 hosts of 50 pages, 700
#: rows at 6 periods: 1.8 s to build, 4.9 s and 48 iterations to solve, against about 1 s
#: unsplit). Past it, the hosts furthest over their caps are split first; the others' crawls
#: beyond their caps are spilled by the release, as with no split at all.
MAX_SPLIT_ROWS = 1_024

#: A host is bound when the plan gives it more than its cap by this share (rounding).
_OVER = 1e-3


def wide_class(cls: int | IntArray) -> IntArray:
    """The first change-rate class of the :data:`HOST_CLASS_MERGE` merged with ``cls``
    (1..255; class 0, no estimate, stays 0); elementwise."""
    c = np.asarray(cls, dtype=np.int64)
    return np.where(c > 0, (c - 1) // HOST_CLASS_MERGE * HOST_CLASS_MERGE + 1, 0)


def split_key(page_class: IntArray, group: IntArray) -> IntArray:
    """Each page's class in a plan with politeness-bound hosts, elementwise: for a page of
    bound host ``group`` (its index among the plan's bound hosts; -1: not bound) with an
    estimate, that host's class of its :func:`wide_class`,
    :func:`planner.cycle.plan_cycle.host_class`; otherwise ``page_class`` itself. The one
    mapping the planner (:func:`host_load`), the release and the simulator share."""
    cls = np.asarray(page_class, dtype=np.int64)
    g = np.asarray(group, dtype=np.int64)
    on = (g >= 0) & (cls > 0)
    return np.where(on, host_class(wide_class(cls), np.maximum(g, 0)), cls).astype(np.int64)


@dataclass(frozen=True)
class HostPages:
    """The fetched pages of the hosts whose cap could bind, and the caps.

    Attributes
    ----------
    host : (H,) int
        The hosts' ids.
    cap : (H,) float
        Re-crawls a period each host accepts: its polite capacity less room for its
        never-fetched pages spread over the cycle, >= 0.
    page_host : (n,) int
        Each page's host, an index into ``host``.
    page_class : (n,) int
        Each page's change-rate class, 0..255 (0: fetched, no estimate yet).
    rate : (n,) float
        Each page's change rate, per day (ignored in class 0).
    elapsed : (n,) float
        Days since each page's last fetch, >= 0.
    """

    host: IntArray
    cap: FloatArray
    page_host: IntArray
    page_class: IntArray
    rate: FloatArray
    elapsed: FloatArray

    @classmethod
    def none(cls) -> HostPages:
        """No host whose cap could bind."""
        i, f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return cls(i, f, i, i, f, f)


@dataclass(frozen=True)
class CapsPlan:
    """A cycle planned within the bound hosts' caps: the plan (quotas keyed by class, split
    classes by :func:`~planner.cycle.plan_cycle.host_class` ``(c, g)``), the indexes into
    :attr:`HostPages.host` of the bound hosts (g indexes this array; empty: nothing split),
    their caps, crawls a period, how many plans were solved, and the inputs of the plan kept
    (aggregates and measures, classes keyed as the plan's)."""

    outcome: PlanOutcome
    bound: IntArray
    cap: FloatArray
    solves: int
    aggregates: BucketAggregates
    measures: CrawlMeasures


def host_caps(
    delay: npt.ArrayLike,
    new_pages: npt.ArrayLike,
    *,
    period_seconds: float,
    periods: int,
) -> FloatArray:
    """Re-crawls a period each host accepts, (H,): the requests its polite ``delay``
    (seconds between two, per host; <= 0: no limit) allows in a period of
    ``period_seconds`` (:func:`planner.cycle.due_urls.host_capacity`, what the release
    allows), less room for its ``new_pages`` never fetched, spread over a cycle of
    ``periods`` (the plan's new pages are not split by host), >= 0."""
    cap = host_capacity(np.asarray(delay, dtype=float), float(period_seconds)).astype(float)
    room = np.asarray(new_pages, dtype=float) / max(int(periods), 1)
    return np.maximum(cap - np.minimum(cap, room), 0.0)


def host_load(outcome: PlanOutcome, pages: HostPages) -> FloatArray:
    """Crawls a period the plan gives each host of ``pages``, (H,): the sum over its pages
    of their class's planned crawls per page and period, the mean over the cycle's periods.
    Pages of a split class take that class's crawls (their host's group is the key's)."""
    load = np.zeros(pages.host.size)
    cycle = outcome.cycle
    if cycle is None or not cycle.fractions or pages.host.size == 0:
        return load
    mean: dict[int, float] = {}
    for period in cycle.fractions:
        for cls, f in period.items():
            mean[int(cls)] = mean.get(int(cls), 0.0) + float(f) / len(cycle.fractions)
    keys = np.array(sorted(mean), dtype=np.int64)
    values = np.array([mean[k] for k in keys.tolist()], dtype=float)
    if keys.size == 0:
        return load
    split = keys[keys >= HOST_CLASS_STRIDE]
    page_key = pages.page_class.astype(np.int64)
    if split.size:  # a page of a split class: its wide class on its host's group
        groups = {int(k) // HOST_CLASS_STRIDE - 1 for k in split.tolist()}
        page_key = split_key(page_key, _groups_of(groups, pages))
    at = np.searchsorted(keys, page_key).clip(max=keys.size - 1)
    per_page = np.where(keys[at] == page_key, values[at], 0.0)
    np.add.at(load, pages.page_host, per_page)
    return load


def _groups_of(groups: set[int], pages: HostPages) -> IntArray:
    """Each page's group (its host's index in ``pages.host``), -1 for a page whose host is
    not among ``groups``; for :func:`host_load`, whose split plans index bound hosts by
    their place in ``pages.host`` (:func:`plan_within_caps` keeps them so)."""
    inside = np.isin(pages.page_host, np.array(sorted(groups), dtype=np.int64))
    return np.where(inside, pages.page_host, -1)


def split_classes(
    aggregates: BucketAggregates, pages: HostPages, bound: IntArray
) -> tuple[BucketAggregates, HostCaps]:
    """The aggregates with the pages of the ``bound`` hosts (indexes into ``pages.host``)
    in classes of their own, and the caps for the model.

    Class c (> 0) of bound host ``pages.host[g]`` becomes class ``host_class(wide_class(c),
    g)``: g is the host's index in ``pages.host``, so every host of ``pages`` keeps its key
    whichever are bound. Their pages leave classes 1..255 (page counts, rate and change
    sums, obsolete pages subtracted); fetched pages with no estimate yet stay in class 0.
    Returns aggregates over ``HOST_CLASS_STRIDE (H + 1)`` classes (H: hosts of ``pages``)
    and :class:`HostCaps` with every host's cap (a host not bound holds no class).
    """
    hosts = pages.host.size
    size = HOST_CLASS_STRIDE * (hosts + 1)
    on_bound = np.isin(pages.page_host, bound) & (pages.page_class > 0)
    cls = pages.page_class[on_bound].astype(np.int64)
    group = pages.page_host[on_bound].astype(np.int64)
    rate, elapsed = pages.rate[on_bound], pages.elapsed[on_bound]
    period = aggregates.period
    moved = bucket_aggregates(cls, rate, elapsed, period=period)
    split = bucket_aggregates(
        split_key(cls, group), rate, elapsed, period=period, n_buckets=size - 1
    )
    base = _minus(aggregates, moved)
    pages_out = split.pages.copy()
    pages_out[: base.pages.size] += base.pages
    rate_sum = np.nan_to_num(split.mean_rate * split.pages)
    change_sum = np.nan_to_num(split.change_fraction * split.pages)
    obsolete = np.nan_to_num(split.obsolete)
    n = base.pages.size
    rate_sum[:n] += np.nan_to_num(base.mean_rate * base.pages)
    change_sum[:n] += np.nan_to_num(base.change_fraction * base.pages)
    obsolete[:n] += np.nan_to_num(base.obsolete)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_rate = np.where(pages_out > 0, rate_sum / pages_out, np.nan)
        change = np.where(pages_out > 0, change_sum / pages_out, np.nan)
    mean_rate[0] = change[0] = obsolete[0] = np.nan
    merged = BucketAggregates(pages_out, mean_rate, change, obsolete, period)
    caps = HostCaps(
        group=np.arange(size, dtype=np.int64) // HOST_CLASS_STRIDE - 1,
        cap=np.maximum(np.asarray(pages.cap, dtype=float), 0.0),
    )
    return merged, caps


def _minus(whole: BucketAggregates, part: BucketAggregates) -> BucketAggregates:
    """The aggregates of ``whole``'s pages less ``part``'s (a subset of them): counts and
    sums subtracted, the means re-formed; a class left empty is empty."""
    pages = whole.pages - part.pages
    if np.any(pages < 0):
        raise ValueError("split_classes: the bound hosts' pages are not among the aggregates'")
    rate = np.nan_to_num(whole.mean_rate * whole.pages) - np.nan_to_num(part.mean_rate * part.pages)
    change = np.nan_to_num(whole.change_fraction * whole.pages) - np.nan_to_num(
        part.change_fraction * part.pages
    )
    obsolete = np.maximum(np.nan_to_num(whole.obsolete) - np.nan_to_num(part.obsolete), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_rate = np.where(pages > 0, np.maximum(rate, 0.0) / pages, np.nan)
        fraction = np.where(pages > 0, np.clip(change / pages, 0.0, 1.0), np.nan)
    obsolete = np.where(pages > 0, obsolete, 0.0)
    return BucketAggregates(pages, mean_rate, fraction, obsolete, whole.period)


def plan_within_caps(
    aggregates: BucketAggregates,
    settings: CycleSettings,
    measures: CrawlMeasures,
    pages: HostPages,
    *,
    warm: WarmStart | None = None,
) -> CapsPlan:
    """Plan the cycle, splitting off the hosts whose cap the plan would exceed (module
    docstring). ``measures.bucket_seconds``, ``rate_shape`` and ``importance``, per class
    0..255, are carried to each split class from its change-rate class. Bound hosts are
    numbered by their place in ``pages.host``; :attr:`CapsPlan.bound` lists those split, in
    that order, and the plan's split keys are renumbered to index it."""
    outcome = plan_cycle(aggregates, settings, measures, warm=warm)
    bound = np.zeros(0, dtype=np.int64)
    kept = (aggregates, measures)
    solves = 1
    steady = settings.model == "steady" and settings.optimize
    while steady and pages.host.size and solves <= SPLIT_ROUNDS and outcome.cycle is not None:
        load = host_load(outcome, pages)
        over = np.flatnonzero(load > pages.cap * (1 + _OVER) + 1e-9)
        over = _within_rows(np.setdiff1d(over, bound), load - pages.cap, bound, pages)
        if over.size == 0:
            break
        trial = np.union1d(bound, over)
        split, caps = split_classes(aggregates, pages, trial)
        keys = np.arange(split.pages.size)
        split_measures = replace(
            measures,
            host_caps=caps,
            bucket_seconds=_per_split_class(measures.bucket_seconds, keys),
            rate_shape=_per_split_class(measures.rate_shape, keys),
            importance=_per_split_class(measures.importance, keys),
        )
        planned = plan_cycle(split, settings, split_measures)
        solves += 1
        if planned.cycle is None:  # the split plan failed: keep the last one that solved
            break
        outcome, bound, kept = planned, trial, (split, split_measures)
    split, used = _renumbered_inputs(kept[0], kept[1], bound)
    return CapsPlan(_renumbered(outcome, bound), bound, pages.cap[bound], solves, split, used)


def _within_rows(over: IntArray, excess: FloatArray, bound: IntArray, pages: HostPages) -> IntArray:
    """The hosts of ``over`` to split this round: furthest over their caps first, while the
    split classes of ``bound`` and these stay within :data:`MAX_SPLIT_ROWS`."""
    if over.size == 0:
        return over
    estimated = pages.page_class > 0
    pairs = np.unique(
        np.stack([pages.page_host[estimated], wide_class(pages.page_class[estimated])]), axis=1
    )
    rows = np.bincount(pairs[0], minlength=pages.host.size)
    room = MAX_SPLIT_ROWS - int(rows[bound].sum())
    ranked = over[np.argsort(-excess[over], kind="stable")]
    used = np.cumsum(rows[ranked])
    return np.sort(ranked[used <= room])


def _per_split_class(values: npt.ArrayLike | None, keys: IntArray) -> FloatArray | None:
    """A per-class array (classes 0..255) carried to every split class from its change-rate
    class (the wide class's first); None stays None."""
    if values is None:
        return None
    per_class = np.asarray(values, dtype=float)
    return per_class[base_class(keys) % per_class.size]


def _renumbered_inputs(
    aggregates: BucketAggregates, measures: CrawlMeasures, bound: IntArray
) -> tuple[BucketAggregates, CrawlMeasures]:
    """The split plan's inputs with the bound hosts' classes renumbered as
    :func:`_renumbered` does their quotas: over ``HOST_CLASS_STRIDE (len(bound) + 1)``
    classes."""
    if bound.size == 0:
        return aggregates, measures
    size = HOST_CLASS_STRIDE * (bound.size + 1)
    source = np.concatenate(
        [np.arange(HOST_CLASS_STRIDE)]
        + [np.arange(HOST_CLASS_STRIDE) + HOST_CLASS_STRIDE * (int(g) + 1) for g in bound]
    )

    def take(values: npt.ArrayLike | None) -> FloatArray | None:
        return None if values is None else np.asarray(values, dtype=float)[source]

    renumbered = BucketAggregates(
        aggregates.pages[source],
        aggregates.mean_rate[source],
        aggregates.change_fraction[source],
        aggregates.obsolete[source],
        aggregates.period,
    )
    caps = measures.host_caps
    assert caps is not None
    host_caps = HostCaps(
        group=np.arange(size, dtype=np.int64) // HOST_CLASS_STRIDE - 1,
        cap=np.asarray(caps.cap, dtype=float)[bound],
    )
    return renumbered, replace(
        measures,
        host_caps=host_caps,
        bucket_seconds=take(measures.bucket_seconds),
        rate_shape=take(measures.rate_shape),
        importance=take(measures.importance),
    )


def _renumbered(outcome: PlanOutcome, bound: IntArray) -> PlanOutcome:
    """The plan with split keys ``host_class(c, g)`` (g: an index into ``pages.host``)
    renumbered to ``host_class(c, j)``, j the host's place in ``bound``."""
    cycle = outcome.cycle
    if cycle is None or bound.size == 0:
        return outcome
    place = {int(g): j for j, g in enumerate(bound.tolist())}

    def key(k: int) -> int:
        if k < HOST_CLASS_STRIDE:
            return k
        return int(host_class(k % HOST_CLASS_STRIDE, place[k // HOST_CLASS_STRIDE - 1]))

    cycle = replace(
        cycle,
        quotas=[{key(int(k)): v for k, v in row.items()} for row in cycle.quotas],
        fractions=[{key(int(k)): v for k, v in row.items()} for row in cycle.fractions],
        marginal=[{key(int(k)): v for k, v in row.items()} for row in cycle.marginal],
    )
    ids = np.array([key(int(k)) for k in outcome.inputs.bucket_ids.tolist()], dtype=np.int64)
    return replace(outcome, cycle=cycle, inputs=replace(outcome.inputs, bucket_ids=ids))
