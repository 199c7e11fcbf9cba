"""Nightly pipeline benchmark: ``crawlplan nightly`` on a store of 1,000,000 pages x 20 fetches.

Run with ``make bench``. The store (SQLite, the default backend) is built in bulk: 1,000 hosts,
``--pages`` pages of which a tenth were never fetched, the others fetched ``--fetches`` times
a day apart with change flags drawn from Poisson rates spread over five orders of magnitude
(1e-3 to 1e2 changes per day), each fetch timed. Then one nightly run (capacity configured:
a tenth of the pages per period, T = 14 periods of one day, strategy 1) is timed stage by
stage. Baselines measured in the same run on the same database:

* read: a bare ``SELECT page_id, fetched_at, changed`` of every observation, ordered by page
  and time, through the driver (the least the estimate stage must do to see its evidence);
* a second nightly run, for the next cycle, warm-started from the first run's plan;
* a run on point estimates (``plan.rates = "estimates"``), the baseline of the default
  Bayes-equivalent rates (:mod:`estimators.bayes_action`);
* a run with probes off (``plan.probe_horizon = 0``; 180, on, by default), the
  baseline of the second run's estimate stage, which picks and marks the probes;
* a last run with follow-ups on (``plan.follow_ups = "on"``; off by default), beside the
  second run, which marks probes alone;

and a third run with ``--polite-hosts`` hosts (default 20) asking robots.txt for 30 minutes
between requests (48 a day, where the plan gives a host about 100): the hosts whose
politeness binds are split into classes of their own and the cycle planned again
(``planner.cycle.bound_hosts``), timed beside the second run.

Building the store takes about 10 minutes; ``--keep DIR`` keeps it for the next run.

Options: ``--pages N`` (default 1,000,000), ``--fetches K`` (default 20), ``--keep DIR``
reuses a store built in DIR (handy when iterating).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from sqlalchemy import update

from estimators.bayes_action import PROBE_HORIZON_PERIODS
from service.nightly import NightlySettings, run_nightly
from store import Database, open_database, upgrade_schema
from store.models import HOSTS as HOSTS_TABLE

HOSTS = 1_000
BASE = datetime(2026, 3, 1, tzinfo=UTC)


def _stamp(seconds: np.ndarray) -> list[str]:
    """Epoch seconds as the SQLite text form of the store's timestamps."""
    whole = np.floor(seconds).astype("datetime64[s]")
    text = np.datetime_as_string(whole, unit="s")
    return [t.replace("T", " ") + ".000000" for t in text.tolist()]


def build_store(db: Database, pages: int, fetches: int, seed: int = 0) -> float:
    """Fill the store in bulk; returns seconds taken."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    base = BASE.timestamp()
    first = _stamp(np.array([base - 30 * 86_400.0]))[0]
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("PRAGMA cache_size = -1000000")
        cur.execute("BEGIN")
        cur.executemany(
            "INSERT INTO hosts (id, origin, first_seen, next_fetch_at, consecutive_errors) "
            "VALUES (?, ?, ?, ?, 0)",
            [(h, f"http://h{h}.example", first, first) for h in range(1, HOSTS + 1)],
        )
        chunk = 50_000
        for lo in range(1, pages + 1, chunk):
            ids = np.arange(lo, min(lo + chunk, pages + 1))
            fetched = ids % 10 != 0
            rate = 10.0 ** rng.uniform(-3, 2, ids.size)
            offset = rng.uniform(0, 86_400, ids.size)
            times = base - (fetches - np.arange(fetches))[None, :] * 86_400 + offset[:, None]
            changed = rng.random((ids.size, fetches)) < -np.expm1(-rate)[:, None]
            last = _stamp(times[:, -1])
            cur.executemany(
                "INSERT INTO pages (id, url, host_id, status, first_seen, last_fetch_at, "
                "fetches, changes, bucket, cash, history) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, "
                "0, 0)",
                [
                    (
                        int(i),
                        f"http://h{1 + i % HOSTS}.example/{i}",
                        int(1 + i % HOSTS),
                        "ok" if f else "new",
                        first,
                        last[k] if f else None,
                        fetches if f else 0,
                        int(changed[k, 1:].sum()) if f else 0,
                    )
                    for k, (i, f) in enumerate(zip(ids.tolist(), fetched.tolist(), strict=True))
                ],
            )
            rows = []
            stamps = _stamp(times.ravel())
            flags = changed.ravel().tolist()
            for k, i in enumerate(ids.tolist()):
                if not fetched[k]:
                    continue
                for j in range(fetches):
                    at = k * fetches + j
                    rows.append(
                        (
                            i,
                            "fetch",
                            stamps[at],
                            stamps[at - 1] if j else None,
                            stamps[at],
                            200,
                            (1 if flags[at] else 0) if j else None,
                            0.05 + 0.01 * (i % 7),
                        )
                    )
            cur.executemany(
                "INSERT INTO observations (page_id, kind, fetched_at, previous_fetch_at, "
                "recorded_at, http_status, changed, duration) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            if (lo - 1) % 200_000 == 0:
                print(f"  {ids[-1]:,} pages ({time.perf_counter() - t0:.0f} s)", flush=True)
        cur.execute("COMMIT")
        cur.execute("ANALYZE")
    finally:
        raw.close()
    return time.perf_counter() - t0


def _set_crawl_delay(db: Database, hosts: int, seconds: float | None) -> None:
    """robots.txt's crawl delay of hosts 1..``hosts`` (None: none)."""
    with db.write() as conn:
        conn.execute(
            update(HOSTS_TABLE).where(HOSTS_TABLE.c.id <= hosts).values(crawl_delay=seconds)
        )


