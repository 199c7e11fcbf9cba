"""Planning past the cycle (terminal value, receding horizon) and exploration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from planner.cycle.plan_inputs import explore, model_horizon, planning_weights
from planner.model.instance import CrawlInstance
from planner.model.weights import Strategy, strategy_weights, with_terminal_value
from planner.solver.plan_solver import solve_plan


def test_the_horizon_is_the_cycle_unless_configured_longer() -> None:
    assert model_horizon(3) == 3
    assert model_horizon(3, 20) == 20
    assert model_horizon(3, 2) == 3


def _one_bucket_and_new_pages(periods: int, discovery: float) -> CrawlInstance:
    """The demo's second plan: 2,868 pages fetched once (no estimate yet: a = 0.5), 7,982
    never fetched, 1,000 crawls a period, discovery measured pooled at 0.29 per crawl."""
    return CrawlInstance.from_mapping(
        {
            "periods": periods,
            "buckets": 1,
            "b0": [2868.0],
            "y0": [1434.0],
            "n0": 7982.0,
            "a": [[0.5] * periods],
            "capacity": 1000.0,
            "crawl_cost": 1.0,
            "new_crawl_cost": 1.0,
            "oldnwt": discovery,
            "newnwt": discovery,
            "nconst": 0.0,
        }
    )


def test_over_a_long_horizon_discoveries_outweigh_crawls() -> None:
    """Why the horizon is the cycle by default: every crawl adds its discoveries to the
    uncrawled pages of every later period, so over 11 periods the model puts off all of the
    published cycle's crawls; over the cycle, with the terminal value, it fetches new pages at
    full capacity."""
    long = _one_bucket_and_new_pages(11, 0.29)
    idle = solve_plan(long, planning_weights(long, Strategy.EVERY_PERIOD, 1000.0))
    assert idle.status.ok
    assert idle.trajectory.x[:, :3].sum() + idle.trajectory.z[:3].sum() < 1.0
    cycle = _one_bucket_and_new_pages(3, 0.29)
    busy = solve_plan(cycle, planning_weights(cycle, Strategy.EVERY_PERIOD, 1000.0))
    assert busy.status.ok
    np.testing.assert_allclose(busy.trajectory.z, 1000.0, rtol=1e-6)


def _two_buckets(periods: int) -> CrawlInstance:
    """100 slow pages (2 % change a period) and 100 fast ones (80 %), 20 crawls a period,
    both buckets at their steady state under a uniform crawl of 10 % a period."""
    a = np.array([0.02, 0.8])
    f = 0.1
    y0 = 100 * (1 - f) * a / (1 - (1 - f) * (1 - a))
    return CrawlInstance.from_mapping(
        {
            "periods": periods,
            "buckets": 2,
            "b0": [100.0, 100.0],
            "y0": y0.tolist(),
            "n0": 0.0,
            "a": np.repeat(a[:, None], periods, axis=1).tolist(),
            "capacity": 20.0,
            "crawl_cost": 1.0,
            "new_crawl_cost": 1.0,
            "oldnwt": 0.0,
            "newnwt": 0.0,
            "nconst": 0.0,
        }
    )


def _steady_obsolete(fraction: np.ndarray, a: np.ndarray) -> float:
    """Obsolete pages at the steady state of equation (2) with crawl fractions ``fraction``."""
    f = np.clip(fraction, 0.0, 1.0)
    return float((100 * (1 - f) * a / (1 - (1 - f) * (1 - a))).sum())


def test_a_longer_horizon_stops_starving_slow_pages() -> None:
    """Solved over a 3-period cycle, the model counts a slow page's crawl for the periods
    left in the cycle only, and spends the cycle on fast pages; over 12 periods it crawls
    the slow pages too, and the published cycle's crawl, repeated, leaves fewer pages obsolete
    at the steady state."""
    a = np.array([0.02, 0.8])
    first = {}
    for periods in (3, 12):
        solution = solve_plan(_two_buckets(periods), Strategy.EVERY_PERIOD)
        assert solution.status.ok
        # mean crawl fractions over the published cycle (its first 3 periods)
        first[periods] = solution.trajectory.x[:, :3].mean(axis=1) / 100.0
    assert first[3][0] == pytest.approx(0.0, abs=1e-6)  # the slow pages starve
    assert first[12][0] > 0.05
    assert first[12].sum() == pytest.approx(0.2, rel=1e-6)  # the capacity is spent either way
    assert _steady_obsolete(first[12], a) < _steady_obsolete(first[3], a)
    # over the cycle alone, the terminal value (revisits every 200 / 20 = 10 periods) does it
    instance = _two_buckets(3)
    valued = solve_plan(instance, planning_weights(instance, Strategy.EVERY_PERIOD, 20.0))
    fractions = valued.trajectory.x.mean(axis=1) / 100.0
    assert fractions[0] > 0.05
    assert _steady_obsolete(fractions, a) < _steady_obsolete(first[3], a)


def test_terminal_value_is_the_obsolete_periods_before_the_next_crawl() -> None:
    base = strategy_weights(Strategy.EVERY_PERIOD, 3, 4)
    weights = with_terminal_value(base, [0.0, 0.5, 1.0], revisit_periods=2.0)
    # sum_{k=1..2} (1 - a)^k: 2 for a page that never changes, 0.5 + 0.25 for a = 0.5, 0 for 1
    np.testing.assert_allclose(weights.oldwt[:, -1], [1.0 + 2.0, 1.0 + 0.75, 1.0], rtol=1e-12)
    np.testing.assert_array_equal(weights.oldwt[:, :-1], base.oldwt[:, :-1])
    np.testing.assert_array_equal(weights.newwt, base.newwt)
    # strategy 2 weighs no period before the last: nothing to add
    end = strategy_weights(Strategy.END_OF_CYCLE, 3, 4)
    np.testing.assert_array_equal(with_terminal_value(end, [0.1] * 3, 5.0).oldwt, end.oldwt)


def test_new_pages_left_uncrawled_at_the_end_weigh_alike() -> None:
    base = strategy_weights(Strategy.EVERY_PERIOD, 2, 3)
    weights = with_terminal_value(base, [0.0, 0.5], 2.0, new_page_change=0.5)
    assert weights.newwt[-1] == pytest.approx(1.0 + 0.75, rel=1e-12)
    np.testing.assert_array_equal(weights.newwt[:-1], base.newwt[:-1])
    assert with_terminal_value(base, [0.0, 0.5], 2.0).newwt[-1] == 1.0


def test_exploration_gives_every_bucket_a_floor_at_the_same_crawl_time() -> None:
    instance = _two_buckets(3)  # 200 pages, capacity 20 crawls: a revisit every 10 periods
    before = np.full((2, 3), 100.0)
    x = np.array([[0.0, 0.0, 5.0], [20.0, 20.0, 15.0]])  # the slow bucket starved
    out = explore(instance, before, x, capacity_crawls=20.0, revisits=2.0)
    floor = 100.0 / (2.0 * 10.0)  # each page once per 2 revisit intervals: 5 a period
    np.testing.assert_allclose(out[0], [floor, floor, 5.0])
    np.testing.assert_allclose(out.sum(axis=0), x.sum(axis=0))  # equal costs: same crawls
    assert (out >= 0).all()
    np.testing.assert_array_equal(explore(instance, before, x, 20.0, revisits=0.0), x)


@given(
    x=hnp.arrays(np.float64, (3, 2), elements=st.floats(0, 50)),
    cost=hnp.arrays(np.float64, (3,), elements=st.floats(0.1, 5)),
    revisits=st.floats(0.5, 10),
)
def test_exploration_never_adds_crawl_time_or_negative_crawls(
    x: np.ndarray, cost: np.ndarray, revisits: float
) -> None:
    instance = CrawlInstance.from_mapping(
        {
            "periods": 2,
            "buckets": 3,
            "b0": [50.0, 50.0, 50.0],
            "y0": [10.0, 10.0, 10.0],
            "n0": 0.0,
            "a": [[0.1, 0.1]] * 3,
            "capacity": 100.0,
            "crawl_cost": np.repeat(cost[:, None], 2, axis=1).tolist(),
            "new_crawl_cost": 1.0,
            "oldnwt": 0.0,
            "newnwt": 0.0,
            "nconst": 0.0,
        }
    )
    before = np.full((3, 2), 50.0)
    out = explore(instance, before, x, capacity_crawls=15.0, revisits=revisits)
    assert (out >= -1e-9).all()
    np.testing.assert_allclose(cost @ out, cost @ x, rtol=1e-9, atol=1e-9)
