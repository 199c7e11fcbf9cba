"""The end-to-end demo, short: a synthetic web crawled for real under nightly plans and under
the uniform baseline at the same budget, scored against ground truth; each side's web server,
worker API and worker pool in a process of its own, as ``crawlplan demo`` runs them."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from estimators.buckets import BucketScale
from scenarios.demo_report import periodic_freshness, reference_freshness, share_of_gain
from scenarios.ground_truth import (
    match_fetches,
    repository_freshness,
    score_change_detection,
    time_averaged_freshness,
)
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from service.demo import (
    WORLDS,
    DemoReport,
    DemoSettings,
    _host_delays,
    _keeping_up,
    _merged_quota_rows,
    _Truth,
    _web_config,
    run_demo,
)
from store import open_database
from store.models import (
    NIGHTLY_RUNS,
    OBSERVATIONS,
    PAGES,
    PERIOD_RELEASES,
    PLAN_PERIODS,
    PLANS,
    QUOTAS,
)
from tests.interrupts import interruptible

ROOT = Path(__file__).resolve().parent.parent


def test_short_demo_end_to_end(tmp_path: Path) -> None:
    lines: list[str] = []
    settings = DemoSettings(
        tmp_path, hosts=6, pages=6, period=1.5, periods=3, cycles=3, workers=3, share=0.6
    )
    report = run_demo(settings, say=lines.append)
    # Freshness was measured every period for both crawls, against ground truth.
    assert len(report.seconds) == 9 and len(report.cycles) == 3
    assert all(0.0 <= f <= 1.0 for f in report.planned + report.uniform)
    assert report.planned[-1] > 0.2 and report.uniform[-1] > 0.2
    # Both crawls kept the same budget (quotas within capacity), kept up with their releases
    # (counted by the crawl processes) and stayed polite (each server's own log).
    budget = settings.budget
    for name, fetched in report.fetched.items():
        assert 0 < fetched <= 9 * budget + 40  # + redirects followed
        assert sum(report.fetched_per_period[name]) >= 0.7 * sum(report.released[name])
    assert report.smallest_gap >= 0.05 - 0.005
    assert any(line.startswith("cycle 3 period 3: freshness") for line in lines)  # progress
    db = open_database(f"sqlite:///{tmp_path / 'crawlplan.db'}")
    with db.read() as conn:
        plans = conn.execute(select(func.count()).select_from(PLANS)).scalar_one()
        runs = conn.execute(
            select(func.count()).where(NIGHTLY_RUNS.c.status == "published")
        ).scalar_one()
        releases = conn.execute(select(func.count()).select_from(PERIOD_RELEASES)).scalar_one()
        estimated = conn.execute(
            select(func.count()).where(PAGES.c.estimator.is_not(None))
        ).scalar_one()
        discovered = conn.execute(select(func.count()).select_from(PAGES)).scalar_one()
        fetches = conn.execute(select(func.count()).select_from(OBSERVATIONS)).scalar_one()
        released = conn.execute(select(func.sum(PERIOD_RELEASES.c.pages))).scalar_one()
        planned = (
            conn.execute(select(func.sum(QUOTAS.c.pages))).scalar_one()
            + conn.execute(select(func.sum(PLAN_PERIODS.c.new_pages))).scalar_one()
        )
    assert plans == runs == 3  # a plan published by each cycle's nightly run
    assert releases >= 6  # the periods were released to the workers
    assert discovered > 36  # pages found beyond the 36 seeded (redirects, blocked pages)
    assert estimated > 0 and fetches > 0  # pages fetched and estimated
    assert released >= 0.5 * planned * releases / (3 * 3)  # quotas met in the periods run
    assert fetches >= 0.7 * released  # and the workers fetched what was released
    # Every period was released by the side's worker API (crawlplan serve's period releaser,
    # which reported each release to the demo), none by the demo itself: the demo counted
    # them all, but for one the API may have made after the last sample.
    assert 0 < sum(report.released["crawlplan"]) <= released
    assert sum(report.released["crawlplan"]) >= released - max(report.released["crawlplan"])
    assert any(line.startswith("| 3 |") for line in lines)  # the per-cycle table
    assert any(line.startswith("Kept up, uniform") for line in lines)
    nightly = [line for line in lines if line.startswith("  nightly (crawlplan): plan")]
    assert nightly and all("pages marked for a probe" in line for line in nightly)
    assert "0 false alarms" in report.detection
    # Steady state after one uniform revisit of the 36 pages (7.7 s: two 4.5 s cycles),
    # beside the references computed from the true rates; no request robots.txt disallows
    # and no gap under a host's delay in either server's log.
    assert report.warmup_cycles == 2
    assert set(report.steady) == {"crawlplan", "uniform"}
    assert report.sampled["crawlplan"] == pytest.approx(float(np.mean(report.planned[6:])))
    assert 0.0 < report.steady["crawlplan"] <= 1.0 and 0.0 < report.steady["uniform"] <= 1.0
    assert 0.0 < report.uniform_computed <= report.optimum < 1.0
    assert report.impolite == {"crawlplan": 0, "uniform": 0}
    assert report.disallowed == {"crawlplan": 0, "uniform": 0}
    assert any(line.startswith("Steady state (cycles 3-3") for line in lines)
    for name in ("report.md", "freshness.csv", "freshness.png", "pages.csv"):
        assert (tmp_path / name).stat().st_size > 0
    # pages.csv: one row per page of the web (36), its URL, its true rate, crawlplan's
    # estimate where it has one, the last plan's crawls for its class, and each crawl's
    # fetches after the warm-up (at most all of its fetches)
    with (tmp_path / "pages.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["page"]) for r in rows] == list(range(36))
    assert len({r["url"] for r in rows}) == 36 and all(r["url"].startswith("http") for r in rows)
    assert all(float(r["rate"]) > 0 for r in rows)
    assert all(float(r["planned"]) >= 0 for r in rows) and any(float(r["planned"]) for r in rows)
    assert any(r["estimate"] for r in rows)
    assert all(r["estimator"] for r in rows if r["estimate"])
    for name in ("crawlplan", "uniform"):
        steady = sum(int(r[f"fetches_{name}"]) for r in rows)
        assert 0 < steady <= report.fetched[name]
        # each page's fetches over the whole run, from its server's log: at least those of
        # the steady state (the log also holds answers the workers' counters may not: the
        # noise check's repeated fetches, a fetch after the pool's last count)
        whole = report.fetches_per_page[name]
        assert whole.shape == (36,)
        assert all(whole[int(r["page"])] >= int(r[f"fetches_{name}"]) for r in rows)
        assert steady < whole.sum()
    planned, uniform = report.fetches_per_page["crawlplan"], report.fetches_per_page["uniform"]
    fetches_line = next(line for line in lines if line.startswith("Fetches: crawlplan"))
    assert (
        f"(a page: median {np.median(planned):g} and {np.median(uniform):g}; fetched at least "
        f"4 times: {np.mean(planned >= 4):.0%} and {np.mean(uniform >= 4):.0%} of the pages)"
    ) in fetches_line


def test_the_oracle_plans_on_the_webs_true_rates_and_estimates_nothing(tmp_path: Path) -> None:
    """``oracle``: the crawlplan side's store holds every page's true rate (per day; 0 for the
    host's special pages, which never change, once found before a nightly run) and the
    bucket of that rate, and its nightly runs plan without an estimate stage; the uniform
    side is the usual one."""
    settings = DemoSettings(
        tmp_path, hosts=4, pages=4, period=1.5, periods=3, cycles=2, workers=2, oracle=True
    )
    lines: list[str] = []
    report = run_demo(settings, say=lines.append)
    assert any(line.startswith("oracle: ") for line in lines)
    assert report.plans == 4 and sum(report.fetched.values()) > 0
    web = SyntheticWeb(_web_config(settings))
    db = open_database(f"sqlite:///{tmp_path / 'crawlplan.db'}")
    with db.read() as conn:
        rows = conn.execute(select(PAGES.c.url, PAGES.c.rate, PAGES.c.estimator)).all()
        buckets = conn.execute(
            select(PAGES.c.rate, PAGES.c.bucket).where(PAGES.c.rate.is_not(None))
        ).all()
        stages = list(
            conn.execute(
                select(NIGHTLY_RUNS.c.stages).where(NIGHTLY_RUNS.c.status == "published")
            ).scalars()
        )
    assert len(stages) == 2  # the first plan's run and the first cycle's end
    assert all("estimate" not in s and "schedule" in s for s in stages)
    rates = np.array([r for r, _ in buckets])
    assert [b for _, b in buckets] == BucketScale().assign(rates).tolist()
    paths = {web.path(p): p for p in range(web.n_pages)}
    listed = {}
    for url, rate, estimator in rows:
        path = "/" + url.split("/", 3)[3]
        if path in paths:  # seeded before the first nightly run
            assert estimator == "true", url
            listed[url] = rate
        else:  # a special page, unless found after the last nightly run
            assert (rate, estimator) in ((0.0, "true"), (None, None)), url
    assert len(listed) == web.n_pages
    truth = sorted(float(r) * 86_400.0 for r in web.rate)
    assert sorted(listed.values()) == pytest.approx(truth)
    # the uniform side estimated as usual
    uniform = open_database(f"sqlite:///{tmp_path / 'uniform.db'}")
    with uniform.read() as conn:
        assert "true" not in set(conn.execute(select(PAGES.c.estimator)).scalars())


def test_time_averaged_freshness_of_one_page_is_its_fresh_share_of_the_window() -> None:
    web = SyntheticWeb(WebConfig(hosts=1, pages_per_host=1, rate_low=0.05, rate_high=0.05))
    changes = web.change_times(0)
    c0, c1 = float(changes[0]), float(changes[1])  # two changes (horizon 3,600 s, 0.05/s)
    # Served just before the first change, again halfway to the second: fresh from each
    # fetch to the next change, stale between c0 and the second fetch and after c1.
    a, b = c0 - 1.0, (c0 + c1) / 2
    start, end = a - 2.0, c1 + 3.0
    expected = ((c0 - a) + (c1 - b)) / (end - start)
    assert time_averaged_freshness(web, {0: [b, a]}, start, end) == pytest.approx(expected)
    assert time_averaged_freshness(web, {}, start, end) == 0.0
    still = SyntheticWeb(WebConfig(hosts=1, pages_per_host=2, static_share=1.0))
    assert still.change_times(0).size == 0  # a page that never changes: fresh once served
    assert time_averaged_freshness(still, {0: [5.0]}, 0.0, 10.0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="end > start"):
        time_averaged_freshness(web, {0: [a]}, end, start)


def test_an_answer_the_crawler_never_recorded_is_no_false_alarm() -> None:
    """A fetch the server answered but the crawler did not store (a noise check's extra
    fetch, a read timeout after the server logged its 200) sits between two recorded ones.
    The second recorded fetch's flag compares with the first: the page changed between
    them, so the flag is a detection. Paired in log order it was scored against the
    unrecorded answer, after the change: a false alarm, the short demo's one in seven runs."""
    web = SyntheticWeb(WebConfig(hosts=1, pages_per_host=1, rate_low=0.05, rate_high=0.05))
    c0, c1 = (float(t) for t in web.change_times(0)[:2])
    # The demo's own case: the crawler's noise check fetches a host's first page a few times
    # in a row and records one observation; paired in order, a later flag was scored against
    # the interval between two noise fetches.
    a, lost, b = c0 - 1.0, c0 + 0.25 * (c1 - c0), c0 + 0.5 * (c1 - c0)
    served = {0: [a, lost, b]}
    # The crawler's start times run a few ms ahead of the server's log.
    recorded = {0: [(a - 0.004, None), (b - 0.004, True)]}
    fetches = match_fetches(served, recorded)
    assert fetches == {0: [(a, None), (b, True)]}
    score = score_change_detection(web, fetches)
    assert (score.revisits, score.real_changes, score.detected, score.false_alarms) == (1, 1, 1, 0)
    # A 304 after the change would be a miss, and the same flag with no change between
    # (both fetches after c0) a false alarm: the scorer still counts both.
    late = {0: [(lost, None), (b, False)]}
    assert score_change_detection(web, late).false_alarms == 0
    assert score_change_detection(web, {0: [(lost, None), (b, True)]}).false_alarms == 1
    assert score_change_detection(web, {0: [(a, None), (b, False)]}).missed == 1
    # A fetch the log never answered (or answered a minute later) is left out; each answer
    # is matched once.
    assert match_fetches({0: [a]}, {0: [(a - 0.004, None), (a + 0.5, True)]}) == {0: [(a, None)]}
    assert match_fetches({0: [a + 120.0]}, {0: [(a, None)]}) == {}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_time_averaged_freshness_is_the_mean_of_dense_samples(seed: int) -> None:
    """The exact integral against the instant scorer sampled every 0.05 s (pages born and
    dying within the window too)."""
    web = SyntheticWeb(
        WebConfig(hosts=2, pages_per_host=8, born_share=0.3, dies_share=0.3, seed=seed)
    )
    rng = np.random.default_rng(seed)
    served = {p: sorted(rng.uniform(0, 400, int(rng.integers(0, 6)))) for p in range(web.n_pages)}
    grid = np.arange(100.0, 300.0, 0.05) + 0.025
    alive = [sum(web.alive(p, t) for p in range(web.n_pages)) for t in grid]
    fresh = []
    for t in grid:
        latest = {p: max(x for x in ts if x <= t) for p, ts in served.items() if ts and ts[0] <= t}
        fresh.append(repository_freshness(web, latest, t) * alive[len(fresh)])
    dense = sum(fresh) / sum(alive)
    assert time_averaged_freshness(web, served, 100.0, 300.0) == pytest.approx(dense, abs=2e-3)


def test_fast_freshness_matches_the_ground_truth_scorer() -> None:
    web = SyntheticWeb(WebConfig(hosts=3, pages_per_host=20, born_share=0.3, dies_share=0.2))
    truth = _Truth(web)
    rng = np.random.default_rng(1)
    for t in (5.0, 300.0, 2000.0):
        fetched = {p: float(rng.uniform(0, t)) for p in range(web.n_pages) if rng.random() < 0.7}
        flat = np.full(web.n_pages, np.nan)
        for page, at in fetched.items():
            flat[page] = at
        assert truth.freshness(flat, t) == pytest.approx(repository_freshness(web, fetched, t))


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), None if it is gone or a zombie: with
    the pid, it names one process even if the pid is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_ctrl_c_stops_the_demo_and_every_child(tmp_path: Path) -> None:
    # --steady, every setting of its preset overridden but the web's: options win
    options = ["--steady", "--hosts", "4", "--pages", "4", "--period", "1", "--periods", "2"]
    options += ["--cycles", "100", "--workers", "2", "--capacity", "8"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "demo", "--dir", str(tmp_path / "out"), *options],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=interruptible,
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("cycle 1 period 2"):
                break
        else:
            pytest.fail("the demo ended before crawling:\n" + "".join(seen))
        said = "".join(seen)
        assert "4 hosts x 4 pages = 16 pages" in said and "budget: 8 crawls per 1 s" in said
        children = {pid: _started(pid) for pid in _descendants(proc.pid)}
        # two web servers, two worker APIs and two worker pools, at least
        assert len(children) >= 6, children
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, "".join(seen) + rest  # the CLI's exit for an interrupt

    def left() -> list[int]:
        return [pid for pid, started in children.items() if started and _started(pid) == started]

    deadline = time.monotonic() + 20
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left(), "child processes left behind"


