"""The Bayes action and Bayes-equivalent rates (:mod:`estimators.bayes_action`): closed forms,
the freshness-optimal schedule they must reduce to when a rate is known, and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.bayes_action import (
    PROBE_STRADDLE,
    BayesPlanPrior,
    bayes_equivalent_rates,
    bayes_refresh,
    bayes_refresh_at,
    choose_probes,
    evidence_grid,
    fit_bayes_plan,
    fit_grid_prior,
    fit_group_grid_priors,
    follow_up_gains,
    grid_log_likelihood,
    grid_posterior,
    plan_rates,
    plug_in_refresh,
    probe_gains,
    rate_grid,
    straddling,
)
from estimators.evidence import change_intervals_from_fetches, last_modified_evidence_from_fetches
from estimators.prior import exposure_loglik_on_grid
from planner.schedules.optimal import refresh_schedule

GRID = rate_grid(0.5, 200.0)  # log rates, per day: 5e-4 to 40


def point_masses(rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posteriors that know each rate exactly (all weight on its grid point), and the grid
    rates they sit on."""
    index = np.abs(GRID[None, :] - np.log(rates)[:, None]).argmin(axis=1)
    post = np.zeros((rates.size, GRID.size))
    post[np.arange(rates.size), index] = 1.0
    return post, np.exp(GRID[index])


def test_a_known_rate_gets_the_freshness_optimal_schedule() -> None:
    rng = np.random.default_rng(3)
    post, rates = point_masses(np.exp(rng.uniform(np.log(0.002), np.log(5.0), 400)))
    budget = 400 / 20.0
    action = bayes_refresh(GRID, post, budget)
    best = refresh_schedule(rates, budget, objective="freshness").refresh_rate
    crawled = best > 0
    # pages within a grid step of the cut-off may differ
    near_cutoff = np.abs(rates * action.price - 1.0) < 0.1
    assert not np.any(((action.refresh > 0) != crawled) & ~near_cutoff)
    both = crawled & (action.refresh > 0) & ~near_cutoff
    assert both.sum() > 100
    np.testing.assert_allclose(action.refresh[both], best[both], rtol=0.03)
    assert action.refresh.sum() == pytest.approx(budget, rel=1e-6)
    assert np.all(action.refresh[rates > 1.2 / action.price] == 0)
    # the same action, chunk by chunk, at the price the whole set
    halves = [
        bayes_refresh_at(GRID, part, action.price).refresh for part in (post[:200], post[200:])
    ]
    np.testing.assert_array_equal(np.concatenate(halves), action.refresh)


def test_the_equivalent_rate_of_a_known_rate_is_that_rate() -> None:
    post, rates = point_masses(np.geomspace(0.003, 3.0, 60))
    equivalent, action = bayes_equivalent_rates(GRID, post, 60 / 15.0)
    crawled = action.refresh > 0
    assert crawled.sum() > 20
    # within two grid steps: the plug-in rate is flat near its peak
    np.testing.assert_allclose(np.log(equivalent[crawled]), np.log(rates[crawled]), atol=0.25)
    assert np.all(equivalent[~crawled] >= 1.0 / action.price)


def test_the_prior_finds_two_clusters_that_a_log_normal_cannot_hold() -> None:
    rng = np.random.default_rng(7)
    truth = np.where(rng.random(4000) < 0.5, 0.02, 2.0)
    exposure = np.full(truth.size, 60.0)
    changes = rng.poisson(truth * exposure).astype(float)
    weights = fit_grid_prior(exposure_loglik_on_grid(changes, exposure, GRID))
    rate = np.exp(GRID)
    assert weights.sum() == pytest.approx(1.0)
    for centre in (0.02, 2.0):
        near = np.abs(np.log(rate / centre)) < 0.5
        assert weights[near].sum() == pytest.approx(0.5, abs=0.05)
    between = (rate > 0.1) & (rate < 0.5)
    assert weights[between].sum() < 0.02


