"""The nightly pipeline on a real store (SQLite and PostgreSQL): estimate, measure, solve,
publish, schedule; idempotent, resumable, one run at a time."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update

import service.nightly as nightly_module
from estimators.discovery import discovery_rates
from service.errors import ConfigError
from service.nightly import NightlySettings, cycle_start, run_nightly
from service.pipeline import release_period
from store import Database, FetchResult, LeasePolicy, LeaseQueue, add_pages, latest_plan
from store.due_times import page_schedule_finished
from store.errors import NightlyRunBusyError
from store.measurements import measure_crawl
from store.models import HOSTS, NIGHTLY_RUNS, PAGES, PLANS, RELEASED_PAGES
from store.nightly_runs import recent_runs, run_liveness, start_run
from store.plans import plan_detail
from tests.conftest import T0, count_store_reads

DAY = timedelta(days=1)


def _crawl_history(
    db: Database,
    pages: int,
    visits: int,
    new: int = 3,
    slow_every: int = 0,
    hosts: tuple[str, ...] = ("h",),
) -> None:
    """``pages`` pages fetched daily for ``visits`` days (page k changes every k-th visit,
    page 0 never; page k on ``hosts[k % len(hosts)]``), each fetch timed 0.1 s (1 s for
    every ``slow_every``-th page), plus ``new`` pages never fetched on the first host."""
    add_pages(
        db,
        [
            (f"http://{hosts[k % len(hosts)]}.test/p{k}", f"http://{hosts[k % len(hosts)]}.test")
            for k in range(pages)
        ],
        now=T0,
    )
    queue = LeaseQueue(db, LeasePolicy(max_urls=pages, max_urls_per_host=pages))
    for day in range(visits):
        now = T0 + day * DAY + timedelta(minutes=1)
        for lease in queue.lease("w", now=now):
            results = []
            for leased in lease.pages:
                k = int(leased.url.rsplit("p", 1)[1])
                changed = None if day == 0 else bool(k and day % k == 0)
                results.append(
                    FetchResult(
                        leased.page_id,
                        now,
                        "ok",
                        200,
                        changed=changed,
                        duration=1.0 if slow_every and k % slow_every == 0 else 0.1,
                        next_due_at=now + DAY - timedelta(minutes=2),
                    )
                )
            queue.finish(lease.lease_id, results, now=now)
    origin = f"http://{hosts[0]}.test"
    add_pages(db, [(f"{origin}/new{k}", origin) for k in range(new)], now=T0)


def _plans(db: Database) -> int:
    with db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(PLANS)).scalar_one())


SETTINGS = NightlySettings(period_days=1.0, periods=4, strategy=1, capacity=8.0)


def test_cycle_start_is_a_whole_period() -> None:
    start = cycle_start(T0 + timedelta(hours=5, minutes=3), 1.0)
    assert start == T0.replace(hour=0)
    assert cycle_start(start, 1.0) == start


def test_discovery_rates_recover_the_linear_model() -> None:
    rng = np.random.default_rng(0)
    old = rng.integers(10, 100, 12)
    new = rng.integers(0, 50, 12)
    found = 0.2 * old + 0.5 * new + 3.0
    rates = discovery_rates(old, new, found, bin_seconds=3600, period_seconds=86400)
    assert rates.method == "nnls"
    assert rates.oldnwt == pytest.approx(0.2, rel=1e-9)
    assert rates.newnwt == pytest.approx(0.5, rel=1e-9)
    assert rates.nconst == pytest.approx(3.0 * 24, rel=1e-9)
    pooled = discovery_rates(old[:2], new[:2], found[:2], bin_seconds=1, period_seconds=1)
    assert pooled.method == "pooled"
    assert pooled.oldnwt == pooled.newnwt == pytest.approx(found[:2].sum() / (old + new)[:2].sum())
    none = discovery_rates([0, 0], [0, 0], [5, 1], bin_seconds=1, period_seconds=1)
    assert (none.method, none.oldnwt, none.nconst) == ("none", 0.0, 0.0)


def test_measurements_of_the_crawl(db: Database) -> None:
    _crawl_history(db, pages=6, visits=4)
    m = measure_crawl(db, until=T0 + 4 * DAY, window=10 * DAY, bin_seconds=86400)
    assert m.fetches == 24
    assert m.seconds_per_fetch == pytest.approx(0.1)
    assert sum(m.bucket_fetches) == 24 and np.nanmax(m.bucket_seconds) == pytest.approx(0.1)
    assert m.since == T0 + timedelta(minutes=1)  # a young crawl: from its first fetch
    assert sum(m.new_crawls) == 6 and sum(m.old_crawls) == 18
    assert sum(m.discovered) == 0  # seeded pages are not discoveries
    found = [(f"http://h.test/found{k}", "http://h.test") for k in range(2)]
    add_pages(db, found, now=T0 + DAY, discovered=True)
    m = measure_crawl(db, until=T0 + 4 * DAY, window=10 * DAY, bin_seconds=86400)
    assert m.discovered[0] == 2  # bins of a day from the first fetch: T0 + 1 day is bin 0
    capped = measure_crawl(
        db, until=T0 + 4 * DAY, window=10 * DAY, bin_seconds=86400, max_fetches=6
    )
    assert capped.fetches == 6  # the latest fetches only


def test_cold_start_plans_new_pages_only(db: Database) -> None:
    add_pages(db, [(f"http://h.test/s{k}", "http://h.test") for k in range(20)], now=T0)
    with pytest.raises(ConfigError, match=r"plan\.capacity"):
        run_nightly(db, NightlySettings(capacity=0.0), now=T0)
    report = run_nightly(db, SETTINGS, now=T0)
    assert report.status == "published" and report.plan == 1
    assert report.cycle is not None
    assert report.cycle.new_pages == [8, 8, 8, 8]  # the seeds reveal more as they are crawled
    assert page_schedule_finished(db, 1)
    assert release_period(db, now=T0 + timedelta(hours=1)).status == "released"


def test_published_plan_fits_capacity_and_covers_populated_buckets(db: Database) -> None:
    _crawl_history(db, pages=12, visits=8)
    now = T0 + 8 * DAY
    report = run_nightly(db, SETTINGS, now=now)
    assert report.status == "published", report.message
    assert report.inputs is not None and report.inputs.instance is not None
    plan = latest_plan(db)
    assert plan is not None and plan.version == report.plan and plan.periods == 4
    assert plan.starts_at == cycle_start(now, 1.0)
    detail = plan_detail(db, plan.version)
    buckets = {b for _, b in detail.quotas}
    assert buckets == set(report.inputs.bucket_ids.tolist())
    for period in range(1, 5):
        crawls = sum(q for (p, _), q in detail.quotas.items() if p == period)
        assert crawls + detail.new_pages[period] <= 8  # equal costs: crawls fit the capacity
    assert sum(detail.new_pages.values()) >= 3  # the never-fetched pages are planned
    (run,) = recent_runs(db)
    assert run.status == "published" and run.plan_id == plan.version
    assert set(run.stages) == {
        "measure",
        "estimate",
        "importance",
        "aggregate",
        "solve",
        "publish",
        "schedule",
    }
    assert release_period(db, now=now + timedelta(minutes=5)).status == "released"


def test_the_model_looks_past_the_cycle_but_publishes_the_cycle(db: Database) -> None:
    _crawl_history(db, pages=12, visits=8)
    now = T0 + 8 * DAY
    with pytest.raises(ConfigError, match=r"plan\.horizon"):
        NightlySettings(horizon=-1)
    settings = NightlySettings(period_days=1.0, periods=4, strategy=1, capacity=8.0, horizon=9)
    report = run_nightly(db, settings, now=now)
    assert report.status == "published", report.message
    assert report.inputs is not None and report.inputs.instance is not None
    assert report.inputs.instance.periods == 9
    assert report.cycle is not None and len(report.cycle.quotas) == 4
    plan = latest_plan(db)
    assert plan is not None and plan.periods == 4
    with db.read() as conn:
        inputs = conn.execute(select(PLANS.c.inputs).where(PLANS.c.id == plan.version)).scalar()
    assert inputs["horizon"] == 9
    detail = plan_detail(db, plan.version)
    for period in range(1, 5):
        crawls = sum(q for (p, _), q in detail.quotas.items() if p == period)
        assert crawls + detail.new_pages[period] <= 8


def test_rerun_is_idempotent_and_next_cycle_warm_starts(db: Database) -> None:
    _crawl_history(db, pages=10, visits=6)
    now = T0 + 6 * DAY
    assert run_nightly(db, SETTINGS, now=now).status == "published"
    again = run_nightly(db, SETTINGS, now=now + timedelta(hours=2))
    assert again.status == "unchanged" and again.plan == 1 and _plans(db) == 1
    forced = run_nightly(db, SETTINGS, now=now, force=True)
    assert forced.status == "published" and forced.plan == 2
    following = run_nightly(db, SETTINGS, now=now + DAY)
    assert following.status == "published" and following.plan == 3
    assert following.solver["starts"] == ["uniform"]  # convex: one start, no warm start
    assert latest_plan(db).strategy == "steady freshness"  # type: ignore[union-attr]
    # The paper's model starts from the plan in force.
    paper = replace(SETTINGS, model="webfountain")
    assert run_nightly(db, paper, now=now + 2 * DAY).status == "published"
    warm = run_nightly(db, paper, now=now + 3 * DAY)
    assert warm.status == "published" and warm.solver["starts"][0] == "warm"
    assert latest_plan(db).strategy == "strategy 1"  # type: ignore[union-attr]


def test_dry_run_writes_nothing(db: Database) -> None:
    _crawl_history(db, pages=10, visits=6)
    now = T0 + 6 * DAY
    run_nightly(db, SETTINGS, now=now)
    report = run_nightly(db, SETTINGS, now=now + DAY, dry_run=True)
    assert report.status == "dry-run" and report.cycle is not None and report.plan is None
    assert report.current_quotas  # the current plan, to compare with
    assert _plans(db) == 1 and len(recent_runs(db)) == 1


def test_killed_before_publish_keeps_the_previous_plan(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crawl_history(db, pages=10, visits=6)
    now = T0 + 6 * DAY
    run_nightly(db, SETTINGS, now=now)

    def killed(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(nightly_module, "plan_within_caps", killed)
        with pytest.raises(KeyboardInterrupt):
            run_nightly(db, SETTINGS, now=now + DAY)
    plan = latest_plan(db)
    assert plan is not None and plan.version == 1
    assert recent_runs(db)[0].status == "failed"
    assert run_nightly(db, SETTINGS, now=now + DAY).status == "published"


def test_killed_after_publish_is_resumed(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    _crawl_history(db, pages=10, visits=6)
    now = T0 + 6 * DAY

    def killed(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(nightly_module, "schedule_pages", killed)
        with pytest.raises(KeyboardInterrupt):
            run_nightly(db, SETTINGS, now=now)
    assert not page_schedule_finished(db, 1)
    assert release_period(db, now=now + timedelta(minutes=1)).status == "not scheduled yet"
    report = run_nightly(db, SETTINGS, now=now + timedelta(minutes=2))
    assert report.status == "resumed" and report.resumed == 1 and _plans(db) == 1
    assert page_schedule_finished(db, 1)


def test_one_run_at_a_time_and_killed_runs_are_abandoned(db: Database) -> None:
    _crawl_history(db, pages=6, visits=4)
    now = T0 + 4 * DAY
    with run_liveness(db) as alone:  # a live run: it holds the nightly run lock
        assert alone is True
        start_run(
            db, cycle_start=now, stale_after=timedelta(minutes=30), now=now, others_dead=alone
        )
        with pytest.raises(NightlyRunBusyError, match="still running"):
            run_nightly(db, SETTINGS, now=now + timedelta(hours=1))  # even past stale_after
    # Its process gone (the lock freed, its row still running): taken over at once.
    report = run_nightly(db, SETTINGS, now=now + timedelta(minutes=1))
    assert report.status == "published"
    with db.read() as conn:
        statuses = (
            conn.execute(select(NIGHTLY_RUNS.c.status).order_by(NIGHTLY_RUNS.c.id)).scalars().all()
        )
    assert statuses == ["abandoned", "published"]


def test_capacity_the_model_leaves_idle_is_spent() -> None:
    # Discovery this high makes every crawl find more uncrawled pages than it refreshes, so
    # the model's optimum idles; the plan still spends every period's capacity.
    from estimators.buckets import bucket_aggregates
    from estimators.discovery import DiscoveryRates
    from planner.cycle.plan_inputs import cycle_from_trajectory, plan_inputs
    from planner.solver.plan_solver import PlanSolver

    agg = bucket_aggregates(np.full(496, 0), np.full(496, np.nan), np.zeros(496), period=1.0)
    inputs = plan_inputs(
        agg,
        new_pages=920,
        periods=4,
        capacity_crawls=150.0,
        bucket_seconds=np.full(256, np.nan),
        seconds_per_fetch=0.03,
        discovery=DiscoveryRates(0.84, 0.84, 0.0, "pooled"),
    )
    assert inputs.instance is not None
    solution = PlanSolver(inputs.instance, 1).solve()
    cycle = cycle_from_trajectory(inputs, solution.trajectory)
    for t in range(4):
        crawls = sum(cycle.quotas[t].values()) + cycle.new_pages[t]
        assert 149 <= crawls <= 150, (t, cycle.quotas[t], cycle.new_pages[t])


def test_only_one_of_many_concurrent_runs_starts(db: Database) -> None:
    import threading

    started, refused = [], []

    def attempt() -> None:
        try:
            started.append(start_run(db, cycle_start=T0, stale_after=timedelta(minutes=30)))
        except NightlyRunBusyError:
            refused.append(1)

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(started) == 1 and len(refused) == 5


def test_a_run_taken_for_dead_stops_at_its_next_heartbeat(db: Database) -> None:
    from store.nightly_runs import heartbeat

    slow = start_run(db, cycle_start=T0, stale_after=timedelta(minutes=30), now=T0)
    start_run(db, cycle_start=T0, stale_after=timedelta(minutes=30), now=T0 + timedelta(hours=1))
    with pytest.raises(NightlyRunBusyError, match="another run took over"):
        heartbeat(db, slow, {"estimate": 1.0})


def test_equal_crawl_costs_make_the_capacity_a_number_of_crawls(db: Database) -> None:
    _crawl_history(db, pages=12, visits=8, slow_every=2)
    with pytest.raises(ConfigError, match=r"plan\.crawl_cost"):
        NightlySettings(crawl_cost="cheap")
    measured = NightlySettings(periods=4, strategy=1, capacity=8.0)
    run_nightly(db, measured, now=T0 + 8 * DAY)  # estimates: pages in their buckets
    report = run_nightly(db, measured, now=T0 + 9 * DAY)
    assert report.inputs is not None and report.inputs.instance is not None
    assert np.ptp(report.inputs.instance.crawl_cost) > 0.1  # slow and fast buckets differ
    equal = NightlySettings(periods=4, strategy=1, capacity=8.0, crawl_cost="equal")
    report = run_nightly(db, equal, now=T0 + 9 * DAY, force=True)
    assert report.status == "published" and report.inputs is not None
    instance = report.inputs.instance
    assert instance is not None
    np.testing.assert_allclose(instance.crawl_cost, instance.crawl_cost[0, 0])
    assert instance.capacity[0] == pytest.approx(8.0 * instance.crawl_cost[0, 0])
    plan = plan_detail(db, report.plan or 0)
    for period in range(1, 5):
        crawls = sum(q for (p, _), q in plan.quotas.items() if p == period)
        assert crawls + plan.new_pages[period] <= 8


def test_a_dry_run_reuses_a_fitting_reading_and_plans_the_same(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A what-if's second dry run reuses the first one's reading of the store (same store,
    time, window and period): the same plan as reading again, without the measure and
    aggregate reads. A reading that does not fit is read again; a real run refuses one."""
    _crawl_history(db, pages=12, visits=8)
    assert run_nightly(db, SETTINGS, now=T0 + 8 * DAY).status == "published"  # estimates
    now = T0 + 9 * DAY
    measured = replace(SETTINGS, capacity=0.0)  # the capacity from the measured fetches
    other = replace(measured, periods=3, strategy=3)
    first = run_nightly(db, measured, now=now, dry_run=True)
    fresh = run_nightly(db, other, now=now, dry_run=True)
    assert first.reading is not None and first.reading.fits(db, other, now)
    assert first.inputs is not None and first.inputs.instance is not None
    assert first.inputs.instance.buckets > 1  # estimated pages in several buckets
    reads = count_store_reads(monkeypatch)
    reused = run_nightly(db, other, now=now, dry_run=True, reading=first.reading)
    assert reads == [] and reused.status == fresh.status == "dry-run"
    assert reused.cycle == fresh.cycle and reused.inputs is not None and fresh.inputs is not None
    assert reused.inputs.capacity_crawls == fresh.inputs.capacity_crawls > 0
    assert reused.reading == first.reading
    # Another time, period or window: read again.
    for changed, at in (
        (other, now + DAY),
        (replace(other, period_days=2.0), now),
        (replace(other, window_days=3.0), now),
    ):
        reads.clear()
        again = run_nightly(db, changed, now=at, dry_run=True, reading=first.reading)
        assert reads == ["measure_crawl", "aggregates_from_store"]
        assert again.reading is not None and again.reading.fits(db, changed, at)
    with pytest.raises(ValueError, match="only a dry run"):
        run_nightly(db, other, now=now, reading=first.reading)


