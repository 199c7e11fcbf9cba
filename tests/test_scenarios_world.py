"""Synthetic worlds: seeded, the change process as specified, births, deaths, rhythms."""

from __future__ import annotations

import numpy as np
import pytest

from scenarios.world import WorldSpec, build_world


def test_same_seed_same_world_and_changes() -> None:
    spec = WorldSpec(pages=2000, hosts=20, birth_rate=0.01, death_rate=0.01)
    a, b = build_world(spec, 3, 10), build_world(spec, 3, 10)
    for name in ("host", "section", "rate", "importance", "born", "dies", "slot"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    ca, cb = a.period_changes(4, seed=9), b.period_changes(4, seed=9)
    np.testing.assert_array_equal(ca.count_a, cb.count_a)
    np.testing.assert_array_equal(ca.first_b, cb.first_b)
    other = build_world(spec, 4, 10)
    assert not np.array_equal(a.rate, other.rate)


def test_poisson_counts_and_change_times() -> None:
    spec = WorldSpec(pages=100_000, hosts=10, rate_model="constant", rate=0.4)
    world = build_world(spec, 1, 1)
    ch = world.period_changes(0, seed=2)
    total = ch.count_a + ch.count_b
    assert total.mean() == pytest.approx(0.4, rel=0.02)
    assert total.var() == pytest.approx(0.4, rel=0.05)  # Poisson: variance = mean
    has = ch.count_a > 0
    # the first change of segment A lies inside [0, slot) and before the last one
    assert np.all(ch.first_a[has] < world.slot[has])
    assert np.all(ch.first_a[has] <= ch.last_a[has])
    assert np.all(np.isnan(ch.first_a[~has]))
    # P(no change before the slot) = exp(-rate * slot)
    assert (~has).mean() == pytest.approx(np.exp(-0.4 * world.slot).mean(), abs=0.005)


def test_rates_spread_over_orders_of_magnitude_and_importance_is_centered() -> None:
    world = build_world(WorldSpec(pages=20_000, hosts=100), 1, 1)
    assert world.rate.max() / world.rate.min() > 1e4
    assert world.importance.mean() == pytest.approx(1.0)
    wf = WorldSpec(pages=20_000, rate_model="webfountain", section_sigma=0.0)
    lifetimes = build_world(wf, 1, 1)
    days = 1.0 / lifetimes.rate  # period_days = 1: mean lifetime in days
    assert days.min() >= 1.0 - 1e-9 and days.max() <= 600.0 + 1e-9
    assert np.mean(days <= 10.0) == pytest.approx(0.12, abs=0.01)  # WebFountain Table 2
    halved = build_world(WorldSpec(**{**wf.__dict__, "webfountain_version": 3}), 1, 1)
    np.testing.assert_allclose(halved.rate, lifetimes.rate / 2)


def test_loguniform_rates_fill_their_range_evenly_in_log() -> None:
    spec = WorldSpec(
        pages=40_000, rate_model="loguniform", rate_low=0.005, rate_high=1.0, section_sigma=0.0
    )
    log_rate = np.log(build_world(spec, 1, 1).rate)
    low, high = np.log(0.005), np.log(1.0)
    assert log_rate.min() >= low and log_rate.max() <= high
    # uniform in log: each fifth of the log range holds a fifth of the pages
    counts = np.histogram(log_rate, bins=5, range=(low, high))[0] / log_rate.size
    np.testing.assert_allclose(counts, 0.2, atol=0.01)
    assert log_rate.std() == pytest.approx((high - low) / np.sqrt(12), rel=0.02)
    half_day = build_world(WorldSpec(**{**spec.__dict__, "period_days": 0.5}), 1, 1)
    np.testing.assert_allclose(half_day.rate, np.exp(log_rate) / 2)


def test_sections_share_a_rate_factor() -> None:
    spec = WorldSpec(
        pages=20_000, hosts=50, rate_model="lognormal", fast_sigma=0.5, section_sigma=1.0
    )
    world = build_world(spec, 2, 1)
    log_rate = np.log(world.rate)
    means = np.bincount(world.section, weights=log_rate) / np.bincount(world.section)
    # between-section spread carries the shared factor (sigma 1) on top of the page's (0.5)
    assert means.std() > 0.8


def test_births_and_deaths() -> None:
    spec = WorldSpec(pages=10_000, hosts=10, birth_rate=0.01, death_rate=0.05)
    world = build_world(spec, 1, 20)
    assert np.count_nonzero(world.born == 5) == 100
    assert world.n_pages == 10_000 + 20 * 100
    alive0 = world.alive(0).sum()
    alive10 = np.count_nonzero(world.alive(10) & (world.born == 0))
    assert alive10 / alive0 == pytest.approx(0.95**10, rel=0.05)
    ch = world.period_changes(10, seed=1)
    dead = ~world.alive(10)
    assert ch.count_a[dead].sum() == 0 and ch.count_b[dead].sum() == 0


def test_weekday_rhythm_keeps_the_weekly_mean() -> None:
    spec = WorldSpec(pages=1000, hosts=10, weekday_rhythm=0.8)
    world = build_world(spec, 1, 7)
    rng = np.random.default_rng(0)
    week = np.array([world.multiplier(t, rng) for t in range(7)])
    assert week.mean(axis=0) == pytest.approx(np.ones(1000))
    rhythmic = world.section_weekend[world.section]
    assert np.all(week[5, rhythmic] == pytest.approx(week[0, rhythmic] * 0.2))


def test_working_hours_shape() -> None:
    x, m = build_world(WorldSpec(pages=10, hosts=1), 1, 1).day_shape()
    np.testing.assert_allclose(m, x)  # no rhythm: uniform in the day
    x, m = build_world(WorldSpec(pages=10, hosts=1, working_hours=0.6), 1, 1).day_shape()
    inside = m[2] - m[1]
    assert inside == pytest.approx(8 / 24 + 0.6 * 16 / 24)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"pages": 0}, "pages"),
        ({"hosts": 0}, "hosts"),
        ({"rate_model": "zipf"}, "rate_model"),
        ({"rate_low": 2.0, "rate_high": 1.0}, "rate_low"),
        ({"weekday_rhythm": 0.5, "period_days": 2.0}, "weekday_rhythm"),
        ({"death_rate": 1.0}, "death_rate"),
        ({"last_modified": {"liar": 1.0}}, "last_modified"),
    ],
)
def test_impossible_specs_name_the_key(changes: dict[str, object], key: str) -> None:
    spec = WorldSpec(**changes)  # type: ignore[arg-type]
    assert spec.problems()[0][0] == key
    with pytest.raises(ValueError, match=key):
        build_world(spec, 0, 1)


def test_link_graph_importance_is_its_pagerank() -> None:
    from estimators.pagerank import pagerank

    spec = WorldSpec(pages=3_000, hosts=30, links_per_page=6.0, host_link_share=0.7)
    world = build_world(spec, 1, 1)
    assert world.links is not None
    rank = pagerank(world.links).scores
    np.testing.assert_allclose(world.importance, rank / rank.mean())
    src = np.repeat(np.arange(world.n_pages), np.diff(world.links.indptr))
    same_host = world.host[src] == world.host[world.links.indices]
    assert same_host.mean() == pytest.approx(0.7, abs=0.03)
    assert world.links.indices.size / world.n_pages == pytest.approx(6.0, rel=0.05)
    # without links the world is as before (same random stream)
    plain = build_world(WorldSpec(pages=3_000, hosts=30), 1, 1)
    assert plain.links is None
    np.testing.assert_array_equal(plain.rate, world.rate)