def test_an_em_step_is_the_mean_of_the_pages_posteriors() -> None:
    """The EM step ``w <- mean over pages of their posteriors under w`` (the NPMLE's fixed
    point), here from equal weights: one step, and the second from the first."""
    rng = np.random.default_rng(3)
    exposure = rng.uniform(5.0, 80.0, 300)
    changes = rng.poisson(np.exp(rng.normal(-2.0, 1.5, 300)) * exposure).astype(float)
    loglik = exposure_loglik_on_grid(changes, exposure, GRID)
    flat = np.full(GRID.size, 1.0 / GRID.size)
    first = grid_posterior(loglik, flat).mean(axis=0)
    np.testing.assert_allclose(fit_grid_prior(loglik, iterations=1), first, rtol=1e-10)
    second = grid_posterior(loglik, first).mean(axis=0)
    np.testing.assert_allclose(fit_grid_prior(loglik, iterations=2), second, rtol=1e-10)


def test_a_page_seen_changed_at_every_fetch_is_worth_less_than_its_knee_says() -> None:
    """Three intervals of 10 days, each with a change: flat above about 0.1 a day. Under a
    population where such pages are mostly fast, the Bayes action crawls it far less than a
    page known to change 0.1 a day, and its equivalent rate lies above that."""
    intervals = change_intervals_from_fetches(
        np.array([0, 0, 0, 0, 1, 1]),
        np.array([0.0, 10, 20, 30, 0, 30]),
        np.array([0, 1, 1, 1, 0, 0]),
    )
    loglik, has = grid_log_likelihood(GRID, intervals)
    assert has.tolist() == [True, True]
    rate = np.exp(GRID)
    prior = np.where(np.abs(np.log(rate / 0.1)) < 0.05, 0.3, 0.0) + np.where(
        np.abs(np.log(rate / 10.0)) < 0.05, 0.7, 0.0
    )
    prior /= prior.sum()
    post = grid_posterior(loglik, prior)
    moderate = np.abs(np.log(rate / 0.1)) < 0.05
    # (1 - e^-1)^3 = 0.253 against 1: the moderate rate keeps 0.3 * 0.253 / (0.3 * 0.253 + 0.7)
    assert post[0, moderate].sum() == pytest.approx(0.3 * 0.2526 / (0.3 * 0.2526 + 0.7), rel=0.02)
    equivalent, action = bayes_equivalent_rates(GRID, post, 0.05)
    plug = plug_in_refresh(GRID, action.price)
    known_moderate = plug[moderate].max()
    assert action.refresh[0] < 0.5 * known_moderate
    assert equivalent[0] > 0.1


def test_reliable_dates_replace_the_intervals_of_their_page() -> None:
    """Page 0: fetched on days 10, 20, 30 with Last-Modified 8, 15, 15; its dates show two
    changes (the one 2 days before the first fetch, one in (10, 20]) in 2 + 5 + 10 = 17 days
    unchanged: the likelihood lambda^2 e^(-17 lambda) peaks at 2 / 17 a day. Page 1's dates
    are not believed: its two changed intervals are read instead."""
    page = np.array([0, 0, 0, 1, 1, 1])
    at = np.array([10.0, 20, 30, 10, 20, 30])
    modified = np.array([8.0, 15, 15, 9, 19, 29])
    changed = np.array([0, 1, 0, 0, 1, 1])
    intervals = change_intervals_from_fetches(page, at, changed)
    evidence = last_modified_evidence_from_fetches(page, at, modified, n_pages=2)
    loglik, has = grid_log_likelihood(GRID, intervals, evidence, np.array([True, False]))
    assert has.tolist() == [True, True]
    assert np.exp(GRID[loglik[0].argmax()]) == pytest.approx(2 / 17, rel=0.06)
    only_intervals, _ = grid_log_likelihood(GRID, intervals)
    np.testing.assert_array_equal(loglik[1], only_intervals[1])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.001, 20.0), min_size=3, max_size=40),
    st.floats(0.02, 0.9),
    st.integers(0, 2**31 - 1),
)
def test_the_bayes_action_spends_the_budget_and_no_more(
    rates: list[float], share: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    post = rng.dirichlet(np.full(GRID.size, 0.3), size=len(rates))
    budget = share * len(rates) * 0.05
    action = bayes_refresh(GRID, post, budget)
    assert np.all(action.refresh >= 0)
    # each page's rate is interpolated between crawl-rate grid points: the spend is
    # continuous in the price, and the bisection finds the budget
    assert action.refresh.sum() == pytest.approx(budget, rel=1e-6)


def test_bad_shapes_and_budgets_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="posterior must be"):
        bayes_refresh(GRID, np.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match="budget must be > 0"):
        bayes_refresh(GRID, np.ones((2, GRID.size)) / GRID.size, 0.0)
    with pytest.raises(ValueError, match="prior needs"):
        grid_posterior(np.zeros((2, GRID.size)), np.ones(3))
    with pytest.raises(ValueError, match="a budget or a price"):
        bayes_equivalent_rates(GRID, np.ones((2, GRID.size)) / GRID.size, 1.0, price=1.0)
    with pytest.raises(ValueError, match="shortest <= longest"):
        rate_grid(2.0, 1.0)
    days = np.arange(3.0)
    intervals = change_intervals_from_fetches(np.zeros(3, dtype=int), days, np.ones(3))
    with pytest.raises(ValueError, match="sharing must name each of the 1 pages"):
        fit_bayes_plan(1.0, intervals, sharing=np.ones(2, dtype=bool))


