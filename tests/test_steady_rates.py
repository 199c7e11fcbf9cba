"""The steady-rate bucket model (planner.model.steady_rates) and its solve.

The model's promise (issue 24): with constant capacity and no new pages, its per-bucket crawl
rates are the freshness-optimal allocation (Cho & Garcia-Molina) aggregated to the buckets,
and the same for the other page-level objectives. Checked against the page schedules of
planner.schedules.optimal, which solve the page-level problem by its Lagrangian closed forms.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.buckets import BucketAggregates
from planner.cycle.plan_cycle import (
    HOST_CLASS_STRIDE,
    CrawlMeasures,
    CycleSettings,
    HostCaps,
    base_class,
    host_class,
    plan_cycle,
    web_renewal,
)
from planner.model.instance import CrawlInstance
from planner.model.steady_rates import (
    STEADY_OBJECTIVES,
    SteadySetup,
    marginal_value,
    page_value,
    period_value,
    revisit_interval,
)
from planner.schedules.optimal import refresh_schedule
from planner.solver.steady_solver import solve_steady
from scenarios.policies import RateKnowledge
from scenarios.policies.webfountain import WebFountainPolicy
from scenarios.simulator import SimulationSettings, simulate
from scenarios.world import WorldSpec, build_world


def _instance(
    rates: np.ndarray,
    pages: np.ndarray,
    capacity: float | list[float],
    periods: int = 7,
    **extra: object,
) -> CrawlInstance:
    B = rates.size
    cap = capacity if isinstance(capacity, list) else [capacity] * periods
    data: dict[str, object] = dict(
        buckets=B,
        periods=periods,
        b0=pages.astype(float),
        y0=np.zeros(B),
        n0=0.0,
        change_rate=rates,
        capacity=cap,
        crawl_cost=1.0,
        new_crawl_cost=1.0,
        oldnwt=0.0,
        newnwt=0.0,
        nconst=0.0,
    )
    data.update(extra)
    return CrawlInstance.from_mapping(data)


def _page_optimum(
    rates: np.ndarray, pages: np.ndarray, capacity: float, objective: str
) -> np.ndarray:
    """The page-level optimum's crawls per page, summed to each bucket: rate per page [B]."""
    counts = pages.astype(int)
    schedule = refresh_schedule(np.repeat(rates, counts), capacity, objective=objective)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.add.reduceat(np.asarray(schedule.refresh_rate), starts) / counts


@pytest.mark.parametrize("objective", sorted(STEADY_OBJECTIVES))
def test_steady_state_is_the_page_level_optimum(objective: str) -> None:
    """Constant capacity, no new pages: crawls per page of every bucket equal the page
    schedule's to 0.1% wherever its revisit interval is at least one period (x <= N binds
    below: the release crawls a page at most once a period)."""
    rng = np.random.default_rng(3)
    rates = np.logspace(-3.5, 1.0, 60)
    pages = rng.integers(20, 400, rates.size).astype(float)
    capacity = float(pages.sum() / 9.0)
    solution = solve_steady(_instance(rates, pages, capacity), SteadySetup(objective=objective))
    assert solution.status.ok, solution.message
    plan = solution.trajectory.x / pages[:, None]
    assert np.allclose(plan, plan[:, :1], rtol=1e-5, atol=1e-9)  # the same every period
    optimum = _page_optimum(rates, pages, capacity, objective)
    crawled = optimum > 1e-9
    assert optimum.max() < 1.0  # every interval spans a period or more here
    assert np.allclose(plan[crawled, 0], optimum[crawled], rtol=1e-3)
    assert np.all(plan[~crawled, 0] < 1e-4)  # what the optimum starves, the plan starves


def test_freshness_value_is_cho_periodic_refresh() -> None:
    """V(x, N) / N is (f / l)(1 - e^(-l/f)) at f = x / N, and its derivative is the page
    schedule's marginal (1 - e^-u (1 + u)) / l."""
    lam = np.array([0.01, 0.3, 2.0])
    pages = np.array([100.0, 100.0, 100.0])
    x = np.array([10.0, 50.0, 100.0])
    f = x / pages
    expected = (f / lam) * (1 - np.exp(-lam / f))
    assert np.allclose(period_value("freshness", x, pages, lam) / pages, expected, rtol=1e-9)
    u = lam / f
    assert np.allclose(
        marginal_value("freshness", x, pages, lam), (1 - np.exp(-u) * (1 + u)) / lam, rtol=1e-7
    )
    h = 1e-4
    for objective in STEADY_OBJECTIVES:
        numeric = (
            period_value(objective, x + h, pages, lam) - period_value(objective, x - h, pages, lam)
        ) / (2 * h)
        sign = 1.0 if STEADY_OBJECTIVES[objective] else -1.0
        assert np.allclose(marginal_value(objective, x, pages, lam), sign * numeric, rtol=1e-5)


