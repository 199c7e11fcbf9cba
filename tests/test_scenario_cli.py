"""``crawlplan scenario``: list, run a small scenario file, bad scenario files, what-if input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from planner.scenario_command import scenario_app, whatif_instance
from scenarios.scenario_files import ScenarioError, parse_scenario, shipped_scenarios

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
    ):
        assert name in out


def test_every_shipped_scenario_is_valid() -> None:
    scenarios = shipped_scenarios()
    assert len(scenarios) >= 8
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
    assert len(summary) == 2 * 3
    gap = summary["freshness"] - summary["freshness_bound"]
    assert np.allclose(summary["freshness_gap"], gap)
    assert (summary["freshness_gap"] < 0.01).all()  # nobody beats the oracle optimum
    assert (summary["obsolescence_gap"] > -0.01).all()
    assert (summary["crawls"] == summary["crawls"].round()).all()
    metrics = pd.read_csv(report / "small-metrics.csv")
    assert len(metrics) == 2 * 3 * (6 + 3)
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


def test_whatif_instance_from_bucket_aggregates() -> None:
    pages = np.array([5, 100, 0, 50], dtype=np.int64)
    change = np.array([np.nan, 0.5, np.nan, 0.1])
    obsolete = np.array([np.nan, 40.0, 0.0, 3.0])
    instance = whatif_instance(pages, change, obsolete, 7, periods=4, capacity=30)
    assert instance.buckets == 2 and instance.periods == 4
    np.testing.assert_allclose(instance.b0, [100, 50])
    np.testing.assert_allclose(instance.y0, [40, 3])
    assert instance.n0 == 12  # never fetched plus the pages without an estimate
    np.testing.assert_allclose(instance.a[:, 0], [0.5, 0.1])
    with pytest.raises(ValueError, match="estimate"):
        whatif_instance(
            np.array([5, 0]), np.array([np.nan, np.nan]), np.zeros(2), 0, periods=2, capacity=1
        )
