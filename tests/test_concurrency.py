"""Many worker processes leasing from one store, and a worker killed while holding leases.

8 processes lease and report 20,000 URLs across 200 hosts on PostgreSQL, and the same on SQLite
with the processes sharing one file: every URL is leased exactly once in the round, no host is
held by two workers at once, and every fetch is recorded exactly once.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from store import Database, add_pages
from store.models import Lease, Observation, Page
from tests import leasing_worker
from tests.conftest import orm_all

HOSTS = 200
URLS = 20_000
WORKERS = 8


def _seed(db: Database, hosts: int, urls: int) -> None:
    per_host = urls // hosts
    add_pages(
        db,
        (
            (f"http://h{h}.test:8080/page/{i}", f"http://h{h}.test:8080")
            for h in range(hosts)
            for i in range(per_host)
        ),
    )


def _run_workers(url: str, tmp_path: Path, count: int, **kwargs: object) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    procs = []
    for w in range(count):
        out = tmp_path / f"worker-{w}.json"
        proc = ctx.Process(
            target=leasing_worker.run,
            args=(url, f"w{w}", str(tmp_path), str(out)),
            # Half the workers report and release in one step (finish), half in two.
            kwargs={"finish": w % 2 == 0, **kwargs},
        )
        proc.start()
        procs.append((proc, out))
    logs = []
    for proc, out in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0, f"worker exited with {proc.exitcode}"
        logs.append(json.loads(out.read_text()))
    return logs


def _no_overlap(logs: list[dict]) -> None:
    by_host: dict[int, list[tuple[float, float, str]]] = {}
    for log in logs:
        for entry in log["log"]:
            by_host.setdefault(entry["host"], []).append(
                (entry["start"], entry["end"], log["worker"])
            )
    for host, spans in by_host.items():
        spans.sort()
        for (_s1, e1, w1), (s2, _e2, w2) in itertools.pairwise(spans):
            assert s2 >= e1, f"host {host} held by {w1} and {w2} at once"


@pytest.mark.slow
def test_eight_workers_lease_every_url_exactly_once(db: Database, tmp_path: Path) -> None:
    _seed(db, HOSTS, URLS)
    db.dispose()  # no pooled connections across the spawn
    logs = _run_workers(db.url.render_as_string(hide_password=False), tmp_path, WORKERS)

    assert all(log["violations"] == [] for log in logs), [log["violations"] for log in logs]
    _no_overlap(logs)
    leased = Counter(pid for log in logs for entry in log["log"] for pid in entry["pages"])
    assert len(leased) == URLS
    assert set(leased.values()) == {1}, "a URL was leased twice in one round"
    assert sum(e["recorded"] for log in logs for e in log["log"]) == URLS
    assert sum(1 for log in logs if log["log"]) >= 2, "the work was not shared between workers"
    with db.read() as conn:
        observations = conn.execute(select(func.count()).select_from(Observation)).scalar_one()
        distinct = conn.execute(select(func.count(func.distinct(Observation.page_id)))).scalar_one()
        fetches = set(conn.execute(select(Page.fetches)).scalars())
        open_leases = conn.execute(
            select(func.count()).where(Lease.released_at.is_(None))
        ).scalar_one()
    assert observations == URLS and distinct == URLS
    assert fetches == {1}
    assert open_leases == 0


@pytest.mark.slow
def test_killed_worker_loses_nothing(db: Database, tmp_path: Path) -> None:
    _seed(db, hosts=10, urls=500)
    db.dispose()
    url = db.url.render_as_string(hide_password=False)
    ctx = multiprocessing.get_context("spawn")
    ready = tmp_path / "ready.json"
    victim = ctx.Process(
        target=leasing_worker.lease_and_hang, args=(url, "victim", str(ready), 2.0)
    )
    victim.start()
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    held = json.loads(ready.read_text())
    assert len(held) == 50
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    victim.join(timeout=30)
    assert victim.exitcode == -signal.SIGKILL

    # Two survivors; they get the victim's pages once its 2 s lease has expired.
    logs = _run_workers(url, tmp_path, 2, lease_seconds=30.0)
    leased = Counter(pid for log in logs for entry in log["log"] for pid in entry["pages"])
    assert set(held) <= set(leased)
    assert len(leased) == 500 and set(leased.values()) == {1}
    pages = orm_all(db, select(Page))
    assert {p.fetches for p in pages} == {1}
    assert all(p.lease_id is None for p in pages)
    with db.read() as conn:
        assert conn.execute(select(func.count()).select_from(Observation)).scalar_one() == 500
        victim_leases = conn.execute(
            select(Lease.released_at).where(Lease.worker == "victim")
        ).all()
    assert victim_leases and all(r.released_at is None for r in victim_leases)
