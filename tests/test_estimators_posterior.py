"""Gamma posteriors of change rates, group priors, and freshness in expectation over them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pytest
from scipy import integrate

from estimators import (
    ChangeIntervals,
    GammaRatePosterior,
    LastModifiedEvidence,
    PoissonChangeMLE,
    expected_fresh_probability,
    expected_periodic_freshness,
)
from estimators.gamma_updates import changed_intervals_update, changed_within_update
from estimators.notifications import NotificationRates

if TYPE_CHECKING:
    from scenarios.simulator import CrawlLog, Observations
    from scenarios.world import World

SEED = 20261125


def _exact_moments(
    a: float, b: float, changed: list[float], unchanged: float
) -> tuple[float, float]:
    """Mean and variance of the exact posterior ``Gamma(a, b) * e^(-lambda U) *
    prod (1 - e^(-lambda tau))``, integrated on a fine grid of log rates."""
    scale = (a + len(changed)) / (b + unchanged)
    theta = np.linspace(math.log(scale) - 40, math.log(scale) + 8, 400_001)
    lam = np.exp(theta)
    log_density = a * theta - (b + unchanged) * lam  # d lambda = lambda d theta
    for tau in changed:
        log_density += np.log(-np.expm1(-lam * tau))
    weight = np.exp(log_density - log_density.max())
    z = integrate.trapezoid(weight, theta)
    mean = integrate.trapezoid(weight * lam, theta) / z
    second = integrate.trapezoid(weight * lam * lam, theta) / z
    return mean, second - mean * mean


# --- conjugate updates: exact -----------------------------------------------------------


def test_unchanged_intervals_add_their_length_to_beta() -> None:
    intervals = ChangeIntervals.from_lists([[1.5, 2.0, 0.25], [4.0]], [[0, 0, 0], [0]])
    fit = GammaRatePosterior(prior=(0.7, 3.0)).fit(intervals)
    assert fit.alpha_.tolist() == [0.7, 0.7]
    assert fit.beta_.tolist() == [3.0 + 3.75, 3.0 + 4.0]
    assert fit.mean_ == pytest.approx(0.7 / np.array([6.75, 7.0]), rel=1e-15)
    assert fit.sd_ == pytest.approx(math.sqrt(0.7) / np.array([6.75, 7.0]), rel=1e-15)
    assert fit.evidence_.tolist() == [3, 1]


def test_exact_change_times_add_changes_to_alpha_and_time_to_beta() -> None:
    """A reliable Last-Modified replaces the page's change intervals; an unreliable one is
    ignored; a page fetched once adds one change in its age."""
    intervals = ChangeIntervals.from_lists([[1.0, 1.0], [1.0, 1.0], []], [[1, 0], [1, 0], []])
    lm = LastModifiedEvidence(
        intervals=np.array([2, 2, 0]),
        changes=np.array([1, 1, 0]),
        exposure=np.array([1.6, 1.6, 0.0]),
        age_sum=np.array([0.6, 0.6, 0.0]),
        single_fetch_age=np.array([np.nan, np.nan, 5.0]),
    )
    fit = GammaRatePosterior(prior=(0.5, 2.0)).fit(
        intervals, last_modified=lm, reliable=np.array([True, False, True])
    )
    assert fit.alpha_[0] == 1.5 and fit.beta_[0] == 2.0 + 1.6
    assert fit.alpha_[2] == 1.5 and fit.beta_[2] == 7.0
    alone = GammaRatePosterior(prior=(0.5, 2.0)).fit(intervals.take([1]))
    assert fit.alpha_[1] == alone.alpha_[0] and fit.beta_[1] == alone.beta_[0]
    assert fit.evidence_.tolist() == [2, 2, 1]


def test_reliable_notifications_are_a_complete_change_log() -> None:
    intervals = ChangeIntervals.from_lists([[1.0, 1.0, 1.0], [2.0]], [[1, 1, 0], [0]])
    notes = NotificationRates(
        page=np.array([0]),
        rate=np.array([4 / 8.0]),
        rate_low=np.array([0.1]),
        rate_high=np.array([1.0]),
        notifications=np.array([4]),
    )
    fit = GammaRatePosterior(prior=(1.0, 1.0)).fit(intervals, notifications=notes)
    assert fit.alpha_[0] == 5.0 and fit.beta_[0] == 9.0
    assert fit.alpha_[1] == 1.0 and fit.beta_[1] == 3.0
    assert fit.evidence_.tolist() == [4, 1]


# --- the change interval: moment matching against the exact posterior -------------------


@pytest.mark.parametrize(
    ("a", "b", "tau"),
    [(0.5, 2.0, 1.0), (3.0, 10.0, 0.1), (1.0, 1.0, 50.0), (0.2, 0.01, 3.0), (40.0, 4.0, 1e-4)],
)
def test_one_change_interval_matches_the_exact_posterior_moments(
    a: float, b: float, tau: float
) -> None:
    alpha, beta = changed_within_update(np.array([a]), np.array([b]), np.array([tau]))
    mean, var = _exact_moments(a, b, [tau], 0.0)
    assert alpha[0] / beta[0] == pytest.approx(mean, rel=1e-7)
    assert alpha[0] / beta[0] ** 2 == pytest.approx(var, rel=1e-6)


@pytest.mark.parametrize(
    ("a", "b", "changed", "unchanged"),
    [
        (0.5, 5.0, [7.0, 7.0, 7.0], 0.0),
        (0.5, 5.0, [28.0], 56.0),
        (0.4, 10.0, [2.0, 5.0, 1.0], 20.0),
        (2.0, 1.0, [0.5] * 8, 6.0),
    ],
)
def test_several_change_intervals_stay_close_to_the_exact_posterior(
    a: float, b: float, changed: list[float], unchanged: float
) -> None:
    """Assumed-density filtering is approximate after the first change interval: its mean
    stays within 5 % of the exact posterior's, its sd within 15 %."""
    page = np.zeros(len(changed), dtype=np.intp)
    alpha, beta = changed_intervals_update(
        np.array([a]), np.array([b + unchanged]), page, np.array(changed)
    )
    mean, var = _exact_moments(a, b, changed, unchanged)
    assert alpha[0] / beta[0] == pytest.approx(mean, rel=0.05)
    assert math.sqrt(alpha[0]) / beta[0] == pytest.approx(math.sqrt(var), rel=0.15)