def test_the_grid_reaches_down_to_what_a_page_watched_long_can_tell() -> None:
    """Nineteen unchanged daily intervals: the grid starts at a tenth of a change in 19 days,
    not in one, and the page's posterior mode lies below 0.1 a day."""
    days = np.arange(20.0)
    intervals = change_intervals_from_fetches(np.zeros(20, dtype=int), days, np.zeros(20))
    grid = evidence_grid(intervals)
    assert grid is not None
    assert np.exp(grid[0]) == pytest.approx(0.1 / 19, rel=1e-9)
    assert np.exp(grid[-1]) == pytest.approx(20.0, rel=0.06)
    loglik, _ = grid_log_likelihood(grid, intervals)
    assert np.exp(grid[loglik[0].argmax()]) < 0.01


def test_pages_without_evidence_are_planned_on_the_prior_and_take_their_share() -> None:
    """Pages fetched once with no date have the prior for their posterior: one rate for all
    of them, the prior's Bayes-equivalent rate, and they share the budget, so the price is
    higher than on the pages with evidence alone."""
    rng = np.random.default_rng(3)
    n, once = 40, 20
    page = np.repeat(np.arange(n), 6)
    at = np.tile(np.arange(6.0) * 2.0, n)
    rate = np.where(np.arange(n) % 2 == 0, 0.02, 2.0)[page]
    changed = (rng.random(page.size) < 1 - np.exp(-rate * 2.0)).astype(float)
    # the last `once` pages were fetched once only: drop their later fetches
    keep = (page < n - once) | (at == 0)
    intervals = change_intervals_from_fetches(page[keep], at[keep], changed[keep], n_pages=n)
    assert np.all(intervals.n_intervals[n - once :] == 0)
    budget = 0.1 * n
    plan = fit_bayes_plan(budget, intervals)
    assert plan is not None
    rates = plan_rates(plan, intervals)
    assert np.all(np.isfinite(rates)) and np.unique(rates[n - once :]).size == 1
    prior_rate, _ = bayes_equivalent_rates(plan.grid, plan.prior[None, :], price=plan.price)
    assert rates[-1] == pytest.approx(prior_rate[0], rel=1e-12)
    seen = np.arange(n) < n - once
    alone = fit_bayes_plan(budget, intervals, sharing=seen)
    assert alone is not None and alone.price < plan.price


