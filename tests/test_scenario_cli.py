"""``crawlplan scenario``: list, run a small scenario file, bad scenario files, what-if input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from scenarios.scenario_files import ScenarioError, parse_scenario, shipped_scenarios
from service.cli.scenario import scenario_app
from store import (
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    open_database,
    publish_plan,
    upgrade_schema,
)
from store.estimates import write_estimates
from store.models import PAGES
from store.plans import latest_plan
from tests.conftest import count_store_reads

SMALL = """\
name = "small"
title = "A small scenario"
periods = 6
warmup = 3
cycle = 3
budget_share = 0.2
seeds = [1]

[world]
pages = 600
hosts = 6

[[variants]]
name = "fifth"

[[variants]]
name = "half"
budget_share = 0.5

[[policies]]
kind = "uniform"

[[policies]]
kind = "nutch"

[[policies]]
kind = "freshness"
name = "freshness (true)"
rates = "true"
"""


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(scenario_app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_list_shows_the_shipped_scenarios() -> None:
    code, out, _ = _invoke("list")
    assert code == 0
    for name in (
        "webfountain-1",
        "webfountain-2",
        "webfountain-3",
        "planner-vs-peers",
        "cold-start",
        "lying-last-modified",
        "weekday-rhythm",
        "capacity-sweep",
        "importance-opic",
    ):
        assert name in out


def test_every_shipped_scenario_is_valid() -> None:
    scenarios = shipped_scenarios()
    assert len(scenarios) >= 9
    for scenario in scenarios:
        quick = scenario.quick_version()
        assert all(v.world.pages <= 4000 for v in quick.variants)


def test_run_writes_the_report(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    code, out, err = _invoke("run", str(path), "--out", str(tmp_path / "report"))
    assert code == 0, err
    report = tmp_path / "report"
    names = {p.name for p in report.iterdir()}
    assert {
        "small.md",
        "small-metrics.csv",
        "small-summary.csv",
        "small-crawls-by-rate.csv",
        "small-freshness.png",
        "small-obsolete.png",
        "small-crawls-by-rate.png",
    } <= names
    summary = pd.read_csv(report / "small-summary.csv")
    assert len(summary) == 2 * 4  # + Xyleme sqrt (true), the obsolescence optimum, added
    assert set(summary.loc[summary["policy"] == "uniform", "freshness_share"]) == {0.0}
    assert set(summary.loc[summary["policy"] == "freshness (true)", "freshness_share"]) == {1.0}
    assert "note: added the reference run 'Xyleme sqrt (true)'" in out
    gap = summary["freshness"] - summary["freshness_bound"]
    assert np.allclose(summary["freshness_gap"], gap)
    # nobody beats the oracle optimum (beyond the noise of 600 pages over 6 periods)
    assert (summary["freshness_gap"] < 0.015).all()
    assert (summary["obsolescence_gap"] > -0.01).all()
    assert (summary["crawls"] == summary["crawls"].round()).all()
    metrics = pd.read_csv(report / "small-metrics.csv")
    assert len(metrics) == 2 * 4 * (6 + 3)
    typed = pd.read_parquet(report / "small-metrics.parquet")
    assert typed["warmup"].dtype == bool and len(typed) == len(metrics)
    markdown = (report / "small.md").read_text()
    assert "| policy |" in markdown.replace("| variant | policy |", "| policy |")
    assert "freshness (true)" in out


HEAD = 'name = "bad"\nperiods = 2\nbudget = 10\n'
POLICY = '[[policies]]\nkind = "uniform"\n'
BAD = [
    (HEAD + "pages = 10\n" + POLICY, "line 4: pages: unknown key"),
    (
        'name = "bad"\nperiods = "many"\nbudget = 1\n' + POLICY,
        "line 2: periods: expected an integer",
    ),
    ('name = "bad"\nperiods = 0\nbudget = 1\n' + POLICY, "line 2: periods: 0 is not possible"),
    (HEAD + POLICY + "[world]\npages = -5\n", "line 7: world.pages: -5 is not possible"),
    (
        HEAD + POLICY + "[world]\npagez = 5\n",
        "line 7: world.pagez: unknown key; did you mean 'pages'?",
    ),
    (HEAD + POLICY + "[world]\nrate_model = 'zipf'\n", "line 7: world.rate_model"),
    (
        'name = "bad"\nperiods = 2\nbudget_share = 2.0\n' + POLICY,
        "line 3: budget_share: 2.0 is not in (0, 1]",
    ),
    (HEAD + "[[policies]]\nkind = 'lottery'\n", "line 5: policies[1].kind: use one of"),
    (
        HEAD + POLICY + "[[policies]]\nkind = 'nutch'\nstrategy = 1\n",
        "line 8: policies[2].strategy",
    ),
    (HEAD + "[[policies]]\nkind = 'webfountain'\nstrategy = 5\n", "line 6: policies[1].strategy"),
    (HEAD + POLICY + POLICY, "line 6: policies[2].name: 'uniform' is used twice"),
    (HEAD + "metrics = ['speed']\n" + POLICY, "line 4: metrics: unknown metric 'speed'"),
    (HEAD + "seeds = []\n" + POLICY, "line 4: seeds: give a non-empty list"),
    (HEAD + "periods = [\n", "not valid TOML"),
    (HEAD + "importance = 'opic'\n" + POLICY, "line 4: importance: 'opic' needs a link graph"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_scenario_files_get_one_line_naming_key_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, _, err = _invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0], lines[0]


def test_an_unknown_scenario_name_lists_the_shipped_ones(tmp_path: Path) -> None:
    code, _, err = _invoke("run", "no-such-scenario", "--out", str(tmp_path))
    assert code == 2 and "shipped: " in err and "cold-start" in err


def test_missing_keys() -> None:
    with pytest.raises(ScenarioError, match="periods: missing"):
        parse_scenario('name = "x"\n[[policies]]\nkind = "uniform"\n')
    with pytest.raises(ScenarioError, match="budget: missing"):
        parse_scenario('name = "x"\nperiods = 3\n[[policies]]\nkind = "uniform"\n')


def test_whatif_on_a_store_without_estimates_says_what_to_do(sqlite_url: str) -> None:
    db = open_database(sqlite_url, create=True)
    upgrade_schema(db)
    add_pages(db, [("http://a.example/x", "seed"), ("http://b.example/y", "seed")])
    result = CliRunner().invoke(
        scenario_app,
        ["whatif", "--capacity", "10"],
        env={"CRAWLPLAN_DB_URL": sqlite_url},
        catch_exceptions=False,
    )
    assert result.exit_code == 2
    assert "no page has a change-rate bucket yet" in result.stderr


def test_whatif_compares_with_the_published_plan_without_writing(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = count_store_reads(monkeypatch)
    db = open_database(sqlite_url, create=True)
    upgrade_schema(db)
    urls = [(f"http://h{k % 5}.example/p{k}", "seed") for k in range(60)]
    add_pages(db, urls)
    now = datetime.now(UTC)
    ids = list(range(1, 51))
    write_estimates(
        db,
        ids,
        [0.05 if i % 2 else 0.8 for i in ids],
        [None] * 50,
        [None] * 50,
        ["poisson_mle"] * 50,
        [10 if i % 2 else 200 for i in ids],
    )
    db.run_write(
        lambda conn: conn.execute(
            PAGES.update().where(PAGES.c.id <= 50).values(last_fetch_at=now - timedelta(days=2))
        )
    )
    start = now - timedelta(hours=1)
    draft = PlanDraft(
        starts_at=start,
        period_days=1.0,
        strategy="strategy-3",
        periods=[
            PlanPeriodDraft(
                period=t,
                starts_at=start + timedelta(days=t - 1),
                ends_at=start + timedelta(days=t),
                capacity=10.0,
                new_pages=2,
                quotas={10: 3, 200: 5},
            )
            for t in range(1, 4)
        ],
        inputs={},
        solver={},
    )
    version = publish_plan(db, draft)
    result = CliRunner().invoke(
        scenario_app,
        ["whatif", "--capacity", "20", "--strategy", "1", "--periods", "3"],
        env={"CRAWLPLAN_DB_URL": sqlite_url},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert "what-if (capacity 20/period, strategy 1, 3 periods" in result.stdout
    assert f"published plan v{version}" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines()]
    rows = [r for r in rows if r and r[0].isdigit()]
    assert [int(r[0]) for r in rows] == [10, 200]
    assert [int(r[2]) for r in rows] == [9, 15]  # the published crawls per cycle
    # Planned as the nightly run plans: capacity left idle by the model is spent, so the
    # cycle's crawls are 20 a period (re-crawls by bucket, then new pages), and every bucket
    # is crawled (exploration).
    # Columns: bucket, pages, published, re-planned (the published plan's parameters on
    # today's store: capacity 10 from its periods, strategy 3, 3 periods), what-if, change.
    (new,) = [line.split() for line in result.stdout.splitlines() if line.split()[:1] == ["new"]]
    assert sum(int(r[4]) for r in rows) + int(new[3]) == 3 * 20
    assert all(int(r[4]) > 0 for r in rows)
    assert sum(int(r[3]) for r in rows) + int(new[2]) == 3 * 10
    assert all(int(r[5]) == int(r[4]) - int(r[3]) for r in [*rows, ["", *new]])
    (again,) = [line for line in result.stdout.splitlines() if "planned again" in line]
    assert "capacity 10/period" in again
    assert reads == ["measure_crawl", "aggregates_from_store"]  # the store read once
    spent = re.search(r"([\d,]+) re-crawls and ([\d,]+) new pages over the cycle", again)
    assert spent is not None and int(spent[1]) + int(spent[2]) == 3 * 10  # its capacity
    assert "obsolete pages at the cycle's end" in again
    latest = latest_plan(db)
    assert latest is not None and latest.version == version  # nothing published