def test_fetched_pages_with_a_bucket_and_no_rate_are_named_not_a_traceback(db: Database) -> None:
    """Estimates written by other means than ``crawlplan estimate`` (a bucket, no rate and
    no plan rate): a dry run (a what-if: it does not estimate) says how many pages, which,
    and what to run."""
    from store.models import PAGES

    _crawl_history(db, pages=12, visits=8)
    assert run_nightly(db, SETTINGS, now=T0 + 8 * DAY).status == "published"  # estimates
    with db.write() as conn:
        ids = conn.execute(select(PAGES.c.id).where(PAGES.c.bucket > 0)).scalars().all()
        assert len(ids) >= 2
        conn.execute(
            PAGES.update().where(PAGES.c.id.in_(ids[:2])).values(rate=None, plan_rate=None)
        )
    with pytest.raises(ConfigError) as error:
        run_nightly(db, SETTINGS, now=T0 + 9 * DAY, dry_run=True)
    assert str(error.value) == (
        "the store's data make no valid plan instance: 2 fetched pages have a change-rate "
        f"bucket but no rate >= 0 (page id {min(ids[:2])}, for one): run `crawlplan "
        "estimate`, which writes every estimated page's rate and bucket together"
    )
    assert _plans(db) == 1


def test_the_plans_marginal_values_are_published(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values the planner gives with its quotas (per period, per bucket and for new pages)
    are published with the plan, for the releases to spill unusable quota by."""
    _crawl_history(db, pages=12, visits=8)
    real = nightly_module.plan_within_caps

    def valued(*args: object, **kwargs: object) -> object:
        planned = real(*args, **kwargs)  # type: ignore[arg-type]
        outcome = planned.outcome
        cycle = outcome.cycle
        assert cycle is not None
        marginal = [
            {b: 0.5 + t + b / 1000 for b in q} | {200: 0.01, 201: float("nan")}
            for t, q in enumerate(cycle.quotas)
        ]
        new_marginal = [0.25 * t for t in range(len(cycle.quotas))]
        cycle = replace(cycle, marginal=marginal, new_marginal=new_marginal)
        return replace(planned, outcome=replace(outcome, cycle=cycle))

    monkeypatch.setattr(nightly_module, "plan_within_caps", valued)
    report = run_nightly(db, SETTINGS, now=T0 + 8 * DAY)
    assert report.status == "published" and report.cycle is not None
    detail = plan_detail(db, report.plan or 0)
    assert detail.marginal == {  # a value that is not finite is none
        (t + 1, b): v for t, m in enumerate(report.cycle.marginal) for b, v in m.items() if b != 201
    }
    assert detail.new_marginal == {t + 1: 0.25 * t for t in range(4)}
    assert all(detail.quotas[(t, 200)] == 0 for t in range(1, 5))  # a value, no quota


def test_a_host_whose_politeness_binds_gets_classes_of_its_own(db: Database) -> None:
    """Two hosts of 30 fetched pages, 30 crawls a day: the free plan gives each about 15.
    One host's robots.txt asks for 6 h between requests (4 a day): the plan splits its pages
    into classes of their own (keys past 255), gives them at most 4 crawls a period and
    records the host and its cap; the release queues no more of its pages than that, and
    the other host's pages take the capacity it cannot."""
    _crawl_history(db, pages=60, visits=8, new=0, hosts=("free", "slow"))
    with db.write() as conn:
        conn.execute(
            update(HOSTS).where(HOSTS.c.origin == "http://slow.test").values(crawl_delay=21_600.0)
        )
        slow = conn.execute(
            select(HOSTS.c.id).where(HOSTS.c.origin == "http://slow.test")
        ).scalar_one()
    now = T0 + 8 * DAY
    settings = replace(SETTINGS, capacity=30.0, crawl_cost="equal")
    report = run_nightly(db, settings, now=now)
    assert report.status == "published", report.message
    record = report.solver["bound_hosts"]
    assert record["host_id"] == [slow] and record["cap"] == [4.0] and record["solves"] >= 2
    plan = latest_plan(db)
    assert plan is not None
    detail = plan_detail(db, plan.version)
    assert any(b >= 256 for _, b in detail.quotas)
    for period in range(1, 5):
        on_slow = sum(q for (p, b), q in detail.quotas.items() if p == period and b >= 256)
        crawls = sum(q for (p, _), q in detail.quotas.items() if p == period)
        assert 3 <= on_slow <= 4
        assert crawls + detail.new_pages[period] == 30
    release = release_period(db, now=now + timedelta(minutes=5), min_delay_seconds=1.0)
    assert release.status == "released", release
    with db.read() as conn:
        hosts = Counter(
            conn.execute(
                select(RELEASED_PAGES.c.host_id).where(RELEASED_PAGES.c.plan_id == plan.version)
            ).scalars()
        )
    assert hosts[slow] <= 4
    assert sum(hosts.values()) == release.released


def test_plan_weights_importance_moves_crawls_to_important_buckets(db: Database) -> None:
    """``plan.weights = "importance"``: the buckets whose pages carry most OPIC importance
    get more crawls than with every page alike, the capacity the same."""
    _crawl_history(db, pages=24, visits=10, new=0)
    now = T0 + 10 * DAY
    settings = replace(SETTINGS, capacity=6.0, crawl_cost="equal")
    assert run_nightly(db, settings, now=now).status == "published"
    with db.read() as conn:
        rows = conn.execute(
            select(PAGES.c.id, PAGES.c.bucket, PAGES.c.url).where(PAGES.c.bucket > 0)
        ).all()
    # the pages that change every 2nd-4th visit: important; the others hardly
    important = {r.bucket for r in rows if int(r.url.rsplit("p", 1)[1]) in (2, 3, 4)}
    with db.write() as conn:
        for r in rows:
            k = int(r.url.rsplit("p", 1)[1])
            conn.execute(
                update(PAGES)
                .where(PAGES.c.id == r.id)
                .values(importance=20.0 if k in (2, 3, 4) else 0.5)
            )

    def crawls(weights: str) -> tuple[int, int]:
        report = run_nightly(
            db, replace(settings, weights=weights), now=now, dry_run=True, force=True
        )
        assert report.cycle is not None
        on = sum(q for quotas in report.cycle.quotas for b, q in quotas.items() if b in important)
        return on, sum(sum(q.values()) for q in report.cycle.quotas)

    equal, weighted = crawls("equal"), crawls("importance")
    assert weighted[0] > equal[0] and weighted[1] == equal[1]
    with pytest.raises(ConfigError, match=r"plan\.weights must be equal or importance"):
        replace(settings, weights="pagerank")


def test_the_nightly_run_plans_on_bayes_equivalent_rates_unless_told_otherwise(
    db: Database,
) -> None:
    """``plan.rates = "bayes"`` (the default) writes every estimated page's plan rate and
    buckets it by that rate; ``"estimates"`` clears them, and the plan buckets by estimate."""
    from estimators.buckets import BucketScale

    _crawl_history(db, pages=12, visits=8, slow_every=3)
    assert SETTINGS.rates == "bayes"
    assert run_nightly(db, SETTINGS, now=T0 + 8 * DAY).status == "published"
    columns = (PAGES.c.rate, PAGES.c.plan_rate, PAGES.c.bucket)
    with db.read() as conn:
        rows = conn.execute(select(*columns).where(PAGES.c.rate.is_not(None))).all()
    assert len(rows) >= 12
    assert all(plan is not None and plan > 0 for _, plan, _ in rows)
    assert [b for *_, b in rows] == BucketScale().assign(np.array([p for _, p, _ in rows])).tolist()
    estimates = replace(SETTINGS, rates="estimates")
    assert run_nightly(db, estimates, now=T0 + 9 * DAY, force=True).status == "published"
    with db.read() as conn:
        rows = conn.execute(select(*columns).where(PAGES.c.rate.is_not(None))).all()
    assert all(plan is None for _, plan, _ in rows)
    assert [b for *_, b in rows] == BucketScale().assign(np.array([r for r, _, _ in rows])).tolist()


def test_with_estimating_off_the_plan_uses_the_rates_the_store_holds(db: Database) -> None:
    """``estimate=False`` (the demo's oracle) leaves the rates and buckets written by
    something else untouched and plans on them: the page written as fast gets a crawl every
    period, the pages written as never changing only the capacity left idle; the estimate
    stage is not run at all."""
    from estimators.buckets import BucketScale
    from store.estimates import write_estimates

    _crawl_history(db, pages=6, visits=5, new=0)
    with db.read() as conn:
        ids = [int(i) for i in conn.execute(select(PAGES.c.id).order_by(PAGES.c.id)).scalars()]
    rates = [0.0] * (len(ids) - 1) + [2.0]  # changes per day: one page changes, twice a day
    buckets = BucketScale().assign(np.array(rates)).tolist()
    write_estimates(db, ids, rates, rates, rates, ["true"] * len(ids), buckets)
    oracle = replace(SETTINGS, capacity=2.0, estimate=False, explore=0.0)
    report = run_nightly(db, oracle, now=T0 + 5 * DAY)
    assert report.status == "published"
    assert "estimate" not in report.stages and "importance" in report.stages
    with db.read() as conn:
        stored = conn.execute(
            select(PAGES.c.rate, PAGES.c.bucket, PAGES.c.estimator).order_by(PAGES.c.id)
        ).all()
    assert [(r, b, e) for r, b, e in stored] == [
        (r, b, "true") for r, b in zip(rates, buckets, strict=True)
    ]
    detail = plan_detail(db, report.plan)
    crawls = Counter[int]()
    for (_period, bucket), pages in detail.quotas.items():
        crawls[bucket] += pages
    slow, fast = buckets[0], buckets[-1]
    assert set(crawls) <= {slow, fast}
    # the fast page is crawled every period; what is left goes to the unchanging pages
    assert crawls[fast] == oracle.periods
    # estimating again replaces the written rates with the crawl's own estimates
    estimating = replace(oracle, estimate=True)
    assert run_nightly(db, estimating, now=T0 + 5 * DAY, force=True).status == "published"
    with db.read() as conn:
        names = set(conn.execute(select(PAGES.c.estimator)).scalars())
    assert "true" not in names