def _aged_web(lam: float, beta: float, interval: float) -> tuple[float, float]:
    """Fresh share and re-crawls per page and period of a web whose pages' ages are
    exponential with rate ``beta`` (a population growing at that rate), each page crawled at
    birth and every ``interval`` periods of its age: by quadrature over ages and by counting
    the pages that reach each multiple of the interval."""
    # Gauss-Legendre on each interval between two crawls (the integrand jumps at crawls).
    nodes, weights = np.polynomial.legendre.leggauss(40)
    starts = np.arange(0.0, 60.0 / beta, interval)
    ages = starts[:, None] + (nodes[None, :] + 1.0) * interval / 2.0
    fresh = np.exp(-lam * (ages - starts[:, None])) * beta * np.exp(-beta * ages)
    share = float(np.sum(fresh * weights[None, :]) * interval / 2.0)
    k = np.arange(1, int(60.0 / (beta * interval)) + 2)
    crawls = float(np.sum(beta * np.exp(-beta * k * interval)))
    return share, crawls


@pytest.mark.parametrize(
    ("lam", "beta", "interval"), [(0.01, 0.02, 60.0), (0.3, 0.014, 9.0), (2.0, 0.05, 1.5)]
)
def test_a_growing_web_is_valued_by_its_ages(lam: float, beta: float, interval: float) -> None:
    """The closed forms of "A growing web" (planner.model.steady_rates) against the web they
    describe: a bucket whose re-crawls per page are those of the aged web has the aged web's
    fresh share, and its revisit interval is the one the web was crawled at."""
    share, crawls = _aged_web(lam, beta, interval)
    pages = np.array([1000.0])
    x = crawls * pages
    lam_ = np.array([lam])
    value = period_value("freshness", x, pages, lam_, renewal=beta)
    assert value[0] / pages[0] == pytest.approx(share, rel=1e-5)
    assert revisit_interval(x, pages, beta)[0] == pytest.approx(interval, rel=1e-6)
    # Fewer re-crawls than 1 / interval: the pages crawled at birth are not due yet.
    assert crawls < 1.0 / interval


def test_a_growing_web_reduces_to_the_old_web_and_stays_concave() -> None:
    """beta -> 0 gives the known-rate values; dV/dx and dV/dN are the derivatives; the value
    per page is concave in the crawls per page (the model stays a convex program)."""
    lam = np.array([0.003, 0.05, 0.4, 3.0])
    pages = np.full(4, 200.0)
    x = np.array([2.0, 20.0, 60.0, 150.0])
    for fn in (period_value, marginal_value, page_value):
        old = fn("freshness", x, pages, lam)
        assert np.allclose(fn("freshness", x, pages, lam, renewal=1e-9), old, rtol=1e-6)
    assert np.allclose(revisit_interval(x, pages, 1e-12), pages / x, rtol=1e-9)
    beta = 0.02
    h = 1e-4

    def value(xx: np.ndarray, nn: np.ndarray) -> np.ndarray:
        return period_value("freshness", xx, nn, lam, renewal=beta)

    dx = (value(x + h, pages) - value(x - h, pages)) / (2 * h)
    dn = (value(x, pages + h) - value(x, pages - h)) / (2 * h)
    assert np.allclose(marginal_value("freshness", x, pages, lam, renewal=beta), dx, rtol=1e-5)
    assert np.allclose(page_value("freshness", x, pages, lam, renewal=beta), dn, rtol=1e-5)
    f = np.logspace(-4, 0, 400)
    for rate in lam:
        per_page = period_value(
            "freshness", f, np.ones_like(f), np.full_like(f, rate), renewal=beta
        )
        slopes = np.diff(per_page) / np.diff(f)
        assert np.all(slopes > 0)
        assert np.all(np.diff(slopes) <= 1e-9 * slopes[1:])  # slopes fall: concave