def bare_read(db: Database) -> tuple[float, int]:
    """Every observation's (page, time, changed), ordered, through the driver."""
    t0 = time.perf_counter()
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(
            "SELECT page_id, fetched_at, changed FROM observations ORDER BY page_id, fetched_at"
        )
        rows = 0
        while batch := cur.fetchmany(100_000):
            rows += len(batch)
    finally:
        raw.close()
    return time.perf_counter() - t0, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--fetches", type=int, default=20)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--polite-hosts", type=int, default=20)
    args = parser.parse_args()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nightly.db"
    built = path.exists()
    db = open_database(f"sqlite:///{path}", create=True)
    upgrade_schema(db)
    print(f"nightly benchmark: {args.pages:,} pages x {args.fetches} fetches, SQLite at {path}")
    if not built:
        seconds = build_store(db, args.pages, args.fetches)
        print(f"  store built in {seconds:.0f} s")
    read_s, rows = bare_read(db)
    settings = NightlySettings(
        period_days=1.0, periods=14, strategy=1, capacity=args.pages / 10, window_days=7.0
    )
    now = BASE + timedelta(hours=1)
    t0 = time.perf_counter()
    first = run_nightly(db, settings, now=now, force=True)
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = run_nightly(db, settings, now=now + timedelta(days=1), force=True)
    total2 = time.perf_counter() - t0
    polite = min(max(args.polite_hosts, 0), HOSTS)
    _set_crawl_delay(db, polite, 1_800.0)
    t0 = time.perf_counter()
    third = run_nightly(db, settings, now=now + timedelta(days=2), force=True)
    total3 = time.perf_counter() - t0
    _set_crawl_delay(db, polite, None)
    t0 = time.perf_counter()
    plain = replace(settings, rates="estimates")
    fourth = run_nightly(db, plain, now=now + timedelta(days=3), force=True)
    total4 = time.perf_counter() - t0
    t0 = time.perf_counter()
    unprobed = run_nightly(
        db, replace(settings, probe_horizon=0.0), now=now + timedelta(days=4), force=True
    )
    total5 = time.perf_counter() - t0
    t0 = time.perf_counter()
    following = run_nightly(
        db, replace(settings, follow_ups=True), now=now + timedelta(days=5), force=True
    )
    total6 = time.perf_counter() - t0
    bound = third.solver.get("bound_hosts", {})
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  baseline: bare ordered read of {rows:,} observations: {read_s:.1f} s")
    print(
        f"  nightly (first plan, {first.solver.get('buckets')} buckets, "
        f"{first.solver.get('iterations')} iterations): {total:.1f} s (target < 120 s)"
    )
    for stage, seconds in first.stages.items():
        print(f"    {stage:<10} {seconds:8.1f} s")
    print(
        f"  nightly (next cycle, warm start, {second.solver.get('iterations')} iterations): "
        f"{total2:.1f} s; solve {second.stages.get('solve', float('nan')):.1f} s"
    )
    print(
        f"  nightly with {polite} hosts at Crawl-delay 1800 s: {total3:.1f} s; "
        f"{len(bound.get('host_id', []))} hosts bound, {third.solver.get('buckets')} classes, "
        f"{bound.get('solves', 1)} solves: solve {third.stages.get('solve', float('nan')):.1f} "
        f"s, aggregate {third.stages.get('aggregate', float('nan')):.1f} s (second run: "
        f"{second.stages.get('aggregate', float('nan')):.1f} s)"
    )
    print(
        f"  nightly on point estimates (plan.rates = estimates, the baseline of the "
        f"Bayes-equivalent rates): {total4:.1f} s; estimate "
        f"{fourth.stages.get('estimate', float('nan')):.1f} s (second run: "
        f"{second.stages.get('estimate', float('nan')):.1f} s)"
    )
    print(
        f"  probes (plan.probe_horizon = {PROBE_HORIZON_PERIODS:g}, the default): "
        f"{second.probes:,} pages marked by the second run, estimate "
        f"{second.stages.get('estimate', float('nan')):.1f} s; the baseline without probes "
        f"(plan.probe_horizon = 0): {total5:.1f} s, estimate "
        f"{unprobed.stages.get('estimate', float('nan')):.1f} s"
    )
    print(
        f"  follow-ups (plan.follow_ups = on): {total6:.1f} s, {following.probes:,} probes and "
        f"{following.follow_ups:,} follow-ups marked, estimate "
        f"{following.stages.get('estimate', float('nan')):.1f} s (second run, off: "
        f"{second.stages.get('estimate', float('nan')):.1f} s)"
    )
    print(f"  peak memory: {peak_mib:,.0f} MiB")
    results = {
        "pages": args.pages,
        "fetches": args.fetches,
        "bare_read_s": read_s,
        "nightly_s": total,
        "stages": first.stages,
        "nightly_warm_s": total2,
        "stages_warm": second.stages,
        "iterations": [first.solver.get("iterations"), second.solver.get("iterations")],
        "nightly_polite_s": total3,
        "stages_polite": third.stages,
        "bound_hosts": len(bound.get("host_id", [])),
        "nightly_estimates_s": total4,
        "stages_estimates": fourth.stages,
        "probes": second.probes,
        "nightly_unprobed_s": total5,
        "stages_unprobed": unprobed.stages,
        "nightly_follow_ups_s": total6,
        "follow_ups": following.follow_ups,
        "stages_follow_ups": following.stages,
        "peak_mib": peak_mib,
    }
    out = Path("bench-results")
    out.mkdir(exist_ok=True)
    (out / "nightly.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
