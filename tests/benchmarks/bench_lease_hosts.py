"""Lease-host benchmark: one lease call among many idle hosts.

Run with ``make bench``. A store of ``--idle`` hosts (default 200,000) with one page each and
nothing due (fetched, waiting for a plan's release; their politeness delay passed long ago),
plus 1,000 busy hosts with 10 due pages each, built in bulk SQL on each backend. Timed, each
beside baselines measured in the same run on the same database:

* lease: ``LeaseQueue.lease`` with the default policy (100 URLs, 20 per host, 20 hosts), call
  after call until the 10,000 due pages are leased; the median and the slowest call;
* the host query alone (``LeaseQueue``'s, walking ``ix_hosts_ready``), 50 times;
* baseline, the host query before migration 0011: hosts in ``next_fetch_at`` order through an
  index on it, each probed for a due page (in ``pages``) or a queued one (in
  ``released_pages``), 50 times: it reads every host whose politeness delay has passed;
* baseline, the same lease calls on a store with the busy hosts only (no idle host): what a
  lease costs when the idle hosts cost nothing;
* the recomputation of every host's ``ready_at`` (what migration 0011's backfill and
  :func:`store.recompute_ready` do), once.

Options: ``--idle N`` (default 200,000), ``--backend sqlite|postgresql|both`` (default both),
``--pg URL`` (admin URL, default the local server), ``--out FILE``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import text

from store import Database, LeasePolicy, LeaseQueue, open_database, upgrade_schema
from store.host_ready import refresh_ready_everywhere

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BUSY = 1_000
PER_BUSY = 10
NOW = datetime(2026, 3, 1, tzinfo=UTC)
QUERY_RUNS = 50

_SQLITE_SERIES = "WITH RECURSIVE s(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM s WHERE i < :hi)"
_SQLITE_HOSTS = (
    _SQLITE_SERIES + " INSERT INTO hosts (id, origin, first_seen, next_fetch_at, "
    "consecutive_errors) SELECT i, printf('http://h%07d.example', i), :first, "
    "CASE WHEN i <= :busy THEN :first ELSE :idle END, 0 FROM s"
)
_PG_HOSTS = (
    "INSERT INTO hosts (id, origin, first_seen, next_fetch_at, consecutive_errors) "
    "SELECT i, 'http://h' || lpad(i::text, 7, '0') || '.example', :first, "
    "CASE WHEN i <= :busy THEN CAST(:first AS timestamptz) ELSE :idle END, 0 "
    "FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i"
)
# Page i: host 1 + (i - 1) // PER_BUSY for the busy hosts' pages (due), then one page per
# idle host (fetched, not due).
_PAGE_COLUMNS = (
    "INSERT INTO pages (id, url, host_id, status, first_seen, next_due_at, last_fetch_at, "
    "fetches, changes, bucket, cash, history) "
)
_SQLITE_PAGES = (
    _SQLITE_SERIES + " " + _PAGE_COLUMNS + "SELECT i, printf('http://bench.example/%09d', i), "
    "CASE WHEN i <= :due THEN 1 + (i - 1) / :per ELSE i - :due + :busy END, 'ok', :first, "
    "CASE WHEN i <= :due THEN :first END, :first, 1, 0, 1, 0.0, 0.0 FROM s"
)
_PG_PAGES = (
    _PAGE_COLUMNS + "SELECT i, 'http://bench.example/' || lpad(i::text, 9, '0'), "
    "CASE WHEN i <= :due THEN 1 + (i - 1) / :per ELSE i - :due + :busy END, 'ok', :first, "
    "CASE WHEN i <= :due THEN CAST(:first AS timestamptz) END, :first, 1, 0, 1, 0.0, 0.0 "
    "FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i"
)
# The host query before migration 0011 (SQLite; PostgreSQL adds OFFSET 0 to each probe, so
# that it is probed per host by index, and FOR UPDATE SKIP LOCKED).
_OLD_HOSTS = """
SELECT h.id, h.origin, h.crawl_delay, h.robots_txt, h.robots_status, h.robots_fetched_at,
       h.robots_expires_at
FROM hosts h
WHERE (h.leased_until IS NULL OR h.leased_until < :now) AND h.next_fetch_at <= :now
  AND (h.backoff_until IS NULL OR h.backoff_until <= :now)
  AND (EXISTS (SELECT p.id FROM pages p WHERE p.host_id = h.id AND p.next_due_at <= :now
               AND (p.leased_until IS NULL OR p.leased_until < :now) {offset})
       OR EXISTS (SELECT r.page_id FROM released_pages r
                  WHERE r.host_id = h.id AND r.due_at <= :now {offset}))
ORDER BY h.next_fetch_at, h.id LIMIT 20 {lock}
"""


def build(db: Database, idle: int) -> float:
    """Fill an initialized store with the BUSY busy hosts (``idle`` 0), or add ``idle`` idle
    hosts to it; seconds taken."""
    t0 = time.perf_counter()
    postgres = db.dialect == "postgresql"
    first = NOW - timedelta(days=1)
    stamp: object = first if postgres else first.replace(tzinfo=None).isoformat(" ") + ".000000"
    # Idle hosts were fetched long ago: their politeness delay passed before the busy hosts'.
    idle_at = first - timedelta(days=10)
    idle_stamp: object = (
        idle_at if postgres else idle_at.replace(tzinfo=None).isoformat(" ") + ".000000"
    )
    due = BUSY * PER_BUSY
    hosts, pages = (
        ((1, BUSY), (1, due)) if idle == 0 else ((BUSY + 1, BUSY + idle), (due + 1, due + idle))
    )
    with db.write() as conn:
        conn.execute(
            text(_PG_HOSTS if postgres else _SQLITE_HOSTS),
            {"lo": hosts[0], "hi": hosts[1], "busy": BUSY, "first": stamp, "idle": idle_stamp},
        )
        conn.execute(
            text(_PG_PAGES if postgres else _SQLITE_PAGES),
            {
                "lo": pages[0],
                "hi": pages[1],
                "due": due,
                "per": PER_BUSY,
                "busy": BUSY,
                "first": stamp,
            },
        )
    if postgres:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE hosts")
            conn.exec_driver_sql("VACUUM ANALYZE pages")
    else:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
    return time.perf_counter() - t0


def _lease_calls(db: Database) -> tuple[list[float], int]:
    """Lease with the default policy until nothing is due; each call's seconds, URLs leased."""
    queue = LeaseQueue(db, LeasePolicy())
    times: list[float] = []
    leased = 0
    while True:
        t0 = time.perf_counter()
        batch = queue.lease("bench", now=NOW)
        times.append(time.perf_counter() - t0)
        if not batch:
            return times, leased
        leased += sum(len(lease.pages) for lease in batch)