def test_a_groups_prior_is_its_own_where_it_has_pages_and_the_populations_where_not() -> None:
    """Each group's prior (MAP under the population's weights worth ``strength`` pages):
    a group with many pages of one rate concentrates there, a group with none keeps the
    population's weights exactly, and the more pages a group has, the less the population
    pulls it back."""
    rng = np.random.default_rng(11)
    exposure = np.full(900, 60.0)
    groups = np.repeat([0, 2, 3], [600, 295, 5])  # group 1 has no page
    truth = np.where(groups == 0, rng.choice([0.02, 2.0], groups.size), 2.0)
    loglik = exposure_loglik_on_grid(rng.poisson(truth * exposure).astype(float), exposure, GRID)
    population = fit_grid_prior(loglik)
    priors = fit_group_grid_priors(loglik, groups, population, strength=20.0)
    assert priors.shape == (4, GRID.size)
    np.testing.assert_allclose(priors.sum(axis=1), 1.0)
    np.testing.assert_array_equal(priors[1], population)
    fast = np.abs(GRID - np.log(2.0)) < 0.5
    # group 2 (295 pages, all at 2 a day): nearly all there; the population two thirds
    assert priors[2][fast].sum() > 0.95 > 0.7 > population[fast].sum()
    # group 3 (5 pages at 2 a day): between the population and group 2
    assert population[fast].sum() < priors[3][fast].sum() < priors[2][fast].sum()
    stronger = fit_group_grid_priors(loglik, groups, population, strength=2000.0)
    assert np.abs(stronger[2] - population).sum() < np.abs(priors[2] - population).sum()
    with pytest.raises(ValueError, match="groups must be 900 integers"):
        fit_group_grid_priors(loglik, groups[:-1], population)
    with pytest.raises(ValueError, match="strength must be > 0"):
        fit_group_grid_priors(loglik, groups, population, strength=0.0)


def test_each_group_is_planned_on_its_prior_and_the_price_spends_the_budget() -> None:
    """Pages of two groups with the same evidence (unchanged over ten daily fetches): in a
    group whose other pages never changed either they are planned slower than in the group
    of pages that change; every page's Bayes action at the fitted price spends the budget."""
    changing, unchanged, static = 200, 4, 100
    n = changing + unchanged + static
    every = np.concatenate([np.resize([1, 2, 4, 8], changing), np.zeros(unchanged + static)])
    page = np.repeat(np.arange(n), 10)
    at = np.tile(np.arange(10.0), n)
    changed = ((every[page] > 0) & (at % np.maximum(every[page], 1) == 0)).astype(float)
    intervals = change_intervals_from_fetches(page, at, changed, n_pages=n)
    groups = (np.arange(n) >= changing + unchanged).astype(np.intp)
    budget = 0.1 * n
    plan = fit_bayes_plan(budget, intervals, groups=groups)
    alone = fit_bayes_plan(budget, intervals)
    assert plan is not None and plan.group_priors is not None and alone is not None
    rates = plan_rates(plan, intervals, groups=groups)
    # the same evidence, a page of group 0 and one of group 1 (the static pages)
    assert rates[n - 1] < rates[changing] / 3.5
    np.testing.assert_array_equal(rates[changing + unchanged :], rates[n - 1])
    # without groups both are planned alike
    plain = plan_rates(alone, intervals)
    assert plain[changing] == plain[n - 1]
    # a group the fit never saw is planned on the population's prior
    unseen = plan.posterior(np.zeros((1, plan.grid.size)), np.array([5]))
    np.testing.assert_allclose(unseen[0], plan.prior)
    loglik, has = grid_log_likelihood(plan.grid, intervals)
    assert has.all()
    posterior = plan.posterior(loglik, groups)
    spent = bayes_refresh_at(plan.grid, posterior, plan.price).refresh
    assert spent.sum() == pytest.approx(budget, rel=1e-4)
    # the population's price would overspend it (by 0.8 % here)
    assert bayes_refresh_at(plan.grid, posterior, alone.price).refresh.sum() > budget * 1.005
    with pytest.raises(ValueError, match="integers >= 0"):
        plan.posterior(loglik, -groups)


# -- probes ------------------------------------------------------------------------------------
def _two_points(grid: np.ndarray, slow: float, fast: float, share: float) -> np.ndarray:
    """A posterior with ``share`` of its mass at the grid rate nearest ``slow`` and the rest
    at the one nearest ``fast``, shape (1, G)."""
    post = np.zeros((1, grid.size))
    post[0, np.argmin(np.abs(grid - np.log(slow)))] += share
    post[0, np.argmin(np.abs(grid - np.log(fast)))] += 1.0 - share
    return post


