"""Politeness under faults (issue 26): four crawl processes on PostgreSQL, one killed -9.

The killed process's hosts must be crawled by the others within a lease time (leases are
short and renewed by each live worker's heartbeat; a dead worker renews nothing), and no
host may get two requests closer than its delay, by the web server's own log. Worker names
carry the process id, which is how the test tells the killed process's leases apart.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from crawler.urls import origin_of
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store import Database, add_pages, open_database, upgrade_schema
from store.models import Host, Lease
from store.types import utcnow
from tests.conftest import fresh_pg_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HOSTS = 12
MIN_DELAY = 0.4  # seconds between two requests to one host
LEASE_SECONDS = 3.0  # heartbeat every second
#: Worker threads per process. A thread crawls its batch of hosts to the end before it leases
#: again, so a free host is taken within a lease time only if some survivor has an idle
#: thread: with two threads each (eight for twelve hosts), CI saw the victim's fourth host
#: wait 8.4 s for a busy thread's batch to end. Four each leave the survivors at least four
#: idle threads (twelve, at most eight of them busy with the others' hosts).
WORKERS = 4


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_database() as url:
        yield url


def _start(url: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    env.update(
        CRAWLPLAN_DB_URL=url,
        CRAWLPLAN_MIN_DELAY=str(MIN_DELAY),
        CRAWLPLAN_LEASE_SECONDS=str(LEASE_SECONDS),
        CRAWLPLAN_LEASE_MAX_HOSTS="2",  # spread the hosts over the processes
    )
    command = [
        sys.executable,
        "-m",
        "service",
        "crawl",
        "--allow-private",
        "--workers",
        str(WORKERS),
    ]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _held_by(db: Database, pid: int) -> set[str]:
    """Origins of the live leases of the process ``pid`` (its workers are HOST-PID-n)."""
    now = utcnow()
    query = (
        select(Host.origin)
        .join(Lease, Lease.host_id == Host.id)
        .where(Lease.worker.like(f"%-{pid}-%"), Lease.released_at.is_(None))
        .where(Lease.expires_at > now)
    )
    with db.read() as conn:
        return {row[0] for row in conn.execute(query)}


def test_kill_9_one_of_four_crawls_others_take_its_hosts_politely(pg_url: str) -> None:
    web = SyntheticWeb(WebConfig(hosts=HOSTS, pages_per_host=40, rate_low=0.01, rate_high=0.1))
    db = open_database(pg_url, create=True)
    upgrade_schema(db)
    with WebServer(web, seed=5) as server:
        urls = [server.url(page) for page in range(web.n_pages)]
        add_pages(db, [(u, origin_of(u)) for u in urls])
        procs = [_start(pg_url) for _ in range(4)]
        try:
            # The victim: the first process seen holding a host. (Always the first started
            # was flaky: one slow to start could find the 12 hosts held by the other three
            # and their pages all crawled before a lease came free.)
            waited = time.monotonic() + 60
            held: set[str] = set()
            victim = procs[0]
            while not held:
                assert time.monotonic() < waited, "no process leased a host in a minute"
                for proc in procs:
                    assert proc.poll() is None, proc.communicate()
                time.sleep(0.2)
                for proc in procs:
                    if held := _held_by(db, proc.pid):
                        victim = proc
                        break
            time.sleep(1.0)  # mid-crawl, a heartbeat or so in
            held = _held_by(db, victim.pid) or held
            victim.kill()
            victim.wait()
            killed_at = server.now()
            taken: dict[str, float] = {}
            deadline = time.monotonic() + 60
            while len(taken) < len(held) and time.monotonic() < deadline:
                time.sleep(0.2)
                with server.lock:
                    for r in server.log:
                        origin = server.origins[r.host]
                        if origin in held and origin not in taken and r.t > killed_at + 0.05:
                            taken[origin] = r.t - killed_at
            assert set(taken) == held, f"not taken within a minute: {held - set(taken)}"
            assert max(taken.values()) < 60
            assert max(taken.values()) < LEASE_SECONDS + 5  # a lease time, not five minutes
        finally:
            for proc in procs:
                if proc is not victim and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
    assert all(p.returncode is not None for p in procs)
    # Politeness, from the server's log: no host asked twice within its delay.
    gaps = []
    for host in range(HOSTS):
        times = sorted(r.t for r in server.requests_to(host))
        gaps += [b - a for a, b in itertools.pairwise(times)]
    print(  # the figures docs/reliability.md quotes (pytest -s)
        f"killed process held {len(held)} hosts; taken after "
        f"{', '.join(f'{t:.1f}' for t in sorted(taken.values()))} s; {len(gaps) + HOSTS} "
        f"requests to {HOSTS} hosts, closest two to one host {min(gaps):.3f} s apart "
        f"(delay {MIN_DELAY} s)"
    )
    assert len(gaps) > HOSTS  # the crawl did crawl
    assert min(gaps) >= MIN_DELAY - 0.02, min(gaps)
    # The victim's hosts were not kept from the others for a whole lease of old (300 s).
    with db.read() as conn:
        stale = conn.execute(
            select(Lease.id).where(
                Lease.released_at.is_(None), Lease.expires_at > utcnow() + timedelta(seconds=10)
            )
        ).first()
    assert stale is None
    db.dispose()
