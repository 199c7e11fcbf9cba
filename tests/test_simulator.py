"""The simulator: metrics on a hand-computed world, closed forms on large ones, the rules."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios.policies import POLICY_KINDS, Policy, RandomPolicy, UniformPolicy, make_policy
from scenarios.simulator import (
    CrawlLog,
    Observations,
    SimulationError,
    SimulationSettings,
    simulate,
)
from scenarios.world import (
    LAST_MODIFIED_MODES,
    STATIC_DATE_AGE,
    PeriodChanges,
    World,
    WorldSpec,
    build_world,
)

NAN = math.nan


@dataclass(frozen=True)
class ScriptedWorld(World):
    """A world whose changes are given: period -> (segment A times, segment B times)."""

    script: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)

    def period_changes(self, period: int, seed: int) -> PeriodChanges:
        a, b = self.script.get(period, ([], []))

        def seg(times: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            if not times:
                return np.zeros(1, np.int64), np.array([NAN]), np.array([NAN])
            return np.array([len(times)]), np.array([min(times)]), np.array([max(times)])

        (ca, fa, la), (cb, fb, lb) = seg(a), seg(b)
        return PeriodChanges(ca, fa, la, cb, fb, lb)


class Scripted(Policy):
    """Crawls page 0 in the given periods."""

    def __init__(self, periods: set[int]) -> None:
        self.name = "scripted"
        self.periods = periods

    def select(self, period: int, budget: int, log: CrawlLog) -> np.ndarray:
        return np.array([0] if period in self.periods else [], dtype=np.int64)


def _one_page_world(rate: float) -> ScriptedWorld:
    base = build_world(WorldSpec(pages=1, hosts=1, sections_per_host=1), 0, 4)
    values = {f.name: getattr(base, f.name) for f in fields(World)}
    values["slot"] = np.array([0.5])
    values["rate"] = np.array([rate])
    script = {1: ([1.25], []), 2: ([], [2.75])}
    return ScriptedWorld(**values, script=script)


def test_metrics_of_a_hand_computed_world() -> None:
    lam = 0.3
    world = _one_page_world(lam)
    settings = SimulationSettings(periods=4, budget=1, warm_start=False)
    result = simulate(world, Scripted({0, 1}), settings)
    m = result.metrics.set_index("period")
    # period 0: never fetched until the crawl at 0.5 (stale since birth), no change after
    assert m.loc[0, "freshness"] == pytest.approx(0.5)
    assert m.loc[0, "age"] == pytest.approx(0.125)  # integral of s over [0, 0.5)
    assert m.loc[0, "obsolescence"] == pytest.approx(lam * (0.125 + 0.125))
    assert m.loc[0, "obsolete_pages"] == 0 and m.loc[0, "uncrawled_pages"] == 0
    assert np.isnan(m["change_ratio"][0])  # a first fetch is no re-crawl
    # period 1: change at 1.25, crawl at 1.5 sees it
    assert m.loc[1, "freshness"] == pytest.approx(0.75)
    assert m.loc[1, "age"] == pytest.approx(0.25**2 / 2)
    assert m.loc[1, "obsolescence"] == pytest.approx(lam * ((1.0 - 0.25) / 2 + 0.125))
    assert m.loc[1, "change_ratio"] == 1.0
    # period 2: no crawl, change at 2.75
    assert m.loc[2, "freshness"] == pytest.approx(0.75)
    assert m.loc[2, "age"] == pytest.approx(0.25**2 / 2)
    assert m.loc[2, "obsolescence"] == pytest.approx(lam * (1.5**2 - 0.5**2) / 2)
    assert m.loc[2, "obsolete_pages"] == 1
    # period 3: stale since 2.75 all period
    assert m.loc[3, "freshness"] == 0.0
    assert m.loc[3, "age"] == pytest.approx((1.25**2 - 0.25**2) / 2)
    # importance of a single page: weighted = unweighted
    assert np.allclose(m["freshness_w"], m["freshness"])
    assert result.crawls.tolist() == [2]


def test_uniform_refresh_matches_the_periodic_closed_forms() -> None:
    lam, interval = 0.1, 10
    world = build_world(WorldSpec(pages=20_000, hosts=20, rate_model="constant", rate=lam), 1, 40)
    settings = SimulationSettings(periods=30, budget=2_000, warmup=10)
    summary = simulate(world, UniformPolicy(), settings).summary()
    r = lam * interval
    assert summary["freshness"] == pytest.approx(-math.expm1(-r) / r, rel=0.01)
    age = interval / 2 - 1 / lam + -math.expm1(-r) / (lam**2 * interval)
    assert summary["age"] == pytest.approx(age, rel=0.01)
    assert summary["obsolescence"] == pytest.approx(r / 2, rel=1e-9)  # Xyleme: lambda I / 2


def test_random_refresh_approaches_the_poisson_closed_form() -> None:
    # Each page is crawled with probability p per period; with p and lambda small the gaps
    # are nearly exponential and freshness tends to 1 / (1 + r), r = lambda / p.
    lam, p, pages = 0.02, 0.02, 10_000
    world = build_world(WorldSpec(pages=pages, hosts=10, rate_model="constant", rate=lam), 2, 250)
    settings = SimulationSettings(periods=150, budget=int(p * pages), warmup=100, seed=2)
    summary = simulate(world, RandomPolicy(seed=2), settings).summary()
    r = lam / p
    geometric = p / lam * (1 - p * math.exp(-lam) / (1 - (1 - p) * math.exp(-lam)))
    assert summary["freshness"] == pytest.approx(geometric, rel=0.01)
    assert summary["freshness"] == pytest.approx(1 / (1 + r), rel=0.01)


def test_a_run_is_reproducible_and_changes_do_not_depend_on_the_policy() -> None:
    world = build_world(WorldSpec(pages=1_000, hosts=10), 5, 12)
    settings = SimulationSettings(periods=8, budget=100, warmup=4, seed=3)
    a = simulate(world, make_policy({"kind": "nutch"}), settings)
    b = simulate(world, make_policy({"kind": "nutch"}), settings)
    assert a.metrics.equals(b.metrics)
    c = simulate(world, make_policy({"kind": "uniform"}), settings)
    # same pages alive, same world: only the crawling differs
    assert a.metrics["alive"].equals(c.metrics["alive"])


@pytest.mark.parametrize("kind", sorted(POLICY_KINDS))
def test_every_policy_spends_exactly_its_budget(kind: str) -> None:
    spec = WorldSpec(pages=1_500, hosts=15, birth_rate=0.01, death_rate=0.01)
    world = build_world(spec, 1, 12)
    extra: dict[str, object] = {}
    if kind in ("xyleme", "freshness", "harmonic"):
        extra = {"rates": "true"}
    elif kind == "cohorts":
        # Pages are born every period, so the cohort LP is solved every period: 8 rate
        # classes take a quarter of the default 32's time (28 s on a 2-core machine), and
        # the crawl fills its budget the same way.
        extra = {"buckets": 8}
    policy = make_policy({"kind": kind, **extra})
    settings = SimulationSettings(periods=8, budget=150, warmup=4, oracle=True)
    result = simulate(world, policy, settings)
    assert (result.metrics["crawls"] == 150).all()


class Greedy(Policy):
    def __init__(self, pick: np.ndarray) -> None:
        self.name = "bad"
        self.pick = pick

    def select(self, period: int, budget: int, log: CrawlLog) -> np.ndarray:
        return self.pick


@pytest.mark.parametrize(
    ("pick", "message"),
    [
        (np.arange(11), "over the budget"),
        (np.array([1, 1]), "twice"),
        (np.array([10_000]), "out of range"),
    ],
)
def test_the_simulator_rejects_a_policy_that_breaks_the_rules(
    pick: np.ndarray, message: str
) -> None:
    world = build_world(WorldSpec(pages=100, hosts=5), 1, 2)
    with pytest.raises(SimulationError, match=message):
        simulate(world, Greedy(pick), SimulationSettings(periods=2, budget=10))


def test_unknown_pages_cannot_be_crawled() -> None:
    world = build_world(WorldSpec(pages=100, hosts=5, birth_rate=0.1), 1, 3)
    unborn = np.flatnonzero(world.born == 2)[:1]
    with pytest.raises(SimulationError, match="does not know"):
        simulate(world, Greedy(unborn), SimulationSettings(periods=2, budget=10))


def test_importance_weighting() -> None:
    flat = build_world(WorldSpec(pages=2_000, hosts=20, importance_sigma=0.0), 1, 6)
    result = simulate(flat, UniformPolicy(), SimulationSettings(periods=6, budget=200))
    assert np.allclose(result.metrics["freshness_w"], result.metrics["freshness"])
    skewed = build_world(WorldSpec(pages=2_000, hosts=20, importance_sigma=2.0), 1, 6)
    result = simulate(skewed, UniformPolicy(), SimulationSettings(periods=6, budget=200))
    assert not np.allclose(result.metrics["freshness_w"], result.metrics["freshness"])


def test_dead_pages_waste_crawls_and_are_dropped() -> None:
    world = build_world(WorldSpec(pages=2_000, hosts=20, death_rate=0.05), 1, 20)
    result = simulate(world, UniformPolicy(), SimulationSettings(periods=20, budget=400))
    assert result.metrics["wasted"].sum() > 0
    # round robin finds each dead page once, then never again
    dead = np.count_nonzero(world.dies < 20)
    assert result.metrics["wasted"].sum() <= dead


def test_oracle_optima_of_a_uniform_web_are_the_periodic_closed_forms() -> None:
    from scenarios.runner import freshness_bound, obsolescence_bound

    lam = np.full(1_000, 0.1)
    assert freshness_bound(lam, 100) == pytest.approx(-math.expm1(-1.0))
    assert obsolescence_bound(lam, 100) == pytest.approx(0.5)
    # with a crawl per page per period available, every page is crawled every period
    assert freshness_bound(lam, 1_000) == pytest.approx(-math.expm1(-0.1) / 0.1)


def test_crawls_per_cycle_by_true_change_rate() -> None:
    import pandas as pd

    from scenarios.runner import crawls_by_rate
    from scenarios.simulator import SimulationResult

    result = SimulationResult(
        policy="p",
        metrics=pd.DataFrame(),
        crawls=np.array([2, 4, 7, 0]),
        rate=np.array([0.002, 0.003, 0.5, 0.5]),
        lifetime=np.array([14, 14, 14, 0]),  # the last page never lived in the measured periods
        seconds=0.0,
    )
    table = crawls_by_rate(result, cycle=7)
    assert table["pages"].tolist() == [2, 1]
    assert table["crawls_per_cycle"].tolist() == pytest.approx([1.5, 3.5])
    assert table["rate_low"].iloc[0] < 0.002 < table["rate_high"].iloc[0]


def test_opic_importance_converges_to_the_link_graph_pagerank() -> None:
    from scipy.stats import spearmanr

    world = build_world(WorldSpec(pages=3_000, hosts=30, links_per_page=8.0), 1, 21)
    seen: list[CrawlLog] = []

    class Watch(UniformPolicy):
        def observe(self, obs: object, log: CrawlLog) -> None:
            seen[:] = [log]

    settings = SimulationSettings(periods=21, budget=500, importance="opic")
    simulate(world, Watch(), settings)
    estimate = seen[0].importance
    assert estimate.mean() == pytest.approx(1.0)
    assert spearmanr(estimate, world.importance).statistic > 0.9
    with pytest.raises(SimulationError, match="links_per_page"):
        no_links = build_world(WorldSpec(pages=100, hosts=5), 1, 2)
        simulate(
            no_links, UniformPolicy(), SimulationSettings(periods=2, budget=10, importance="opic")
        )


class Recorder(Policy):
    """Delegates to ``inner`` and records the pages each period's crawls actually fetched."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.crawled: list[np.ndarray] = []

    def start(self, log: CrawlLog) -> None:
        self.inner.start(log)

    def select(self, period: int, budget: int, log: CrawlLog) -> np.ndarray:
        return self.inner.select(period, budget, log)

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        self.crawled.append(obs.page.copy())
        self.inner.observe(obs, log)


