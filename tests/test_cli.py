"""The command line as a user meets it: real console script, real databases, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CRAWLPLAN = [sys.executable, "-m", "service"]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    full_env.update(env or {})
    return subprocess.run(
        [*CRAWLPLAN, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_help_lists_the_commands(tmp_path: Path) -> None:
    proc = run("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in ("init", "seed", "status", "config"):
        assert command in proc.stdout


def test_init_seed_status_on_the_default_sqlite_file(tmp_path: Path) -> None:
    assert run("init", cwd=tmp_path).stdout.startswith("initialized sqlite:///crawlplan.db")
    assert (tmp_path / "crawlplan.db").exists()
    assert "up to date" in run("init", cwd=tmp_path).stdout
    proc = run("seed", "http://a.test/x", "HTTP://A.test:80/x#top", "https://b.test/", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "seeded 2 new pages on 2 new hosts (1 already known)" in proc.stdout
    status = run("status", cwd=tmp_path)
    assert status.returncode == 0
    assert "2 on 2 hosts; 2 due now" in status.stdout
    assert "none published yet" in status.stdout
    data = json.loads(run("status", "--json", cwd=tmp_path).stdout)
    assert data["pages"] == 2 and data["by_status"] == {"new": 2} and data["by_bucket"] == {"0": 2}


def test_seed_file_with_malformed_urls_stores_the_good_ones(tmp_path: Path) -> None:
    run("init", cwd=tmp_path)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(
        "# seeds\nhttp://good.test/1\n\nftp://bad.test/\nhttp://good.test/2\nnot a url\n"
        "http://:80/\nhttp://good.test/1\n"
    )
    proc = run("seed", "--file", str(seeds), "--rejects", str(tmp_path / "rej.tsv"), cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "seeded 2 new pages on 1 new hosts (1 already known)" in proc.stdout
    assert "rejected line 4: 'ftp://bad.test/'" in proc.stderr
    assert "rejected line 6:" in proc.stderr and "rejected line 7:" in proc.stderr
    assert "error: 3 malformed URLs were not seeded" in proc.stderr
    rejects = (tmp_path / "rej.tsv").read_text().splitlines()
    assert rejects[0] == "where\ttext\treason" and len(rejects) == 4
    status = json.loads(run("status", "--json", cwd=tmp_path).stdout)
    assert status["pages"] == 2


def test_seed_from_stdin(tmp_path: Path) -> None:
    run("init", cwd=tmp_path)
    proc = subprocess.run(
        [*CRAWLPLAN, "seed", "--file", "-"],
        cwd=tmp_path,
        input="http://s.test/a\nhttp://s.test/b\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "seeded 2 new pages" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("status",), ("no database at crawlplan.db", "crawlplan init")),
        (("status", "--db", "sqlite:///never.db"), ("no database at never.db",)),
        (("status", "--db", "::not a url::"), ("malformed database URL",)),
        (("status", "--db", "mysql://root@localhost/x"), ("unsupported database 'mysql'",)),
        (
            ("status", "--db", "postgresql://postgres@127.0.0.1:1/crawlplan"),
            ("cannot open postgresql+psycopg://postgres@127.0.0.1:1/crawlplan", "server"),
        ),
        (("seed", "--file", "missing.txt"), ("does not exist",)),
        (("seed",), ("nothing to seed",)),
        (("init", "--db", "sqlite:///no/such/dir/x.db"), ("directory no/such/dir does not exist",)),
        (("status", "--config", "nope.toml"), ("configuration file nope.toml does not exist",)),
        (("status", "--db", "sqlite:///garbage.db"), ("file is not a database",)),
    ],
)
def test_user_mistakes_get_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    if args[0] == "seed":
        run("init", cwd=tmp_path)
    (tmp_path / "garbage.db").write_text("not a database")
    assert_one_line_error(run(*args, cwd=tmp_path), *needles)
    if args[0] == "status":
        assert not (tmp_path / "crawlplan.db").exists()
        assert not (tmp_path / "never.db").exists()


def test_status_on_an_uninitialized_postgres_database(pg_url: str, tmp_path: Path) -> None:
    proc = run("status", "--db", pg_url, cwd=tmp_path)
    assert_one_line_error(proc, "has no crawlplan schema", "crawlplan init")


def test_postgres_database_that_does_not_exist(pg_url: str, tmp_path: Path) -> None:
    missing = pg_url.rsplit("/", 1)[0] + "/crawlplan_no_such_db"
    assert_one_line_error(run("status", "--db", missing, cwd=tmp_path), "createdb")


def test_cli_on_postgres_through_the_environment(pg_url: str, tmp_path: Path) -> None:
    env = {"CRAWLPLAN_DB_URL": pg_url}
    assert run("init", cwd=tmp_path, env=env).returncode == 0
    assert run("seed", "http://pg.test/", cwd=tmp_path, env=env).returncode == 0
    data = json.loads(run("status", "--json", cwd=tmp_path, env=env).stdout)
    assert data["pages"] == 1
    assert not (tmp_path / "crawlplan.db").exists()


def test_bad_config_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "crawlplan.toml").write_text("[lease]\nseconds = 'soon'\n")
    assert_one_line_error(run("config", cwd=tmp_path), "lease.seconds must be float", "'soon'")
    (tmp_path / "crawlplan.toml").write_text("[lease\n")
    assert_one_line_error(run("config", cwd=tmp_path), "crawlplan.toml is not valid TOML")


def test_config_shows_where_values_come_from(tmp_path: Path) -> None:
    (tmp_path / "crawlplan.toml").write_text('[store]\ndb = "sqlite:///file.db"\n')
    proc = run("config", cwd=tmp_path, env={"CRAWLPLAN_LEASE_MAX_URLS": "7"})
    assert proc.returncode == 0
    assert "sqlite:///file.db" in proc.stdout and "crawlplan.toml" in proc.stdout
    assert "$CRAWLPLAN_LEASE_MAX_URLS" in proc.stdout


def test_estimate_reports_bad_rows_and_estimates_the_rest(tmp_path: Path) -> None:
    (tmp_path / "obs.csv").write_text(
        "page,fetched_at,changed\n"
        "http://a.test/1,2026-01-01T00:00:00Z,\n"
        "http://a.test/1,2026-01-02T00:00:00Z,1\n"
        "http://a.test/1,2026-01-03T00:00:00Z,0\n"
        "http://a.test/2,0,\n"
        "http://a.test/2,1.5,maybe\n"
    )
    proc = run("estimate", "-i", "obs.csv", "-o", "rates.csv", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "line 6: changed must be 1, 0 or empty, got 'maybe'" in proc.stderr
    rates = (tmp_path / "rates.csv").read_text().splitlines()
    assert rates[0] == "page,rate,rate_low,rate_high,estimator,fetches,bucket"
    assert len(rates) == 3
    (tmp_path / "cols.csv").write_text("page,when\nx,1\n")
    assert_one_line_error(
        run("estimate", "-i", "cols.csv", "-o", "r.csv", cwd=tmp_path), "missing column"
    )


def test_the_clock_tolerance_decides_whether_last_modified_is_used(tmp_path: Path) -> None:
    """A page fetched every 10 minutes, changed each time, 30 s before the fetch: within
    the default tolerance (60 s) that looks like a server stamping the response time; with
    estimate.clock_tolerance = 1 s it is a truthful Last-Modified."""
    step, before = 10 / 1440, 30 / 86400
    rows = ["page,fetched_at,changed,last_modified"]
    for k in range(8):
        t = 1.0 + k * step
        rows.append(f"http://a.test/1,{t!r},{'' if k == 0 else 1},{t - before!r}")
    (tmp_path / "obs.csv").write_text("\n".join(rows) + "\n")
    for env, expected in (({}, "poisson"), ({"CRAWLPLAN_CLOCK_TOLERANCE": "1"}, "last_modified")):
        proc = run("estimate", "-i", "obs.csv", "-o", "rates.csv", cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
        header, row = (tmp_path / "rates.csv").read_text().splitlines()
        estimator = row.split(",")[header.split(",").index("estimator")]
        assert estimator.startswith(expected), row


def test_solve_writes_integer_quotas_and_names_bad_keys(tmp_path: Path) -> None:
    instance = {
        "periods": 3,
        "buckets": 2,
        "b0": [100, 300],
        "y0": [10, 30],
        "n0": 20,
        "change_rate": [0.5, 0.02],
        "capacity": [120, 120, 120],
        "crawl_cost": 1.0,
        "new_crawl_cost": 1.0,
        "oldnwt": 0.1,
        "newnwt": 0.1,
        "nconst": 5,
    }
    (tmp_path / "inst.json").write_text(json.dumps(instance))
    for model in ("webfountain", "steady"):
        args = ["--out", "sol.json", "--model", model, "--strategy", "1"]
        proc = run("solve", "inst.json", *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        solution = json.loads((tmp_path / "sol.json").read_text())
        assert solution["status"] == "optimal" and solution["model"] == model
        quota = solution["quota"]
        for t in range(3):
            assert sum(row[t] for row in quota) + solution["new_quota"][t] == 120
    assert len(solution["marginal"]) == 2 and solution["goal"] == "freshness"
    assert_one_line_error(
        run("solve", "inst.json", "--objective", "age", cwd=tmp_path), "--objective"
    )
    del instance["b0"]
    (tmp_path / "bad.json").write_text(json.dumps(instance))
    assert_one_line_error(run("solve", "bad.json", cwd=tmp_path), "b0")


def test_counted_says_one_in_the_singular() -> None:
    from service.cli.support import counted

    assert counted(1, "page") == "1 page"
    assert counted(0, "page") == "0 pages"
    assert counted(12_345, "notification") == "12,345 notifications"
    assert counted(1.0, "day") == "1 day"
    assert counted(0.5, "day") == "0.5 days"
    assert counted(2, "policy", "policies") == "2 policies"