def test_urgent_crawls_count_with_the_releases_a_crawl_kept_up_with() -> None:
    report = DemoReport(
        released={"crawlplan": [90, 80], "uniform": [100, 100]},
        fetched_per_period={"crawlplan": [100, 100], "uniform": [100, 99]},
        carried_over={"crawlplan": [0, 3], "uniform": [0, 0]},
        urgent={"crawlplan": 30},
    )
    planned, uniform = _keeping_up(report)
    assert planned.startswith(
        "Kept up, crawlplan: 200 fetched of 170 released and 30 urgent crawls (probes) "
        "charged to its quotas (100%); the most pages still queued from earlier releases "
        "when a period was released: 3."
    )
    assert uniform.startswith("Kept up, uniform: 199 fetched of 200 released (100%);")


def test_the_terminal_quota_table_merges_runs_of_small_quotas() -> None:
    report = DemoReport(
        quotas={0: 300.0, 10: 1.0, 11: 2.0, 12: 40.0, 13: 0.0, 20: 0.5},
        bucket_rates={10: 0.01, 11: 0.011, 12: 0.012, 13: 0.013, 20: 0.02},
    )
    assert _merged_quota_rows(report) == [
        "| 0 | nan | 300.0 |",
        "| 10-11 | 0.0100-0.0110 | 3.0 |",
        "| 12 | 0.0120 | 40.0 |",
        "| 13-20 | 0.0130-0.0200 | 0.5 |",
    ]
    # a run of small quotas ends once it sums to 5 crawls a period
    thin = DemoReport(
        quotas={b: 2.0 for b in range(1, 6)}, bucket_rates={b: b / 10 for b in range(1, 6)}
    )
    assert _merged_quota_rows(thin) == [
        "| 1-3 | 0.1000-0.3000 | 6.0 |",
        "| 4-5 | 0.4000-0.5000 | 4.0 |",
    ]


