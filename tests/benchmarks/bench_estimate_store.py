"""Estimation from the store at scale: ``crawlplan estimate`` over 10,000,000 pages.

Run with ``python tests/benchmarks/bench_estimate_store.py`` (not part of ``make bench``:
building the store takes several minutes). The SQLite store is built in SQL, not through
the crawl path: 1,000 hosts, ``--pages`` pages each fetched ``--fetches`` times a day apart
(a random offset per page), change flags drawn with probability 1 - exp(-rate x 1 day) from
a rate spread log-uniformly over 1e-3..1e2 changes per day, and a Last-Modified date on the
fetches of one host in four. Then, each in a process of its own so that its peak memory
(``ru_maxrss`` of the child) is its own:

* ``crawlplan estimate --db URL``: every page re-estimated from its observations, in chunks,
  and the estimates written back (rates, intervals, estimator, bucket);
* baseline: a bare ``SELECT page_id, fetched_at, changed`` of every observation, ordered by
  page and time, through the driver (the least any estimation must read);
* ``crawlplan estimate`` with ``estimate.min_change = 0.05``: it reads every fetch's
  signature too (each version of a page has its own) and counts the changes below 5 % of
  the text as none.

Options: ``--pages N`` (default 10,000,000), ``--fetches K`` (default 3), ``--keep DIR``
reuses (or builds once into) DIR/estimate.db.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from store import open_database, upgrade_schema

HOSTS = 1_000
BASE_EPOCH = 1_772_323_200  # 2026-03-01T00:00:00Z
DAY = 86_400

_STAMP = "strftime('%Y-%m-%d %H:%M:%S', {t}, 'unixepoch') || '.000000'"

_BUILD = [
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA cache_size = -1000000",
    "BEGIN",
    f"""
    WITH RECURSIVE h(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM h WHERE i < {HOSTS})
    INSERT INTO hosts (id, origin, first_seen, next_fetch_at, consecutive_errors)
    SELECT i, 'http://h' || i || '.example', {_STAMP.format(t=BASE_EPOCH - 60 * DAY)},
           {_STAMP.format(t=BASE_EPOCH - 60 * DAY)}, 0 FROM h
    """,
    # Per page: a rate (log-uniform from a hash of the id) and a time-of-day offset.
    """
    CREATE TEMP TABLE g AS
    WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :pages)
    SELECT i AS id,
           1 + i % {hosts} AS host,
           power(10.0, -3.0 + 5.0 * ((i * 2654435761) % 1000003) / 1000003.0) AS rate,
           (i * 40503) % {day} AS offset
    FROM s
    """,
    f"""
    INSERT INTO pages (id, url, host_id, status, first_seen, last_fetch_at, fetches, changes,
                       bucket, cash, history)
    SELECT id, 'http://h' || host || '.example/' || id, host, 'ok',
           {_STAMP.format(t=BASE_EPOCH - 60 * DAY)},
           {_STAMP.format(t=f"{BASE_EPOCH} - {DAY} + offset")}, :fetches, 0, 0, 0, 0
    FROM g
    """,
    # Each fetch: its time (epoch seconds) and whether the page changed since the one before.
    """
    CREATE TEMP TABLE f AS
    WITH RECURSIVE k(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM k WHERE j < :fetches - 1)
    SELECT g.id AS id, g.host AS host, k.j AS j,
           {base} - (:fetches - k.j) * {day} + g.offset AS t,
           CASE WHEN k.j = 0 THEN NULL
                WHEN (abs(random()) % 1000000) / 1e6 < 1 - exp(-g.rate) THEN 1 ELSE 0 END
             AS changed
    FROM g JOIN k ORDER BY g.id, k.j
    """,
    # Honest Last-Modified on one host in four: an hour before the latest fetch that saw a
    # change (ten days before the first fetch until then).
    f"""
    INSERT INTO observations (page_id, kind, fetched_at, previous_fetch_at, recorded_at,
                              http_status, changed, duration, last_modified, signature)
    SELECT id, 'fetch', {_STAMP.format(t="t")},
           CASE WHEN j = 0 THEN NULL ELSE {_STAMP.format(t=f"t - {DAY}")} END,
           {_STAMP.format(t="t")}, 200, changed, 0.05,
           CASE WHEN host % 4 = 0 THEN {_STAMP.format(t="lm")} END,
           printf('%016x%016x%08x', (id * 2654435761 + v * 40503) & 281474976710655,
                  id * 1000003 + v, 500 + v % 7)
    FROM (
        SELECT *, coalesce(
            max(CASE WHEN changed = 1 THEN t - 3600 END)
                OVER (PARTITION BY id ORDER BY j ROWS UNBOUNDED PRECEDING),
            first_value(t) OVER (PARTITION BY id ORDER BY j) - 10 * {DAY}) AS lm,
            -- the version: a new signature (SimHash, exact hash, words) at every change
            sum(coalesce(changed, 0)) OVER (PARTITION BY id ORDER BY j
                                            ROWS UNBOUNDED PRECEDING) AS v
        FROM f
    ) ORDER BY id, j
    """,
    "COMMIT",
    "ANALYZE",
]


def build_store(path: Path, pages: int, fetches: int) -> float:
    """Create and fill the store at ``path``; returns seconds taken."""
    t0 = time.perf_counter()
    db = open_database(f"sqlite:///{path}", create=True)
    upgrade_schema(db)
    db.engine.dispose()
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        for statement in _BUILD:
            sql = (
                statement.format(hosts=HOSTS, day=DAY, base=BASE_EPOCH)
                if "{day}" in statement
                else statement
            )
            cur.execute(sql, {"pages": pages, "fetches": fetches} if ":" in sql else {})
    finally:
        raw.close()
    return time.perf_counter() - t0


_BARE_READ = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1])
t0 = time.perf_counter()
cur = con.execute(
    "SELECT page_id, fetched_at, changed FROM observations ORDER BY page_id, fetched_at"
)
rows = 0
while batch := cur.fetchmany(100_000):
    rows += len(batch)
print(rows, time.perf_counter() - t0, con.execute("SELECT count(*) FROM pages").fetchone()[0])
"""