# --- expected freshness ------------------------------------------------------------------


def _gamma_expectation(f: object, a: float, b: float) -> float:
    """``E[f(lambda)]`` under ``Gamma(a, b)``, integrated on a fine grid of log rates."""
    theta = np.linspace(math.log(a / b) - 90, math.log(a / b) + 6, 800_001)
    lam = np.exp(theta)
    weight = np.exp(a * theta - b * lam - (a * math.log(a / b) - a))  # lambda^a e^-b lambda
    values = f(lam)  # type: ignore[operator]
    return float(integrate.trapezoid(weight * values, theta) / integrate.trapezoid(weight, theta))


@pytest.mark.parametrize("a", [0.3, 1.0, 1.0 + 1e-9, 2.5, 12.0])
@pytest.mark.parametrize("b", [0.05, 1.0, 30.0])
def test_expected_freshness_matches_quadrature(a: float, b: float) -> None:
    for k in (0.0, 0.3, 7.0, 200.0):
        want = _gamma_expectation(lambda lam, k=k: np.exp(-lam * k), a, b)
        assert expected_fresh_probability(a, b, k) == pytest.approx(want, rel=1e-6)
    for interval in (1e-6, 0.5, 7.0, 500.0):
        want = _gamma_expectation(lambda lam, i=interval: -np.expm1(-lam * i) / (lam * i), a, b)
        assert expected_periodic_freshness(a, b, interval) == pytest.approx(want, rel=1e-6)


def test_expected_periodic_freshness_agrees_with_monte_carlo() -> None:
    rng = np.random.default_rng(SEED)
    lam = rng.gamma(0.6, 1 / 4.0, 400_000)
    sample = -np.expm1(-lam * 3.0) / (lam * 3.0)
    stderr = sample.std() / math.sqrt(sample.size)
    assert abs(expected_periodic_freshness(0.6, 4.0, 3.0) - sample.mean()) < 4 * stderr


def test_expected_freshness_broadcasts() -> None:
    got = expected_periodic_freshness(np.array([0.5, 1.0, 2.0]), 2.0, np.array([[1.0], [4.0]]))
    assert got.shape == (2, 3)
    assert np.all(np.diff(got, axis=0) < 0)  # longer intervals, staler pages


# --- group priors, calibration ------------------------------------------------------------