def test_periodic_freshness_is_the_time_average_of_a_periodic_refresh() -> None:
    rate = np.array([0.0, 1.0, 1.0, 2.0])
    refresh = np.array([0.0, 0.0, 1.0, 4.0])
    expected = [1.0, 0.0, 1 - math.exp(-1), 2 * (1 - math.exp(-0.5))]
    assert periodic_freshness(rate, refresh) == pytest.approx(expected, rel=1e-12)
    # The same average from a simulated page: changes as Poisson, crawled every 1/f.
    rng = np.random.default_rng(3)
    lam, f, horizon = 0.7, 0.5, 20_000.0
    changes = np.sort(rng.uniform(0, horizon, rng.poisson(lam * horizon)))
    t = rng.uniform(0, horizon, 200_000)
    last_crawl = np.floor(t * f) / f
    fresh = np.searchsorted(changes, last_crawl) == np.searchsorted(changes, t)
    assert fresh.mean() == pytest.approx(
        periodic_freshness(np.array([lam]), np.array([f]))[0], abs=0.01
    )


def test_the_optimum_beats_uniform_within_host_capacity() -> None:
    rate = np.geomspace(0.001, 5.0, 400)
    host = np.repeat(np.arange(4), 100)
    free = reference_freshness(rate, 40.0)
    assert free.optimum > free.uniform
    assert free.uniform == pytest.approx(float(periodic_freshness(rate, np.full(400, 0.1)).mean()))
    tight = reference_freshness(rate, 40.0, host=host, host_capacity=np.array([1.0, 40, 40, 40]))
    assert free.uniform == tight.uniform and tight.optimum <= free.optimum + 1e-12
    assert share_of_gain(0.6, 0.5, 0.7) == pytest.approx(0.5)
    assert share_of_gain(0.4, 0.5, 0.7) == pytest.approx(-0.5)
    assert math.isnan(share_of_gain(0.4, 0.5, 0.5))


