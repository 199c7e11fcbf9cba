"""Configuration precedence: option > environment > crawlplan.toml > default."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from service.config import load_settings
from service.errors import ConfigError
from store.database import DEFAULT_DB_URL
from store.leases import LeasePolicy


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings(environ={})
    assert s.db_url == DEFAULT_DB_URL
    assert s.lease_policy == LeasePolicy()
    assert set(s.origins.values()) == {"default"}


def test_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[store]\ndb = "sqlite:///from-file.db"\n[lease]\nseconds = 30\nmax_urls = 9\n'
        "revisit_after_days = 0.5\n"
    )
    env = {"CRAWLPLAN_LEASE_SECONDS": "45", "CRAWLPLAN_DB_URL": "sqlite:///from-env.db"}
    s = load_settings({"store.db": "sqlite:///from-option.db"}, config_file=cfg, environ=env)
    assert s.db_url == "sqlite:///from-option.db"
    assert s.lease_policy.lease_seconds == 45.0
    assert s.lease_policy.max_urls == 9
    assert s.lease_policy.revisit_after == timedelta(hours=12)
    assert s.origins["lease.seconds"] == "$CRAWLPLAN_LEASE_SECONDS"
    assert s.origins["lease.max_urls"] == str(cfg)


def test_config_file_from_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "x.toml"
    cfg.write_text("[lease]\nmax_hosts = 3\n")
    assert load_settings(environ={"CRAWLPLAN_CONFIG": str(cfg)}).lease_policy.max_hosts == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[lease]\nmax_urls = 0\n", "lease.max_urls must be >= 1"),
        ("[lease]\nmax_urls = 2.5\n", "lease.max_urls must be int"),
        ("[lease]\nmax_urls = true\n", "lease.max_urls must be int"),
        ("[lease]\nspeed = 1\n", "unknown setting 'lease.speed'"),
        ("db = 'x'\n", "must be a [section]"),
        ("[store]\ndb = 5\n", "store.db must be str"),
        ("[crawl]\nscope = 'web'\n", "crawl.scope must be one of hosts, domains, any, got 'web'"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_settings(config_file=cfg, environ={})


def test_bad_environment_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"\$CRAWLPLAN_LEASE_SECONDS: lease.seconds"):
        load_settings(environ={"CRAWLPLAN_LEASE_SECONDS": "soon"})


def test_defaults_written_in_config_match_their_owners() -> None:
    """config.py states some defaults as values (so that reading the configuration does not
    import numpy, SciPy or Pyomo); each must equal the default of the class that owns it."""
    from crawler.fetch import FetchLimits
    from crawler.worker import CrawlSettings
    from estimators.bayes_action import PROBE_HORIZON_PERIODS
    from estimators.defaults import CLOCK_TOLERANCE_DAYS, MAX_RATE, MIN_RATE
    from planner.cycle.plan_inputs import EXPLORE_REVISITS

    values = load_settings({}, environ={}).values
    assert values["crawl.max_bytes"] == FetchLimits().max_bytes
    assert values["crawl.user_agent"] == CrawlSettings().user_agent
    assert values["crawl.scope"] == CrawlSettings().scope.mode
    assert values["crawl.noise_twins"] == CrawlSettings().noise_twins
    assert values["crawl.robots_give_up_after"] == CrawlSettings().robots_give_up_after
    assert values["estimate.min_rate"] == MIN_RATE
    assert values["estimate.max_rate"] == MAX_RATE
    assert values["estimate.clock_tolerance"] == CLOCK_TOLERANCE_DAYS * 86_400.0
    assert values["plan.explore"] == EXPLORE_REVISITS
    assert values["plan.probe_horizon"] == PROBE_HORIZON_PERIODS
    from scenarios.policies.knowledge import RateKnowledge
    from service.nightly import NightlySettings

    assert (values["plan.follow_ups"] == "on") == NightlySettings().follow_ups
    assert NightlySettings().follow_ups == RateKnowledge().follow_ups  # the simulator's too