def _brute_value(rates: np.ndarray, weights: np.ndarray, price: float) -> float:
    """max(0, max_f sum_i w_i F(f, rate_i) - sum(w) price f) on a fine crawl-rate grid."""
    f = np.exp(np.linspace(np.log(1e-5), np.log(1e4), 200_001))
    x = rates[:, None] / f[None, :]
    value = (weights[:, None] * (-np.expm1(-x) / x)).sum(axis=0) - weights.sum() * price * f
    return max(0.0, float(value.max()))


def test_a_probe_gain_is_the_knowledge_gradient() -> None:
    grid = rate_grid(0.01, 1000.0)
    price = 2.0  # cut-off rate 0.5 a day
    post = _two_points(grid, 0.05, 20.0, 0.4)
    rates = np.exp(grid)[post[0] > 0]
    weights = post[0][post[0] > 0]
    for delay in (0.5, 2.0, 8.0):
        keep = np.exp(-rates * delay)
        expected = (
            _brute_value(rates, weights * keep, price)
            + _brute_value(rates, weights * (1 - keep), price)
            - _brute_value(rates, weights, price)
        )
        got = float(probe_gains(grid, post, price, delay)[0])
        assert got == pytest.approx(expected, rel=0.01)
    # a probe a minute long tells 0.05 a day from 20 a day far less than one of two days
    minute = probe_gains(grid, post, price, 1 / 1440)[0]
    assert minute < 0.1 * probe_gains(grid, post, price, 2.0)[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5), st.floats(0.01, 10.0))