def test_a_growing_web_plans_shorter_intervals_for_the_same_budget() -> None:
    """With new pages found every period, the renewal the plan uses is those pages over the
    pages held; the plan's marginal values are equal across the buckets it crawls (its
    optimum), and it gives the fast buckets more than the plan for an old web would."""
    rates = np.array([0.002, 0.01, 0.05, 0.2])
    pages = np.full(4, 2500.0)
    instance = _instance(rates, pages, 160.0, nconst=200.0)
    beta = web_renewal(instance)
    assert beta == pytest.approx(160.0 / 10_000)  # as many as the capacity crawls
    assert web_renewal(_instance(rates, pages, 160.0, nconst=50.0)) == pytest.approx(0.005)
    assert web_renewal(_instance(rates, pages, 160.0)) == 0.0
    grown = solve_steady(instance, SteadySetup(renewal=0.005))
    old = solve_steady(instance, SteadySetup())
    assert grown.status.ok and old.status.ok
    x = grown.trajectory.x[:, 0]
    crawled = x > 1e-3
    marginal = grown.marginal[crawled, 0]
    assert np.allclose(marginal, marginal.mean(), rtol=1e-3)
    assert x[-2:].sum() > old.trajectory.x[-2:, 0].sum()


def test_renewal_is_checked() -> None:
    with pytest.raises(ValueError, match="renewal must be >= 0"):
        SteadySetup(renewal=-0.1)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    share=st.floats(0.02, 0.9),
    new=st.integers(0, 3000),
    vary=st.booleans(),
)
def test_plans_respect_capacity_pages_and_new_pages(
    seed: int, share: float, new: int, vary: bool
) -> None:
    """Any plan: crawl time within each period's capacity, at most a bucket's pages a period,
    no more new pages than known, and capacity spent while something is worth a crawl."""
    rng = np.random.default_rng(seed)
    B, T = 12, 6
    rates = np.exp(rng.uniform(np.log(1e-3), np.log(5.0), B))
    pages = rng.integers(1, 500, B).astype(float)
    base = float(pages.sum() * share)
    capacity = [base * (0.5 + rng.random()) if vary else base for _ in range(T)]
    p = rng.dirichlet(np.ones(B))
    inst = _instance(rates, pages, capacity, periods=T, n0=float(new), p=p, nconst=5.0)
    solution = solve_steady(inst, SteadySetup(lifetime=T))
    assert solution.status.ok, solution.message
    tr = solution.trajectory
    before, n_before = tr.before(inst)
    spent = tr.x.sum(axis=0) + tr.z
    assert np.all(spent <= np.asarray(capacity) * (1 + 1e-6) + 1e-6)
    assert np.all(tr.x <= before * (1 + 1e-6) + 1e-6)
    assert np.all(tr.z <= n_before * (1 + 1e-6) + 1e-6)
    room = (before.sum(axis=0) + n_before) - spent
    full = spent >= np.asarray(capacity) * (1 - 1e-4)
    assert np.all(full | (room < 1e-3 * np.asarray(capacity)))


def test_caps_bind_and_the_rest_goes_elsewhere() -> None:
    """A bucket capped by politeness gets at most its cap; the capacity goes to the others."""
    rates = np.array([0.05, 0.1, 0.2])
    pages = np.array([1000.0, 1000.0, 1000.0])
    free = solve_steady(_instance(rates, pages, 600.0, periods=3))
    cap = np.full((3, 3), np.inf)
    cap[1, :] = 50.0
    capped = solve_steady(_instance(rates, pages, 600.0, periods=3), SteadySetup(cap=cap))
    assert free.trajectory.x[1, 0] > 100.0
    assert np.all(capped.trajectory.x[1] <= 50.0 + 1e-6)
    assert np.allclose(capped.trajectory.x.sum(axis=0), 600.0, rtol=1e-6)


def test_new_pages_are_crawled_when_they_are_worth_it() -> None:
    """A pool of new pages takes crawls from slow buckets (a new page held is worth more than
    a re-crawl of a page that hardly changes); with no terminal credit fewer are crawled."""
    rates = np.array([0.001, 0.002])
    pages = np.array([1000.0, 1000.0])
    inst = _instance(rates, pages, 200.0, periods=7, n0=500.0, p=np.array([0.5, 0.5]))
    with_credit = solve_steady(inst, SteadySetup(lifetime=7))
    without = solve_steady(inst, SteadySetup(lifetime=0))
    assert with_credit.trajectory.z.sum() == pytest.approx(500.0, rel=1e-4)
    assert without.trajectory.z.sum() <= with_credit.trajectory.z.sum() + 1e-6
    assert with_credit.trajectory.z[0] > 100.0


