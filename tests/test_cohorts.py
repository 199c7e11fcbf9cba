"""The cohort LP (planner/model/cohorts.py): its values per period, the steady state against
Cho & Garcia-Molina's continuous freshness optimum, and invariants of its plans."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.integrate import dblquad

from planner.model.cohorts import (
    CohortPlan,
    build_cohort_model,
    cohort_values,
    even_cohorts,
    solve_with_highs,
)
from planner.model.instance import CrawlInstance
from planner.schedules.optimal import refresh_schedule
from planner.solver.compiler import compile_model
from planner.solver.ipopt import solve_nlp

RATES = np.array([0.0, 1e-6, 3e-5, 0.003, 0.05, 0.4, 1.0, 3.0, 12.0])


def _instance(
    rate: np.ndarray, pages: np.ndarray, capacity: float | np.ndarray, periods: int, **extra: object
) -> CrawlInstance:
    data: dict[str, object] = {
        "periods": periods,
        "buckets": len(rate),
        "b0": pages,
        "y0": np.zeros(len(rate)),
        "n0": 0.0,
        "change_rate": rate,
        "capacity": capacity,
        "crawl_cost": 1.0,
        "new_crawl_cost": 1.0,
        "oldnwt": 0.0,
        "newnwt": 0.0,
        "nconst": 0.0,
    }
    data.update(extra)
    return CrawlInstance.from_mapping(data)


# -- the values per period ------------------------------------------------------------------


def _quadrature(lam: float, k: int) -> tuple[float, float, float]:
    """keep, crawl and new by adaptive quadrature over the phase theta and the time s (module
    docstring of planner.model.cohorts): age k+1+s-theta before the crawl, s-theta after it;
    the two regions s < theta and s > theta are integrated apart (the crawl is a jump)."""

    def before(s: float, theta: float) -> float:
        return math.exp(-lam * (k + 1 + s - theta))

    def after(s: float, theta: float) -> float:
        return math.exp(-lam * (s - theta))

    # dblquad integrates func(y, x) over x in [a, b], y in [g(x), h(x)]: here x = theta, y = s.
    early = dblquad(before, 0.0, 1.0, 0.0, lambda theta: theta)[0]  # s < theta: not yet crawled
    late_kept = dblquad(before, 0.0, 1.0, lambda theta: theta, 1.0)[0]
    late_crawled = dblquad(after, 0.0, 1.0, lambda theta: theta, 1.0)[0]
    return early + late_kept, early + late_crawled, late_crawled


@pytest.mark.parametrize("lam", [1e-5, 0.003, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("k", [0, 1, 5])
def test_freshness_values_equal_quadrature(lam: float, k: int) -> None:
    values = cohort_values(np.array([[lam]]), cohorts=10, objective="freshness")
    keep, crawl, new = _quadrature(lam, k)
    assert values.keep[0, k, 0] == pytest.approx(keep, abs=1e-9)
    assert values.crawl[0, k, 0] == pytest.approx(crawl, abs=1e-9)
    assert values.new[0, 0] == pytest.approx(new, abs=1e-9)


@pytest.mark.parametrize("interval", [1, 2, 3, 7, 25])
def test_integer_interval_gives_periodic_freshness_and_obsolescence(interval: int) -> None:
    """A page crawled every m periods: Cho's (1 - e^(-lam m)) / (lam m) and Xyleme's lam m / 2."""
    lam = RATES[RATES > 0][:, None]
    fresh = cohort_values(lam, cohorts=40, objective="freshness")
    mean = (
        fresh.keep[:, : interval - 1, 0].sum(axis=1) + fresh.crawl[:, interval - 1, 0]
    ) / interval
    x = lam[:, 0] * interval
    np.testing.assert_allclose(mean, -np.expm1(-x) / x, rtol=1e-9)
    obs = cohort_values(lam, cohorts=40, objective="obsolescence")
    mean = (obs.keep[:, : interval - 1, 0].sum(axis=1) + obs.crawl[:, interval - 1, 0]) / interval
    np.testing.assert_allclose(mean, lam[:, 0] * interval / 2.0, rtol=1e-12)


def test_values_are_finite_monotone_and_stale_in_the_absorbing_cohort() -> None:
    values = cohort_values(RATES[:, None], cohorts=6, objective="freshness")
    assert np.all(np.isfinite(values.keep)) and np.all(np.isfinite(values.crawl))
    # A crawl never loses value, and older cohorts are worth less: crawl the oldest first.
    assert np.all(values.crawl >= values.keep)
    assert np.all(np.diff(values.keep[:, :-1, 0], axis=1) <= 0)
    gain = values.crawl - values.keep
    assert np.all(np.diff(gain[1:, :, 0], axis=1) >= -1e-15)
    np.testing.assert_array_equal(values.keep[:, -1, :], 0.0)
    np.testing.assert_allclose(values.keep[0, :-1, 0], 1.0)  # a page that never changes


def test_bad_settings_say_what_to_give() -> None:
    inst = _instance(np.array([0.1]), np.array([10.0]), 1.0, 2)
    with pytest.raises(ValueError, match="initial cohorts"):
        build_cohort_model(inst, cohorts=4)
    with pytest.raises(ValueError, match=r"\[B, K\]"):
        build_cohort_model(inst, cohorts=4, initial=np.ones((1, 3)))
    with pytest.raises(ValueError, match="objective must be one of"):
        cohort_values(np.ones((1, 1)), 4, "staleness")  # type: ignore[arg-type]


# -- the steady state against the continuous optimum ---------------------------------------

STEADY_RATES = np.geomspace(0.003, 3.0, 20)
STEADY_PAGES = 1000.0


@pytest.fixture(scope="module")
def steady_state() -> tuple[CohortPlan, float, np.ndarray, np.ndarray]:
    """20 buckets of 1000 pages, rates 0.003-3 per period, every page once per 7 periods on
    average, T = 14, K = 40, cyclic: the LP's freshness and crawl rates, and the optimum's."""
    B, T = len(STEADY_RATES), 14
    inst = _instance(STEADY_RATES, np.full(B, STEADY_PAGES), STEADY_PAGES * B / 7, T)
    plan = solve_with_highs(build_cohort_model(inst, cohorts=40, cyclic=True))
    assert plan.status == "optimal"
    lp_freshness = plan.objective / (T * B * STEADY_PAGES)
    lp_rate = plan.crawls.sum(axis=1) / (T * STEADY_PAGES)
    optimum = refresh_schedule(STEADY_RATES, B / 7, objective="freshness")
    return plan, lp_freshness - optimum.value, lp_rate, optimum.refresh_rate


def test_steady_state_freshness_within_0001_of_the_continuous_optimum(
    steady_state: tuple[CohortPlan, float, np.ndarray, np.ndarray],
) -> None:
    """Measured: LP 0.64742, Cho's optimum 0.64774 (uniform: 0.61020). The LP is below, as it
    must be: its plans are periodic schedules too, on the period grid."""
    _, gap, _, _ = steady_state
    assert -0.001 < gap <= 1e-9


def test_steady_state_crawl_rates_sit_on_the_period_grid_next_to_the_optimum(
    steady_state: tuple[CohortPlan, float, np.ndarray, np.ndarray],
) -> None:
    """Each bucket's revisit interval in the LP is within one period of the optimum's.

    Not within 1%, as issue 24 asks: the cohorts value integer intervals exactly and a
    fractional interval m + q as the mix of m and m + 1 (module docstring, "The period grid"),
    so the LP's freshness against the crawl rate is the piecewise-linear interpolation of the
    concave continuous curve between rates 1/(m+1) and 1/m, and a vertex of the LP puts a
    bucket on one of them (at most one bucket per binding capacity row is split). Measured,
    LP interval against the optimum's: 26 / 25.37 (-2.4% in rate), 8 / 7.63 (-4.7%),
    7 / 6.50 (-7.2%), 6 / 5.56 (-7.3%); at intervals of 1-3 periods the grid is coarsest
    relative to the interval: 3 / 3.33 (+10.9%), 3 / 3.11 (+3.6%), 4 / 3.69 (-7.8%), 4 / 4.18
    (+4.4%). The fastest three buckets (rates 1.6-3) starve in both. Over the buckets with
    intervals of 5 or more the LP crawls 3.8% fewer pages than the optimum (it moves them to
    the 3-4 period buckets). Halving the period (T = 28, K = 80, rates and capacity halved per
    period) brings the freshness gap from 0.00032 to 0.00012 and that aggregate to 0.03%,
    while single buckets still differ by up to 6%.
    """
    _, _, lp_rate, opt_rate = steady_state
    live = opt_rate > 0
    assert np.all(lp_rate[~live] < 1e-9)
    interval = 1.0 / opt_rate[live]
    lp_interval = 1.0 / lp_rate[live]
    assert np.all(lp_interval >= np.floor(interval) - 1e-6)
    assert np.all(lp_interval <= np.ceil(interval) + 1e-6)


def test_steady_state_pages_and_capacity(
    steady_state: tuple[CohortPlan, float, np.ndarray, np.ndarray],
) -> None:
    plan, _, _, _ = steady_state
    np.testing.assert_allclose(plan.c.sum(axis=1), STEADY_PAGES, rtol=1e-7)
    np.testing.assert_allclose(plan.c[:, :, -1], plan.c[:, :, 0], atol=1e-6)
    np.testing.assert_allclose(plan.crawls.sum(axis=0), STEADY_PAGES * 20 / 7, rtol=1e-7)


# -- the Ipopt bridge solves the same LP ------------------------------------------------------


def test_ipopt_through_the_bridge_reaches_the_highs_optimum() -> None:
    rate = np.array([0.02, 0.2, 1.5])
    pages = np.array([300.0, 200.0, 100.0])
    inst = _instance(rate, pages, 90.0, 5, n0=50.0, nconst=10.0, oldnwt=0.05, newnwt=0.2)
    initial = even_cohorts(pages, 8, 5.0)
    highs = solve_with_highs(build_cohort_model(inst, cohorts=8, initial=initial))
    model = build_cohort_model(inst, cohorts=8, initial=initial)
    out = solve_nlp(compile_model(model), None, {"tol": 1e-10}, use_scaling=False)
    assert out.status.ok
    assert out.objective == pytest.approx(highs.objective, rel=1e-6)


# -- invariants of plans (property tests) ----------------------------------------------------


@st.composite
def _planning_cases(draw: st.DrawFn) -> tuple[CrawlInstance, np.ndarray, str, float]:
    B = draw(st.integers(1, 4))
    K = draw(st.integers(2, 6))
    T = draw(st.integers(1, 4))
    rate = np.array(draw(st.lists(st.floats(1e-3, 5.0), min_size=B, max_size=B)))
    pages = np.array(draw(st.lists(st.floats(1.0, 1e4), min_size=B, max_size=B)))
    cost = np.array(draw(st.lists(st.floats(0.2, 5.0), min_size=B, max_size=B)))
    share = draw(st.floats(0.05, 0.9))  # capacity below the work of crawling every page
    capacity = share * float(cost @ pages)
    n0 = draw(st.sampled_from([0.0, 0.0, 50.0]))
    oldnwt = draw(st.sampled_from([0.0, 0.1]))
    inst = _instance(
        rate, pages, capacity, T, crawl_cost=cost, n0=n0, nconst=n0 / 5, oldnwt=oldnwt, newnwt=0.3
    )
    mix = np.array(draw(st.lists(st.integers(0, 9), min_size=B * K, max_size=B * K)), float)
    mix = mix.reshape(B, K) + 1e-3  # every bucket holds its pages somewhere
    initial = mix / mix.sum(axis=1, keepdims=True) * pages[:, None]
    objective = draw(st.sampled_from(["freshness", "obsolescence"]))
    return inst, initial, objective, capacity


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_planning_cases())
def test_plans_conserve_pages_stay_nonnegative_and_spend_binding_capacity(
    case: tuple[CrawlInstance, np.ndarray, str, float],
) -> None:
    inst, initial, objective, capacity = case
    K = initial.shape[1]
    model = build_cohort_model(inst, cohorts=K, objective=objective, initial=initial)  # type: ignore[arg-type]
    plan = solve_with_highs(model)
    assert plan.status == "optimal"
    tol = 1e-6 * max(float(inst.b0.sum()), 1.0)
    assert plan.c.min() >= -tol and plan.x.min() >= -tol and plan.z.min() >= -tol
    assert np.all(plan.x <= plan.c[:, :, :-1] + tol)
    np.testing.assert_allclose(plan.c[:, :, 0], initial, atol=tol)
    held = plan.c.sum(axis=1)  # (B, T + 1)
    np.testing.assert_allclose(held[:, 1:] - held[:, :-1], inst.p[:, None] * plan.z, atol=tol)
    spent = (inst.crawl_cost * plan.crawls).sum(axis=0) + inst.new_crawl_cost * plan.z
    assert np.all(spent <= capacity * (1 + 1e-6))
    if float(inst.oldnwt.max()) == 0.0:
        # Every crawl is worth something (lambda > 0) and the capacity is below the work of
        # the pages held: each period spends it exactly. With discovery (oldnwt > 0) a crawl
        # also adds new uncrawled pages, which the objective charges (newwt), so crawling a
        # slow page may be worth less than nothing and capacity may rightly stay unspent.
        np.testing.assert_allclose(spent, capacity, rtol=1e-6)


# -- the simulator policy ---------------------------------------------------------------------


def test_cohort_policy_is_registered_and_wants_the_true_rates() -> None:
    from scenarios.policies import PolicyError, make_policy
    from scenarios.policies.cohorts import CohortPolicy

    policy = make_policy({"kind": "cohorts", "rates": "true", "buckets": 8, "cycle": 7})
    assert isinstance(policy, CohortPolicy) and policy.buckets == 8
    with pytest.raises(PolicyError, match="rates"):
        make_policy({"kind": "cohorts", "rates": "estimated"})
    with pytest.raises(PolicyError, match="buckets"):
        make_policy({"kind": "cohorts", "rates": "true", "buckets": 2.5})


def test_cohort_policy_spends_the_budget_and_beats_uniform_on_a_mixture() -> None:
    """A seeded mixture world of 2,000 pages, budget 1/7: the cohort plan (true rates) keeps
    the repository fresher than round robin (measured 0.8378 against 0.8063; at 10,000 pages the
    scenario run gave 0.8451 against 0.8163, equal to the freshness-optimal page schedule)."""
    from scenarios.policies import UniformPolicy
    from scenarios.policies.cohorts import CohortPolicy
    from scenarios.simulator import SimulationSettings, simulate
    from scenarios.world import WorldSpec, build_world

    world = build_world(WorldSpec(pages=2000, hosts=20), seed=3, periods=21)
    settings = SimulationSettings(periods=14, budget=2000 // 7, warmup=7, oracle=True, seed=3)
    cohort = simulate(world, CohortPolicy("cohorts", buckets=16), settings)
    uniform = simulate(world, UniformPolicy("uniform"), settings)
    assert int(cohort.crawls.sum()) == 14 * settings.budget
    gain = cohort.summary()["freshness"] - uniform.summary()["freshness"]
    assert gain > 0.01
