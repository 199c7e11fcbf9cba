"""Change rates from sites' change notifications, where the notifications can be trusted.

A site that notifies every change (an API ping, a sitemap ``lastmod``) gives a complete
change log: the rate is the number of notified changes over the time observed, as a
Poisson count (an exact gamma confidence interval), and the page needs no blind recrawls, only
a crawl after each notification. A site that notifies some changes but not others does not:
its notifications are ignored and the fetches decide.

Only notifications from the page's first fetch on count (an old ``lastmod`` says nothing of
how often the page changes now), and the time observed starts at that fetch.

**The reliability test.** A page's notifications are reliable when the page has at least
``min_notifications`` of them and our own fetches saw at least ``min_checked`` changes, each
of which was notified: a notification falls inside the fetch interval in which the change was
seen (``(t_previous, t]``, with ``tolerance`` days of clock skew). One change seen by a fetch
and never notified makes the page unreliable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import gamma

from estimators.defaults import CLOCK_TOLERANCE_DAYS, CONFIDENCE

__all__ = ["NotificationRates", "notification_rates"]


@dataclass(frozen=True)
class NotificationRates:
    """Pages whose notifications are reliable, and their rates (changes per day).

    ``page`` [k] page ids; ``rate``, ``rate_low``, ``rate_high`` [k]; ``notifications`` [k].
    """

    page: NDArray[np.int64]
    rate: NDArray[np.float64]
    rate_low: NDArray[np.float64]
    rate_high: NDArray[np.float64]
    notifications: NDArray[np.int64]


def notification_rates(
    fetch_page: ArrayLike,
    fetch_t: ArrayLike,
    fetch_changed: ArrayLike,
    note_page: ArrayLike,
    note_t: ArrayLike,
    *,
    min_notifications: int = 2,
    min_checked: int = 2,
    tolerance: float = CLOCK_TOLERANCE_DAYS,
    confidence: float = CONFIDENCE,
) -> NotificationRates:
    """Judge each notifying page and estimate the reliable ones' rates.

    Parameters
    ----------
    fetch_page, fetch_t, fetch_changed : array_like, shape (n,)
        Fetches: page id, time (days), 1.0 changed since the previous fetch / 0.0 not /
        NaN unknown (first fetch); sorted by page then time.
    note_page, note_t : array_like, shape (m,)
        Notifications: page id and the time of the change (days).
    """
    fp = np.asarray(fetch_page, dtype=np.int64)
    ft = np.asarray(fetch_t, dtype=np.float64)
    fc = np.asarray(fetch_changed, dtype=np.float64)
    npg = np.asarray(note_page, dtype=np.int64)
    nt = np.asarray(note_t, dtype=np.float64)
    empty = NotificationRates(
        np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, np.int64)
    )
    if npg.size == 0 or fp.size == 0:
        return empty
    # Only notifications from the page's first fetch on count: an old lastmod from before we
    # watched the page says nothing about how often it changes now.
    fetched_pages, first_at = np.unique(fp, return_index=True)
    pos = np.searchsorted(fetched_pages, npg)
    known = (pos < fetched_pages.size) & (
        fetched_pages[np.minimum(pos, fetched_pages.size - 1)] == npg
    )
    start = np.where(known, ft[first_at[np.minimum(pos, fetched_pages.size - 1)]], np.inf)
    keep = nt >= start
    npg, nt = npg[keep], nt[keep]
    if npg.size == 0:
        return empty
    order = np.lexsort((nt, npg))
    npg, nt = npg[order], nt[order]
    pages, counts = np.unique(npg, return_counts=True)
    # Fetch intervals in which a change was seen: (previous fetch, this fetch].
    same = np.zeros(fp.size, dtype=bool)
    same[1:] = fp[1:] == fp[:-1]
    seen = same & (fc == 1.0)
    idx = np.flatnonzero(seen)
    lo, hi, owner = ft[idx - 1] - tolerance, ft[idx] + tolerance, fp[idx]
    # Was each seen change notified? The notifications of the owner page inside (lo, hi].
    key_lo = np.searchsorted(npg, owner, side="left")
    key_hi = np.searchsorted(npg, owner, side="right")
    notified = np.zeros(idx.size, dtype=bool)
    for k in range(idx.size):  # one binary search per seen change
        times = nt[key_lo[k] : key_hi[k]]
        j = np.searchsorted(times, lo[k], side="right")
        notified[k] = j < times.size and times[j] <= hi[k]
    checked = np.zeros(pages.size, dtype=np.int64)
    missed = np.zeros(pages.size, dtype=np.int64)
    at = np.searchsorted(pages, owner)
    inside = (at < pages.size) & (pages[np.minimum(at, pages.size - 1)] == owner)
    np.add.at(checked, at[inside], 1)
    np.add.at(missed, at[inside], (~notified[inside]).astype(np.int64))
    reliable = (counts >= min_notifications) & (checked >= min_checked) & (missed == 0)
    if not reliable.any():
        return empty
    # Time observed: from the page's first fetch to the last of its fetches and notifications.
    first = np.full(pages.size, np.inf)
    last = np.full(pages.size, -np.inf)
    fat = np.searchsorted(pages, fp)
    fin = (fat < pages.size) & (pages[np.minimum(fat, pages.size - 1)] == fp)
    np.minimum.at(first, fat[fin], ft[fin])
    np.maximum.at(last, fat[fin], ft[fin])
    nat = np.searchsorted(pages, npg)
    np.maximum.at(last, nat, nt)
    span = np.maximum(last - first, 1e-9)
    n = counts[reliable].astype(np.float64)
    t = span[reliable]
    alpha = 1.0 - confidence
    return NotificationRates(
        page=pages[reliable],
        rate=n / t,
        rate_low=gamma.ppf(alpha / 2, n) / t,
        rate_high=gamma.ppf(1 - alpha / 2, n + 1) / t,
        notifications=counts[reliable].astype(np.int64),
    )
