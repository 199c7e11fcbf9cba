"""Capacity accounting benchmark: the per-period reads of status, /metrics and nightly.

A store with a plan of 14 one-day periods, the last one running, and ``--fetches`` fetches in
each period (one host, 1,000 pages), on SQLite and PostgreSQL. Timed, best of 3:

* ``crawlplan status``'s table: :func:`store.period_use.plan_period_use` over the 14 periods;
* a ``/metrics`` scrape's: :func:`store.period_use.current_and_last`;
* the nightly capacity measurement's: :func:`store.period_use.ended_periods` over 7 days;
* the two counts a release adds (:func:`store.releases.queue_release`: new pages among the
  pages it queued, pages waiting on backed-off hosts) on a queue of ``--queue`` pages.

Baseline, same run and database: ``count(*)`` of the 14 periods' observations by their
``fetched_at`` index (the rows the status table reads, counted without reading them).

Options: ``--fetches N`` (default 100,000 a period), ``--queue N`` (default 100,000),
``--pg URL`` (an admin URL; default the local server, ``--pg none`` skips PostgreSQL). The
PostgreSQL database is a scratch one, dropped at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import bindparam, func, insert, select

from store import Database, PlanDraft, PlanPeriodDraft, open_database, publish_plan
from store.models import HOSTS, OBSERVATIONS, PAGES, RELEASED_PAGES
from store.period_use import current_and_last, ended_periods, plan_period_use
from store.schema import upgrade_schema

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DAY = timedelta(days=1)
_CHUNK = 20_000


def _build(db: Database, fetches: int, queue: int) -> datetime:
    """The plan, its observations and a release queue; returns the plan's start."""
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - 13 * DAY
    hosts = [
        {
            "id": h + 1,
            "origin": f"http://h{h}.test",
            "first_seen": start,
            "next_fetch_at": start,
            "consecutive_errors": 0,
            "backoff_until": start + 20 * DAY if h < 10 else None,
        }
        for h in range(1_000)
    ]
    pages = [
        {
            "id": k + 1,
            "url": f"http://h0.test/{k}",
            "host_id": 1,
            "status": "ok",
            "first_seen": start,
            "fetches": 1,
            "changes": 0,
            "bucket": 0,
            "cash": 0.0,
            "history": 0.0,
        }
        for k in range(1_000)
    ]
    with db.write() as conn:
        conn.execute(insert(HOSTS), hosts)
        conn.execute(insert(PAGES), pages)
    periods = [
        PlanPeriodDraft(t + 1, start + t * DAY, start + (t + 1) * DAY, float(fetches), 0, {})
        for t in range(14)
    ]
    publish_plan(
        db,
        PlanDraft(start, 1.0, "bench", periods, inputs={}, solver={}),
    )
    step = 86_400 / fetches
    for t in range(14):
        base = start + t * DAY
        rows = [
            {
                "page_id": k % 1_000 + 1,
                "kind": "fetch",
                "fetched_at": base + timedelta(seconds=k * step),
                "recorded_at": base,
                "http_status": 200 if k % 50 else 503,
                "duration": 0.1,
            }
            for k in range(fetches)
        ]
        with db.write() as conn:
            for i in range(0, fetches, _CHUNK):
                conn.execute(insert(OBSERVATIONS), rows[i : i + _CHUNK])
    queued = [
        {
            "host_id": k % 1_000 + 1,
            "due_at": start + timedelta(seconds=k),
            "page_id": 10_000 + k,
            "plan_id": 1,
            "period": 13 + k % 2,
            "url": f"http://h.test/{k}",
            "status": "new" if k % 3 else "ok",
        }
        for k in range(queue)
    ]
    with db.write() as conn:
        for i in range(0, queue, _CHUNK):
            conn.execute(insert(RELEASED_PAGES), queued[i : i + _CHUNK])
    return start


def _best(call: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench(db: Database, fetches: int, queue: int) -> None:
    t0 = time.perf_counter()
    start = _build(db, fetches, queue)
    print(
        f"  built {14 * fetches:,} observations, {queue:,} queued pages: "
        f"{time.perf_counter() - t0:.0f} s"
    )
    now = datetime.now(UTC)
    o, rp, h = OBSERVATIONS.c, RELEASED_PAGES.c, HOSTS.c
    baseline = select(func.count()).where(o.fetched_at >= start, o.fetched_at < now)
    new_queued = select(func.count()).where(rp.plan_id == 1, rp.period == 14, rp.status == "new")
    held = rp.host_id.in_(select(h.id).where(h.backoff_until > bindparam("now")))
    backed_off = select(func.count()).where(held)

    def scalar(stmt: object, **params: object) -> Callable[[], object]:
        def run() -> object:
            with db.read() as conn:
                return conn.execute(stmt, params).scalar_one()  # type: ignore[call-overload]

        return run

    figures = {
        "baseline: count(*) of the 14 periods' fetches": scalar(baseline),
        "status table, 14 periods (plan_period_use)": lambda: plan_period_use(db, 1),
        "a /metrics scrape (current_and_last)": lambda: current_and_last(db),
        "nightly, 7 days (ended_periods)": lambda: ended_periods(
            db, since=now - 7 * DAY, until=now
        ),
        "release: new pages it queued": scalar(new_queued),
        "release: pages on backed-off hosts": scalar(backed_off, now=now),
    }
    for name, call in figures.items():
        print(f"  {name}: {_best(call):.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fetches", type=int, default=100_000)
    parser.add_argument("--queue", type=int, default=100_000)
    parser.add_argument("--pg", default=PG_ADMIN)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        print("SQLite")
        db = open_database(f"sqlite:///{Path(scratch) / 'bench.db'}", create=True)
        upgrade_schema(db)
        bench(db, args.fetches, args.queue)
        db.dispose()
    if args.pg == "none":
        return
    name = f"crawlplan_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        print("PostgreSQL")
        url = args.pg.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        db = open_database(f"{url}/{name}")
        upgrade_schema(db)
        bench(db, args.fetches, args.queue)
        db.dispose()
    finally:
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


if __name__ == "__main__":
    main()