def test_importance_weights_shift_crawls() -> None:
    rates = np.array([0.1, 0.1])
    pages = np.array([500.0, 500.0])
    inst = _instance(rates, pages, 100.0, periods=2)
    even = solve_steady(inst, SteadySetup(objective="obsolescence"))
    weighted = solve_steady(
        inst, SteadySetup(objective="obsolescence", importance=np.array([4.0, 1.0]))
    )
    assert even.trajectory.x[0, 0] == pytest.approx(50.0, rel=1e-4)
    # Xyleme's sqrt rule: crawls proportional to sqrt(w lambda): 2:1
    assert weighted.trajectory.x[0, 0] == pytest.approx(200.0 / 3.0, rel=1e-4)


def test_bad_setup_is_refused() -> None:
    with pytest.raises(ValueError, match="objective must be one of"):
        SteadySetup(objective="age")
    with pytest.raises(ValueError, match="lifetime"):
        SteadySetup(lifetime=-1)


def test_plan_cycle_uses_the_steady_model_and_publishes_values() -> None:
    """The default cycle settings plan with the steady-rate model; the cycle carries the
    marginal values per class, highest for the buckets the plan crawls hardest at the margin."""
    pages = np.array([0, 400, 400, 400], dtype=np.int64)
    rate = np.array([np.nan, 0.01, 0.1, 5.0])
    fraction = np.where(np.isnan(rate), np.nan, 1 - np.exp(-np.nan_to_num(rate)))
    aggregates = BucketAggregates(
        pages=pages,
        mean_rate=rate,
        change_fraction=fraction,
        obsolete=np.array([np.nan, 10.0, 100.0, 390.0]),
        period=1.0,
    )
    outcome = plan_cycle(
        aggregates, CycleSettings(capacity=120.0, periods=4, explore=0), CrawlMeasures(0)
    )
    assert outcome.solver.weights == "steady freshness"
    cycle = outcome.cycle
    assert cycle is not None
    assert len(cycle.marginal) == 4 and len(cycle.new_marginal) == 4
    assert set(cycle.marginal[0]) == {1, 2, 3}
    assert sum(cycle.quotas[0].values()) + cycle.new_pages[0] == 120
    # the fastest bucket (5 changes a period) is starved by the freshness optimum
    assert cycle.quotas[0][3] == 0
    assert cycle.quotas[0][2] > cycle.quotas[0][1]


# -- uncertain rates (issue 25): freshness in expectation over a Gamma belief -----------------


def test_expected_freshness_matches_monte_carlo() -> None:
    """E[V] over lambda ~ Gamma(alpha, alpha / mean) equals the average of V over draws, and
    its derivatives are the differences of E[V] (shapes below, at and above 1)."""
    rng = np.random.default_rng(5)
    x = np.array([10.0, 40.0, 5.0, 30.0])
    pages = np.array([100.0, 100.0, 100.0, 50.0])
    mean = np.array([0.05, 0.3, 0.02, 1.0])
    shape = np.array([0.5, 1.0, 3.0, 20.0])
    expected = period_value("freshness", x, pages, mean, shape)
    draws = rng.gamma(shape[:, None], (mean / shape)[:, None], size=(4, 400_000))
    sampled = period_value("freshness", x[:, None], pages[:, None], draws).mean(axis=1)
    assert np.allclose(expected, sampled, rtol=5e-3)
    h = 1e-4
    for derivative, step in ((marginal_value, (h, 0.0)), (page_value, (0.0, h))):
        up = period_value("freshness", x + step[0], pages + step[1], mean, shape)
        down = period_value("freshness", x - step[0], pages - step[1], mean, shape)
        assert np.allclose(derivative("freshness", x, pages, mean, shape), (up - down) / (2 * h))
    known = period_value("freshness", x, pages, mean, np.full(4, np.inf))
    assert np.allclose(known, period_value("freshness", x, pages, mean), rtol=1e-5)


