"""What the crawl measured recently: throughput, fetch durations per bucket, discovery counts.

The nightly pipeline estimates the plan's inputs from the store itself: crawl capacity from
the fetches the workers made, crawl cost per bucket from measured fetch durations, and the
discovery rates from how many new URLs appeared while old and new pages were crawled. This
module reads those numbers with a few aggregate queries; turning them into rates is the
estimators' job (:mod:`estimators.discovery`).

The window is bounded twice: at most ``window`` back from ``until``, and at most the latest
``max_fetches`` fetches (found by the ``fetched_at`` index), so the cost of measuring does not
grow with the age or the size of the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, Integer, and_, cast, func, select

from store.database import Database
from store.models import OBSERVATIONS, PAGES, UNFETCHABLE_STATUS
from store.types import epoch_seconds

__all__ = ["CrawlMeasurements", "measure_crawl"]

_N_BUCKETS = 255


@dataclass(frozen=True)
class CrawlMeasurements:
    """The crawl's recent record, over ``since``..``until``.

    Attributes
    ----------
    since, until : datetime
        The window measured.
    fetches : int
        Fetches made in the window (every answer, errors included: they cost crawl time).
    seconds_per_fetch : float
        Mean measured duration of a fetch, seconds (NaN when none was timed).
    bucket_fetches : list of int, 256 entries
        Timed fetches per bucket (index = the page's current bucket, 0 = no estimate).
    bucket_seconds : list of float, 256 entries
        Mean duration of a fetch per bucket, seconds (NaN where none was timed).
    bin_seconds : float
        Width of the bins below, seconds.
    old_crawls, new_crawls, discovered : list of int, one entry per bin
        Per bin: fetches of pages fetched before, first fetches of pages, fetchable pages the
        crawl found first seen (URLs robots.txt disallows are not new pages: the discovery
        rates count only what the plan could crawl).
    """

    since: datetime
    until: datetime
    fetches: int
    seconds_per_fetch: float
    bucket_fetches: list[int]
    bucket_seconds: list[float]
    bin_seconds: float
    old_crawls: list[int]
    new_crawls: list[int]
    discovered: list[int]

    @property
    def window_seconds(self) -> float:
        """Length of the window, seconds."""
        return (self.until - self.since).total_seconds()


def _bin(column: Any, dialect: str, since_s: float, width: float) -> Any:
    offset = (epoch_seconds(column, dialect) - since_s) / width
    if dialect == "postgresql":
        return cast(func.floor(offset), Integer)
    return cast(offset, Integer)  # truncation is the floor: offsets are >= 0 here


def _counts(rows: Any, bins: int) -> list[int]:
    out = [0] * bins
    for index, count in rows:
        if index is not None and 0 <= int(index) < bins:
            out[int(index)] += int(count)
    return out


def measure_crawl(
    db: Database,
    *,
    until: datetime,
    window: timedelta,
    bin_seconds: float,
    max_fetches: int = 100_000,
) -> CrawlMeasurements:
    """Measure throughput, durations and discovery over the recent window."""
    obs = OBSERVATIONS.c
    fetch = obs.kind == "fetch"
    with db.read() as conn:
        since = until - window
        oldest = conn.execute(
            select(obs.fetched_at)
            .where(fetch, obs.fetched_at < until)
            .order_by(obs.fetched_at.desc())
            .offset(max_fetches)
            .limit(1)
        ).scalar_one_or_none()
        after = obs.fetched_at >= since
        if oldest is not None and oldest >= since:
            # The latest max_fetches fetches: those strictly after the one just older.
            since, after = oldest, obs.fetched_at > oldest
        in_window = and_(fetch, after, obs.fetched_at < until)
        # A crawl younger than the window is measured from its first fetch, not the window's
        # start (else a young crawl's throughput would read low).
        first = conn.execute(select(func.min(obs.fetched_at)).where(in_window)).scalar_one()
        if first is not None and first > since:
            # ... but never less than one bin: a minute of fetches is no day's throughput.
            since = max(min(first, until - timedelta(seconds=bin_seconds)), since)
        dialect = db.dialect
        since_s = since.timestamp()
        bins = max(1, math.ceil((until - since).total_seconds() / bin_seconds))
        total, timed, duration = conn.execute(
            select(func.count(), func.count(obs.duration), func.sum(obs.duration)).where(in_window)
        ).one()
        per_bucket = conn.execute(
            select(PAGES.c.bucket, func.count(obs.duration), func.avg(cast(obs.duration, Float)))
            .select_from(OBSERVATIONS.join(PAGES, PAGES.c.id == obs.page_id))
            .where(in_window, obs.duration.is_not(None))
            .group_by(PAGES.c.bucket)
        ).all()
        slot = _bin(obs.fetched_at, dialect, since_s, bin_seconds)
        first = obs.previous_fetch_at.is_(None)
        by_bin = conn.execute(
            select(slot, first, func.count()).where(in_window).group_by(slot, first)
        ).all()
        seen = _bin(PAGES.c.first_seen, dialect, since_s, bin_seconds)
        discovered = conn.execute(
            select(seen, func.count())
            .where(
                PAGES.c.first_seen >= since,
                PAGES.c.first_seen < until,
                PAGES.c.discovered,
                PAGES.c.status != UNFETCHABLE_STATUS,
            )
            .group_by(seen)
        ).all()
    bucket_fetches = [0] * (_N_BUCKETS + 1)
    bucket_seconds = [math.nan] * (_N_BUCKETS + 1)
    for bucket, count, mean in per_bucket:
        bucket_fetches[int(bucket)] = int(count)
        bucket_seconds[int(bucket)] = float(mean)
    return CrawlMeasurements(
        since=since,
        until=until,
        fetches=int(total),
        seconds_per_fetch=float(duration) / timed if timed else math.nan,
        bucket_fetches=bucket_fetches,
        bucket_seconds=bucket_seconds,
        bin_seconds=float(bin_seconds),
        old_crawls=_counts(((i, c) for i, f, c in by_bin if not f), bins),
        new_crawls=_counts(((i, c) for i, f, c in by_bin if f), bins),
        discovered=_counts(discovered, bins),
    )