def _grouped_pages(
    seed: int, groups: int, per_group: int, fetches: int, gap: float
) -> tuple[ChangeIntervals, np.ndarray, np.ndarray, np.ndarray]:
    """Pages whose rates share a log-normal group level, fetched every ``gap`` (jittered):
    intervals, true rates, group of each page, true group mean."""
    rng = np.random.default_rng(seed)
    group_mean = np.exp(rng.normal(math.log(0.05), 1.2, groups))
    group = np.repeat(np.arange(groups), per_group)
    shape = 2.0
    rate = rng.gamma(shape, group_mean[group] / shape)
    n = rate.size
    length = gap * rng.uniform(0.5, 1.5, (n, fetches))
    changed = rng.random((n, fetches)) < -np.expm1(-rate[:, None] * length)
    page = np.repeat(np.arange(n), fetches)
    intervals = ChangeIntervals(page, length.ravel(), changed.ravel(), n)
    return intervals, rate, group, group_mean


def test_group_priors_recover_group_levels() -> None:
    intervals, _, group, group_mean = _grouped_pages(SEED, 60, 80, 6, 10.0)
    fit = GammaRatePosterior().fit(intervals, groups=[("section", group)])
    (level,) = fit.group_priors_
    assert level.name == "section" and level.group.tolist() == list(range(60))
    err = np.abs(np.log(level.mean / group_mean))
    assert np.median(err) < 0.2, f"seed {SEED}"
    assert level.between_sd == pytest.approx(1.2, rel=0.25)
    assert float(level.alpha[0]) == pytest.approx(2.0, rel=0.5)


def test_posterior_is_calibrated_and_beats_the_mle_on_thin_evidence() -> None:
    intervals, rate, group, _ = _grouped_pages(SEED + 1, 200, 30, 4, 14.0)
    fit = GammaRatePosterior().fit(intervals, groups=[("section", group)])
    alone = GammaRatePosterior().fit(intervals)
    low, high = fit.posterior_.interval(0.9)
    cover = float(np.mean((rate >= low) & (rate <= high)))
    assert 0.85 <= cover <= 0.95, f"coverage {cover}, seed {SEED + 1}"
    low, high = fit.posterior_.interval(0.5)
    assert 0.45 <= float(np.mean((rate >= low) & (rate <= high))) <= 0.55
    mle = PoissonChangeMLE(confidence=None).fit(intervals).rate_
    finite = np.isfinite(mle)  # 0 counts; inf cannot be scored on rates

    def error(estimate: np.ndarray) -> float:
        return float(np.mean(np.abs(estimate[finite] - rate[finite])))

    assert error(fit.mean_) < 0.85 * error(mle), f"seed {SEED + 1}"
    assert error(fit.mean_) < error(alone.mean_), f"seed {SEED + 1}"


def test_a_page_never_fetched_gets_its_groups_prior() -> None:
    intervals, _, group, _ = _grouped_pages(SEED + 2, 20, 40, 5, 7.0)
    n = intervals.n_pages
    # three more pages, never fetched: two in group 3, one in a group of its own
    more = ChangeIntervals(intervals.page, intervals.length, intervals.changed, n + 3)
    host = np.r_[group // 5, [0, 0, 9]]
    section = np.r_[group, [3, 3, 99]]
    fit = GammaRatePosterior().fit(more, groups=[("host", host), ("section", section)])
    hosts, sections = fit.group_priors_
    g3 = int(np.flatnonzero(sections.group == 3)[0])
    assert fit.alpha_[n : n + 2].tolist() == [sections.alpha[g3]] * 2
    assert fit.beta_[n : n + 2].tolist() == [sections.beta[g3]] * 2
    assert fit.evidence_[n:].tolist() == [0, 0, 0]
    # the lone unfetched section of a host without evidence: the population's median, with
    # the spread of hosts and of sections around it integrated into its prior
    g99 = int(np.flatnonzero(sections.group == 99)[0])
    h9 = int(np.flatnonzero(hosts.group == 9)[0])
    assert sections.weight[g99] == 0.0 and hosts.weight[h9] == 0.0
    a0, b0 = fit.population_prior_
    spread = hosts.between_sd**2 + sections.between_sd**2
    assert fit.mean_[n + 2] == pytest.approx(a0 / b0 * math.exp(spread / 2), rel=1e-12)
    assert fit.alpha_[n + 2] < hosts.alpha[h9] < a0  # each level's uncertainty widens it


def test_the_fit_is_deterministic() -> None:
    intervals, _, group, _ = _grouped_pages(SEED + 3, 30, 20, 4, 7.0)
    one = GammaRatePosterior().fit(intervals, groups=[("g", group)])
    two = GammaRatePosterior().fit(intervals, groups=[("g", group)])
    assert np.array_equal(one.alpha_, two.alpha_) and np.array_equal(one.beta_, two.beta_)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1.0, 0.0, math.nan, math.inf])
