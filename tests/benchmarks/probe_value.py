"""What a probe was worth over a live crawl's life: the estimate stage on a store cut back.

Run as a script (not part of ``make bench``)::

    python tests/benchmarks/probe_value.py STORE.db --at 2 6 9.5

on a SQLite store a live crawl left (``crawlplan demo --dir DIR`` leaves ``DIR/crawlplan.db``).
For each time T (minutes after the store's first fetch) it copies the store, deletes the
observations after T and runs the nightly estimate stage as of T
(:func:`service.pipeline.estimate_from_store` with ``now = T`` and the probes on), and
prints what :func:`estimators.bayes_action.choose_probes` saw: the cut-off rate (the fastest
worth a crawl at the plan's price, per second), the pages whose posterior straddles it, and
for each delay tried the median and the best ratio of a probe's gain over the horizon to
the price of its two crawls (a probe pays above 1), then the pages marked. It answers why a
live crawl probed when it did; the defaults are ``crawlplan demo --steady``'s (50 crawls per
2.5 s period, 6 periods a cycle, 0.05 s between requests to a host, a 1 s clock tolerance
for Last-Modified) and the service's probe horizon and share.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimators import bayes_action  # noqa: E402
from estimators.buckets import BucketScale  # noqa: E402
from service.config import load_settings  # noqa: E402
from service.pipeline import ProbeSettings, estimate_from_store  # noqa: E402
from store import open_database  # noqa: E402

_DAY = 86_400.0


def _report(seen: list[str], original: Any) -> Any:
    """``choose_probes`` that also appends what it was given and what a probe was worth."""

    def choose(plan: Any, posterior: np.ndarray, horizon: float, **options: Any) -> Any:
        chosen = original(plan, posterior, horizon, **options)
        cutoff = 1.0 / plan.price
        straddle = bayes_action.straddling(plan, posterior)
        seen.append(
            f"  cut-off {cutoff / _DAY:.4f} a second; {posterior.shape[0]:,} pages, "
            f"{straddle.size:,} straddling it"
        )
        if straddle.size:
            for multiple in bayes_action.PROBE_DELAYS:
                delay = max(multiple / cutoff, options.get("shortest", 0.0))
                gain = bayes_action.probe_gains(plan.grid, posterior[straddle], plan.price, delay)
                ratio = gain * horizon / (2.0 * plan.price)
                seen.append(
                    f"    delay {delay * _DAY:.2f} s: gain over the horizon / price of two "
                    f"crawls, median {np.median(ratio):.2f}, best {ratio.max():.2f}"
                )
        return chosen

    return choose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="a live crawl's SQLite store")
    parser.add_argument("--at", type=float, nargs="+", required=True, help="minutes")
    parser.add_argument("--capacity", type=float, default=50.0, help="crawls a period")
    parser.add_argument("--period", type=float, default=2.5, help="seconds")
    parser.add_argument("--periods", type=int, default=6, help="periods a cycle")
    parser.add_argument("--horizon", type=float, default=bayes_action.PROBE_HORIZON_PERIODS)
    parser.add_argument("--min-delay", type=float, default=0.05, help="seconds")
    parser.add_argument("--clock-tolerance", type=float, default=1.0, help="seconds")
    args = parser.parse_args()
    if not args.store.is_file():
        sys.exit(f"probe_value.py: no store at {args.store}; pass a demo's crawlplan.db")
    with sqlite3.connect(args.store) as conn:
        first = conn.execute("SELECT min(fetched_at) FROM observations").fetchone()[0]
    if first is None:
        sys.exit(f"probe_value.py: {args.store} holds no fetch")
    start = datetime.fromisoformat(first).replace(tzinfo=UTC)
    policy = load_settings(
        {"estimate.clock_tolerance": args.clock_tolerance}, environ={}
    ).last_modified_policy
    period_days = args.period / _DAY
    probes = ProbeSettings(
        horizon_days=args.horizon * period_days,
        shortest_days=args.min_delay / _DAY,
        limit=int(bayes_action.PROBE_SHARE * args.capacity * args.periods / 2),
    )
    with tempfile.TemporaryDirectory() as scratch:
        for minutes in args.at:
            at = start + timedelta(minutes=minutes)
            copy = Path(scratch) / f"at-{minutes:g}.db"
            shutil.copy(args.store, copy)
            with sqlite3.connect(copy) as conn:
                conn.execute(
                    "DELETE FROM observations WHERE fetched_at > ?",
                    (at.strftime("%Y-%m-%d %H:%M:%S.%f"),),
                )
            seen: list[str] = []
            original = bayes_action.choose_probes
            with mock.patch.object(bayes_action, "choose_probes", _report(seen, original)):
                summary = estimate_from_store(
                    open_database(f"sqlite:///{copy}"),
                    scale=BucketScale(),
                    policy=policy,
                    plan_budget=args.capacity / period_days,
                    probes=probes,
                    now=at,
                )
            print(f"T = {minutes:g} min:")
            print("\n".join(seen))
            print(f"  pages marked for a probe: {summary.probes_queued} (at most {probes.limit})")


if __name__ == "__main__":
    main()