_PROFILE_KINDS = ("uniform", "freshness", "nutch", "random")


@settings(max_examples=12, deadline=None)
@given(
    raw=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=7).filter(lambda v: sum(v) > 0.1),
    kind=st.sampled_from(_PROFILE_KINDS),
    seed=st.integers(0, 50),
)
def test_capacity_per_period_is_respected_and_spent(raw: list[float], kind: str, seed: int) -> None:
    profile = tuple(np.asarray(raw) / np.mean(raw))
    world = build_world(WorldSpec(pages=400, hosts=8, birth_rate=0.02), seed, 12)
    extra = {"rates": "true"} if kind == "freshness" else {}
    policy = Recorder(make_policy({"kind": kind, **extra}))
    sim = SimulationSettings(
        periods=8, budget=40, warmup=3, oracle=True, seed=seed, budget_profile=profile
    )
    result = simulate(world, policy, sim)
    budgets = sim.budgets()
    assert budgets.tolist() == [round(40 * profile[t % len(profile)]) for t in range(11)]
    # every policy spends exactly each period's capacity (enough known pages)
    assert result.metrics["crawls"].tolist() == budgets.astype(float).tolist()
    assert [c.size for c in policy.crawled] == budgets.tolist()


def test_a_budget_profile_must_average_one() -> None:
    with pytest.raises(SimulationError, match=r"mean is 0\.75"):
        SimulationSettings(periods=2, budget=10, budget_profile=(0.5, 1.0))
    with pytest.raises(SimulationError, match=">= 0"):
        SimulationSettings(periods=2, budget=10, budget_profile=(-1.0, 3.0))