def test_uncertain_rates_plan_on_the_expectation() -> None:
    """The model with Gamma beliefs reaches the plan that maximizes expected freshness: the
    page-level optimum over the belief, found here by brute force for two buckets; with
    huge shapes it is the known-rate plan."""
    rates = np.array([0.02, 0.5])
    pages = np.array([500.0, 500.0])
    inst = _instance(rates, pages, 100.0, periods=1)
    shape = np.array([0.7, 0.7])
    uncertain = solve_steady(inst, SteadySetup(rate_shape=shape))
    assert uncertain.status.ok, uncertain.message
    grid = np.linspace(0.0, 100.0, 20_001)
    value = period_value(
        "freshness",
        np.stack([grid, 100.0 - grid]),
        pages[:, None],
        rates[:, None],
        shape[:, None],
    ).sum(axis=0)
    best = grid[int(np.argmax(value))]
    assert uncertain.trajectory.x[0, 0] == pytest.approx(best, abs=0.02)
    known = solve_steady(inst, SteadySetup(rate_shape=np.full(2, np.inf)))
    plain = solve_steady(inst)
    assert np.allclose(known.trajectory.x, plain.trajectory.x, rtol=1e-4, atol=1e-3)
    # A fast bucket (3 changes a period) on a belief that spread: some of its pages may be
    # slow, so it gets far more crawls than a known 3 would (43/57 against 83/17).
    fast = _instance(np.array([0.02, 3.0]), pages, 100.0, periods=1)
    spread = solve_steady(fast, SteadySetup(rate_shape=np.array([0.5, 0.5])))
    sure = solve_steady(fast)
    assert spread.trajectory.x[1, 0] > 2.5 * sure.trajectory.x[1, 0]


# -- politeness-bound hosts: host caps (issue 24) -------------------------------------------


def test_host_caps_bind_and_the_rest_goes_elsewhere() -> None:
    """A host group's crawls are at most its cap in every period, spent on its rows by their
    rates; the capacity the host cannot take goes to the other rows."""
    rates = np.array([0.05, 0.1, 0.2, 0.05, 0.1, 0.2])
    pages = np.full(6, 1000.0)
    inst = _instance(rates, pages, 900.0, periods=3)
    free = solve_steady(inst)
    cap = np.array([60.0, 30.0, np.inf])  # the last period: no cap
    host = (np.array([3, 4, 5]), cap)
    capped = solve_steady(inst, SteadySetup(host_caps=[host]))
    assert capped.status.ok, capped.message
    x, x_free = capped.trajectory.x, free.trajectory.x
    assert x_free[3:, 0].sum() > 200.0  # the cap binds
    assert np.all(x[3:, :2].sum(axis=0) <= cap[:2] * (1 + 1e-6) + 1e-6)
    assert np.allclose(x.sum(axis=0), 900.0, rtol=1e-6)  # capacity spent
    assert np.all(x[:3, :2] > x_free[:3, :2] + 10.0)  # the rest went to the unbound rows
    assert np.allclose(x[:, 2], x_free[:, 2], rtol=1e-4)  # uncapped period: the free plan
    # inside the host, the freshness optimum at its low rate: the slower rows first
    assert x[3, 1] > x[4, 1] > x[5, 1]


