"""The WebFountain paper's instances (sec. 5): versions 1, 2 and 3 as :class:`CrawlInstance`.

What the paper states: 500M pages, B = 255 buckets, T = 14 periods, the web doubling in about
400 days; change rates spread as Brewington & Cybenko's mean-lifetime distribution (its
Table 2: cumulative probability 0, 0.12, 0.40, 1.00 at mean lifetimes of 1, 10, 100 and 600
days); version 1 puts 2M pages in every bucket, version 2 puts 3M in each of the fastest and
the slowest 25% of buckets and 1M in each of the middle 50%, version 3 halves version 1's
change rates. What it leaves open, and the choices made here:

* **Rates per bucket.** Bucket i (1 = fastest) holds the mean lifetime at quantile
  ``(i - 1/2) / B`` of Table 2, interpolated linearly in log-lifetime; its change rate is
  ``D / lifetime`` per period.
* **Period length** ``D = 2`` days (a 28-day cycle): the paper's repository grows from 500M to
  about 522M pages in a cycle (Table 3), which is the growth of a web doubling in 400 days over
  about 25 days.
* **Growth.** ``g = N (2^(D/400) - 1)`` new pages per period, half of them brought in from
  outside (``nconst``) and half discovered by crawling: ``oldnwt = newnwt`` chosen so that a
  crawl at full capacity finds ``g / 2`` per period. ``n0 = g``.
* **Capacity.** One second per crawl, old or new (``crawl_cost = new_crawl_cost = 1``), and
  ``C`` seconds per period enough to crawl every page once per cycle plus the new pages:
  ``C = (N + T g) / T``.
* **Initial obsolete pages.** The steady state of crawling every page once per cycle of
  length ``L = T D``: ``y0 = b0 (1 - (1 - exp(-lambda L)) / (lambda L))``.
"""

from __future__ import annotations

import numpy as np

from planner.model.instance import CrawlInstance, check_model_size

__all__ = [
    "PAPER_BUCKETS",
    "PAPER_PERIODS",
    "PERIOD_DAYS",
    "bucket_lifetimes",
    "paper_instance",
]

PAPER_BUCKETS = 255
PAPER_PERIODS = 14
#: Length of one period in days.
PERIOD_DAYS = 2.0
#: Crawl capacity relative to crawling every page, old and new, once per cycle.
CAPACITY_MARGIN = 1.0
#: Days for the web to double in size.
DOUBLING_DAYS = 400.0
#: Brewington & Cybenko's cumulative distribution of mean page lifetime (WebFountain Table 2).
LIFETIME_CDF = (0.0, 0.12, 0.40, 1.0)
LIFETIME_DAYS = (1.0, 10.0, 100.0, 600.0)


def bucket_lifetimes(buckets: int = PAPER_BUCKETS) -> np.ndarray:
    """Mean lifetime in days of the pages of each bucket, fastest first, shape (B,)."""
    q = (np.arange(buckets) + 0.5) / buckets
    return np.asarray(10.0 ** np.interp(q, LIFETIME_CDF, np.log10(LIFETIME_DAYS)), dtype=float)


def paper_instance(
    version: int = 1, periods: int = PAPER_PERIODS, buckets: int = PAPER_BUCKETS
) -> CrawlInstance:
    """The paper's instance ``version`` (1, 2 or 3) with T = ``periods`` and B = ``buckets``.

    Smaller ``buckets`` keep the same rate distribution and total pages (for tests).
    """
    if version not in (1, 2, 3):
        raise ValueError(f"version: expected 1, 2 or 3, got {version!r}")
    check_model_size(buckets, periods)
    scale = PAPER_BUCKETS / buckets  # pages per bucket grow when there are fewer buckets
    lifetime = bucket_lifetimes(buckets)
    rate = PERIOD_DAYS / lifetime  # changes per page per period
    if version == 3:
        rate = rate / 2.0
    b0 = np.full(buckets, 2.0e6 * scale)
    if version == 2:
        quarter = round(buckets / 4)
        b0 = np.full(buckets, 1.0e6 * scale)
        b0[:quarter] = 3.0e6 * scale
        b0[buckets - quarter :] = 3.0e6 * scale
    total = float(b0.sum())
    growth = total * (2.0 ** (PERIOD_DAYS / DOUBLING_DAYS) - 1.0)
    capacity = CAPACITY_MARGIN * (total + periods * growth) / periods
    cycle = rate * periods
    y0 = b0 * (1.0 - (-np.expm1(-cycle)) / cycle)
    found_per_crawl = 0.5 * growth / capacity
    return CrawlInstance.from_mapping(
        {
            "periods": periods,
            "buckets": buckets,
            "b0": b0,
            "y0": y0,
            "n0": growth,
            "change_rate": rate,
            "capacity": np.full(periods, capacity),
            "crawl_cost": 1.0,
            "new_crawl_cost": 1.0,
            "oldnwt": found_per_crawl,
            "newnwt": found_per_crawl,
            "nconst": 0.5 * growth,
        }
    )