@settings(max_examples=12, deadline=None)
@given(
    polite_hosts=st.integers(1, 4),
    cap=st.integers(1, 12),
    kind=st.sampled_from((*_PROFILE_KINDS, "stormcrawler", "webfountain")),
    seed=st.integers(0, 50),
)
def test_no_host_gets_more_crawls_than_its_politeness_cap(
    polite_hosts: int, cap: int, kind: str, seed: int
) -> None:
    spec = WorldSpec(pages=600, hosts=6, polite_hosts=polite_hosts, polite_cap=cap)
    world = build_world(spec, seed, 10)
    extra = {"rates": "true"} if kind in ("freshness", "webfountain") else {}
    policy = Recorder(make_policy({"kind": kind, **extra}))
    result = simulate(
        world, policy, SimulationSettings(periods=6, budget=80, warmup=4, oracle=True)
    )
    limit = world.host_cap
    assert np.isinf(limit[polite_hosts:]).all() and (limit[:polite_hosts] == cap).all()
    for pages in policy.crawled:
        per_host = np.bincount(world.host[pages], minlength=spec.hosts)
        assert (per_host <= limit).all()
    crawls = result.metrics["crawls"] + result.metrics["deferred"]
    assert (crawls <= 80).all()
    if kind in ("uniform", "freshness", "nutch", "stormcrawler"):
        # polite fetch lists: the budget goes to the hosts that can take it
        assert (result.metrics["deferred"] == 0).all()
        assert (result.metrics["crawls"] == 80).all()


