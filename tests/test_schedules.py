"""Page-level refresh schedules against closed forms, the KKT conditions and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedules import multipliers
from planner.schedules.objectives import (
    OBJECTIVES,
    freshness_gain,
    inverse_gain,
    objective_named,
)
from planner.schedules.optimal import (
    Schedule,
    ScheduleError,
    XylemeSum,
    binary_closed_form,
    refresh_schedule,
    xyleme_intervals,
)

KKT_RTOL = 1e-9


def _instance(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.exp(rng.normal(-1.5, 1.5, n)), rng.lognormal(0.0, 1.0, n)


def _assert_kkt(
    s: Schedule,
    lam: np.ndarray,
    importance: np.ndarray,
    *,
    host: np.ndarray | None = None,
    lo: np.ndarray | None = None,
    hi: np.ndarray | None = None,
) -> None:
    """Stationarity, bounds, host capacities and complementary slackness, to 1e-9 relative."""
    goal = objective_named(s.objective)
    w = importance / importance.mean()
    f = s.refresh_rate
    lo = np.zeros_like(f) if lo is None else lo
    hi = np.full_like(f, np.inf) if hi is None else hi
    assert np.all(f >= lo * (1 - 1e-12)) and np.all(f <= hi * (1 + 1e-12))
    m = np.full_like(f, s.multiplier)
    if host is not None:
        m = m + np.where(host >= 0, s.host_multiplier[np.maximum(host, 0)], 0.0)
        assert np.all(s.host_load <= s.host_capacity * (1 + 1e-12))
        binding = s.host_multiplier > 0
        np.testing.assert_allclose(s.host_load[binding], s.host_capacity[binding], rtol=KKT_RTOL)
    active = (lam > 0) & (w > 0)
    marginal = goal.marginal(f, lam, w)
    inside = active & (f > lo * (1 + 1e-12)) & (f < hi * (1 - 1e-12)) & np.isfinite(m)
    np.testing.assert_allclose(marginal[inside], m[inside], rtol=KKT_RTOL)
    at_low = active & ~inside & (f <= lo * (1 + 1e-12))
    assert np.all(marginal[at_low] <= m[at_low] * (1 + KKT_RTOL))
    at_high = active & ~inside & (f >= hi * (1 - 1e-12))
    assert np.all(marginal[at_high] >= m[at_high] * (1 - KKT_RTOL))
    assert s.spent + s.unspent == pytest.approx(s.bandwidth - s.discovery, rel=1e-12)


# -- closed forms ---------------------------------------------------------------------------


def test_xyleme_two_pages_by_hand() -> None:
    # sqrt(lambda) = (1, 2), S = 3, G = 3: f = G sqrt(lambda) / S = (1, 2); obsolescence
    # 1 / 2 + 4 / 4 = 1.5 = S^2 / (2 G)
    s = refresh_schedule(np.array([1.0, 4.0]), 3.0)
    np.testing.assert_allclose(s.refresh_rate, [1.0, 2.0], rtol=1e-15)
    np.testing.assert_allclose(s.interval, [1.0, 0.5], rtol=1e-15)
    assert s.value == pytest.approx(1.5, rel=1e-15)
    assert s.multiplier == pytest.approx(0.5, rel=1e-15)  # lambda / (2 f^2)


def test_xyleme_interval_formula_and_average_obsolescence() -> None:
    lam, r = _instance(5_000, 1)
    G = 800.0
    s = refresh_schedule(lam, G, importance=r)
    np.testing.assert_allclose(s.interval, xyleme_intervals(lam, r, G), rtol=1e-12)
    centred = r / r.mean()
    K = np.sqrt(centred * lam).sum() / G
    np.testing.assert_allclose(s.interval * np.sqrt(centred * lam), K, rtol=1e-12)
    plain = refresh_schedule(lam, G)
    assert plain.value == pytest.approx(np.sqrt(lam).sum() ** 2 / (2 * G), rel=1e-12)


def test_binary_matches_azar_closed_form() -> None:
    lam, w = _instance(3_000, 2)
    for G in (50.0, 400.0, 3_000.0):
        s = refresh_schedule(lam, G, objective="binary", importance=w)
        f, mu = binary_closed_form(lam, w, G)
        np.testing.assert_allclose(s.refresh_rate, f, rtol=1e-10, atol=1e-12)
        assert s.multiplier == pytest.approx(mu, rel=1e-10)


def test_harmonic_closed_form_rate() -> None:
    lam, w = _instance(2_000, 3)
    s = refresh_schedule(lam, 500.0, objective="harmonic", importance=w)
    wc = w / w.mean()
    expected = (-lam + np.sqrt(lam**2 + 4 * wc * lam / s.multiplier)) / 2
    np.testing.assert_allclose(s.refresh_rate, expected, rtol=1e-9)
    assert np.all(s.refresh_rate > 0)  # harmonic staleness never starves a page


def test_inverse_gain_round_trips_over_the_whole_range() -> None:
    rng = np.random.default_rng(4)
    c = np.concatenate(
        [
            rng.uniform(0, 1, 10_000),
            10 ** rng.uniform(-250, -1, 10_000),
            1 - 10 ** rng.uniform(-15, -1, 10_000),
        ]
    )
    c = c[(c > 0) & (c < 1)]
    x = inverse_gain(c)
    np.testing.assert_allclose(freshness_gain(x), c, rtol=1e-11)


def test_freshness_formula_of_periodic_refresh() -> None:
    # F = (1 - exp(-lambda / f)) f / lambda; one page at f = lambda keeps 1 - 1/e of the time
    s = refresh_schedule(np.array([2.0]), 2.0, objective="freshness")
    assert s.refresh_rate[0] == pytest.approx(2.0)
    assert s.value == pytest.approx(1 - math.exp(-1), rel=1e-14)


# -- KKT conditions ------------------------------------------------------------------------


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_budget_spent_and_kkt(objective: str) -> None:
    lam, w = _instance(4_000, 5)
    s = refresh_schedule(lam, 900.0, objective=objective, importance=w)
    assert s.spent == pytest.approx(900.0, rel=1e-12)
    assert s.unspent == pytest.approx(0.0, abs=1e-9)
    _assert_kkt(s, lam, w)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_kkt_with_hosts_bounds_and_discovery(objective: str) -> None:
    rng = np.random.default_rng(6)
    n, hosts = 3_000, 40
    lam, w = _instance(n, 6)
    host = rng.integers(-1, hosts, n)
    capacity = rng.uniform(5.0, 40.0, hosts)
    capacity[7] = np.inf
    longest = np.where(rng.random(n) < 0.2, 50.0, np.nan)
    shortest = np.where(rng.random(n) < 0.2, 2.0, np.nan)
    s = refresh_schedule(
        lam,
        1_000.0,
        objective=objective,
        importance=w,
        host=host,
        host_capacity=capacity,
        min_interval=shortest,
        max_interval=longest,
        discovery_share=0.1,
    )
    assert s.discovery == pytest.approx(100.0)
    assert s.spent == pytest.approx(900.0, rel=1e-12)
    assert len(s.binding_hosts) > 0
    assert 7 not in s.binding_hosts
    lo = np.nan_to_num(1 / longest, nan=0.0)
    hi = np.nan_to_num(1 / shortest, nan=np.inf)
    _assert_kkt(s, lam, w, host=host, lo=lo, hi=hi)


def _many_hosts(n: int, hosts: int, seed: int) -> dict[str, np.ndarray]:
    """Pages on hosts of log-normal sizes (some on none), capacities around their Xyleme load:
    half or twice it, as in the benchmark, so that a share of the hosts binds."""
    rng = np.random.default_rng(seed)
    lam = 10.0 ** rng.normal(-1.0, 1.0, n)
    w = np.exp(rng.normal(0.0, 1.0, n))
    size = np.exp(rng.normal(0.0, 1.5, hosts))
    host = np.minimum(np.searchsorted(np.cumsum(size / size.sum()), rng.random(n)), hosts - 1)
    host[rng.random(n) < 0.05] = -1
    xyleme = 1.0 / xyleme_intervals(lam, w, 0.1 * n)
    load = np.bincount(host[host >= 0], weights=xyleme[host >= 0], minlength=hosts)
    capacity = np.where(rng.random(hosts) < 0.2, 0.5, 2.0) * load
    return {"lam": lam, "w": w, "host": host, "capacity": capacity}


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_kkt_with_many_hosts_in_small_chunks(
    objective: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # small chunks: the capped total, the samples that start the searches and the host solves
    # all run over many chunks (on threads), as on millions of pages; the schedule does not
    # depend on the chunking
    p = _many_hosts(20_000, 400, 11)

    def solve() -> Schedule:
        return refresh_schedule(
            p["lam"],
            2_000.0,
            objective=objective,
            importance=p["w"],
            host=p["host"],
            host_capacity=p["capacity"],
        )

    whole = solve()
    monkeypatch.setattr(multipliers, "_CHUNK", 256)
    monkeypatch.setattr(multipliers, "_SAMPLE", 1024)
    s = solve()
    assert s.spent == pytest.approx(2_000.0, rel=1e-12)
    assert 40 < len(s.binding_hosts) < 400
    _assert_kkt(s, p["lam"], p["w"], host=p["host"])
    assert s.multiplier == pytest.approx(whole.multiplier, rel=1e-12)
    np.testing.assert_array_equal(s.binding_hosts, whole.binding_hosts)
    np.testing.assert_allclose(s.refresh_rate, whole.refresh_rate, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_capacities_beyond_the_bandwidth_then_below_it(objective: str) -> None:
    # generous capacities: few hosts bind; scarce ones: most do, and what they leave unspent
    # is reported (every page is on a host here)
    p = _many_hosts(5_000, 100, 12)
    host = np.where(p["host"] >= 0, p["host"], 0)
    for scale, bandwidth in ((4.0, 500.0), (0.05, 500.0)):
        s = refresh_schedule(
            p["lam"],
            bandwidth,
            objective=objective,
            importance=p["w"],
            host=host,
            host_capacity=scale * p["capacity"],
        )
        _assert_kkt(s, p["lam"], p["w"], host=host)
        if scale < 1:
            assert s.multiplier == 0.0
            assert s.unspent > 0
            np.testing.assert_allclose(s.host_load, scale * p["capacity"], rtol=1e-9)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_hosts_that_never_bind_leave_the_schedule_alone(objective: str) -> None:
    lam, w = _instance(3_000, 13)
    host = np.arange(3_000) % 30
    free = refresh_schedule(lam, 500.0, objective=objective, importance=w)
    s = refresh_schedule(
        lam, 500.0, objective=objective, importance=w, host=host, host_capacity=np.full(30, 1e4)
    )
    assert len(s.binding_hosts) == 0
    assert s.multiplier == pytest.approx(free.multiplier, rel=1e-12)
    np.testing.assert_allclose(s.refresh_rate, free.refresh_rate, rtol=1e-12)
    _assert_kkt(s, lam, w, host=host)


def test_freshness_starves_fast_pages_beyond_the_multiplier() -> None:
    lam = np.array([0.1, 0.5, 1.0, 5.0, 50.0])
    s = refresh_schedule(lam, 2.0, objective="freshness")
    starved = s.refresh_rate == 0
    np.testing.assert_array_equal(starved, 1 / lam <= s.multiplier)
    assert starved[-1] and not starved[0]  # the fastest page goes first


def test_freshness_budget_inside_a_starvation_jump_is_spent_exactly() -> None:
    # Pages 1-2 take about 14 crawls at mu = 0.01, where page 3 (w / lambda = 0.01) starts;
    # 15 crawls put page 3 at about one crawl per period, between two neighbouring floats of mu.
    lam = np.array([1.0, 1.0, 100.0])
    s = refresh_schedule(lam, 15.0, objective="freshness")
    assert s.spent == pytest.approx(15.0, rel=1e-12)
    assert s.multiplier == pytest.approx(0.01, rel=1e-12)
    assert 0 < s.refresh_rate[2] < 100.0 / 30


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_optimum_beats_uniform_and_proportional(objective: str) -> None:
    lam, w = _instance(2_000, 7)
    G = 700.0
    goal = objective_named(objective)
    wc = w / w.mean()
    best = refresh_schedule(lam, G, objective=objective, importance=w).value
    uniform = goal.value(np.full_like(lam, G / lam.size), lam, wc)
    proportional = goal.value(G * lam / lam.sum(), lam, wc)
    if goal.maximize:
        assert best >= uniform >= proportional  # Cho & Garcia-Molina: uniform beats proportional
    else:
        assert best <= min(uniform, proportional)


# -- hosts that cannot be served -------------------------------------------------------------


def test_overcommitted_host_is_scaled_to_its_capacity_and_reported() -> None:
    lam = np.ones(6)
    host = np.array([0, 0, 0, 1, 1, 1])
    s = refresh_schedule(lam, 4.0, host=host, host_capacity=np.array([0.3, 10.0]), max_interval=2.0)
    np.testing.assert_array_equal(s.overcommitted_hosts, [0])
    assert s.host_load[0] == pytest.approx(0.3)
    assert 0 in s.binding_hosts
    assert s.spent == pytest.approx(4.0)


def test_bandwidth_beyond_host_capacities_is_left_unspent() -> None:
    lam = np.ones(4)
    s = refresh_schedule(lam, 10.0, host=np.array([0, 0, 1, 1]), host_capacity=np.array([1.0, 2.0]))
    assert s.spent == pytest.approx(3.0)
    assert s.unspent == pytest.approx(7.0)
    np.testing.assert_array_equal(s.binding_hosts, [0, 1])
    assert s.multiplier == 0.0


def test_pages_that_never_change_get_only_their_lower_bound() -> None:
    s = refresh_schedule(
        np.array([0.0, 1.0, 0.0]), 2.0, max_interval=np.array([4.0, np.nan, np.nan])
    )
    np.testing.assert_allclose(s.refresh_rate, [0.25, 1.75, 0.0])


# -- properties ------------------------------------------------------------------------------

rates = st.lists(st.floats(1e-4, 1e3), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(rates, st.floats(0.1, 500.0), st.sampled_from(OBJECTIVES))
def test_rates_are_nonnegative_and_spend_the_budget(
    lam: list[float], G: float, objective: str
) -> None:
    s = refresh_schedule(np.array(lam), G, objective=objective)
    assert np.all(s.refresh_rate >= 0)
    assert s.spent == pytest.approx(G, rel=1e-11)


@settings(max_examples=60, deadline=None)
@given(rates, st.floats(0.1, 300.0), st.floats(1.01, 4.0), st.sampled_from(OBJECTIVES))
def test_every_page_gains_when_the_bandwidth_grows(
    lam: list[float], G: float, factor: float, objective: str
) -> None:
    arr = np.array(lam)
    small = refresh_schedule(arr, G, objective=objective).refresh_rate
    large = refresh_schedule(arr, G * factor, objective=objective).refresh_rate
    assert np.all(large >= small * (1 - 1e-9))


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-3, 1e3), st.integers(1, 50), st.floats(0.1, 1e3), st.sampled_from(OBJECTIVES))
def test_alike_pages_get_the_uniform_schedule(lam: float, n: int, G: float, objective: str) -> None:
    s = refresh_schedule(np.full(n, lam), G, objective=objective)
    np.testing.assert_allclose(s.refresh_rate, G / n, rtol=1e-9)


# -- the incremental Xyleme sum ----------------------------------------------------------------


def test_xyleme_sum_follows_updates() -> None:
    rng = np.random.default_rng(8)
    lam, r = _instance(1_000, 8)
    running = XylemeSum(lam, r)
    for _ in range(2_000):
        k = rng.integers(0, lam.size, 3)
        k = np.unique(k)
        new_lam, new_r = (
            lam[k] * rng.lognormal(0, 0.3, k.size),
            r[k] * rng.lognormal(0, 0.3, k.size),
        )
        running.update(lam[k], r[k], new_lam, new_r)
        lam[k], r[k] = new_lam, new_r
    added_lam, added_r = np.array([0.7, 2.0]), np.array([1.5, 0.2])
    running.update(np.zeros(0), np.zeros(0), added_lam, added_r)
    lam, r = np.concatenate([lam, added_lam]), np.concatenate([r, added_r])
    exact = np.sqrt(r / r.mean() * lam).sum()
    assert running.total == pytest.approx(exact, rel=1e-9)
    np.testing.assert_allclose(
        running.interval(lam, r, 50.0), xyleme_intervals(lam, r, 50.0), rtol=1e-9
    )


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"rate": [1.0, -0.5]}, "rate value(s) are not >= 0 and finite (first at row 1"),
        ({"rate": [1.0, float("nan")]}, "rate value(s)"),
        ({"rate": [float("inf")]}, "rate value(s)"),
        ({"bandwidth": 0.0}, "bandwidth must be a finite number > 0"),
        ({"bandwidth": -3.0}, "bandwidth must be a finite number > 0"),
        ({"bandwidth": float("nan")}, "bandwidth must be a finite number > 0"),
        ({"importance": [1.0, -1.0]}, "importance value(s)"),
        ({"importance": [1.0, 2.0, 3.0]}, "importance must hold one value per page"),
        ({"objective": "fresh"}, "unknown refresh objective 'fresh'"),
        ({"min_interval": [5.0, 1.0], "max_interval": [2.0, 3.0]}, "min_interval > max_interval"),
        ({"max_interval": [0.0, 1.0]}, "max_interval must be > 0"),
        ({"host": np.array([0, 3]), "host_capacity": np.array([1.0])}, "host index out of range"),
        ({"host": np.array([0, 0]), "host_capacity": np.array([-1.0])}, "host capacity value(s)"),
        ({"discovery_share": 1.0}, "discovery share must be in [0, 1)"),
        ({"bandwidth": 1.0, "max_interval": 0.5}, "below the 4 that the pages' max intervals"),
    ],
)
def test_bad_input_is_named(kwargs: dict[str, object], words: str) -> None:
    args: dict[str, object] = {"rate": [1.0, 2.0], "bandwidth": 10.0}
    args.update(kwargs)
    rate = np.asarray(args.pop("rate"), dtype=float)
    bandwidth = args.pop("bandwidth")
    with pytest.raises(ScheduleError) as caught:
        refresh_schedule(rate, bandwidth, **args)  # type: ignore[arg-type]
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)
