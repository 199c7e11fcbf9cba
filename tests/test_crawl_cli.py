"""`crawlplan crawl` as a process: graceful stop on SIGTERM, and SIGKILL then restart."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from crawler.noise import NOISE_TWINS
from crawler.urls import normalize_url, origin_of
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store import add_pages, open_database, upgrade_schema
from store.models import Observation, Page
from tests.conftest import orm_all


@pytest.fixture
def web_and_db(tmp_path: Path) -> Iterator[tuple[WebServer, str]]:
    web = SyntheticWeb(WebConfig(hosts=6, pages_per_host=20, rate_low=0.01, rate_high=0.1))
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    db = open_database(url, create=True)
    upgrade_schema(db)
    with WebServer(web) as server:
        seeds = [normalize_url(o + "/s0/p0.html") for o in server.origins]
        add_pages(db, [(u, origin_of(u)) for u in seeds])
        db.dispose()
        yield server, url


def _crawl(url: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    env.update(CRAWLPLAN_DB_URL=url, CRAWLPLAN_MIN_DELAY="0.2", CRAWLPLAN_LEASE_SECONDS="3")
    return subprocess.Popen(
        [sys.executable, "-m", "service", "crawl", "--allow-private", "--workers", "3", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job is
    )


def _fetch_requests(server: WebServer) -> Counter[str]:
    """Page requests per URL as the server saw them (robots.txt excluded), without the twin
    fetches of the hosts' noise checks (``crawler.noise``: a page asked again up to
    NOISE_TWINS times in a row, never observed on their own; a crawl killed before its lease
    ended checks again when it restarts). A page fetched twice in a row and observed twice
    still shows: it is counted once here."""
    with server.lock:
        log = list(server.log)
    last: dict[int, str] = {}
    repeats: Counter[int] = Counter()
    counts: Counter[str] = Counter()
    for r in log:
        if r.path == "/robots.txt":
            continue
        if last.get(r.host) == r.path and repeats[r.host] < NOISE_TWINS:
            repeats[r.host] += 1
        else:
            repeats[r.host] = 0
            counts[server.origins[r.host] + r.path] += 1
        last[r.host] = r.path
    return counts


def _observations(url: str) -> Counter[str]:
    db = open_database(url)
    pages = {p.id: p.url for p in orm_all(db, select(Page))}
    counts = Counter(
        pages[o.page_id]
        for o in orm_all(db, select(Observation))
        if o.error != "disallowed by robots.txt"  # stores from before: blocked pages observed
    )
    db.dispose()
    return counts


def _wait_for_requests(server: WebServer, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while sum(_fetch_requests(server).values()) < n and time.monotonic() < deadline:
        time.sleep(0.05)


def test_sigterm_finishes_in_flight_fetches_and_reports_them(
    web_and_db: tuple[WebServer, str],
) -> None:
    server, url = web_and_db
    proc = _crawl(url)
    _wait_for_requests(server, 15)
    proc.send_signal(signal.SIGTERM)
    out, errors = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, errors  # 143, README "Exit codes"
    assert "SIGTERM" in errors and "fetched" in out
    assert _observations(url) == _fetch_requests(server)  # every request the server saw
    db = open_database(url)
    assert all(p.lease_id is None for p in orm_all(db, select(Page)))  # leases released
    db.dispose()


def test_sigkill_then_restart_loses_nothing_and_counts_nothing_twice(
    web_and_db: tuple[WebServer, str],
) -> None:
    server, url = web_and_db
    proc = _crawl(url)
    _wait_for_requests(server, 20)
    proc.kill()
    proc.wait(timeout=30)
    before = _observations(url)
    db = open_database(url)
    held = sum(1 for p in orm_all(db, select(Page)) if p.lease_id is not None)
    db.dispose()
    restarted = _crawl(url, "--until-idle", "--seconds", "90")
    _out, errors = restarted.communicate(timeout=120)
    assert restarted.returncode == 0, errors
    after = _observations(url)
    served = _fetch_requests(server)
    assert all(after[u] >= before[u] for u in before)  # nothing recorded was lost
    for page_url, count in after.items():
        # Only fetches in flight at the kill are missing; none is recorded twice.
        assert count <= served[page_url], page_url
    # The only requests without an observation are fetches the killed process had not
    # reported yet: pages still under its (expired) leases, fetched again after the restart.
    assert sum(served.values()) - sum(after.values()) <= held
    web_pages = {server.url(p) for p in range(server.web.n_pages)}
    assert web_pages <= set(after)  # the restarted crawl finished the job


def test_two_processes_stop_on_sigint_and_finish_politely(
    web_and_db: tuple[WebServer, str],
) -> None:
    """`--processes 2`: Ctrl-C (SIGINT, as a terminal sends it to the whole process group)
    stops both processes gracefully; a second run finishes the crawl; across both, every
    request is recorded once and no host ever gets two requests closer than its delay."""
    server, url = web_and_db
    proc = _crawl(url, "--processes", "2")
    _wait_for_requests(server, 25)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the parent and its children
    # communicate() returns only once every process holding the pipes has exited: the
    # children inherit them, so a child left running would hold this up to the timeout.
    out, errors = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, errors  # 130, README "Exit codes"
    assert "SIGINT" in errors and "fetched" in out
    assert _observations(url) == _fetch_requests(server)
    finished = _crawl(url, "--processes", "2", "--until-idle", "--seconds", "90")
    _out, errors = finished.communicate(timeout=120)
    assert finished.returncode == 0, errors
    observed = _observations(url)
    assert observed == _fetch_requests(server)  # nothing lost, nothing twice
    assert {server.url(p) for p in range(server.web.n_pages)} <= set(observed)
    with server.lock:
        log = list(server.log)
    for host in range(len(server.origins)):
        times = sorted(r.t for r in log if r.host == host)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert not gaps or min(gaps) >= 0.2 - 0.02, host
