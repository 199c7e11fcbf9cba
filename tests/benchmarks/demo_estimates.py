"""How much of the optimum's gain a demo's own estimates allow, estimator settings side by side.

Run as a script on the directory of a finished ``crawlplan demo`` (its ``pages.csv`` and
``crawlplan.db``)::

    python tests/benchmarks/demo_estimates.py DIR [--shrink always thin] [--window S]

The demo's store is re-estimated from its observations, once per ``--shrink`` setting of
:class:`estimators.ChangeRateEstimator` (with the demo's Last-Modified clock tolerance of
one second), and each setting's estimates are scored against the web's true rates:

* median ``|ln(estimate / true)|`` and the log correlation, and per half decade of the true
  rate and per estimator the median of ``ln(estimate / true)`` (the bias) and its count;
* the time-averaged freshness, under the true rates, of the freshness-optimal page schedule
  computed from the estimates, beside that of the uniform schedule and of the optimal one
  from the true rates, all at the uniform crawl's measured budget (its steady-state fetches
  over ``--window`` seconds), with the share of the optimum's gain the estimates allow.

That share bounds what a planner on these estimates can gain, whatever its model: the
steady-state share the demo measures is this bound less what the live loop loses.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import select

from estimators import ChangeRateEstimator
from estimators.fetch_table import estimate_fetch_arrays
from estimators.reliability import LastModifiedPolicy
from planner.schedules.optimal import refresh_schedule
from store.estimates import iter_fetch_rows
from store.models import PAGES
from store.open import open_database

_DAY = 86_400.0


def periodic_freshness(rate: np.ndarray, refresh: np.ndarray) -> float:
    """Mean time-averaged freshness of pages changing at ``rate`` refreshed at ``refresh``
    (per second each; 0: never refreshed, freshness 0), shape (n,) each."""
    x = rate / np.maximum(refresh, 1e-300)
    return float(np.mean(np.where(refresh > 0, -np.expm1(-x) / x, 0.0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--shrink", nargs="+", default=["always", "thin"])
    parser.add_argument(
        "--window", type=float, default=144.0, help="steady-state seconds (make demo: 144)"
    )
    args = parser.parse_args()
    pages = pd.read_csv(args.directory / "pages.csv", keep_default_na=False)
    page_of = {url: i for i, url in enumerate(pages["url"])}
    true = pages["rate"].to_numpy(dtype=float)
    budget = pages["fetches_uniform"].sum() / args.window
    uniform = periodic_freshness(true, np.full(true.size, budget / true.size))
    optimum = periodic_freshness(
        true, refresh_schedule(true, budget, objective="freshness").refresh_rate
    )
    print(
        f"{args.directory}: {true.size:,} pages, budget {budget:.1f} crawls/s (the uniform "
        f"crawl's); uniform {uniform:.4f}, optimum {optimum:.4f}"
    )
    db = open_database(f"sqlite:///{args.directory / 'crawlplan.db'}")
    with db.read() as conn:
        url_of = dict(conn.execute(select(PAGES.c.id, PAGES.c.url)).tuples().all())
    rows = [row for chunk in iter_fetch_rows(db, chunk_pages=10**7) for row in chunk]
    page_id, host_id, fetched_s, changed, modified_s = np.array(rows, dtype=np.float64).T
    for shrink in args.shrink:
        result = estimate_fetch_arrays(
            page_id.astype(np.int64),
            fetched_s / _DAY,
            changed,
            modified_s / _DAY,
            host_id.astype(np.int64),
            now=fetched_s.max() / _DAY,
            estimator=ChangeRateEstimator(shrink=shrink),
            policy=LastModifiedPolicy(clock_tolerance=1.0 / _DAY),
        )
        rate = np.full(true.size, np.nan)
        name = np.full(true.size, "none", dtype=object)
        for pid, r, e in zip(
            result.page.tolist(), result.rate.tolist(), result.estimator.tolist(), strict=True
        ):
            page = page_of.get(url_of.get(int(pid), ""))
            if page is not None:
                rate[page], name[page] = r / _DAY, e
        ok = np.isfinite(rate) & (rate > 0)
        error = np.log(rate[ok] / true[ok])
        filled = np.where(ok, rate, np.nanmedian(rate[ok]))
        planned = periodic_freshness(
            true, refresh_schedule(filled, budget, objective="freshness").refresh_rate
        )
        print(
            f"\nshrink={shrink}: {ok.sum():,} pages estimated; median |ln(estimate/true)| "
            f"{np.median(np.abs(error)):.3f}, log correlation "
            f"{np.corrcoef(np.log(rate[ok]), np.log(true[ok]))[0, 1]:.3f}; freshness-optimal "
            f"schedule on the estimates {planned:.4f}, "
            f"{(planned - uniform) / (optimum - uniform):.0%} of the optimum's gain"
        )
        band = np.floor(2 * np.log10(true[ok])) / 2
        table = pd.DataFrame({"true rate, 10^": band, "estimator": name[ok], "ln": error})
        summary = table.groupby(["true rate, 10^", "estimator"]).ln.agg(["median", "size"])
        print(summary.round(2).to_string())


if __name__ == "__main__":
    main()
