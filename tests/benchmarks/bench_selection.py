"""Due-URL selection benchmark: choose, release and lease 100,000 due URLs from a large store.

Run with ``make bench``. The store (default 10,000,000 pages on 1,000 hosts, 100 change-rate
buckets, a tenth never fetched) is built in bulk SQL (a recursive CTE on SQLite,
``generate_series`` on PostgreSQL; indexes built after the rows), not through the seeding
path. A published plan asks for 900 pages of each bucket plus 10,000 new pages in the current
period (100,000 in all); one host in fifty has a robots.txt delay of an hour, so host
capacity binds for some of them. Timed, each beside baselines measured in the same run on the
same database:

* read: the candidate queries (per bucket by the covering index ``(bucket, last_fetch_at,
  ...)``, longest unvisited first, new pages by cash, the hosts' delays);
* select: the pure selection (``planner.cycle.due_urls``) on those candidates, the quotas
  pooled as the release does (every bucket planned a tenth of its pages a period), and
  beside it quota by quota, as releases chose before they pooled;
* release: ``release_period`` end to end (its own read and select again, then one write
  transaction that queues the chosen pages in ``released_pages`` with their URLs and
  validators, read in the same statement from the candidate indexes' entries, which hold
  them);
* lease: ``LeaseQueue.lease`` in batches of 100 hosts (about 10,000 URLs) until the released
  pages are all leased, right after the release (workers waiting for it: the queue the
  release has just written is cached);
* choose + release + lease: release + lease, the issue's "choosing and leasing 100,000 due
  URLs" (target: under 2 s on 10,000,000 pages).

Baselines, measured after the timed stages: a bare indexed SELECT of the same number of rows
(the quota's first rows of each bucket and of the new pages, through the driver), and a bare
UPDATE of ``next_due_at`` of 100,000 pages by id (on SQLite with the page cache the store's
bulk writes use), which is what the release and the lease each cost before the release queue.
They run last because the bare UPDATE leaves 200,000 dead row versions behind on PostgreSQL
(its visibility map stale until autovacuum; the timed stages measure the store as built and
vacuumed).

The store's state. A period release runs once a period, so it finds the store's file pages
as the OS left them; this machine (a VM) pages out file pages idle for about 30 s (its
kernel's proactive reclaim, DAMON ``pageout``), so a release, and any run of this bench more
than half a minute after the last, reads from disk. A run right after a build (or right
after another run) found the store cached instead: 1.98 s and then 4.10 s for choose +
release + lease on the same store (2026-11-23, before the release read the candidate
indexes) were the same code, cached and not (the undo's write-ahead log was not the
difference: it is checkpointed; the bare UPDATE went from 4.75 to 8.82 s as well). So by default
(``--cache cold``) the read, the release and each baseline start with the store's files dropped
from the OS cache (``posix_fadvise(DONTNEED)``: the SQLite file; on PostgreSQL the bench
database's relation files, when this process can open them, i.e. a local server run as root
or postgres; PostgreSQL's own buffers, ``shared_buffers``, are not emptied), whatever the
run before did and however long ago. ``--cache warm`` reads the files through instead (the
state right after a build), ``--cache asis`` leaves them as they are. No untimed warm-up
pass: what a stage reads cold is part of its time. Beside the load average, the bench prints
the CPU seconds this process spent in the release and the lease (on SQLite all the work; on
PostgreSQL the client's share): on a shared machine, wall time minus CPU time is waiting,
for the disk or for a core.

Options: ``--pages N`` (default 10,000,000), ``--backend sqlite|postgresql|both`` (default
sqlite), ``--pg URL`` (admin URL, default the local server), ``--keep DIR`` reuses a built
SQLite store in DIR and ``--pg-keep NAME`` a built PostgreSQL database NAME (kept, not
dropped; both handy when iterating: the previous run's release, leases and bare UPDATE are
undone first, the SQLite write-ahead log checkpointed, the PostgreSQL database vacuumed and
checkpointed), ``--cache cold|warm|asis`` (above), ``--repeat N`` (default 3): the release and
the lease run N times, undone in between (each run cold with ``--cache cold``); each stage's
figure is the median of the runs, and the fastest and slowest span are printed beside it (this
VM's own speed moves by up to 1.6x within minutes, so one run says little).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql
from sqlalchemy import text

from planner.cycle.due_urls import select_due_pages
from service.pipeline import release_period
from store import (
    Database,
    LeasePolicy,
    LeaseQueue,
    PlanDraft,
    PlanPeriodDraft,
    open_database,
    publish_plan,
    upgrade_schema,
)
from store.database import sqlite_bulk_cache
from store.releases import host_delays, new_page_candidates, period_work, refresh_candidates

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
HOSTS = 1_000
BUCKETS = 100
PER_BUCKET = 900
NEW = 10_000
BASE = datetime(2026, 3, 1, tzinfo=UTC)  # the period starts here; now is one minute later
SPREAD_S = 15 * 86_400  # last fetches (and scheduled times) within +-15 days of BASE
MIN_DELAY = 1.0
#: Every bucket's planned crawls per page and period: an interval of 10 days, so a page is due
#: after 5 (``DUE_SHARE``), about 40 % of them (last fetches 13 days after to 17 days before
#: the period's end), four times a bucket's quota; the release pools the quotas.
FRACTION = 1 / 10

# Columns of the bulk rows, as SQL expressions of the row number i (1..N).
_SQLITE_ROWS = """
WITH RECURSIVE s(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM s WHERE i < :hi)
INSERT INTO pages (id, url, host_id, status, first_seen, next_due_at, last_fetch_at,
                   fetches, changes, bucket, importance, refresh_interval, scheduled_at,
                   cash, history)
