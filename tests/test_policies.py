"""Policies: the peers' interval arithmetic step by step, rate schedules, the planner, sampling."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.stats import spearmanr

from scenarios.policies import (
    PolicyError,
    RateKnowledge,
    RatePolicy,
    make_policy,
    nutch_policy,
    overdue_priority,
    stormcrawler_policy,
    top_pages,
)
from scenarios.policies.sampling import SamplingPolicy
from scenarios.policies.webfountain import WebFountainPolicy, section_rates
from scenarios.simulator import CrawlLog, Observations, SimulationSettings, simulate
from scenarios.world import World, WorldSpec, build_world


def _log(pages: int = 3, **spec: object) -> CrawlLog:
    world = build_world(WorldSpec(pages=pages, hosts=1, **spec), 0, 1)  # type: ignore[arg-type]
    log = CrawlLog(world, SimulationSettings(periods=1, budget=1, oracle=True))
    log.known[:] = True
    return log


def _obs(
    at: float, changed: bool, last_modified: float = np.nan, first: bool = False
) -> Observations:
    return Observations(
        page=np.array([0]),
        fetched_at=np.array([at]),
        changed=np.array([changed]),
        first=np.array([first]),
        gone=np.array([False]),
        last_modified=np.array([last_modified]),
    )


def test_nutch_interval_arithmetic_step_by_step() -> None:
    policy = nutch_policy(period_days=1.0)
    policy.start(_log())
    assert policy.interval[0] == 30.0  # db.fetch.interval.default: 30 days
    policy.observe(_obs(10.0, False), _log())
    assert policy.interval[0] == pytest.approx(42.0)  # x (1 + 0.4)
    policy.observe(_obs(52.0, False), _log())
    assert policy.interval[0] == pytest.approx(58.8)
    policy.observe(_obs(111.0, True), _log())  # no Last-Modified: modified = fetch time
    assert policy.interval[0] == pytest.approx(47.04)  # x (1 - 0.2)
    assert policy.reference[0] == 111.0
    # SYNC_DELTA: changed 60 days ago, longer than the new interval 37.632: interval 60,
    # next fetch counted from 0.3 x 60 = 18 days before this fetch
    policy.observe(_obs(160.0, True, last_modified=100.0), _log())
    assert policy.interval[0] == pytest.approx(60.0)
    assert policy.reference[0] == pytest.approx(142.0)
    # bounds [60 s, 365 days]
    for k in range(20):
        policy.observe(_obs(200.0 + k, False), _log())
    assert policy.interval[0] == pytest.approx(365.0)
    for k in range(200):
        policy.observe(_obs(300.0 + k, True), _log())
    assert policy.interval[0] == pytest.approx(60 / 86_400)


def test_nutch_in_periods_of_two_days() -> None:
    policy = nutch_policy(period_days=2.0)
    policy.start(_log())
    assert policy.interval[0] == 15.0


def test_stormcrawler_interval_arithmetic_step_by_step() -> None:
    policy = stormcrawler_policy(period_days=1.0)
    policy.start(_log())
    assert policy.interval[0] == 1.0  # one day
    policy.observe(_obs(1.0, False), _log())
    assert policy.interval[0] == pytest.approx(1.5)
    policy.observe(_obs(2.5, True), _log())
    hour = 1 / 24
    assert policy.interval[0] == pytest.approx(1.5 - (1.5 - hour) * 0.5)
    for k in range(20):
        policy.observe(_obs(3.0 + k, False), _log())
    assert policy.interval[0] == pytest.approx(14.0)
    for k in range(40):
        policy.observe(_obs(30.0 + k, True), _log())
    assert policy.interval[0] == pytest.approx(hour, rel=1e-6)


def test_a_first_fetch_does_not_move_the_interval() -> None:
    policy = stormcrawler_policy(period_days=1.0)
    policy.start(_log())
    policy.observe(_obs(1.0, False, first=True), _log())
    assert policy.interval[0] == 1.0


def test_top_pages_is_deterministic_and_skips_the_ineligible() -> None:
    priority = np.array([1.0, 3.0, 3.0, -np.inf, np.nan, 2.0])
    assert top_pages(priority, 3).tolist() == [1, 2, 5]
    assert top_pages(priority, 10).tolist() == [1, 2, 5, 0]


def test_overdue_priority_never_fetched_first_then_most_overdue() -> None:
    log = _log(4)
    log.last_fetch[:] = [np.nan, 0.0, 5.0, 8.0]
    priority = overdue_priority(log, 10.0, np.array([1.0, 0.1, 1.0, 0.0]))
    assert top_pages(priority, 4).tolist() == [0, 2, 1, 3]  # rate 0 last


def test_xyleme_targets_follow_the_square_root_rule() -> None:
    log = _log(3)
    log.true_rate = np.array([0.01, 0.04, 0.16])
    policy = RatePolicy("xyleme", "obsolescence", RateKnowledge("true"))
    target = policy.targets(log, 0, 7)
    np.testing.assert_allclose(target, np.array([1, 2, 4]) * 7 / 7)  # sqrt(lambda) shares
    proportional = RatePolicy("p", "proportional", RateKnowledge("true")).targets(log, 0, 7)
    np.testing.assert_allclose(proportional, np.array([1, 4, 16]) * 7 / 21)


def test_true_rates_need_an_oracle_run() -> None:
    log = _log(3)
    log.true_rate = None
    with pytest.raises(PolicyError, match="oracle"):
        RateKnowledge("true").rate(log, 0)


def test_estimated_rates_come_from_the_policy_own_observations() -> None:
    world = build_world(WorldSpec(pages=3_000, hosts=30), 1, 40)
    policy = make_policy({"kind": "freshness", "refit_every": 7})
    assert isinstance(policy, RatePolicy)
    simulate(world, policy, SimulationSettings(periods=30, budget=1_000, warmup=0))
    estimate = policy.knowledge._rate
    assert estimate is not None
    ok = np.isfinite(estimate) & (world.born == 0)
    corr = np.corrcoef(np.log(estimate[ok]), np.log(world.rate[ok]))[0, 1]
    assert corr > 0.6


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"kind": "lottery"}, "kind"),
        ({"kind": "uniform", "rates": "true"}, "rates"),
        ({"kind": "freshness", "rates": "guessed"}, "rates"),
        ({"kind": "webfountain", "strategy": 4}, "strategy"),
        ({"kind": "sampling", "group": "topic"}, "group"),
        ({"kind": "xyleme", "max_interval": -1}, "max_interval"),
    ],
)
def test_bad_policy_settings_name_the_setting(spec: dict[str, object], key: str) -> None:
    with pytest.raises(PolicyError, match=f"^{key}:"):
        make_policy(spec)


def test_planner_strategy_2_crawls_every_page_about_once_per_cycle() -> None:
    world = build_world(WorldSpec(pages=2_000, hosts=20), 1, 28)
    policy = WebFountainPolicy(
        "s2", RateKnowledge("true"), model="webfountain", strategy=2, buckets=8, cycle=7
    )
    settings = SimulationSettings(periods=14, budget=2_000 // 7 + 1, warmup=7, oracle=True)
    result = simulate(world, policy, settings)
    assert np.mean(result.crawls >= 1) > 0.99  # (almost) no page left out over two cycles
    assert np.mean(result.crawls <= 3) > 0.95  # and few crawled more than about once a cycle
    assert len(policy.solves) == 3


def test_planner_strategy_1_prefers_fast_pages() -> None:
    """The paper's model (over the cycle alone, no exploration) crawls the fastest fifth of
    the pages more than three times as often as the slowest; with the terminal value and
    exploration it gives the slow pages more of the budget."""
    world = build_world(WorldSpec(pages=2_000, hosts=20), 1, 28)
    settings = SimulationSettings(periods=14, budget=300, warmup=7, oracle=True)
    fast = world.rate > np.quantile(world.rate, 0.8)
    slow = world.rate < np.quantile(world.rate, 0.2)
    paper = WebFountainPolicy(
        "s1",
        RateKnowledge("true"),
        model="webfountain",
        strategy=1,
        buckets=8,
        cycle=7,
        terminal_value=False,
        explore=0,
    )
    crawls = simulate(world, paper, settings).crawls
    assert crawls[fast].mean() > 3 * crawls[slow].mean()
    default = WebFountainPolicy(
        "s1", RateKnowledge("true"), model="webfountain", strategy=1, buckets=8, cycle=7, explore=2
    )
    assert simulate(world, default, settings).crawls[slow].mean() > crawls[slow].mean()


def test_section_rates_pool_the_section_evidence() -> None:
    world = build_world(WorldSpec(pages=3_000, hosts=10, sections_per_host=2), 1, 30)
    log_policy = make_policy({"kind": "uniform"})
    settings = SimulationSettings(periods=21, budget=600)
    from scenarios.simulator import CrawlLog as Log

    captured: list[Log] = []

    class Capture(type(log_policy)):  # type: ignore[misc]
        def observe(self, obs: Observations, log: Log) -> None:
            captured[:] = [log]

    simulate(world, Capture(), settings)
    pooled = section_rates(captured[0])
    true = np.bincount(world.section, weights=world.rate) / np.bincount(world.section)
    assert np.corrcoef(np.log(pooled), np.log(true))[0, 1] > 0.5


def test_sampling_spends_on_the_group_that_changes() -> None:
    spec = WorldSpec(pages=2_000, hosts=2, host_skew=0.0, rate_model="constant", rate=0.01)
    world = build_world(spec, 1, 30)
    fast = world.host == 0
    world.rate[fast] = 1.0  # host 0 changes every period, host 1 hardly ever
    policy = SamplingPolicy("sample", group="host", cycle=7, sample_share=0.2)
    settings = SimulationSettings(periods=21, budget=200, warmup=7)
    result = simulate(world, policy, settings)
    assert result.crawls[fast].mean() > 1.5 * result.crawls[~fast].mean()


def test_planner_on_posteriors_plans_on_each_class_belief() -> None:
    """With rates = "posterior" the planner hands plan_cycle one Gamma shape per class (the
    moment match of its pages' beliefs), finite where pages are, and the plan fills the budget."""
    world = build_world(WorldSpec(pages=1_500, hosts=15, section_sigma=1.0), 1, 35)
    policy = WebFountainPolicy("p", RateKnowledge("posterior", refit_every=7), cycle=7)
    simulate(world, policy, SimulationSettings(periods=21, budget=150, warmup=7))
    assert policy.last_inputs is not None and policy.last_plan is not None
    aggregates, measures = policy.last_inputs
    assert measures.rate_shape is not None
    shape = np.asarray(measures.rate_shape)
    populated = np.flatnonzero(aggregates.pages[1:] > 0) + 1
    assert np.all(np.isfinite(shape[populated]) & (shape[populated] > 0))
    cycle = policy.last_plan.cycle
    assert cycle is not None
    assert sum(cycle.quotas[0].values()) + cycle.new_pages[0] == 150


def test_release_order_due_spends_the_budget_and_bad_orders_are_refused() -> None:
    world = build_world(WorldSpec(pages=1_500, hosts=15), 1, 21)
    policy = make_policy({"kind": "webfountain", "release_order": "due", "rates": "true"})
    result = simulate(world, policy, SimulationSettings(periods=14, budget=150, oracle=True))
    assert int(result.crawls.sum()) == 150 * 14
    with pytest.raises(PolicyError, match="release_order"):
        make_policy({"kind": "webfountain", "release_order": "newest"})


def test_planner_weighted_by_importance_hands_each_class_its_mean_weight() -> None:
    """``importance = true``: each class's mean importance over its fetched pages, centered
    on 1 over them all, goes to the plan (as the nightly run's ``plan.weights``); without
    it, none."""
    world = build_world(WorldSpec(pages=1_500, hosts=15, importance_sigma=1.0), 1, 21)
    weighted = make_policy({"kind": "webfountain", "rates": "true", "importance": True})
    plain = make_policy({"kind": "webfountain", "rates": "true"})
    for policy in (weighted, plain):
        simulate(world, policy, SimulationSettings(periods=14, budget=150, oracle=True))
    assert isinstance(weighted, WebFountainPolicy) and isinstance(plain, WebFountainPolicy)
    assert weighted.last_inputs is not None and plain.last_inputs is not None
    aggregates, measures = weighted.last_inputs
    assert plain.last_inputs[1].importance is None
    w = np.asarray(measures.importance, dtype=float)
    populated = np.flatnonzero(aggregates.pages[1:] > 0) + 1
    assert np.all(np.isfinite(w[populated]) & (w[populated] > 0))
    pages = aggregates.pages[populated]
    assert float(np.sum(w[populated] * pages) / pages.sum()) == pytest.approx(1.0)
    assert np.ptp(w[populated]) > 0.1


class _Recorded(WebFountainPolicy):
    """The planner, recording the probes' crawls of each period."""

    probe_crawls: dict[int, set[int]]

    def _probe_crawls(self, period: int, budget: int, log: CrawlLog) -> np.ndarray:
        crawls = super()._probe_crawls(period, budget, log)
        self.probe_crawls[period] = set(crawls.tolist())
        return crawls


def _fast_undated_world(**extra: Any) -> World:
    """600 pages changing 0.025 to 5 times a period, no dates, 60 periods (seed 7): pages
    seen changed at every crawl straddle a thin crawl's cut-off, so the planner probes."""
    spec = WorldSpec(
        pages=600,
        hosts=20,
        rate_model="loguniform",
        rate_low=0.025,
        rate_high=5.0,
        last_modified={"missing": 1.0},
        **extra,
    )
    return build_world(spec, 7, 60)


class _NewPagesRecorded(_Recorded):
    """The planner, recording per period its plan's new-page quota and the never-fetched
    pages it crawled."""

    new_pages: dict[int, tuple[int, int]]

    def select(self, period: int, budget: int, log: CrawlLog) -> np.ndarray:
        chosen = super().select(period, budget, log)
        planned = int(self._new[period - self._cycle_start])
        self.new_pages[period] = (planned, int(np.sum(log.fetches[chosen] == 0)))
        return chosen


def test_probes_are_charged_to_every_quota_new_pages_included() -> None:
    """As the service's release charges urgent crawls (``charge_spent``), a period's probes
    take crawls from each of the plan's quotas in proportion, the new pages' too: on a web
    where pages are born every period, the periods with probes still crawl about their
    share of the new pages the plan asked for, not none."""
    world = _fast_undated_world(birth_rate=0.02)
    settings = SimulationSettings(periods=60, budget=30, warmup=0)
    base = make_policy({"kind": "webfountain", "cycle": 7, "probe_horizon": 600})
    assert isinstance(base, WebFountainPolicy)
    probing = _NewPagesRecorded("p", base.knowledge, cycle=7)
    probing.probe_crawls, probing.new_pages = {}, {}
    simulate(world, probing, settings)
    busy = [t for t, c in probing.probe_crawls.items() if len(c) >= 3]
    assert len(busy) > 20
    for t in busy:
        asked, crawled = probing.new_pages[t]
        # the quota less its share of the probes (rounding: a crawl either way)
        assert crawled >= asked * (1 - len(probing.probe_crawls[t]) / 30) - 1.5, t


def test_the_planner_probes_pages_whose_rate_is_worth_learning() -> None:
    """On a fast web without dates (rates 0.025 to 5 changes a period, a twentieth of the
    pages crawled a period), pages seen changed at every crawl straddle the plan's cut-off:
    the planner probes some of them, each crawled twice the probe's delay apart, and no more
    than 30 % of a period's budget goes to probes (follow-ups off). Without a probe horizon
    it probes none."""
    world = _fast_undated_world()
    settings = SimulationSettings(periods=60, budget=30, warmup=0)
    base = make_policy({"kind": "webfountain", "cycle": 7, "probe_horizon": 600})
    assert isinstance(base, WebFountainPolicy) and not base.knowledge.follow_ups  # off
    assert isinstance(base, WebFountainPolicy)
    probing = _Recorded("p", base.knowledge, cycle=7)
    probing.probe_crawls = {}
    result = simulate(world, probing, settings)
    assert probing.probes_queued > 0
    assert int(result.crawls.sum()) == 30 * 60
    assert max(len(c) for c in probing.probe_crawls.values()) <= 9  # 30 % of 30
    delay = probing._probe_delay
    firsts = {
        (t, page)
        for t, crawls in probing.probe_crawls.items()
        for page in crawls
        if page in probing.probe_crawls.get(t + delay, set())
    }
    assert len(firsts) >= probing.probes_queued // 4  # crawled again the delay later
    off = make_policy({"kind": "webfountain", "cycle": 7, "probe_horizon": 0})
    assert isinstance(off, WebFountainPolicy)
    simulate(world, off, settings)
    assert off.probes_queued == 0
    with pytest.raises(PolicyError, match="probe_horizon"):
        make_policy({"kind": "webfountain", "probe_horizon": -1})


class _FollowedUp(_Recorded):
    """The planner, recording the probes' crawls and the follow-ups' first crawls."""

    firsts: dict[int, tuple[set[int], int]]
    marked: list[int]

    def _follow_up(self, period: int, crawled: np.ndarray) -> None:
        first = set(crawled[np.isin(crawled, self._follow)].tolist())
        self.firsts[period] = (first, self._probe_delay)
        super()._follow_up(period, crawled)

    def _queue_probes(self, period: int, budget: int) -> None:
        super()._queue_probes(period, budget)
        self.marked.append(int(self._follow.size))


def test_follow_ups_ride_on_planned_crawls() -> None:
    """On the same fast web without dates, pages whose lesson pays for one crawl but not
    two are marked for a follow-up (no more than 30 % of the fetched pages at once): the
    plan's own crawl of such a page is the probe's first, and the page is crawled again the
    probe's delay later, in the probe lane. The budget is spent exactly."""
    world = _fast_undated_world()
    settings = SimulationSettings(periods=60, budget=30, warmup=0)
    base = make_policy(
        {"kind": "webfountain", "cycle": 7, "probe_horizon": 600, "follow_ups": True}
    )
    assert isinstance(base, WebFountainPolicy) and base.knowledge.follow_ups
    policy = _FollowedUp("f", base.knowledge, cycle=7)
    policy.probe_crawls, policy.firsts, policy.marked = {}, {}, []
    result = simulate(world, policy, settings)
    assert int(result.crawls.sum()) == 30 * 60
    assert policy.follow_ups_queued > 0
    assert max(policy.marked) <= 0.3 * 600
    firsts = [(t, p, delay) for t, (pages, delay) in policy.firsts.items() for p in pages]
    assert len(firsts) >= policy.follow_ups_queued // 4
    for t, page, delay in firsts:
        assert page not in policy.probe_crawls.get(t, set())  # a planned crawl
        if t + delay < 60:
            assert page in policy.probe_crawls[t + delay], (t, page, delay)  # the probe lane


def test_oracle_priors_bound_what_a_prior_can_add() -> None:
    """On a web whose rates are set by their section (section sigma 2, within 0.2) and that
    sends no dates, a page crawled once says nothing of itself: under the population's true
    rates as prior the plan gives such pages one rate, under their section's (less the page
    itself) each its section's, in the order of the true rates. Both read the truth, so
    both need an oracle run."""
    spec = WorldSpec(
        pages=2000,
        hosts=20,
        sections_per_host=5,
        rate_model="lognormal",
        fast_median=0.1,
        fast_sigma=0.2,
        section_sigma=2.0,
        last_modified={"missing": 1.0},
    )
    world = build_world(spec, 3, 12)
    order = {}
    for rates in ("bayes, true prior", "bayes, true section prior"):
        policy = make_policy({"kind": "webfountain", "rates": rates, "cycle": 7})
        assert isinstance(policy, WebFountainPolicy)
        simulate(world, policy, SimulationSettings(periods=12, budget=200, oracle=True))
        rate = policy.knowledge._rate
        assert rate is not None and np.isfinite(rate).all()
        order[rates] = float(spearmanr(rate, world.rate).statistic)
    assert order["bayes, true section prior"] > 0.95
    assert order["bayes, true prior"] < 0.7
    for rates in ("bayes, true prior", "bayes, true section prior"):
        log = _log(3)
        log.true_rate = None
        with pytest.raises(PolicyError, match="oracle"):
            RateKnowledge(rates).rate(log, 0)