def test_a_probe_gain_is_never_negative_and_nothing_for_a_known_rate(
    mass: list[float], delay: float
) -> None:
    grid = rate_grid(0.01, 1000.0)
    post = np.zeros((2, grid.size))
    post[0, np.linspace(10, grid.size - 10, 5).astype(int)] = np.asarray(mass) + 1e-3
    post[0] /= post[0].sum()
    post[1, grid.size // 2] = 1.0
    gain = probe_gains(grid, post, 2.0, delay)  # not clamped at 0: convexity, not a floor
    assert gain[0] >= -1e-12
    assert gain[1] == pytest.approx(0.0, abs=1e-12)


def test_probes_go_to_pages_whose_rate_is_worth_learning() -> None:
    grid = rate_grid(0.01, 1000.0)
    price = 2.0
    plan = BayesPlanPrior(grid, np.full(grid.size, 1.0 / grid.size), price)
    post = np.vstack(
        [
            _two_points(grid, 0.05, 20.0, 0.99),  # surely worth crawling: nothing to learn
            _two_points(grid, 0.05, 20.0, 0.4),  # straddles the cut-off
            _two_points(grid, 0.05, 20.0, 0.0),  # surely not
            _two_points(grid, 0.05, 20.0, 0.2),  # straddles, less likely worth a crawl
        ]
    )
    # only the pages with mass on both sides of the cut-off are valued
    assert straddling(plan, post).tolist() == [1, 3]
    probes = choose_probes(plan, post, horizon=100.0)
    assert sorted(probes.page.tolist()) == [1, 3]
    assert np.all(np.diff(probes.net) <= 0) and np.all(probes.net > 0)
    cutoff_time = price  # 1 / (1 / price)
    assert probes.delay in {m * cutoff_time for m in (0.25, 0.5, 1.0, 2.0)}
    # each probe pays for its two crawls: its gain over the horizon less twice the price
    best = int(probes.page[0])
    gain = probe_gains(grid, post[[best]], price, probes.delay)[0]
    assert probes.net[0] == pytest.approx(gain * 100.0 - 2 * price)
    assert choose_probes(plan, post, horizon=100.0, limit=1).page.tolist() == [best]
    assert choose_probes(plan, post, horizon=100.0, limit=0).page.size == 0
    # knowledge used for a short while does not pay for two crawls
    most = max(probe_gains(grid, post, price, m * price).max() for m in (0.25, 0.5, 1.0, 2.0))
    assert choose_probes(plan, post, horizon=0.9 * 2 * price / most).page.size == 0
    assert choose_probes(plan, post, horizon=100.0, delays=(1.5,)).delay == 1.5
    # the crawl cannot probe faster than ``shortest``
    assert choose_probes(plan, post, horizon=100.0, shortest=3 * price).delay >= 3 * price
    with pytest.raises(ValueError, match="horizon must be > 0"):
        choose_probes(plan, post, horizon=0.0)
    assert 0 < PROBE_STRADDLE < 0.5


def test_a_lesson_worth_one_crawl_not_two_gets_a_follow_up() -> None:
    grid = rate_grid(0.01, 1000.0)
    price = 2.0
    plan = BayesPlanPrior(grid, np.full(grid.size, 1.0 / grid.size), price)
    post = np.vstack(
        [
            _two_points(grid, 0.05, 20.0, 0.2),
            _two_points(grid, 0.05, 20.0, 0.99),  # nothing to learn
            _two_points(grid, 0.05, 20.0, 0.4),
        ]
    )
    delay = 0.5 * price
    gain = probe_gains(grid, post, price, delay)
    assert gain[0] > gain[2] > 0
    # a horizon at which the best lesson pays for one crawl, not for two
    horizon = 1.5 * price / gain[0]
    chosen = choose_probes(plan, post, horizon=horizon, delays=(delay,))
    assert chosen.page.size == 0
    assert chosen.follow.tolist() == ([0, 2] if gain[2] * horizon > price else [0])
    assert chosen.follow_net[0] == pytest.approx(gain[0] * horizon - price)
    assert chosen.delay == delay
    assert choose_probes(plan, post, horizon, delays=(delay,), follow_ups=False).follow.size == 0
    # a long horizon: both pay for two crawls; past the limit, a page gets a follow-up
    long = 10 * price / gain[2]
    both = choose_probes(plan, post, horizon=long, delays=(delay,))
    assert both.page.tolist() == [0, 2] and both.follow.size == 0
    one = choose_probes(plan, post, horizon=long, delays=(delay,), limit=1)
    assert one.page.tolist() == [0] and one.follow.tolist() == [2]
    assert one.follow_net[0] == pytest.approx(gain[2] * long - price)
    # the probe's own value as a follow-up (a store in chunks follows up those past its limit)
    assert one.as_follow_up.tolist() == pytest.approx([gain[0] * long - price])
    off = choose_probes(plan, post, long, delays=(delay,), follow_ups=False)
    assert off.as_follow_up.tolist() == [0.0, 0.0]
    # no limit left for probes: every page worth it gets a follow-up instead
    assert choose_probes(plan, post, long, delays=(delay,), limit=0).follow.tolist() == [0, 2]
    # nothing pays for even one crawl: nothing
    none = choose_probes(plan, post, horizon=0.5 * price / gain[0], delays=(delay,))
    assert none.page.size == 0 and none.follow.size == 0


def test_a_follow_up_is_worth_what_it_adds_to_the_planned_crawl() -> None:
    """A follow-up's first crawl is the page's next planned one. Where that crawl teaches
    nothing (none planned, or so far off that both rates will have changed) the follow-up
    is worth a probe's gain; where it tells the rates apart in part (a slow page is often
    unchanged after 5 periods, a fast one never), the follow-up adds less."""
    grid = rate_grid(0.01, 1000.0)
    post = np.vstack([_two_points(grid, 0.05, 20.0, 0.4)] * 4)
    probe = probe_gains(grid, post, 2.0, 1.0)
    gain = follow_up_gains(grid, post, 2.0, 1.0, np.array([np.inf, 1e4, 5.0, 50.0]))
    assert gain[:2] == pytest.approx(probe[:2], rel=1e-9)
    assert 0 < gain[2] < 0.75 * probe[2]
    assert gain[2] < gain[3] < probe[3]
    with pytest.raises(ValueError, match="interval"):
        follow_up_gains(grid, post, 2.0, 1.0, np.array([1.0, 0.0, 1.0, 1.0]))