def _undo_leases(db: Database) -> None:
    with db.write() as conn:
        for stmt in (
            "UPDATE pages SET lease_id = NULL, leased_until = NULL WHERE lease_id IS NOT NULL",
            "UPDATE hosts SET lease_id = NULL, leased_until = NULL WHERE lease_id IS NOT NULL",
            "DELETE FROM leases",
        ):
            conn.exec_driver_sql(stmt)


def _query_times(db: Database, stmt: object, params: dict[str, object]) -> list[float]:
    times = []
    for _ in range(QUERY_RUNS):
        with db.write() as conn:  # as a lease runs it (PostgreSQL: its row locks)
            t0 = time.perf_counter()
            conn.execute(stmt, params).all()  # type: ignore[call-overload]
            times.append(time.perf_counter() - t0)
    return times


def bench(db: Database, idle: int) -> dict[str, float]:
    f: dict[str, float] = {"idle_hosts": idle, "busy_hosts": BUSY}
    postgres = db.dialect == "postgresql"
    # Baseline store: the busy hosts only.
    build(db, 0)
    _ready_everywhere(db)
    base, base_leased = _lease_calls(db)
    f["busy_only_lease_median_s"] = statistics.median(base)
    _undo_leases(db)
    f["build_s"] = build(db, idle)
    f["recomputed_hosts"], f["recompute_s"] = _ready_everywhere(db)
    times, leased = _lease_calls(db)
    f["lease_calls"], f["leased"] = len(times), leased
    f["lease_median_s"], f["lease_max_s"] = statistics.median(times), max(times)
    assert base_leased == leased == BUSY * PER_BUSY, (base_leased, leased)
    _undo_leases(db)
    queue = LeaseQueue(db, LeasePolicy())
    new = _query_times(db, queue._sql.hosts_due, {"now": NOW, "limit": 20})
    f["query_median_s"] = statistics.median(new)
    old_sql = _OLD_HOSTS.format(
        offset="OFFSET 0" if postgres else "",
        lock="FOR UPDATE OF h SKIP LOCKED" if postgres else "",
    )
    with db.write() as conn:
        conn.exec_driver_sql("CREATE INDEX bench_hosts_next_fetch_at ON hosts (next_fetch_at)")
    now: object = NOW if postgres else NOW.replace(tzinfo=None).isoformat(" ") + ".000000"
    old = _query_times(db, text(old_sql), {"now": now})
    f["old_query_median_s"] = statistics.median(old)
    return f


def _ready_everywhere(db: Database) -> tuple[int, float]:
    """Every host's ready_at recomputed: hosts set, seconds."""
    with db.write() as conn:
        t0 = time.perf_counter()
        n = refresh_ready_everywhere(conn, db.backend.host_ready)
        return n, time.perf_counter() - t0


def _print(results: dict[str, dict[str, float]]) -> None:
    for backend, f in results.items():
        idle = f"{int(f['idle_hosts']):,} idle + {int(f['busy_hosts']):,} busy hosts"
        print(f"\n{backend}: {idle} (built in {f['build_s']:.1f} s)")
        print(
            f"  lease call, median of {int(f['lease_calls'])} ({int(f['leased']):,} URLs)   "
            f"{f['lease_median_s'] * 1e3:8.2f} ms (slowest {f['lease_max_s'] * 1e3:.1f} ms)"
        )
        print(
            f"    baseline: the same calls with no idle host        "
            f"{f['busy_only_lease_median_s'] * 1e3:8.2f} ms"
        )
        print(
            f"  host query (ready index), median of {QUERY_RUNS}          "
            f"{f['query_median_s'] * 1e3:8.2f} ms"
        )
        print(
            f"    baseline: host query before 0011 (probes)         "
            f"{f['old_query_median_s'] * 1e3:8.2f} ms  "
            f"({f['old_query_median_s'] / f['query_median_s']:.0f}x)"
        )
        print(
            f"  recompute every host's ready_at                      "
            f"{f['recompute_s'] * 1e3:8.1f} ms ({int(f['recomputed_hosts']):,} changed)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=200_000)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--pg", default=PG_ADMIN)
    parser.add_argument("--out", default="bench-results/lease_hosts.json")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="crawlplan-hosts-") as folder:
            db = open_database(f"sqlite:///{Path(folder) / 'hosts.db'}", create=True)
            upgrade_schema(db)
            results["sqlite"] = bench(db, args.idle)
            db.dispose()
    if args.backend in ("postgresql", "both"):
        name = f"crawlplan_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            db = open_database(args.pg.rsplit("/", 1)[0] + "/" + name)
            upgrade_schema(db)
            results["postgresql"] = bench(db, args.idle)
            db.dispose()
        finally:
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    _print(results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