def test_split_rows_plan_like_their_bucket_when_caps_do_not_bind() -> None:
    """Buckets split into (bucket, bound host) rows of the same rate get the unsplit
    bucket's crawls per page when no cap binds; through plan_cycle, a host's classes get
    their planned crawls over the cycle to within one crawl each (rounded as a whole, not
    class by class), and never more than its cap a period."""
    rng = np.random.default_rng(7)
    rates = np.logspace(-2.5, 0.5, 8)
    pages = rng.integers(100, 600, rates.size).astype(float)
    share = rng.uniform(0.1, 0.5, rates.size)  # of each bucket's pages on the bound host
    split_pages = np.concatenate([pages * (1 - share), pages * share])
    split_rates = np.concatenate([rates, rates])
    capacity = float(pages.sum() / 6.0)
    whole = solve_steady(_instance(rates, pages, capacity, periods=4))
    rows = np.arange(rates.size, 2 * rates.size)
    loose = SteadySetup(host_caps=[(rows, np.full(4, capacity))])
    split = solve_steady(_instance(split_rates, split_pages, capacity, periods=4), loose)
    assert split.status.ok and whole.status.ok
    per_page = split.trajectory.x / split_pages[:, None]
    expected = (
        np.vstack([whole.trajectory.x, whole.trajectory.x])
        / np.concatenate([pages, pages])[:, None]
    )
    assert np.allclose(per_page, expected, rtol=1e-4, atol=1e-7)

    # plan_cycle: classes 1..8, the bound host's share as classes 257..264
    keys = np.concatenate([np.arange(1, 9), host_class(np.arange(1, 9), 0)])
    size = HOST_CLASS_STRIDE * 2
    counts = np.zeros(size, dtype=np.int64)
    counts[keys] = np.rint(split_pages).astype(np.int64)
    rate = np.full(size, np.nan)
    rate[keys] = split_rates
    aggregates = BucketAggregates(
        pages=counts,
        mean_rate=rate,
        change_fraction=-np.expm1(-rate),
        obsolete=np.where(np.isnan(rate), np.nan, 0.0),
        period=1.0,
    )
    settings = CycleSettings(capacity=capacity, periods=4, explore=0)
    group = np.arange(size) // HOST_CLASS_STRIDE - 1
    for cap, binds in ((capacity, False), (20.0, True)):
        hosts = HostCaps(group=group, cap=[cap])
        outcome = plan_cycle(aggregates, settings, CrawlMeasures(0, host_caps=hosts))
        plain = plan_cycle(aggregates, settings, CrawlMeasures(0))
        assert outcome.cycle is not None and plain.cycle is not None
        for t in range(4):
            quotas = outcome.cycle.quotas[t]
            host_sum = sum(q for k, q in quotas.items() if k >= HOST_CLASS_STRIDE)
            assert sum(quotas.values()) + outcome.cycle.new_pages[t] == int(capacity)
            assert {base_class(k) for k in quotas} == set(range(1, 9))
            if binds:
                assert host_sum == 20
                assert sum(q for k, q in plain.cycle.quotas[t].items() if k >= 256) > 40
        if not binds:  # the plan's crawls of each of the host's classes over the cycle
            for k in host_class(np.arange(1, 9), 0).tolist():
                planned = sum(plain.cycle.fractions[t][k] * counts[k] for t in range(4))
                given = sum(outcome.cycle.quotas[t][k] for t in range(4))
                assert abs(given - planned) <= 1.0


def test_host_caps_are_checked() -> None:
    with pytest.raises(ValueError, match="host_caps\\[0\\]: caps must be >= 0"):
        SteadySetup(host_caps=[(np.array([0]), np.array([-1.0]))])
    with pytest.raises(ValueError, match="a bucket row is given twice"):
        SteadySetup(host_caps=[(np.array([0, 0]), np.array([1.0]))])
    inst = _instance(np.array([0.1]), np.array([10.0]), 5.0, periods=2)
    with pytest.raises(ValueError, match=r"rows must lie in 0\.\.0"):
        solve_steady(inst, SteadySetup(host_caps=[(np.array([1]), np.array([1.0]))]))


def test_simulated_planner_plans_bound_hosts_within_their_caps() -> None:
    """With politeness-bound hosts the planner's quotas give each bound host at most its
    cap, the simulator defers (almost) no crawl, and the bound hosts' caps are used."""
    spec = WorldSpec(pages=3_000, hosts=30, polite_hosts=2, polite_cap=12)
    world = build_world(spec, 2, 28)
    budget = 3_000 // 7
    policy = WebFountainPolicy("planner", RateKnowledge("true"), cycle=7)
    settings = SimulationSettings(periods=14, warmup=14, budget=budget, oracle=True, seed=2)
    result = simulate(world, policy, settings)
    assert result.metrics["deferred"].sum() <= 2
    assert policy.last_inputs is not None and policy.last_plan is not None
    _, measures = policy.last_inputs
    assert measures.host_caps is not None
    cycle = policy.last_plan.cycle
    assert cycle is not None
    for quotas in cycle.quotas:
        for g in range(2):
            host = [q for k, q in quotas.items() if k // HOST_CLASS_STRIDE == g + 1]
            assert host and sum(host) <= 12
    bound = np.isfinite(world.host_cap)[world.host]
    measured = result.metrics["period"] >= 0
    crawls_bound = result.crawls[bound].sum() / measured.sum()
    assert crawls_bound == pytest.approx(24.0, abs=1.0)  # both caps used