def test_bad_interval_lengths_are_named(bad: float) -> None:
    with pytest.raises(ValueError, match="interval lengths must be finite and > 0"):
        ChangeIntervals.from_lists([[1.0, bad]], [[0, 1]])


def test_bad_evidence_and_groups_are_named() -> None:
    intervals = ChangeIntervals.from_lists([[1.0], [2.0]], [[1], [0]])
    lm = LastModifiedEvidence(
        intervals=np.array([1, 0]),
        changes=np.array([1, 0]),
        exposure=np.array([math.nan, 0.0]),
        age_sum=np.zeros(2),
    )
    with pytest.raises(ValueError, match=r"last_modified\.exposure must be finite and >= 0"):
        GammaRatePosterior().fit(intervals, last_modified=lm, reliable=np.ones(2, bool))
    with pytest.raises(ValueError, match="give last_modified and reliable together"):
        GammaRatePosterior().fit(intervals, last_modified=lm)
    with pytest.raises(ValueError, match="group labels 'host' must be non-negative integers"):
        GammaRatePosterior().fit(intervals, groups=[("host", np.array([0, -1]))])
    with pytest.raises(ValueError, match="one label per page"):
        GammaRatePosterior().fit(intervals, groups=[("host", np.array([0]))])
    with pytest.raises(ValueError, match="beta must be finite and > 0"):
        GammaRatePosterior(prior=(1.0, math.nan)).fit(intervals)
    with pytest.raises(ValueError, match="no page has evidence"):
        GammaRatePosterior().fit(ChangeIntervals.from_lists([[]], [[]]))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.0, 1.0, -1.0), "k must be finite and >= 0"),
        ((math.nan, 1.0, 1.0), "alpha must be finite and > 0"),
        ((1.0, -2.0, 1.0), "beta must be finite and > 0"),
    ],
)
def test_bad_freshness_arguments_are_named(args: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expected_fresh_probability(*args)


def test_bad_periodic_interval_is_named() -> None:
    with pytest.raises(ValueError, match="interval must be finite and > 0"):
        expected_periodic_freshness(1.0, 1.0, [1.0, 0.0])


# --- the simulator's knowledge of rates -----------------------------------------------------


def _uniform_crawl_log(world: World, periods: int, budget: int) -> CrawlLog:
    """The crawl log a uniform recrawl of ``world`` leaves after ``periods`` periods."""
    from scenarios.policies.baselines import UniformPolicy
    from scenarios.simulator import SimulationSettings, simulate

    logs: list[CrawlLog] = []

    class Watching(UniformPolicy):
        def observe(self, obs: Observations, log: CrawlLog) -> None:
            logs.append(log)

    simulate(world, Watching(), SimulationSettings(periods=periods, budget=budget, seed=SEED))
    return logs[-1]


def test_rate_knowledge_yields_posteriors_with_host_and_section_priors() -> None:
    from scenarios.policies.base import PolicyError
    from scenarios.policies.knowledge import RateKnowledge
    from scenarios.world import WorldSpec, build_world

    world = build_world(WorldSpec(pages=3_000, hosts=30, section_sigma=1.0), 1, 40)
    log = _uniform_crawl_log(world, periods=28, budget=300)
    knowledge = RateKnowledge("posterior", last_modified="checked")
    posterior = knowledge.posterior(log, 28)
    assert posterior.n_pages == world.n_pages
    assert np.all(np.isfinite(posterior.alpha) & (posterior.alpha > 0))
    assert np.all(np.isfinite(posterior.beta) & (posterior.beta > 0))
    assert np.array_equal(knowledge.rate(log, 28), posterior.mean)
    assert knowledge.posterior(log, 30) is posterior  # refitted only when due
    fit = knowledge.posterior_fit
    assert fit is not None and [g.name for g in fit.group_priors_] == ["host", "section"]
    alive = (world.born == 0) & (log.fetches > 0)
    corr = np.corrcoef(np.log(posterior.mean[alive]), np.log(world.rate[alive]))[0, 1]
    assert corr > 0.6, f"seed {SEED}"
    with pytest.raises(PolicyError, match="rates='posterior'"):
        RateKnowledge("estimated").posterior(log, 28)


def test_bayes_rate_knowledge_plans_every_live_fetched_page_and_no_other() -> None:
    """``rates = "bayes"``: every live page fetched has a Bayes-equivalent rate, those
    fetched once (no interval, no date) the prior's, one rate for all; pages found dead and
    pages never fetched (the plan's new pages) have none."""
    from scenarios.policies.knowledge import RateKnowledge
    from scenarios.world import WorldSpec, build_world

    spec = WorldSpec(
        pages=2_000, hosts=20, birth_rate=0.03, death_rate=0.02, last_modified={"missing": 1.0}
    )
    log = _uniform_crawl_log(build_world(spec, 2, 12), periods=12, budget=150)
    rate = RateKnowledge("bayes").rate(log, 12)
    fetched = log.eligible & (log.fetches > 0)
    assert np.array_equal(np.isfinite(rate), fetched)
    assert np.all(rate[fetched] > 0)
    once = fetched & (log.change_intervals().n_intervals == 0)
    assert once.sum() > 100 and np.unique(rate[once]).size == 1
    dead = log.gone & (log.fetches > 0)
    assert dead.any() and np.all(np.isnan(rate[dead]))


def test_rate_knowledge_before_any_evidence_is_the_uniform_guess() -> None:
    from scenarios.policies.knowledge import RateKnowledge
    from scenarios.simulator import CrawlLog, SimulationSettings
    from scenarios.world import WorldSpec, build_world

    world = build_world(WorldSpec(pages=400, hosts=4), 0, 2)
    log = CrawlLog(world, SimulationSettings(periods=2, budget=40, warm_start=False))
    log.known[:] = True
    posterior = RateKnowledge("posterior").posterior(log, 0)
    assert posterior.mean == pytest.approx(np.full(400, 0.1))
    assert posterior.evidence.tolist() == [0] * 400


def test_pooled_gamma_moment_matches_the_mixture_of_a_groups_beliefs() -> None:
    from estimators.gamma_updates import pooled_gamma

    alpha = np.array([2.0, 2.0, 0.5, 3.0, 1.0])
    beta = np.array([4.0, 4.0, 10.0, 1.0, 1.0])
    group = np.array([0, 0, 1, 1, 1])
    a, b = pooled_gamma(alpha, beta, group, 3)
    assert (a[0], b[0]) == pytest.approx((2.0, 4.0), rel=1e-12)  # one belief: itself
    assert np.isnan(a[2]) and np.isnan(b[2])  # no pages
    rng = np.random.default_rng(SEED)
    pick = rng.integers(2, 5, 1_000_000)
    draws = rng.gamma(alpha[pick], 1 / beta[pick])
    assert a[1] / b[1] == pytest.approx(draws.mean(), rel=0.01)
    assert a[1] / b[1] ** 2 == pytest.approx(draws.var(), rel=0.03)
    weighted, _ = pooled_gamma(alpha, beta, group, 3, weight=[1, 1, 0, 0, 1])
    assert weighted[1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"group labels must lie in \[0, 3\)"):
        pooled_gamma(alpha, beta, group + 2, 3)


def test_a_cold_store_gets_posteriors_from_single_fetch_dates_alone() -> None:
    """Every page fetched once: no interval, only each reliable Last-Modified age."""
    rng = np.random.default_rng(SEED)
    n = 2_000
    rate = rng.gamma(2.0, 0.05, n)
    age = rng.exponential(1 / rate)
    intervals = ChangeIntervals(np.zeros(0, np.intp), np.zeros(0), np.zeros(0, bool), n)
    lm = LastModifiedEvidence(
        intervals=np.zeros(n, np.intp),
        changes=np.zeros(n, np.intp),
        exposure=np.zeros(n),
        age_sum=np.zeros(n),
        single_fetch_age=age,
    )
    fit = GammaRatePosterior().fit(intervals, last_modified=lm, reliable=np.ones(n, bool))
    a0, b0 = fit.population_prior_
    assert a0 / b0 == pytest.approx(0.1, rel=0.15), f"seed {SEED}"
    assert np.array_equal(fit.alpha_, np.full(n, a0 + 1.0))
    assert np.array_equal(fit.beta_, b0 + age)