def _child(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run a child process; its wall seconds, its own peak RSS (MiB, from ``wait4``) and its
    output."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            sys.exit(f"{argv[:3]} failed ({child.returncode}): {err.read().strip()[-2000:]}")
        return seconds, usage.ru_maxrss / 1024, out.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000_000)
    parser.add_argument("--fetches", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--out", default="bench-results/estimate_store.json")
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp())
    where.mkdir(parents=True, exist_ok=True)
    path = where / "estimate.db"
    if args.build_only:
        built = build_store(path, args.pages, args.fetches)
        print(f"  built in {built:.0f} s ({path.stat().st_size / 2**30:.1f} GiB)", flush=True)
        return
    if not path.exists():
        # In a process of its own: Linux carries a process's peak RSS across fork and exec
        # into its children's ru_maxrss, so a build in this process (2 GiB) would be
        # reported as the peak of each child measured below.
        print(f"building {args.pages:,} pages x {args.fetches} fetches in {path} ...", flush=True)
        subprocess.run(
            [
                *(sys.executable, __file__, "--build-only", "--keep", str(where)),
                *("--pages", str(args.pages), "--fetches", str(args.fetches)),
            ],
            check=True,
        )
    bin_dir = Path(sys.executable).parent
    read_s, read_mib, out = _child([sys.executable, "-c", _BARE_READ, str(path)])
    rows, pages = int(out.split()[0]), int(out.split()[2])
    est_s, est_mib, out = _child(
        [str(bin_dir / "crawlplan"), "estimate", "--db", f"sqlite:///{path}"]
    )
    print(f"store: {pages:,} pages, {rows:,} observations (SQLite)")
    line = "{:<50} {:8.1f} s, peak {:7,.0f} MiB"
    print(line.format("crawlplan estimate (from the store, written back)", est_s, est_mib))
    print(line.format("baseline: bare ordered read of the observations", read_s, read_mib))
    print(f"{'ratio':<50} {est_s / read_s:8.2f}")
    print(out.strip())
    sized_s, sized_mib, sized_out = _child(
        [str(bin_dir / "crawlplan"), "estimate", "--db", f"sqlite:///{path}"],
        env={**os.environ, "CRAWLPLAN_MIN_CHANGE": "0.05"},
    )
    print(line.format("crawlplan estimate, estimate.min_change = 0.05", sized_s, sized_mib))
    print(sized_out.strip())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "pages": pages,
                "observations": rows,
                "estimate_seconds": est_s,
                "estimate_peak_mib": est_mib,
                "bare_read_seconds": read_s,
                "bare_read_peak_mib": read_mib,
                "min_change_seconds": sized_s,
                "min_change_peak_mib": sized_mib,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