def test_crawls_over_a_hosts_cap_are_deferred_not_made() -> None:
    spec = WorldSpec(pages=200, hosts=4, polite_hosts=1, polite_cap=3)
    world = build_world(spec, 1, 2)
    own = np.flatnonzero(world.host == 0)[:10]
    policy = Recorder(Greedy(own))
    result = simulate(world, policy, SimulationSettings(periods=2, budget=10))
    assert result.metrics["crawls"].tolist() == [3.0, 3.0]
    assert result.metrics["deferred"].tolist() == [7.0, 7.0]
    assert [p.tolist() for p in policy.crawled] == [own[:3].tolist()] * 2  # the policy's order


def test_polite_top_pages_count_the_pages_already_taken() -> None:
    from scenarios.policies import top_pages

    spec = WorldSpec(pages=200, hosts=4, polite_hosts=1, polite_cap=3)
    world = build_world(spec, 1, 2)
    log = CrawlLog(world, SimulationSettings(periods=1, budget=10))
    own = np.flatnonzero(world.host == 0)
    priority = np.where(world.host == 0, 2.0, 1.0)  # host 0's pages first
    first = top_pages(priority, 10, log)
    assert np.count_nonzero(world.host[first] == 0) == 3 and first.size == 10
    more = top_pages(priority, 10, log, taken=own[:2])
    assert np.count_nonzero(world.host[more] == 0) == 1  # 2 of the 3 already taken
    assert (world.host[top_pages(priority, 10)] == 0).all()  # no log: no caps


