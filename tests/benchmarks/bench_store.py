"""Store benchmarks: seed throughput and lease+report throughput on SQLite and PostgreSQL.

Run with ``make bench``. Every figure is printed beside a baseline measured in the same run on
the same database, so that a noisy, shared machine still gives a meaningful ratio:

* seed: ``crawlplan seed`` of N URLs (normalize, create hosts, insert pages once) against a
  bare ``executemany`` of the same rows into a table with the same unique index; the peak
  memory of the seeding process shows that seeding streams.
* lease: worker processes leasing batches, reporting observations and releasing hosts,
  against a bare loop that inserts the same observations and updates the same pages by id
  in batches of the same size (the work without the lease bookkeeping).

Options: ``--seed-urls N`` (default 1,000,000), ``--lease-urls N`` (default 20,000),
``--workers N`` (default 4), ``--pg URL`` (default the local server; ``--pg none`` skips it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, update

from crawler.seeds import SeedReader
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    open_database,
    upgrade_schema,
)
from store.models import OBSERVATIONS, PAGES
from store.types import utcnow

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _urls(n: int, hosts: int) -> Iterator[tuple[str, str]]:
    for i in range(n):
        yield f"line {i + 1}", f"http://host-{i % hosts}.example/section-{i % 97}/page-{i}.html"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_seed(url: str, n: int) -> dict[str, float]:
    """Seed n URLs through the real path; baseline: bare executemany of the same rows."""
    db = open_database(url, create=True)
    upgrade_schema(db)
    reader = SeedReader()
    rss_before = _rss_mb()
    t0 = time.perf_counter()
    outcome = add_pages(db, reader.pairs(_urls(n, hosts=1000)))
    seed_s = time.perf_counter() - t0
    assert outcome.added == n, outcome
    rss_peak = _rss_mb()

    meta = MetaData()
    bare = Table(
        "bench_bare_pages",
        meta,
        Column("id", Integer, primary_key=True),
        Column("url", String(2048), unique=True),
        Column("host_id", Integer),
    )
    meta.create_all(db.engine)
    t0 = time.perf_counter()
    chunk: list[dict[str, object]] = []
    for i, (_, u) in enumerate(_urls(n, hosts=1000)):
        chunk.append({"url": u, "host_id": i % 1000})
        if len(chunk) == 5000:
            with db.write() as conn:
                conn.execute(bare.insert(), chunk)
            chunk.clear()
    if chunk:
        with db.write() as conn:
            conn.execute(bare.insert(), chunk)
    bare_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    normalized = sum(1 for _ in SeedReader().pairs(_urls(n, hosts=1000)))
    norm_s = time.perf_counter() - t0
    assert normalized == n
    db.dispose()
    return {
        "urls": n,
        "seed_urls_per_s": n / seed_s,
        "baseline_bare_insert_urls_per_s": n / bare_s,
        "normalize_only_urls_per_s": n / norm_s,
        "seed_seconds": seed_s,
        "peak_rss_mb": rss_peak,
        "rss_before_mb": rss_before,
    }


def _lease_worker(url: str, name: str, out: str) -> None:
    db = open_database(url)
    queue = LeaseQueue(db, LeasePolicy(max_urls=100, max_urls_per_host=20, max_hosts=5))
    done = 0
    misses = 0
    while misses < 3:
        batch = queue.lease(name)
        if not batch:
            misses += 1
            time.sleep(0.02)
            continue
        misses = 0
        for lease in batch:
            now = utcnow()
            queue.finish(
                lease.lease_id,
                [
                    FetchResult(p.page_id, now, "ok", 200, signature="s", bytes=1, duration=0.0)
                    for p in lease.pages
                ],
            )
            done += len(lease.pages)
    Path(out).write_text(str(done))
    db.dispose()


def _baseline_report(db: Database, page_ids: list[int], batch: int) -> None:
    upd = (
        update(PAGES)
        .where(PAGES.c.id == bindparam("p_id"))
        .values(fetches=PAGES.c.fetches + 1, last_fetch_at=bindparam("p_at"))
    )
    for start in range(0, len(page_ids), batch):
        ids = page_ids[start : start + batch]
        now = utcnow()
        with db.write() as conn:
            conn.execute(
                OBSERVATIONS.insert(),
                [
                    {
                        "page_id": pid,
                        "kind": "fetch",
                        "fetched_at": now,
                        "recorded_at": now,
                        "http_status": 200,
                        "signature": "s",
                    }
                    for pid in ids
                ],
            )
            conn.execute(upd, [{"p_id": pid, "p_at": now} for pid in ids])


def bench_lease(url: str, n: int, workers: int, admin: str) -> dict[str, float]:
    """n URLs on n/100 hosts leased+reported by 1 and by `workers` processes vs a bare loop."""
    figures: dict[str, float] = {"urls": n, "workers": workers}
    for count in (1, workers):
        db = open_database(url, create=True)
        upgrade_schema(db)
        hosts = max(1, n // 100)
        add_pages(
            db,
            (
                (f"http://h{i % hosts}.example/p{i}", f"http://h{i % hosts}.example")
                for i in range(n)
            ),
        )
        db.dispose()
        ctx = multiprocessing.get_context("spawn")
        tmp = Path(tempfile.mkdtemp())
        procs = [
            ctx.Process(target=_lease_worker, args=(url, f"w{w}", str(tmp / f"{w}.txt")))
            for w in range(count)
        ]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - t0
        total = sum(int((tmp / f"{w}.txt").read_text()) for w in range(count))
        assert total == n, (total, n)
        figures[f"lease_report_urls_per_s_{count}_workers"] = n / elapsed
        _reset(url, admin)
    db = open_database(url, create=True)
    upgrade_schema(db)
    add_pages(
        db, ((f"http://h{i % 200}.example/p{i}", f"http://h{i % 200}.example") for i in range(n))
    )
    with db.read() as conn:
        ids = [r[0] for r in conn.execute(PAGES.select().with_only_columns(PAGES.c.id))]
    t0 = time.perf_counter()
    _baseline_report(db, ids, batch=20)
    figures["baseline_bare_report_urls_per_s"] = n / (time.perf_counter() - t0)
    db.dispose()
    return figures


def _reset(url: str, admin: str) -> None:
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm", "-writer"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    else:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _pg_database(admin: str) -> str | None:
    name = f"crawlplan_bench_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as error:
        print(f"PostgreSQL skipped: {error}", file=sys.stderr)
        return None
    return admin.rsplit("/", 1)[0] + "/" + name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed-urls", type=int, default=1_000_000)
    parser.add_argument("--lease-urls", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pg", default=None, help=f"admin URL (default {PG_ADMIN})")
    parser.add_argument("--out", default="bench-results/store.json")
    args = parser.parse_args()
    admin = args.pg or PG_ADMIN
    results: dict[str, dict[str, dict[str, float]]] = {}
    tmpdir = Path(tempfile.mkdtemp(prefix="crawlplan-bench-"))
    backends = {"sqlite": lambda tag: f"sqlite:///{tmpdir / tag}.db"}
    if admin != "none":
        backends["postgresql"] = lambda _tag: _pg_database(admin)  # type: ignore[assignment,return-value]
    for backend, make_url in backends.items():
        results[backend] = {}
        url = make_url("seed")
        if url is None:
            continue
        print(f"[{backend}] seeding {args.seed_urls:,} URLs ...", flush=True)
        results[backend]["seed"] = bench_seed(url, args.seed_urls)
        if backend == "postgresql":
            _drop(admin, url)
        url = make_url("lease")
        print(f"[{backend}] leasing {args.lease_urls:,} URLs ...", flush=True)
        results[backend]["lease"] = bench_lease(url, args.lease_urls, args.workers, admin)
        if backend == "postgresql":
            _drop(admin, url)
    _print(results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")


def _drop(admin: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def _print(results: dict[str, dict[str, dict[str, float]]]) -> None:
    print("\nbackend     measure                                   value       baseline    ratio")
    for backend, parts in results.items():
        seed = parts.get("seed")
        if seed:
            rate, base = seed["seed_urls_per_s"], seed["baseline_bare_insert_urls_per_s"]
            print(
                f"{backend:<11} seed {int(seed['urls']):,} URLs (URLs/s)        "
                f"{rate:>10,.0f}  {base:>10,.0f}  {rate / base:>6.2f}"
                "   (baseline: bare executemany insert)"
            )
            print(
                f"{backend:<11} normalize only (URLs/s)                 "
                f"{seed['normalize_only_urls_per_s']:>10,.0f}"
            )
            print(
                f"{backend:<11} seed peak RSS (MB)                      "
                f"{seed['peak_rss_mb']:>10,.0f}  {seed['rss_before_mb']:>10,.0f}"
                "           (baseline: RSS before seeding)"
            )
        lease = parts.get("lease")
        if lease:
            base = lease["baseline_bare_report_urls_per_s"]
            for key, value in lease.items():
                if key.startswith("lease_report"):
                    label = key.removeprefix("lease_report_urls_per_s_").replace("_", " ")
                    print(
                        f"{backend:<11} lease+report+release, {label:<10} (URLs/s) "
                        f"{value:>10,.0f}  {base:>10,.0f}  {value / base:>6.2f}"
                        "   (baseline: bare report, 1 process)"
                    )


if __name__ == "__main__":
    main()
