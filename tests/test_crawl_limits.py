"""The operator's limits on a crawl: private addresses refused (and said so), ``--seconds``.

Issue 26 items 6 and 7: a crawl without ``allow_private`` of a loopback site used to fetch
nothing, say nothing, and back its hosts off for 30 minutes, so that a rerun with the flag
fetched nothing either; ``--seconds 10`` used to run 23.8 s, its deadline checked only
between leases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

import crawler.worker
from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.urls import origin_of
from crawler.worker import CrawlSettings, CrawlStats, run_crawl
from scenarios.hostile_web import HostileConfig, HostileWeb
from store import Database, LeasePolicy, LeaseQueue, add_pages, open_database, upgrade_schema
from store.models import Host, Observation, Page
from store.types import utcnow
from tests.conftest import orm_all

POLICY = LeasePolicy(lease_seconds=30, max_urls=10, max_urls_per_host=10, max_hosts=2)


@pytest.fixture(scope="module")
def web(settled_collector: None) -> Iterator[HostileWeb]:
    with HostileWeb(HostileConfig(trickle=0.2, bomb_bytes=1024)) as server:
        yield server


def _db(tmp_path: object, urls: list[str]) -> Database:
    db = open_database(f"sqlite:///{tmp_path}/crawl.db", create=True)
    upgrade_schema(db)
    add_pages(db, [(url, origin_of(url)) for url in urls])
    return db


def _crawl(db: Database, limits: FetchLimits, **kwargs: object) -> CrawlStats:
    settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.02, max_delay=0.2, duration_factor=0.0),
        limits=limits,
        idle_sleep=0.05,
        max_errors_per_lease=10,
    )
    stats = CrawlStats()
    queue = lambda: LeaseQueue(db, POLICY)  # noqa: E731
    run_crawl(db, queue, settings, workers=1, stats=stats, **kwargs)  # type: ignore[arg-type]
    return stats


def test_a_refused_host_is_said_counted_and_not_backed_off(
    web: HostileWeb,
    tmp_path: object,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(crawler.worker, "REFUSED_RETRY", 0.3)  # 10 s in production
    origin = web.origin("slow-body")
    db = _db(tmp_path, [origin + "/ok.html", origin + "/secret.html"])
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="crawler.worker"):
        stats = _crawl(db, FetchLimits(), until_idle=True, seconds=20)
    # All it could lease was refused: idle as far as this crawl goes, not 20 s of retries.
    assert time.monotonic() - t0 < 5
    assert (stats.refused, stats.fetched, stats.errors, stats.blocked) == (2, 0, 0, 0)
    (warning,) = [r.getMessage() for r in caplog.records if origin in r.getMessage()]
    assert "127.0.0.1, a loopback address" in warning and "--allow-private" in warning
    (host,) = orm_all(db, select(Host))
    assert host.backoff_until is None and host.consecutive_errors == 0
    assert orm_all(db, select(Observation)) == []
    assert {p.status for p in orm_all(db, select(Page))} == {"new"}
    assert all(p.next_due_at <= utcnow() for p in orm_all(db, select(Page)))
    assert web.visits("slow-body") == []
    # A rerun that allows private addresses fetches them (within REFUSED_RETRY).
    again = _crawl(db, FetchLimits(allow_private=True), until_idle=True, seconds=20)
    assert again.refused == 0 and again.fetched + again.blocked == 2
    db.dispose()


def test_seconds_ends_a_lease_between_two_requests(web: HostileWeb, tmp_path: object) -> None:
    # Four pages that each take the whole 1.5 s deadline: the old check between leases let
    # the lease run all four (6 s) past a 1 s limit.
    url = web.url("slow-body")
    db = _db(tmp_path, [url, *(f"{url}/{i}" for i in range(2, 5))])
    limits = FetchLimits(allow_private=True, read_timeout=1.0, total_timeout=1.5)
    t0 = time.monotonic()
    stats = _crawl(db, limits, seconds=1.0)
    took = time.monotonic() - t0
    assert took < 1.0 + 1.5 + 1.0, took  # the deadline, one fetch's timeout, a report
    slow = [v for v in web.visits("slow-body") if v.path.startswith("/slow-body")]
    assert len(slow) == 1 and stats.errors == 1
    db.dispose()


def _children(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid``, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("processes", [1, 2])
def test_a_second_sigterm_ends_the_crawl_at_once(
    web: HostileWeb, tmp_path: Path, processes: int
) -> None:
    # The first SIGTERM waits for the in-flight fetch (a server trickling its headers: up to
    # the 30 s deadline); the second must not (it used to do nothing), nor leave children.
    db = _db(tmp_path, [web.url("slow-headers")])
    db.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    env["CRAWLPLAN_DB_URL"] = f"sqlite:///{tmp_path}/crawl.db"
    command = [sys.executable, "-m", "service", "crawl", "--allow-private", "--workers", "1"]
    command += ["--processes", str(processes)]

    def slow() -> int:
        return len([v for v in web.visits("slow-headers") if v.path == "/slow-headers"])

    before = slow()
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    children: list[int] = []
    try:
        waited = time.monotonic() + 30
        while slow() == before:
            assert time.monotonic() < waited and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        children = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # finishing the fetch
        proc.send_signal(signal.SIGTERM)
        _out, errors = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "SIGTERM again: stopping now" in errors
    if processes > 1:
        assert len(children) >= processes  # the crawl processes (and the resource tracker)
        time.sleep(0.5)
        left = [pid for pid in children if Path(f"/proc/{pid}").exists()]
        alive = [pid for pid in left if "State:\tZ" not in _status(pid)]
        crawling = [pid for pid in alive if "spawn_main" in _cmdline(pid)]
        assert crawling == [], crawling


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "State:\tZ"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("settle", [0.0, 1.0], ids=["while-starting", "while-crawling"])
def test_the_children_of_a_crawl_killed_9_stop_by_themselves(
    web: HostileWeb, tmp_path: Path, settle: float
) -> None:
    # A parent killed with SIGKILL cannot tell its --processes children to stop: they used
    # to crawl on, unsupervised, for good. Killed while they are still importing (seconds on
    # a loaded machine), they once remembered the reaper as their parent and crawled on too.
    db = _db(tmp_path, [web.origin("no-answer") + "/ok.html"])
    db.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    env["CRAWLPLAN_DB_URL"] = f"sqlite:///{tmp_path}/crawl.db"
    command = [sys.executable, "-m", "service", "crawl", "--allow-private", "--workers", "1"]
    proc = subprocess.Popen(
        [*command, "--processes", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    crawling: list[int] = []
    try:
        waited = time.monotonic() + 30
        while len(crawling) < 2:
            assert time.monotonic() < waited and proc.poll() is None
            time.sleep(0.2)
            crawling = [pid for pid in _children(proc.pid) if "spawn_main" in _cmdline(pid)]
        time.sleep(settle)  # starting, or crawling (idle once the one page is done)
        proc.kill()
        proc.wait()
        # They notice within half a second and stop once their in-flight fetch ends, which
        # here (a host that never answers) is at most its whole deadline,
        # FetchLimits.total_timeout; 20 s more for a loaded machine's start-up and exit.
        waited = time.monotonic() + FetchLimits().total_timeout + 20
        while [pid for pid in crawling if "State:\tZ" not in _status(pid)]:
            assert time.monotonic() < waited, "the orphaned crawl processes crawl on"
            time.sleep(0.2)
    finally:
        for pid in crawling:  # only if the test failed: never leave them running
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