SELECT i, printf('http://bench.example/%010d', i), 1 + i % :hosts,
       CASE WHEN i % 10 = 0 THEN 'new' ELSE 'ok' END, :first, NULL,
       CASE WHEN i % 10 = 0 THEN NULL
            ELSE strftime('%Y-%m-%d %H:%M:%S',
                          :base + (i * 2654435761) % (2 * :spread) - :spread - 86400,
                          'unixepoch') || '.000000' END,
       CASE WHEN i % 10 = 0 THEN 0 ELSE 1 END, 0,
       CASE WHEN i % 10 = 0 THEN 0 ELSE 1 + ((i * 40503) / 7) % :buckets END,
       ((i * 40503) % 1000) / 1000.0, 1.0,
       CASE WHEN i % 10 = 0 THEN NULL
            ELSE strftime('%Y-%m-%d %H:%M:%S', :base + (i * 2654435761) % (2 * :spread) - :spread,
                          'unixepoch') || '.000000' END,
       ((i * 2246822519) % 1000003) / 1000003.0, 0.0
FROM s
"""
_PG_ROWS = """
INSERT INTO pages (id, url, host_id, status, first_seen, next_due_at, last_fetch_at,
                   fetches, changes, bucket, importance, refresh_interval, scheduled_at,
                   cash, history)
SELECT i, 'http://bench.example/' || lpad(i::text, 10, '0'), 1 + i % :hosts,
       CASE WHEN i % 10 = 0 THEN 'new' ELSE 'ok' END, :first, NULL,
       CASE WHEN i % 10 = 0 THEN NULL
            ELSE to_timestamp(:base + (i * 2654435761) % (2 * :spread) - :spread - 86400) END,
       CASE WHEN i % 10 = 0 THEN 0 ELSE 1 END, 0,
       CASE WHEN i % 10 = 0 THEN 0 ELSE 1 + ((i * 40503) / 7) % :buckets END,
       ((i * 40503) % 1000) / 1000.0, 1.0,
       CASE WHEN i % 10 = 0 THEN NULL
            ELSE to_timestamp(:base + (i * 2654435761) % (2 * :spread) - :spread) END,
       ((i * 2246822519) % 1000003) / 1000003.0, 0.0
FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i
"""


def build_store(db: Database, pages: int) -> float:
    """Fill an initialized store with ``pages`` pages in bulk SQL; returns seconds taken."""
    t0 = time.perf_counter()
    first = BASE - timedelta(days=30)
    postgres = db.dialect == "postgresql"
    with db.write() as conn:
        conn.execute(
            text(
                "INSERT INTO hosts (id, origin, first_seen, next_fetch_at, consecutive_errors, "
                "crawl_delay) VALUES (:id, :origin, :first, :first, 0, :delay)"
            ),
            [
                {
                    "id": h,
                    "origin": f"http://h{h}.example",
                    "first": first,
                    "delay": 3600.0 if h % 50 == 0 else None,
                }
                for h in range(1, HOSTS + 1)
            ],
        )
        # Indexes are built after the rows (much faster than maintaining them per row).
        if postgres:
            ddl = conn.execute(
                text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'pages'")
            ).all()
        else:
            ddl = conn.execute(
                text(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                    "AND tbl_name = 'pages' AND sql IS NOT NULL"
                )
            ).all()
        secondary = [(n, d) for n, d in ddl if n not in ("pages_pkey", "pages_url_key")]
        for name, _ in secondary:
            conn.execute(text(f"DROP INDEX {name}"))
    if postgres:
        with db.write() as conn:
            conn.execute(text("ALTER TABLE pages DROP CONSTRAINT pages_url_key"))
    chunk = 1_000_000
    params = {
        "hosts": HOSTS,
        "buckets": BUCKETS,
        "base": int(BASE.timestamp()),
        "spread": SPREAD_S,
    }
    for lo in range(1, pages + 1, chunk):
        hi = min(lo + chunk - 1, pages)
        with db.write() as conn:
            stmt = _PG_ROWS if postgres else _SQLITE_ROWS
            # SQLite: the text form the store's UTCDateTime writes (naive UTC, microseconds).
            stamp = first if postgres else first.strftime("%Y-%m-%d %H:%M:%S.%f")
            conn.execute(text(stmt), {**params, "lo": lo, "hi": hi, "first": stamp})
        print(f"  {hi:,} pages ({time.perf_counter() - t0:.0f} s)", flush=True)
    with db.write() as conn:
        for _, definition in secondary:
            conn.execute(text(definition))
        if postgres:
            conn.execute(text("ALTER TABLE pages ADD CONSTRAINT pages_url_key UNIQUE (url)"))
    if postgres:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE pages"))
            conn.execute(text("VACUUM ANALYZE hosts"))
            # The build's dirty pages written now, not by the checkpointer during the timed
            # stages.
            conn.execute(text("CHECKPOINT"))
    else:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
    return time.perf_counter() - t0


def _store_files(db: Database) -> list[Path]:
    """The files that hold the store, when this process can open them (else none)."""
    if db.dialect == "sqlite":
        assert db.url.database
        return [Path(db.url.database)]
    with db.read() as conn:
        folder = conn.exec_driver_sql("SHOW data_directory").scalar()
        names = conn.exec_driver_sql(
            "SELECT pg_relation_filepath(oid) FROM pg_class "
            "WHERE relkind IN ('r', 'i', 't') AND pg_relation_filepath(oid) IS NOT NULL"
        ).scalars()
        relations = [Path(str(folder)) / n for n in names]
    files = [f for r in relations for f in [r, *r.parent.glob(r.name + ".*")] if f.is_file()]
    try:
        for f in files[:1]:
            os.close(os.open(f, os.O_RDONLY))
    except OSError:
        return []
    return files


def _set_cache(files: list[Path], cache: str) -> None:
    """Drop ``files`` from the OS page cache (``cold``) or read them through (``warm``)."""
    if cache == "asis":
        return
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            if cache == "cold":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, 1 << 24):
                    pass
        finally:
            os.close(fd)


def _publish(db: Database) -> None:
    publish_plan(
        db,
        PlanDraft(
            starts_at=BASE,
            period_days=1.0,
            strategy="bench",
            periods=[
                PlanPeriodDraft(
                    period=1,
                    starts_at=BASE,
                    ends_at=BASE + timedelta(days=1),
                    capacity=float(BUCKETS * PER_BUCKET + NEW),
                    new_pages=NEW,
                    quotas=dict.fromkeys(range(1, BUCKETS + 1), PER_BUCKET),
                    fractions=dict.fromkeys(range(1, BUCKETS + 1), FRACTION),
                )
            ],
            inputs={},
            solver={},
        ),
        now=BASE - timedelta(hours=1),
    )


def _bare_select(db: Database) -> tuple[float, int]:
    """The same number of rows through bare indexed SELECTs (quota rows of each bucket)."""
    before = BASE + timedelta(days=1)
    postgres = db.dialect == "postgresql"
    t0 = time.perf_counter()
    rows = 0
    with db.read() as conn:
        for b in range(1, BUCKETS + 1):
            rows += len(
                conn.execute(
                    text(
                        "SELECT id, host_id, last_fetch_at FROM pages WHERE bucket = :b AND "
                        "last_fetch_at < :before ORDER BY last_fetch_at LIMIT :k"
                    ),
                    {
                        "b": b,
                        "before": before if postgres else before.strftime("%Y-%m-%d %H:%M:%S.%f"),
                        "k": PER_BUCKET,
                    },
                ).all()
            )
        rows += len(
            conn.execute(
                text(
                    "SELECT id, host_id, cash FROM pages WHERE status = 'new' "
                    "ORDER BY cash DESC, id DESC LIMIT :k"
                ),
                {"k": NEW},
            ).all()
        )
    return time.perf_counter() - t0, rows


def _bare_update(db: Database, n: int) -> float:
    """UPDATE next_due_at of n pages by id in one transaction (then undone)."""
    ids = list(range(1, 10 * n + 1, 10))
    due = BASE + timedelta(hours=1)
    t0 = time.perf_counter()
    with db.write() as conn:
        if db.dialect == "postgresql":
            conn.execute(
                text("UPDATE pages SET next_due_at = :due WHERE id = ANY(CAST(:ids AS bigint[]))"),
                {"due": due, "ids": ids},
            )
        else:
            stamp = due.strftime("%Y-%m-%d %H:%M:%S.%f")
            with sqlite_bulk_cache(conn):  # the page cache the store's bulk writes use
                conn.exec_driver_sql(
                    "UPDATE pages SET next_due_at = ? WHERE id = ?", [(stamp, i) for i in ids]
                )
    elapsed = time.perf_counter() - t0
    with db.write() as conn:
        conn.execute(
            text("UPDATE pages SET next_due_at = NULL WHERE id = :i"), [{"i": i} for i in ids]
        )
    return elapsed


def _undo_release(db: Database) -> None:
    """Undo a release and its leases (the rows they wrote; the pages are untouched but for
    lease marks), so that the period is released again from the same store."""
    with db.write() as conn:
        for stmt in (
            "DELETE FROM period_releases",
            "DELETE FROM released_pages",
            "UPDATE pages SET lease_id = NULL, leased_until = NULL WHERE lease_id IS NOT NULL",
            "UPDATE hosts SET lease_id = NULL, leased_until = NULL, ready_at = NULL",
            "DELETE FROM leases",
        ):
            conn.exec_driver_sql(stmt)
    if db.dialect == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in ("hosts", "released_pages", "leases", "period_releases"):
                conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
            conn.exec_driver_sql("CHECKPOINT")
    else:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


def bench(db: Database, pages: int, build: bool, cache: str, repeat: int = 1) -> dict[str, float]:
    figures: dict[str, float] = {"pages": pages}
    cores = os.cpu_count() or 1
    if build:
        print(f"[{db.dialect}] building a store of {pages:,} pages ...", flush=True)
        figures["build_s"] = build_store(db, pages)
        _publish(db)
    now = BASE + timedelta(minutes=1)
    files = _store_files(db)
    if not files and cache != "asis":
        print(f"[{db.dialect}] cannot open the store's files: --cache {cache} not applied")
    # The baselines run after the timed stages: the bare UPDATE's 200,000 row versions would
    # otherwise leave PostgreSQL's visibility map stale (a store that autovacuum keeps has it
    # current).
    figures["load_before"] = os.getloadavg()[0]
    # What the service's long-running commands do once set up (service.cli.support.
    # freeze_start_up): the objects built so far are out of the collector's way.
    gc.freeze()

    work = period_work(db, 1, now)
    assert work is not None
    _set_cache(files, cache)
    t0 = time.perf_counter()
    per_bucket = refresh_candidates(
        db,
        {b: max(int(1.25 * q), q + 64) for b, q in work.quotas.items()},
        now=now,
    )
    new = new_page_candidates(db, max(int(1.25 * work.new_pages), work.new_pages + 64), now=now)
    hosts = sorted({h for c in per_bucket.values() for h in c.host_id} | set(new.host_id))
    robots = host_delays(db, hosts)
    figures["read_s"] = time.perf_counter() - t0
    figures["candidates"] = sum(len(c.page_id) for c in per_bucket.values()) + len(new.page_id)
    parts = list(per_bucket.values())
    length = (work.ends_at - work.starts_at).total_seconds()
    inputs = dict(
        page_id=np.concatenate([np.asarray(c.page_id, np.int64) for c in parts]),
        host_id=np.concatenate([np.asarray(c.host_id, np.int64) for c in parts]),
        bucket=np.concatenate([np.asarray(c.bucket, np.int64) for c in parts]),
        last_fetch=np.concatenate([np.asarray(c.last_fetch_s, float) for c in parts]),
        importance=np.concatenate([np.asarray(c.importance, float) for c in parts]),
        quotas=work.quotas,
        new_page_id=np.asarray(new.page_id, np.int64),
        new_host_id=np.asarray(new.host_id, np.int64),
        new_quota=work.new_pages,
        host_ids=np.asarray(hosts, np.int64),
        host_delay=np.array([max(MIN_DELAY, robots.get(h) or 0.0) for h in hosts]),
        start=work.starts_at.timestamp(),
        end=work.ends_at.timestamp(),
        now=now.timestamp(),
        spill=True,
        marginal=work.marginal,
        new_marginal=work.new_marginal,
        due_interval={b: length / f for b, f in work.crawl_fraction.items() if f > 0},
    )
    # the release's choice (pooled quotas), and quota by quota beside it (the baseline)
    t0 = time.perf_counter()
    selection = select_due_pages(**inputs, pooled=True)  # type: ignore[arg-type]
    figures["select_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    select_due_pages(**inputs)  # type: ignore[arg-type]
    figures["select_per_quota_s"] = time.perf_counter() - t0

    spans: list[tuple[float, float, float, float]] = []  # release, lease: wall, CPU
    for run in range(repeat):
        if run:
            _undo_release(db)
        _set_cache(files, cache)  # the release reads the candidates again, as it would
        t0, c0 = time.perf_counter(), time.process_time()
        # scheduled_at is built in bulk SQL here, not by the page schedule
        summary = release_period(db, now=now, min_delay_seconds=MIN_DELAY, require_schedule=False)
        release_s, release_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        assert summary.status == "released", summary
        assert summary.released == len(selection.page_id), (
            summary.released,
            len(selection.page_id),
        )
        queue = LeaseQueue(
            db,
            # Batches of 100 whole hosts (about 10,000 URLs): a host is leased once, all its
            # pages.
            LeasePolicy(
                lease_seconds=3600, max_urls=100_000, max_urls_per_host=10_000, max_hosts=100
            ),
        )
        lease_at = work.ends_at  # every release time (< end) has passed
        t0, c0 = time.perf_counter(), time.process_time()
        leased = 0
        while batch := queue.lease("bench", now=lease_at):
            leased += sum(len(lease.pages) for lease in batch)
        spans.append((release_s, release_cpu_s, time.perf_counter() - t0, time.process_time() - c0))
        assert leased == summary.released, (leased, summary.released)
    # Each stage's median over the runs (the figure reported), and the fastest and slowest
    # choose + release + lease.
    figures["release_s"], figures["release_cpu_s"], figures["lease_s"], figures["lease_cpu_s"] = (
        float(np.median([span[k] for span in spans])) for k in range(4)
    )
    totals = [span[0] + span[2] for span in spans]
    figures["span_median_s"] = float(np.median(totals))
    figures["span_min_s"], figures["span_max_s"] = min(totals), max(totals)
    figures["runs"] = repeat
    figures["released"] = summary.released
    figures["shortfalls"] = len(summary.shortfalls)
    figures["leased"] = leased
    figures["load_after"] = os.getloadavg()[0]
    figures["cores"] = cores
    _set_cache(files, cache)
    figures["baseline_select_s"], figures["baseline_rows"] = _bare_select(db)
    _set_cache(files, cache)
    figures["baseline_update_s"] = _bare_update(db, BUCKETS * PER_BUCKET + NEW)
    return figures


def _built(db: Database, pages: int) -> bool:
    """Whether a kept PostgreSQL store holds the ``pages`` pages and the plan of a build."""
    with db.read() as conn:
        top = conn.execute(text("SELECT max(id) FROM pages")).scalar()
        plans = conn.execute(text("SELECT count(*) FROM plans")).scalar()
    return top == pages and bool(plans)


def _undo_pg(db: Database) -> None:
    """Undo a previous run on a kept PostgreSQL store, then vacuum it (as built)."""
    with db.write() as conn:
        for stmt in (
            "DELETE FROM period_releases",
            "DELETE FROM released_pages",
            "UPDATE pages SET next_due_at = NULL, lease_id = NULL, leased_until = NULL "
            "WHERE next_due_at IS NOT NULL OR lease_id IS NOT NULL",
            "UPDATE hosts SET lease_id = NULL, leased_until = NULL, ready_at = NULL",
            "DELETE FROM leases",
        ):
            conn.exec_driver_sql(stmt)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("pages", "hosts", "released_pages", "leases", "period_releases"):
            conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
        conn.exec_driver_sql("CHECKPOINT")


def _print(results: dict[str, dict[str, float]]) -> None:
    print(
        "\nbackend     pages        measure                                     seconds  "
        "baseline   ratio"
    )
    for backend, f in results.items():
        n = f"{int(f['pages']):,}"
        base_sel, base_upd = f["baseline_select_s"], f["baseline_update_s"]
        rows = [
            ("read candidates ({:,} rows)".format(int(f["candidates"])), f["read_s"], base_sel),
            ("pure selection, pooled quotas", f["select_s"], base_sel),
            ("pure selection, quota by quota (before)", f["select_per_quota_s"], base_sel),
            ("release_period (read+select+write)", f["release_s"], base_sel + base_upd),
            (
                "lease {:,} URLs (batches of 100 hosts)".format(int(f["leased"])),
                f["lease_s"],
                base_upd,
            ),
            ("choose + release + lease", f["span_median_s"], base_sel + base_upd),
        ]
        for label, value, base in rows:
            ratio = value / base
            print(f"{backend:<11} {n:<12} {label:<43} {value:>7.2f}  {base:>8.2f}  {ratio:>6.2f}")
        runs = int(f["runs"])
        if runs > 1:
            print(
                f"{backend:<11} {n:<12} release and lease: median of {runs} runs (each cold "
                f"when --cache cold); choose + release + lease {f['span_min_s']:.2f} to "
                f"{f['span_max_s']:.2f} s"
            )
        print(
            f"{backend:<11} {n:<12} baselines: bare indexed SELECT of {int(f['baseline_rows']):,} "
            f"rows {base_sel:.2f} s; bare UPDATE of 100,000 rows by id {base_upd:.2f} s"
        )
        print(
            f"{backend:<11} {n:<12} load average (1 min) {f['load_before']:.1f} before, "
            f"{f['load_after']:.1f} after the timed stages, on {int(f['cores'])} cores"
        )
        cpu = f["release_cpu_s"] + f["lease_cpu_s"]
        print(
            f"{backend:<11} {n:<12} CPU seconds of this process: release "
            f"{f['release_cpu_s']:.2f}, lease {f['lease_cpu_s']:.2f}, both {cpu:.2f}"
            + (" (the server's are not counted)" if backend == "postgresql" else "")
        )
        if "build_s" in f:
            print(f"{backend:<11} {n:<12} (store built in {f['build_s']:.0f} s)")
        print(
            f"{backend:<11} {n:<12} released {int(f['released']):,}, "
            f"shortfalls {int(f['shortfalls'])}, leased {int(f['leased']):,}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000_000)
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--pg", default=PG_ADMIN, help=f"admin URL (default {PG_ADMIN})")
    parser.add_argument("--keep", default=None, help="directory of a reusable SQLite store")
    parser.add_argument(
        "--pg-keep", default=None, help="name of a reusable PostgreSQL database (kept)"
    )
    parser.add_argument(
        "--cache",
        choices=["cold", "warm", "asis"],
        default="cold",
        help="the store's files in the OS cache before each timed stage (default cold)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="release + lease runs, undone in between; the median is reported (default 3)",
    )
    parser.add_argument("--out", default="bench-results/selection.json")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    results: dict[str, dict[str, float]] = {}
    if args.backend in ("sqlite", "both"):
        folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="crawlplan-sel-"))
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"selection-{args.pages}.db"
        build = not path.exists()
        if not build:  # reuse: undo the previous run's release and leases
            db = open_database(f"sqlite:///{path}")
            upgrade_schema(db)  # a store kept from an older schema revision
            with db.write() as conn:
                for stmt in (
                    "DELETE FROM period_releases",
                    "DELETE FROM released_pages",
                    "UPDATE pages SET next_due_at = NULL, lease_id = NULL, leased_until = NULL "
                    "WHERE id IN (SELECT id FROM pages WHERE next_due_at IS NOT NULL)",
                    "UPDATE hosts SET lease_id = NULL, leased_until = NULL, ready_at = NULL",
                    "DELETE FROM leases",
                ):
                    conn.exec_driver_sql(stmt)
            # The previous run's write-ahead log (its bare UPDATE: hundreds of MB) is copied
            # back now, not by the first commit of the timed stages.
            with db.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            db = open_database(f"sqlite:///{path}", create=True)
            upgrade_schema(db)
        results["sqlite"] = bench(db, args.pages, build, args.cache, args.repeat)
        db.dispose()
        if not args.keep:
            for suffix in ("", "-wal", "-shm", "-writer"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
    if args.backend in ("postgresql", "both"):
        name = args.pg_keep or f"crawlplan_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            db = open_database(args.pg.rsplit("/", 1)[0] + "/" + name)
            upgrade_schema(db)
            build = not exists or not _built(db, args.pages)
            if not build:
                _undo_pg(db)
            results["postgresql"] = bench(db, args.pages, build, args.cache, args.repeat)
            db.dispose()
        finally:
            if not args.pg_keep:
                with psycopg.connect(args.pg, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(name)
                        )
                    )
    _print(results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
