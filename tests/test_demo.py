"""The end-to-end demo, short: a synthetic web crawled for real under nightly plans and under
the uniform baseline at the same budget, scored against ground truth; each server and each
crawl in a process of its own, as ``crawlplan demo`` runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from scenarios.ground_truth import repository_freshness
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from service.demo import DemoReport, DemoSettings, _merged_quota_rows, _Truth, run_demo
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
    assert any(line.startswith("| 3 |") for line in lines)  # the per-cycle table
    assert any(line.startswith("Kept up, uniform") for line in lines)
    assert "0 false alarms" in report.detection
    for name in ("report.md", "freshness.csv", "freshness.png"):
        assert (tmp_path / name).stat().st_size > 0


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
    options = ["--hosts", "4", "--pages", "4", "--period", "1", "--periods", "2"]
    options += ["--cycles", "100", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "demo", "--dir", str(tmp_path / "out"), *options],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
        children = {pid: _started(pid) for pid in _descendants(proc.pid)}
        assert len(children) >= 4, children  # two servers and two crawls, at least
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