def test_the_steady_preset_fetches_every_page_four_times_after_its_warm_up(
    tmp_path: Path,
) -> None:
    steady = DemoSettings.steady(tmp_path)
    pages, cycle = steady.hosts * steady.pages, steady.period * steady.periods
    assert (pages, steady.budget, cycle) == (1_000, 50, 15.0)
    revisit = pages * steady.period / steady.budget  # a uniform recrawl's, seconds
    warmup = math.ceil(revisit / cycle)
    assert (revisit, warmup) == (50.0, 4)
    # after the warm-up (the first lap) a uniform recrawl comes round at least 4 more times
    assert (steady.cycles - warmup) * cycle / revisit >= 4
    assert steady.cycles * cycle * steady.budget / steady.period / pages == 12
    # options given beside --steady override it; the rest keep the demo's defaults
    seeded = DemoSettings.steady(tmp_path, cycles=5, seed=8, world="robots")
    assert (seeded.cycles, seeded.seed, seeded.world, seeded.hosts) == (5, 8, "robots", 40)
    assert DemoSettings(tmp_path).budget == 1_000


def test_worlds_differ_from_the_demos_web(tmp_path: Path) -> None:
    configs = {w: _web_config(DemoSettings(tmp_path, hosts=16, pages=4, world=w)) for w in WORLDS}
    assert configs["demo"].private_links == 0 and configs["robots"].private_links == 3
    delays = _host_delays(configs["robots"], 0.05)
    assert list(np.flatnonzero(delays > 0.05)) == [4, 5, 13] and delays.max() == 0.5
    slow = _host_delays(configs["crawl-delay"], 0.05)
    assert list(np.flatnonzero(slow == 2.0)) == [6, 10, 14] and slow[4] == 0.5
    lying = configs["fast-lying"]
    assert lying.rate_high == pytest.approx(10 * configs["demo"].rate_high)
    kinds = [lying.behavior(h).last_modified for h in range(16)]
    assert kinds.count("truthful") == 4 and {"now", "static", "none"} <= set(kinds)
    with pytest.raises(ValueError, match="unknown world"):
        DemoSettings(tmp_path, world="moon")
