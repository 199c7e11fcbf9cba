"""Scenario reports: the share of the optimum's gain over uniform, the reference runs added
to a scenario, the crawls-by-rate table, budget profiles in scenario files."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from scenarios.estimate_accuracy import FETCH_CLASSES
from scenarios.reports import crawls_by_rate_table, key_table, write_report
from scenarios.runner import gain_shares, reference_policies, run_scenario
from scenarios.scenario_files import Scenario, ScenarioError, load_scenario, parse_scenario

HEAD = """\
name = "tiny"
periods = 4
warmup = 2
cycle = 2
budget_share = 0.25
seeds = [3]
{top}
[world]
pages = 200
hosts = 4
"""


def _scenario(policies: str, top: str = "", metrics: str = "") -> str:
    return HEAD.format(top=f"{metrics}\n{top}") + policies


def test_gain_shares_on_a_hand_made_summary() -> None:
    summary = pd.DataFrame(
        {
            "variant": ["a", "a", "a", "a", "b", "b", "b"],
            "policy": ["uniform", "planner", "opt", "xy", "uniform", "planner", "opt"],
            "freshness": [0.60, 0.70, 0.80, 0.79, 0.50, 0.45, 0.50],
            "obsolescence": [2.0, 1.5, 1.2, 1.0, 3.0, 2.0, 1.0],
        }
    )
    roles = {"uniform": "uniform", "optimum": "opt", "optimum_obsolescence": "xy"}
    out = gain_shares(summary, roles)
    a = out[out["variant"] == "a"].set_index("policy")
    assert a["freshness_share"].tolist() == pytest.approx([0.0, 0.5, 1.0, 0.95])
    # lower obsolescence is better: the same formula, (policy - uniform) / (optimum - uniform)
    assert a["obsolescence_share"].tolist() == pytest.approx([0.0, 0.5, 0.8, 1.0])
    b = out[out["variant"] == "b"].set_index("policy")
    # the optimum gains nothing over uniform in freshness: no share
    assert b["freshness_share"].isna().all()
    # no Xyleme run in variant b: no obsolescence share
    assert b["obsolescence_share"].isna().all()
    assert "freshness_share" not in summary.columns  # the input is not changed
    assert math.copysign(1.0, float(a["obsolescence_share"]["uniform"])) == 1.0  # 0.0, not -0.0


def test_reference_runs_are_added_when_the_file_lacks_them() -> None:
    text = _scenario(
        '[[policies]]\nkind = "nutch"\n\n[[policies]]\nkind = "freshness"\nname = "uniform"\n',
        metrics='metrics = ["freshness", "obsolescence"]',
    )
    policies, roles, notes = reference_policies(parse_scenario(text))
    names = [p.get("name", p["kind"]) for p in policies]
    # "uniform" is taken by an estimating freshness schedule: the reference is renamed
    assert names == [
        "nutch",
        "uniform",
        "uniform (reference)",
        "freshness-optimal (true)",
        "Xyleme sqrt (true)",
    ]
    assert roles == {
        "uniform": "uniform (reference)",
        "optimum": "freshness-optimal (true)",
        "optimum_obsolescence": "Xyleme sqrt (true)",
    }
    assert len(notes) == 3 and all("added the reference run" in n for n in notes)


def test_reference_runs_listed_by_the_file_are_used_as_they_are() -> None:
    text = _scenario(
        '[[policies]]\nkind = "uniform"\nname = "round robin"\n\n'
        '[[policies]]\nkind = "freshness"\nname = "capped"\nrates = "true"\nmax_interval = 9\n\n'
        '[[policies]]\nkind = "freshness"\nname = "best"\nrates = "true"\n',
        metrics='metrics = ["freshness"]',
    )
    policies, roles, notes = reference_policies(parse_scenario(text))
    assert len(policies) == 3 and notes == ()
    # a schedule with a floor on every page's rate is not the optimum
    assert roles == {"uniform": "round robin", "optimum": "best"}


def test_the_report_shows_the_share_and_the_crawls_by_rate(tmp_path: Path) -> None:

    text = _scenario('[[policies]]\nkind = "nutch"\n', metrics='metrics = ["freshness"]')
    run = run_scenario(parse_scenario(text))
    table = key_table(run)
    assert "share of optimum's gain (freshness)" in table.columns
    by_policy = table.set_index("policy")["share of optimum's gain (freshness)"]
    assert by_policy["uniform"] == 0.0 and by_policy["freshness-optimal (true)"] == 1.0
    wide = crawls_by_rate_table(run, "")
    # no planner in the scenario: every policy is shown
    assert set(wide["policy"]) == {"nutch", "uniform", "freshness-optimal (true)"}
    write_report(run, tmp_path)
    markdown = (tmp_path / "tiny.md").read_text()
    assert "Note: added the reference run 'uniform'" in markdown
    assert "## Crawls per page per cycle (2 periods) by true change rate" in markdown


def test_the_report_shows_the_estimating_policies_accuracy(tmp_path: Path) -> None:
    text = _scenario(
        '[[policies]]\nkind = "freshness"\nname = "mine"\n\n[[policies]]\nkind = "nutch"\n',
        metrics='metrics = ["freshness"]',
    )
    run = run_scenario(parse_scenario(text))
    # only the policy that estimates rates from its own crawl is scored
    assert set(run.accuracy["policy"]) == {"mine"}
    assert run.accuracy["pages"].sum() == 200  # every page is known from the start
    assert set(run.accuracy["fetches"]) <= {name for name, _low, _high in FETCH_CLASSES}
    coverage = run.accuracy["80 % coverage, group priors"]
    assert ((coverage >= 0) & (coverage <= 1)).all()
    write_report(run, tmp_path)
    markdown = (tmp_path / "tiny.md").read_text()
    assert "## Estimation accuracy by the pages' fetches" in markdown
    assert "**mine**" in markdown or ", mine**" in markdown


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("budget_profile = [0.5, 1.0]", r"budget_profile: the multipliers' mean is 0\.75"),
        ('budget_profile = ["a"]', "budget_profile: give a list of numbers"),
        ("budget_profile = [2.0, -0.5, 1.5]", "budget_profile: give multipliers >= 0"),
    ],
)
def test_a_bad_budget_profile_is_one_line(line: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as info:
        parse_scenario(_scenario('[[policies]]\nkind = "uniform"\n', top=line), "s.toml")
    assert str(info.value).startswith("s.toml line ")


def test_a_budget_profile_is_read() -> None:
    text = _scenario('[[policies]]\nkind = "uniform"\n', top="budget_profile = [1.5, 0.5]")
    assert parse_scenario(text).budget_profile == (1.5, 0.5)


#: The scenarios of issue 24: the gap to the optimum on three worlds unlike the other shipped
#: ones, and the three questions page schedules cannot answer.
ISSUE_24 = (
    "gap-mixture",
    "gap-lifetimes",
    "gap-births",
    "capacity-rhythm",
    "new-pages",
    "new-pages-flood",
    "polite-host",
)


def _tiny(name: str) -> Scenario:
    """The shipped scenario at 300 pages, 7 + 7 periods, its smallest and largest budgets: it
    parses and runs, nothing more."""
    quick = load_scenario(name).quick_version(max_pages=300)
    ends = (
        quick.variants if len(quick.variants) <= 2 else quick.variants[:: len(quick.variants) - 1]
    )
    variants = tuple(replace(v, periods=7) for v in ends)
    return replace(quick, warmup=7, periods=7, variants=variants)


@pytest.mark.parametrize("name", ISSUE_24)
def test_the_issue_24_scenarios_run_at_a_tiny_size(name: str) -> None:
    scenario = _tiny(name)
    run = run_scenario(scenario)
    roles = set(run.references)
    assert {"uniform", "optimum"} <= roles
    assert "share of optimum's gain (freshness)" in key_table(run).columns
    uniform = run.summary[run.summary["policy"] == run.references["uniform"]]
    assert (uniform["freshness_share"] == 0.0).all()
    wide = crawls_by_rate_table(run, scenario.variants[0].name)
    assert run.references["optimum"] in set(wide["policy"])
    assert any(p.startswith("planner") for p in wide["policy"])
    metrics = run.metrics[~run.metrics["warmup"]]
    if scenario.budget_profile:
        budgets = [round(v.budget * m) for v in scenario.variants for m in scenario.budget_profile]
        assert set(metrics["crawls"]) <= set(map(float, budgets))
    world = scenario.variants[0].world
    if world.polite_hosts:
        assert world.polite_hosts == 3 and world.polite_cap == 40
