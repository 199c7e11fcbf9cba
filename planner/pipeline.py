"""The nightly pipeline's stages, wiring the store to the estimators (service edge).

Stage 2, :func:`aggregates_from_store`: the planner's per-bucket inputs (pages b_i, mean
rate, change fraction a_i per period, expected obsolete pages y_i now) and the pool of
never-fetched pages n, summed chunk by chunk; their size is 256 numbers whatever the size of
the store.

Stage 1, :func:`estimate_from_store`: every page's fetch evidence is streamed from the store
in chunks of whole pages, turned into a fetch table, estimated (change rate, interval,
estimator, bucket) and written back. The population prior of the empirical-Bayes estimator is
fitted on the first chunk and reused for the rest, so every page is shrunk toward the same
prior however the pages are chunked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from estimators.buckets import BucketAggregates, bucket_aggregates, combine_aggregates
from estimators.fetch_table import estimate_fetch_table
from estimators.selection import ChangeRateEstimator
from store import Database
from store.estimates import (
    FetchEvidence,
    PageEstimate,
    iter_fetch_evidence,
    iter_page_states,
    write_estimates,
)

__all__ = ["EstimateSummary", "StoreAggregates", "aggregates_from_store", "estimate_from_store"]

_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
_DAY = pd.Timedelta(days=1)


@dataclass(frozen=True)
class EstimateSummary:
    """What :func:`estimate_from_store` did."""

    pages: int
    fetches: int
    by_estimator: dict[str, int]
    problems: int


def _fetch_table(rows: list[FetchEvidence]) -> pd.DataFrame:
    fetched = pd.to_datetime([r.fetched_at for r in rows], utc=True)
    modified = pd.to_datetime(pd.Series([r.last_modified for r in rows], dtype=object), utc=True)
    return pd.DataFrame(
        {
            "page": [r.page_id for r in rows],
            "fetched_at": (fetched - _EPOCH) / _DAY,
            "changed": [None if r.changed is None else int(r.changed) for r in rows],
            "last_modified": ((modified - _EPOCH) / _DAY).to_numpy(),
            "host": [r.host_id for r in rows],
        }
    )


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def estimate_from_store(
    db: Database,
    *,
    chunk_pages: int = 20_000,
    progress: Callable[[int], None] | None = None,
) -> EstimateSummary:
    """Re-estimate every fetched page from its observations and store rates and buckets."""
    prior = None
    pages = fetches = problems = 0
    by_estimator: dict[str, int] = {}
    now = pd.Timestamp.now(tz="UTC").to_pydatetime()
    for rows in iter_fetch_evidence(db, chunk_pages=chunk_pages):
        estimator = ChangeRateEstimator(prior=prior) if prior is not None else None
        result = estimate_fetch_table(_fetch_table(rows), now=now, estimator=estimator)
        if prior is None:
            prior = result.estimator.prior_
        rates = result.rates
        ids = rates["page"].to_numpy(dtype=np.int64)
        rate, low, high = (
            rates[c].to_numpy(dtype=float) for c in ("rate", "rate_low", "rate_high")
        )
        names = rates["estimator"].astype(str).to_numpy()
        buckets = rates["bucket"].to_numpy(dtype=np.int64)
        write_estimates(
            db,
            (
                PageEstimate(
                    page_id=int(ids[k]),
                    rate=_optional(rate[k]),
                    rate_low=_optional(low[k]),
                    rate_high=_optional(high[k]),
                    estimator=str(names[k]),
                    bucket=int(buckets[k]),
                )
                for k in range(len(ids))
            ),
        )
        for name, count in rates["estimator"].value_counts().items():
            by_estimator[str(name)] = by_estimator.get(str(name), 0) + int(count)
        pages += len(rates)
        fetches += len(rows)
        problems += len(result.problems)
        if progress is not None:
            progress(pages)
    return EstimateSummary(pages, fetches, by_estimator, problems)


@dataclass(frozen=True)
class StoreAggregates:
    """The NLP's inputs from the store: per-bucket aggregates of fetched pages, and n."""

    buckets: BucketAggregates
    new_pages: int


def aggregates_from_store(
    db: Database, *, period_days: float, now: datetime | None = None, chunk_pages: int = 100_000
) -> StoreAggregates:
    """Per-bucket aggregates of the fetched pages and the count of never-fetched pages."""
    when = now or datetime.now(UTC)
    parts = []
    new_pages = 0
    for chunk in iter_page_states(db, chunk_pages=chunk_pages):
        fetched = [s for s in chunk if s.last_fetch_at is not None]
        new_pages += len(chunk) - len(fetched)
        if not fetched:
            continue
        bucket = np.array([s.bucket for s in fetched], dtype=np.int64)
        rate = np.array([np.nan if s.rate is None else s.rate for s in fetched], dtype=float)
        elapsed = np.array(
            [(when - s.last_fetch_at).total_seconds() / 86_400 for s in fetched if s.last_fetch_at],
            dtype=float,
        ).clip(min=0.0)
        parts.append(bucket_aggregates(bucket, rate, elapsed, period=period_days))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        parts.append(
            bucket_aggregates(empty, empty.astype(float), empty.astype(float), period=period_days)
        )
    return StoreAggregates(combine_aggregates(parts), new_pages)
