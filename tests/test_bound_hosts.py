"""Splitting off the hosts whose politeness binds the plan (planner.cycle.bound_hosts)."""

from __future__ import annotations

import numpy as np
import pytest

from estimators.buckets import BucketAggregates, bucket_aggregates, combine_aggregates
from planner.cycle.bound_hosts import (
    HOST_CLASS_MERGE,
    HostPages,
    host_load,
    plan_within_caps,
    split_classes,
    wide_class,
)
from planner.cycle.plan_cycle import (
    HOST_CLASS_STRIDE,
    CrawlMeasures,
    CycleSettings,
    base_class,
    host_class,
    plan_cycle,
)


def _web(seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """4,000 pages on 20 hosts: class, rate (per day), elapsed (days), host index."""
    rng = np.random.default_rng(seed)
    n = 4_000
    rate = np.exp(rng.uniform(np.log(0.003), np.log(3.0), n))
    edges = np.logspace(-3, 2, 256)
    cls = np.clip(np.searchsorted(edges, rate, side="right"), 1, 255).astype(np.int64)
    elapsed = rng.uniform(0.0, 20.0, n)
    host = rng.integers(0, 20, n).astype(np.int64)
    return cls, rate, elapsed, host


def _pages(cls, rate, elapsed, host, cap) -> HostPages:  # type: ignore[no-untyped-def]
    return HostPages(
        host=np.arange(20, dtype=np.int64) + 100,
        cap=np.asarray(cap, dtype=float),
        page_host=host,
        page_class=cls,
        rate=rate,
        elapsed=elapsed,
    )


def test_wide_classes_merge_fixed_runs_of_classes() -> None:
    assert wide_class(np.array([0, 1, 4, 5, 8, 255])).tolist() == [0, 1, 1, 5, 5, 253]
    assert HOST_CLASS_MERGE == 4


def test_split_aggregates_move_the_pages_and_keep_their_sums() -> None:
    cls, rate, elapsed, host = _web()
    whole = bucket_aggregates(cls, rate, elapsed, period=1.0)
    pages = _pages(cls, rate, elapsed, host, np.full(20, 5.0))
    bound = np.array([2, 7])
    split, caps = split_classes(whole, pages, bound)
    on = np.isin(host, bound)
    # the unbound pages' own aggregates, exactly
    rest = bucket_aggregates(cls[~on], rate[~on], elapsed[~on], period=1.0)
    assert np.array_equal(split.pages[:256], rest.pages)
    ok = rest.pages > 0
    assert np.allclose(split.mean_rate[:256][ok], rest.mean_rate[ok])
    assert np.allclose(split.change_fraction[:256][ok], rest.change_fraction[ok])
    assert np.allclose(split.obsolete[1:256], rest.obsolete[1:])
    # every bound page in its host's wide class; totals kept
    keys = host_class(wide_class(cls[on]), host[on])
    assert np.array_equal(np.flatnonzero(split.pages[256:]) + 256, np.unique(keys))
    assert split.pages.sum() == whole.pages.sum()
    assert np.nansum(split.mean_rate * split.pages) == pytest.approx(rate.sum())
    assert np.nansum(split.obsolete) == pytest.approx(np.nansum(whole.obsolete))
    assert set(base_class(np.unique(keys)).tolist()) <= set(wide_class(cls[on]).tolist())
    assert np.asarray(caps.group)[host_class(5, 7)] == 7
    # the aggregates must hold the pages split off
    empty = combine_aggregates([bucket_aggregates(cls[:10], rate[:10], elapsed[:10], period=1.0)])
    with pytest.raises(ValueError, match="not among the aggregates"):
        split_classes(empty, pages, bound)


def _plan(cap: np.ndarray, capacity: float = 400.0):  # type: ignore[no-untyped-def]
    cls, rate, elapsed, host = _web()
    whole = bucket_aggregates(cls, rate, elapsed, period=1.0)
    settings = CycleSettings(capacity=capacity, periods=4, explore=0)
    pages = _pages(cls, rate, elapsed, host, cap)
    return whole, settings, pages, plan_within_caps(whole, settings, CrawlMeasures(0), pages)


def test_no_host_bound_plans_once_unsplit() -> None:
    whole, settings, pages, planned = _plan(np.full(20, 1_000.0))
    assert planned.bound.size == 0 and planned.solves == 1
    plain = plan_cycle(whole, settings, CrawlMeasures(0))
    assert planned.outcome.cycle is not None and plain.cycle is not None
    assert planned.outcome.cycle.quotas == plain.cycle.quotas
    # 400 crawls a period over 20 hosts of about 200 pages: about 20 each
    load = host_load(planned.outcome, pages)
    assert load.sum() == pytest.approx(400.0, rel=0.02)


def test_hosts_over_their_cap_are_split_and_kept_within_it() -> None:
    """Three hosts accept 6 crawls a period where the free plan gives about 20: they are
    split off, each gets at most its cap in every period, the capacity goes elsewhere, and
    the plan keys their classes by their place among the bound hosts."""
    cap = np.full(20, 1_000.0)
    cap[[4, 9, 15]] = 6.0
    whole, settings, pages, planned = _plan(cap)
    assert planned.bound.tolist() == [4, 9, 15]
    assert planned.cap.tolist() == [6.0, 6.0, 6.0]
    assert planned.solves == 2
    cycle = planned.outcome.cycle
    assert cycle is not None
    for t in range(4):
        quotas = cycle.quotas[t]
        per_group: dict[int, int] = {}
        for k, q in quotas.items():
            if k >= HOST_CLASS_STRIDE:
                g = k // HOST_CLASS_STRIDE - 1
                per_group[g] = per_group.get(g, 0) + q
        assert set(per_group) == {0, 1, 2}
        assert all(q <= 6 for q in per_group.values())
        assert sum(per_group.values()) >= 15  # the caps are used
        assert sum(quotas.values()) + cycle.new_pages[t] == 400
    # the plan's class ids are the renumbered keys
    ids = planned.outcome.inputs.bucket_ids
    assert ids.max() < HOST_CLASS_STRIDE * 4
    # inside a bound host, fewer crawls per page than the free plan gives the same classes
    plain = plan_cycle(whole, settings, CrawlMeasures(0))
    assert plain.cycle is not None
    free = host_load(plain, pages)
    assert np.all(free[[4, 9, 15]] > 12.0)


def test_a_host_pushed_over_its_cap_by_the_split_is_bound_next_round() -> None:
    """A cap just above the free plan's load binds once the first hosts' crawls move
    elsewhere: a later round binds it too."""
    whole, settings, pages, first = _plan(np.full(20, 1_000.0))
    load = host_load(first.outcome, pages)
    cap = np.full(20, 1_000.0)
    cap[[0, 1, 2, 3, 4, 5]] = 2.0
    cap[12] = float(load[12]) * 1.02  # free: under; after the split: over
    planned = plan_within_caps(whole, settings, CrawlMeasures(0), _pages_like(pages, cap))
    assert planned.solves == 3
    assert planned.bound.tolist() == [0, 1, 2, 3, 4, 5, 12]


def _pages_like(pages: HostPages, cap: np.ndarray) -> HostPages:
    return HostPages(
        pages.host, cap.astype(float), pages.page_host, pages.page_class, pages.rate, pages.elapsed
    )


def test_the_paper_model_and_the_uniform_crawl_plan_unsplit() -> None:
    cap = np.full(20, 2.0)
    cls, rate, elapsed, host = _web()
    whole = bucket_aggregates(cls, rate, elapsed, period=1.0)
    pages = _pages(cls, rate, elapsed, host, cap)
    uniform = CycleSettings(capacity=400.0, periods=4, optimize=False)
    planned = plan_within_caps(whole, uniform, CrawlMeasures(0), pages)
    assert planned.bound.size == 0 and planned.solves == 1


def test_measured_crawl_costs_follow_the_split_classes() -> None:
    cap = np.full(20, 1_000.0)
    cap[3] = 4.0
    cls, rate, elapsed, host = _web()
    whole = bucket_aggregates(cls, rate, elapsed, period=1.0)
    cost = np.full(256, 0.5)
    settings = CycleSettings(capacity=200.0, periods=3, explore=0)
    pages = _pages(cls, rate, elapsed, host, cap)
    planned = plan_within_caps(
        whole, settings, CrawlMeasures(0, bucket_seconds=cost, seconds_per_fetch=0.5), pages
    )
    assert planned.bound.tolist() == [3]
    cycle = planned.outcome.cycle
    assert cycle is not None
    assert all(
        sum(q for k, q in quotas.items() if k >= HOST_CLASS_STRIDE) <= 4 for quotas in cycle.quotas
    )


def test_split_aggregates_take_no_unestimated_page() -> None:
    cls, rate, elapsed, host = _web()
    cls = cls.copy()
    cls[:50] = 0
    whole = bucket_aggregates(cls, rate, elapsed, period=1.0)
    pages = _pages(cls, rate, elapsed, host, np.full(20, 1.0))
    split, _ = split_classes(whole, pages, np.arange(20))
    assert split.pages[0] == 50  # class 0 stays
    assert split.pages[1:256].sum() == 0
    assert isinstance(split, BucketAggregates)


def test_the_split_stays_within_its_rows_furthest_over_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_SPLIT_ROWS split classes, the hosts furthest over their caps are split and
    the others are left to the release."""
    import planner.cycle.bound_hosts as bh

    cls, _, _, host = _web()
    whole, settings, pages, first = _plan(np.full(20, 1_000.0))
    load = host_load(first.outcome, pages)
    cap = np.maximum(load - np.arange(20) * 0.5 - 1.0, 0.5)  # host 19 furthest over
    rows_per_host = len(np.unique(wide_class(cls[host == 19])))
    monkeypatch.setattr(bh, "MAX_SPLIT_ROWS", 2 * rows_per_host + 1)
    planned = plan_within_caps(whole, settings, CrawlMeasures(0), _pages_like(pages, cap))
    assert planned.bound.tolist() == [18, 19]
    assert planned.solves == 2
