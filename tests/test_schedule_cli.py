"""``crawlplan schedule``: pages, hosts and bounds files in, a refresh schedule out.

Most tests call the Typer app in-process (CliRunner: the same code path, without a Python
start-up per case); one runs the real console script in a subprocess.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from planner.schedules.interval_bounds import first_match, glob_regex, page_bounds
from service.cli.app import app

RATES = [1.0, 0.25, 0.04, 0.0, 4.0]
IMPORTANCE = [1.0, 1.0, 2.0, 1.0, 0.5]
URLS = [
    "http://a.example/1",
    "http://a.example/2",
    "http://b.example/news/1",
    "http://b.example/static",
    "https://c.example:8443/x",
]


def write_pages(path: Path, **extra: list[object]) -> Path:
    table = pd.DataFrame({"page": URLS, "rate": RATES, "importance": IMPORTANCE, **extra})
    if path.suffix == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    return path


def schedule(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["schedule", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def one_line_error(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_obsolescence_gives_xyleme_closed_form_intervals(tmp_path: Path) -> None:
    pages = write_pages(tmp_path / "pages.csv")
    out = tmp_path / "out.csv"
    code, stdout, stderr = schedule(tmp_path, "-i", str(pages), "-g", "2", "-o", str(out))
    assert code == 0, stderr
    table = pd.read_csv(out)
    assert list(table.columns) == ["page", "refresh_rate", "interval"]
    assert table["page"].tolist() == URLS
    lam, w = np.array(RATES), np.array(IMPORTANCE)
    r = w / w.mean()
    root = np.sqrt(r * lam)
    with np.errstate(divide="ignore"):
        expected = (root.sum() / 2.0) / root  # t_i = K / sqrt(r_i lam_i), K = S / G
    np.testing.assert_allclose(table["interval"], expected, rtol=1e-12)
    assert math.isinf(table["interval"][3]) and table["refresh_rate"][3] == 0  # never changes
    assert table["refresh_rate"].sum() == pytest.approx(2.0, rel=1e-12)
    assert stdout.startswith("scheduled 5 pages (obsolescence): bandwidth 2 crawls/period")
    value = root.sum() ** 2 / (2 * 2.0)  # Xyleme: S^2 / (2 G)
    assert f"value {value:.6g}" in stdout
    assert "1 never refreshed (interval inf)" in stdout and f"written to {out}" in stdout
    assert len(stdout.strip().splitlines()) == 1


@pytest.mark.parametrize("objective", ["freshness", "harmonic", "binary"])
def test_every_objective_spends_the_bandwidth_less_the_discovery_share(
    tmp_path: Path, objective: str
) -> None:
    pages = write_pages(tmp_path / "pages.csv")
    out = tmp_path / "out.csv"
    code, stdout, stderr = schedule(
        tmp_path, "-i", str(pages), "-g", "4", "--objective", objective,
        "--discovery-share", "0.25", "-o", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    table = pd.read_csv(out)
    assert len(table) == 5
    assert table["refresh_rate"].sum() == pytest.approx(3.0, rel=1e-9)
    live = table["refresh_rate"] > 0  # freshness and binary starve the fastest pages
    np.testing.assert_allclose(table["interval"][live] * table["refresh_rate"][live], 1.0)
    assert np.isinf(table["interval"][~live]).all()
    assert f"({objective}): bandwidth 4 crawls/period (1 kept for discovery), spent 3" in stdout


def test_hosts_from_url_origins_and_the_binding_ones_are_named(tmp_path: Path) -> None:
    pages = write_pages(tmp_path / "pages.csv")
    hosts = tmp_path / "hosts.csv"
    hosts.write_text(
        "host,capacity\nHTTP://A.example:80,0.5\nhttp://b.example,\nhttps://c.example:8443,0.1\n"
        "http://idle.example,3\n"
    )
    out = tmp_path / "out.csv"
    code, stdout, stderr = schedule(
        tmp_path, "-i", str(pages), "-g", "3", "--hosts", str(hosts), "-o", str(out)
    )
    assert code == 0, stderr
    table = pd.read_csv(out)
    assert list(table.columns) == ["page", "refresh_rate", "interval", "host"]
    assert table["host"].tolist() == ["http://a.example"] * 2 + ["http://b.example"] * 2 + [
        "https://c.example:8443"
    ]
    load = table.groupby("host")["refresh_rate"].sum()
    assert load["http://a.example"] == pytest.approx(0.5, rel=1e-9)
    assert load["https://c.example:8443"] == pytest.approx(0.1, rel=1e-9)
    assert table["refresh_rate"].sum() == pytest.approx(3.0, rel=1e-9)  # b takes the rest
    assert "2 of 4 hosts bind: " in stdout
    assert "https://c.example:8443 (nu " in stdout and "http://a.example (nu " in stdout
    assert stderr == ""


def test_bounds_first_pattern_wins_and_overrides_the_host(tmp_path: Path) -> None:
    pages = write_pages(tmp_path / "pages.csv", host=["a", "a", "b", "b", "c"])
    hosts = tmp_path / "hosts.csv"
    hosts.write_text("host,capacity,min_interval,max_interval\na,,,\nb,,,5\nc,,,\n")
    bounds = tmp_path / "bounds.csv"
    bounds.write_text(
        "pattern,min_interval,max_interval\n"
        "http://a.example/?,10,\n"  # both a pages
        "http://a.example/1,,\n"  # never reached: the rule above matches first
        "*/news/*,,2\n"  # overrides host b's max_interval 5
    )
    out = tmp_path / "out.csv"
    code, _, stderr = schedule(
        tmp_path, "-i", str(pages), "-g", "2", "--hosts", str(hosts),
        "--bounds", str(bounds), "-o", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    interval = pd.read_csv(out).set_index("page")["interval"]
    assert interval["http://a.example/1"] == pytest.approx(10.0)
    assert interval["http://a.example/2"] == pytest.approx(10.0)
    assert interval["http://b.example/news/1"] <= 2.0 + 1e-9
    assert interval["http://b.example/static"] == pytest.approx(5.0)  # rate 0: at its bound


def test_overcommitted_hosts_warn_and_the_schedule_is_written(tmp_path: Path) -> None:
    pages = write_pages(tmp_path / "pages.csv")
    hosts = tmp_path / "hosts.csv"
    hosts.write_text(
        "host,capacity,max_interval\nhttp://a.example,0.05,10\nhttp://b.example,0,\n"
        "https://c.example:8443,,\nhttp://idle.example,0,\n"  # no pages: nothing lost
    )
    out = tmp_path / "out.csv"
    code, stdout, stderr = schedule(
        tmp_path, "-i", str(pages), "-g", "2", "--hosts", str(hosts), "-o", str(out)
    )
    assert code == 0, stderr
    assert "2 hosts over-committed (see warnings)" in stdout
    warnings = stderr.strip().splitlines()
    assert warnings == [
        "warning: host http://a.example: capacity 0.05 crawls/period is below the 0.2 its "
        "pages' max intervals require; they are crawled at 0.25 of their minimum rates "
        "(max intervals x4)",
        "warning: host http://b.example: capacity 0: its pages are never refreshed",
    ]
    load = pd.read_csv(out).groupby("host")["refresh_rate"].sum()
    assert load["http://a.example"] == pytest.approx(0.05)
    assert load["http://b.example"] == 0.0


def test_parquet_in_and_out(tmp_path: Path) -> None:
    pages = write_pages(tmp_path / "pages.parquet")
    hosts = tmp_path / "hosts.parquet"
    origins = ["http://a.example", "http://b.example", "https://c.example:8443"]
    pd.DataFrame({"host": origins, "capacity": [0.5, np.inf, np.nan]}).to_parquet(hosts)
    out = tmp_path / "out.parquet"
    code, stdout, stderr = schedule(
        tmp_path, "-i", str(pages), "-g", "2", "--objective", "freshness",
        "--hosts", str(hosts), "-o", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    table = pd.read_parquet(out)
    assert list(table.columns) == ["page", "refresh_rate", "interval", "host"]
    assert len(table) == 5 and table["interval"].dtype == np.float64
    assert "1 of 3 hosts bind: http://a.example (nu " in stdout
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"page": URLS, "rate": [1.0, -1.0, 1.0, 1.0, 1.0]}).to_parquet(bad)
    one_line_error(*schedule(tmp_path, "-i", str(bad), "-g", "1", "-o", str(out))[::2], "row 2")


@pytest.mark.parametrize(
    ("pages", "hosts", "bounds", "args", "needles"),
    [
        ("page,rat\nx,1\n", None, None, (), ("missing column(s) rate",)),
        ("page,rate\nx,1\ny,abc\n", None, None, (), ("line 3: rate abc is not a number",)),
        ("page,rate\nx,-0.5\n", None, None, (), ("line 2: rate -0.5 is negative",)),
        ("page,rate\nx,1\ny,inf\n", None, None, (), ("line 3: rate inf is not finite",)),
        ("page,rate\nx,1\ny,\n", None, None, (), ("line 3: rate is empty", "drop it")),
        ("page,rate\nx,1\ny,2\nx,3\n", None, None, (), ("lines 2 and 4: page 'x' appears",)),
        ("page,rate\n,1\n", None, None, (), ("line 2: empty page",)),
        ("page,rate,importance\nx,1,-1\n", None, None, (), ("importance -1 is negative",)),
        ("page,rate\nx,1\n", None, None, ("-g", "0"), ("--bandwidth must be", "> 0")),
        ("page,rate\nx,1\n", None, None, ("-g", "-3"), ("--bandwidth must be",)),
        ("page,rate\nx,1\n", None, None, ("--objective", "fresh"), ("unknown --objective",)),
        ("page,rate\nx,1\n", None, None, ("--discovery-share", "1"), ("[0, 1)",)),
        (
            "page,rate\nhttp://d.example/,1\n",
            "host,capacity\nhttp://a.example,1\n",
            None,
            (),
            ("line 2: host 'http://d.example' is not in", "add a row"),
        ),
        (
            "page,rate\nnot-a-url,1\n",
            "host,capacity\nhttp://a.example,1\n",
            None,
            (),
            ("cannot tell the host of page 'not-a-url'", "add a host column"),
        ),
        (
            "page,rate\nhttp://a.example/,1\n",
            "host,capacity\nhttp://a.example,1\nhttp://A.example:80/,2\n",
            None,
            (),
            ("hosts.csv lines 2 and 3: host 'http://a.example' appears more than once",),
        ),
        (
            "page,rate\nhttp://a.example/,1\n",
            "host,capacity\nhttp://a.example,-1\n",
            None,
            (),
            ("hosts.csv line 2: capacity -1 is negative",),
        ),
        (
            "page,rate\nhttp://a.example/,1\n",
            "host,capacity,min_interval,max_interval\nhttp://a.example,1,5,2\n",
            None,
            (),
            ("hosts.csv line 2: min_interval 5 > max_interval 2",),
        ),
        (
            "page,rate\nhttp://a.example/,1\n",
            None,
            "pattern,min_interval\n*,0\n",
            (),
            ("bounds.csv line 2: min_interval 0 is not > 0",),
        ),
        (
            "page,rate\nhttp://a.example/,1\n",
            None,
            "pattern\n*\n",
            (),
            ("no min_interval or max_interval column",),
        ),
        (
            "page,rate\nhttp://a.example/,1\n",
            "host,capacity,min_interval\nhttp://a.example,,3\n",
            "pattern,max_interval\nhttp://a.*,1\n",
            (),
            ("pages.csv line 2: page 'http://a.example/' gets min_interval 3 > max_interval 1",),
        ),
        (
            "page,rate\nx,1\ny,1\n",
            None,
            "pattern,max_interval\n*,0.1\n",
            (),
            ("below the 20 that the pages' max intervals require",),
        ),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(
    tmp_path: Path,
    pages: str,
    hosts: str | None,
    bounds: str | None,
    args: tuple[str, ...],
    needles: tuple[str, ...],
) -> None:
    (tmp_path / "pages.csv").write_text(pages)
    argv = ["-i", str(tmp_path / "pages.csv"), "-o", str(tmp_path / "out.csv")]
    if hosts is not None:
        (tmp_path / "hosts.csv").write_text(hosts)
        argv += ["--hosts", str(tmp_path / "hosts.csv")]
    if bounds is not None:
        (tmp_path / "bounds.csv").write_text(bounds)
        argv += ["--bounds", str(tmp_path / "bounds.csv")]
    if "-g" not in args:
        argv += ["-g", "2"]
    code, stdout, stderr = schedule(tmp_path, *argv, *args)
    one_line_error(code, stderr, *needles)
    assert stdout == ""
    assert not (tmp_path / "out.csv").exists()


def test_the_console_script_end_to_end(tmp_path: Path) -> None:
    write_pages(tmp_path / "pages.csv")
    (tmp_path / "hosts.csv").write_text("host,capacity\nhttp://a.example,0.1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "service", "schedule", "--pages", "pages.csv", "--bandwidth",
         "2", "--hosts", "hosts.csv", "--out", "out.csv"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "host 'http://b.example' is not in hosts.csv" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# -- the pure helpers ------------------------------------------------------------------------


def test_globs_match_whole_urls_and_the_first_pattern_wins() -> None:
    assert glob_regex("a.b?*[x]") == r"a\.b..*\[x\]"
    urls = ["http://a/x.html", "http://a/news/1", "http://b/news/[2]", "ftp://c"]
    patterns = ["*/news/*", "http://a/*", "http://b/news/[?]", "*.html"]
    assert first_match(urls, patterns).tolist() == [1, 0, 0, -1]
    assert first_match(urls, ["http://b/news/[?]", "*"]).tolist() == [1, 1, 0, 1]
    assert first_match(urls, []).tolist() == [-1, -1, -1, -1]
    assert first_match(["http://a/X"], ["http://a/x"]).tolist() == [-1]  # case-sensitive


def test_page_bounds_rule_overrides_host_per_column() -> None:
    nan = math.nan
    lo, hi = page_bounds(
        4,
        host=np.array([0, 0, 1, -1]),
        host_min=np.array([1.0, nan]),
        host_max=np.array([10.0, 20.0]),
        rule=np.array([0, -1, 1, 1]),
        rule_min=np.array([nan, 3.0]),
        rule_max=np.array([5.0, nan]),
    )
    assert lo is not None and hi is not None
    np.testing.assert_array_equal(lo, [1.0, 1.0, 3.0, 3.0])
    np.testing.assert_array_equal(hi, [5.0, 10.0, 20.0, nan])
    assert page_bounds(3) == (None, None)
    assert page_bounds(2, rule=np.array([0, -1]), rule_min=np.array([nan])) == (None, None)
