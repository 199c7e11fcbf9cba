"""The change-rate buckets (WebFountain sec. 4) and the per-bucket numbers the planner needs.

A page's bucket fits in one byte: 0 means "no estimate yet", 1..255 are change-rate classes
log-spaced between a minimum and a maximum rate (changes per day). Bucket k holds rates in
``[edges[k-1], edges[k])``; rates below the minimum go to bucket 1 and rates at or above the
maximum to bucket 255, so that no page with an estimate falls out of the model. Log spacing
gives every class the same *relative* width (about 7.5 % for the default eight decades,
:data:`estimators.defaults.MIN_RATE` to ``MAX_RATE``), which matches how precisely a rate can
be estimated: a relative error, not an absolute one.

Arrays indexed by bucket have shape (256,) with index 0 for the "no estimate" pages, so that
``aggregates.pages[bucket]`` reads naturally; per-class arrays (edges aside) have shape (255,)
and index ``bucket - 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from estimators.defaults import MAX_RATE, MIN_RATE, N_BUCKETS

__all__ = [
    "BucketAggregates",
    "BucketScale",
    "assign_buckets",
    "bucket_aggregates",
    "bucket_edges",
    "bucket_rates",
    "combine_aggregates",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class BucketScale:
    """The bucket configuration: ``n_buckets`` classes from ``min_rate`` to ``max_rate`` per day."""

    min_rate: float = MIN_RATE
    max_rate: float = MAX_RATE
    n_buckets: int = N_BUCKETS

    def __post_init__(self) -> None:
        if not (0 < self.min_rate < self.max_rate < np.inf):
            raise ValueError(
                f"need 0 < min_rate < max_rate < inf (per day), got {self.min_rate}, "
                f"{self.max_rate}"
            )
        if not 1 <= self.n_buckets <= N_BUCKETS:
            raise ValueError(f"n_buckets must be in 1..{N_BUCKETS}, got {self.n_buckets}")

    @property
    def edges(self) -> FloatArray:
        """Bucket edges, shape (n_buckets + 1,): see :func:`bucket_edges`."""
        return bucket_edges(self.min_rate, self.max_rate, self.n_buckets)

    def assign(self, rate: ArrayLike) -> NDArray[np.uint8]:
        """Bucket of each rate: see :func:`assign_buckets`."""
        return assign_buckets(rate, self.edges)


def bucket_edges(
    min_rate: float = MIN_RATE, max_rate: float = MAX_RATE, n_buckets: int = N_BUCKETS
) -> FloatArray:
    """Log-spaced edges ``min_rate * (max_rate / min_rate) ** (k / n_buckets)``, k = 0..n.

    Returns
    -------
    ndarray of float, shape (n_buckets + 1,)
        Changes per day; ``edges[0] == min_rate`` and ``edges[-1] == max_rate`` exactly.
    """
    BucketScale(min_rate, max_rate, n_buckets)  # validates
    edges = np.geomspace(min_rate, max_rate, n_buckets + 1)
    edges[0], edges[-1] = min_rate, max_rate
    return edges


def bucket_rates(edges: FloatArray) -> FloatArray:
    """Representative rate of each class: the geometric mean of its edges, shape (n_buckets,)."""
    e = np.asarray(edges, dtype=np.float64)
    return np.sqrt(e[:-1] * e[1:])


def assign_buckets(rate: ArrayLike, edges: FloatArray) -> NDArray[np.uint8]:
    """Bucket 1..n of each rate by the half-open classes ``[edges[k-1], edges[k])``; NaN -> 0.

    Parameters
    ----------
    rate : array_like of float, shape (n_pages,)
        Changes per day, >= 0 (0 and below ``edges[0]`` go to bucket 1, ``edges[-1]`` and
        above, +inf included, to the last bucket), NaN for "no estimate".
    edges : ndarray of float, shape (n_buckets + 1,)
        From :func:`bucket_edges`.

    Returns
    -------
    ndarray of uint8, shape (n_pages,)
    """
    r = np.asarray(rate, dtype=np.float64)
    if np.any(r < 0):
        raise ValueError("change rates must be >= 0")
    n_buckets = len(edges) - 1
    bucket = np.clip(np.searchsorted(edges, r, side="right"), 1, n_buckets)
    bucket[np.isnan(r)] = 0
    return bucket.astype(np.uint8)


@dataclass(frozen=True)
class BucketAggregates:
    """Per-bucket inputs of the planner, each of shape (n_buckets + 1,), index = bucket.

    Attributes
    ----------
    pages : ndarray of int64
        b_i: pages per bucket (index 0: pages without an estimate).
    mean_rate : ndarray of float
        Mean change rate of the bucket's pages, per day; NaN for bucket 0 and empty buckets.
    change_fraction : ndarray of float
        a_i: expected share of the bucket's pages that change within one period of
        ``period`` days, the mean of ``1 - exp(-rate * period)`` over its pages (NaN as above).
    obsolete : ndarray of float
        y_i now: expected pages of the bucket changed since their last fetch,
        ``sum 1 - exp(-rate * elapsed)`` (0 for an empty bucket, NaN for bucket 0).
    period : float
        The period length D used, days.
    """

    pages: NDArray[np.int64]
    mean_rate: FloatArray
    change_fraction: FloatArray
    obsolete: FloatArray
    period: float


def bucket_aggregates(
    bucket: ArrayLike,
    rate: ArrayLike,
    elapsed: ArrayLike,
    *,
    period: float,
    n_buckets: int = N_BUCKETS,
) -> BucketAggregates:
    """Pages, mean rate, change fraction and expected obsolete pages per bucket.

    Parameters
    ----------
    bucket : array_like of int, shape (n_pages,)
        Bucket of each page, 0..n_buckets.
    rate : array_like of float, shape (n_pages,)
        Change rate, per day (ignored where bucket is 0).
    elapsed : array_like of float, shape (n_pages,)
        Days since the page's last fetch, >= 0 (ignored where bucket is 0).
    period : float
        Period length D, days, > 0.
    n_buckets : int
        Number of classes; outputs have ``n_buckets + 1`` entries.

    Returns
    -------
    BucketAggregates
    """
    b = np.asarray(bucket, dtype=np.intp)
    r = np.asarray(rate, dtype=np.float64)
    s = np.asarray(elapsed, dtype=np.float64)
    if not (b.shape == r.shape == s.shape) or b.ndim != 1:
        raise ValueError("bucket, rate and elapsed must be 1-d with one value per page")
    if not period > 0:
        raise ValueError(f"period must be > 0 days, got {period}")
    if b.size and (b.min() < 0 or b.max() > n_buckets):
        raise ValueError(f"buckets must lie in 0..{n_buckets}")
    est = b > 0
    if np.any(np.isnan(r[est]) | (r[est] < 0)):
        raise ValueError("pages in buckets 1.. need a rate >= 0")
    if np.any(np.isnan(s[est]) | (s[est] < 0)):
        raise ValueError("pages in buckets 1.. need a time since last fetch >= 0 days")
    size = n_buckets + 1
    pages = np.bincount(b, minlength=size).astype(np.int64)
    be, re, se = b[est], r[est], s[est]
    with np.errstate(invalid="ignore"):
        rate_sum = np.bincount(be, weights=re, minlength=size).astype(np.float64)
        changing = np.bincount(be, weights=-np.expm1(-re * period), minlength=size).astype(
            np.float64
        )
        exposure = np.where(se > 0, re * se, 0.0)  # an infinite rate just fetched: 0
        obsolete = np.bincount(be, weights=-np.expm1(-exposure), minlength=size).astype(np.float64)
        mean_rate = np.where(pages > 0, rate_sum / pages, np.nan)
        change_fraction = np.where(pages > 0, changing / pages, np.nan)
    mean_rate[0] = np.nan
    change_fraction[0] = np.nan
    obsolete[0] = np.nan
    return BucketAggregates(pages, mean_rate, change_fraction, obsolete, float(period))


def combine_aggregates(parts: Sequence[BucketAggregates]) -> BucketAggregates:
    """The aggregates of the union of disjoint sets of pages (chunks of one population).

    Pages and obsolete pages add up; mean rate and change fraction are page-weighted means.
    """
    if not parts:
        raise ValueError("nothing to combine")
    period = parts[0].period
    if any(p.period != period or p.pages.shape != parts[0].pages.shape for p in parts):
        raise ValueError("parts must share the period and the number of buckets")
    pages = np.sum([p.pages for p in parts], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted_rate = np.nansum([p.mean_rate * p.pages for p in parts], axis=0)
        weighted_change = np.nansum([p.change_fraction * p.pages for p in parts], axis=0)
        mean_rate = np.where(pages > 0, weighted_rate / pages, np.nan)
        change_fraction = np.where(pages > 0, weighted_change / pages, np.nan)
    obsolete = np.nansum([p.obsolete for p in parts], axis=0)
    mean_rate[0] = change_fraction[0] = obsolete[0] = np.nan  # bucket 0: no estimate
    return BucketAggregates(
        pages=pages.astype(np.int64),
        mean_rate=mean_rate,
        change_fraction=change_fraction,
        obsolete=obsolete,
        period=period,
    )