class _Keeps(UniformPolicy):
    """The uniform recrawl, keeping the crawl log it was last shown."""

    def select(self, period: int, budget: int, log: CrawlLog) -> np.ndarray:
        self.log = log
        return super().select(period, budget, log)


def test_static_servers_send_one_old_date_whatever_changes() -> None:
    spec = WorldSpec(
        pages=400,
        hosts=8,
        rate_model="constant",
        rate=0.5,
        last_modified={"static": 0.5, "honest": 0.5},
    )
    world = build_world(spec, 3, 12)
    policy = _Keeps()
    simulate(world, policy, SimulationSettings(periods=12, budget=100, warm_start=False))
    page, _at, changed, lm = policy.log.fetch_log()
    static = world.host_last_modified[world.host[page]] == LAST_MODIFIED_MODES.index("static")
    assert static.any() and (~static).any()
    assert np.all(lm[static] == -STATIC_DATE_AGE)  # one date, a month before the start
    assert np.nansum(changed[static]) > 0  # while the pages change
    assert np.unique(lm[~static]).size > 10  # honest hosts: each page's own last change


def test_the_warm_start_fetches_leave_their_last_modified_in_the_log() -> None:
    # The crawler that fetched the initial pages before the run read their Last-Modified, as a
    # real one does: without it, a page's first fetch in the run had no date to compare with,
    # and a small budget's estimates lost half their evidence.
    spec = WorldSpec(
        pages=300,
        hosts=6,
        rate_model="constant",
        rate=0.2,
        last_modified={"honest": 0.5, "missing": 0.5},
    )
    world = build_world(spec, 4, 3)
    policy = _Keeps()
    simulate(world, policy, SimulationSettings(periods=3, budget=30))
    page, at, changed, lm = policy.log.fetch_log()
    before = at < 0
    assert np.array_equal(np.sort(page[before]), np.arange(300))  # one each, before the run
    assert np.all(np.isnan(changed[before]))  # a first fetch: no interval
    honest = world.host_last_modified[world.host[page]] == LAST_MODIFIED_MODES.index("honest")
    assert np.all(lm[before & honest] < at[before & honest])  # the page's last change
    assert np.all(np.isnan(lm[before & ~honest]))
    # an Exp(rate) age before the fetch: mean 1 / rate = 5 periods
    ages = (at - lm)[before & honest]
    assert ages.size > 100 and 3.5 < ages.mean() < 6.5
    assert np.all(at[~before] >= 0)
