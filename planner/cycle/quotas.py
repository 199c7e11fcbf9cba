"""Integer crawl quotas from a fractional plan, within capacity exactly.

The model's x[i,t] (old pages of bucket i to crawl in period t) and z[t] (new pages) are
real numbers; workers need whole pages. :func:`integer_quotas` rounds every period by the
largest-remainder rule (Hamilton's method): each quota starts at the floor of its value, and
the pages lost to rounding (the rounded total minus the sum of floors) go one each to the
largest remainders. So quotas are non-negative, differ from the plan by less than one page each,
sum to the period's total rounded to the nearest page, and -- when the rounded total would not
fit -- the total is reduced until the crawl time ``sum_i c[i,t] q[i,t] + d[t] r[t]`` fits in
C[t], taking pages back from the smallest remainders first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Quotas", "charge_spent", "crawl_fractions", "integer_quotas", "largest_remainder"]


@dataclass(frozen=True)
class Quotas:
    """Whole pages to crawl per period.

    Attributes
    ----------
    old : ndarray of int64, shape (B, T)
        Pages of bucket i to re-crawl in period t.
    new : ndarray of int64, shape (T,)
        New pages to crawl in period t.
    """

    old: np.ndarray
    new: np.ndarray


def largest_remainder(values: np.ndarray, total: int) -> np.ndarray:
    """Round ``values`` (shape (k,), >= 0) to integers summing to ``total``.

    ``total`` must lie between ``sum(floor(values))`` and ``sum(ceil(values))``. Ties between
    equal remainders go to the lower index, so the result is deterministic.
    """
    values = np.asarray(values, dtype=float)
    base = np.floor(values)
    extra = int(total - base.sum())
    if extra < 0 or extra > int(np.count_nonzero(values > base)):
        raise ValueError(f"total {total} is not reachable by rounding {values.sum():.3f}")
    order = np.argsort(-(values - base), kind="stable")
    out = base.astype(np.int64)
    out[order[:extra]] += 1
    return out


#: Pages (at least; 1e-8 of the count for large counts) a solved count may fall short of a
#: whole number and still count as it (the solver's
#: tolerance: 200 new pages less 120 crawled come back as 79.99999 pages, not 79).
_WHOLE_TOLERANCE = 1e-4


def _whole_pages(limit: np.ndarray) -> np.ndarray:
    """Whole pages within a solved limit: the floor, after forgiving the solver's tolerance
    (a hair below a whole number counts as it, a hair below 0 as 0)."""
    limit = np.clip(np.asarray(limit, dtype=float), 0.0, None)
    return np.floor(limit + np.maximum(_WHOLE_TOLERANCE, 1e-8 * limit))


def integer_quotas(
    x: np.ndarray,
    z: np.ndarray,
    crawl_cost: np.ndarray,
    new_crawl_cost: np.ndarray,
    capacity: np.ndarray,
    *,
    available: np.ndarray | None = None,
    new_available: np.ndarray | None = None,
) -> Quotas:
    """Round the plan ``x`` [B, T], ``z`` [T] to whole pages that fit in ``capacity`` [T].

    Parameters
    ----------
    x : ndarray, shape (B, T)
        Old pages to crawl (values slightly below 0 from the solver are treated as 0).
    z : ndarray, shape (T,)
        New pages to crawl.
    crawl_cost : ndarray, shape (B, T)
        Seconds per old-page crawl, c[i,t].
    new_crawl_cost : ndarray, shape (T,)
        Seconds per new-page crawl, d[t].
    capacity : ndarray, shape (T,)
        Seconds available per period, C[t].
    available, new_available : ndarray, shapes (B, T) and (T,), optional
        Upper limits (b[i,t-1], n[t-1]); a quota never exceeds the floor of its limit. The
        crawls flooring at a limit takes from the period's planned total go to the planned
        entries furthest below their plan that have room, while they fit in the capacity.

    Returns
    -------
    Quotas
    """
    x = np.clip(np.asarray(x, dtype=float), 0.0, None)
    z = np.clip(np.asarray(z, dtype=float), 0.0, None)
    planned = x.sum(axis=0) + z  # the plan's crawls per period, before the limits
    limit = None
    if available is not None or new_available is not None:
        old_limit = np.full(x.shape, np.inf) if available is None else _whole_pages(available)
        new_limit = (
            np.full(z.shape, np.inf) if new_available is None else _whole_pages(new_available)
        )
        limit = np.vstack([old_limit, np.asarray(new_limit, dtype=float)[None, :]])
        x = np.minimum(x, old_limit)
        z = np.minimum(z, new_limit)
    B, T = x.shape
    old = np.zeros((B, T), dtype=np.int64)
    new = np.zeros(T, dtype=np.int64)
    for t in range(T):
        values = np.append(x[:, t], z[t])
        cost = np.append(crawl_cost[:, t], new_crawl_cost[t])
        base = np.floor(values)
        total = int(np.clip(np.rint(values.sum()), base.sum(), np.ceil(values).sum()))
        q = largest_remainder(values, total)
        # Over capacity (the plan used all of it and rounding went up): give back the pages
        # rounded up last, i.e. with the smallest remainders, until the period fits.
        rounded_up = np.flatnonzero(q > base)
        rounded_up = rounded_up[np.argsort(values[rounded_up] - base[rounded_up], kind="stable")]
        k = 0
        while float(cost @ q) > float(capacity[t]) and k < rounded_up.size:
            q[rounded_up[k]] -= 1
            k += 1
        # Floors can still exceed C[t] only if the plan itself did; trim the costliest pages.
        while float(cost @ q) > float(capacity[t]) and q.sum() > 0:
            j = int(np.argmax(np.where(q > 0, cost, -np.inf)))
            over = float(cost @ q) - float(capacity[t])
            take = min(int(q[j]), max(1, int(np.ceil(over / cost[j]))) if cost[j] > 0 else 0)
            if take == 0:
                break
            q[j] -= take
        if limit is not None:
            target = int(np.rint(planned[t]))
            _top_up(q, values, cost, float(capacity[t]), limit[:, t], target)
        old[:, t], new[t] = q[:-1], q[-1]
    return Quotas(old, new)


def _top_up(
    q: np.ndarray,
    values: np.ndarray,
    cost: np.ndarray,
    capacity: float,
    limit: np.ndarray,
    target: int,
) -> None:
    """Spend, in place, the whole crawls that flooring at the limits took from the plan's
    total (``target``): one at a time to the planned entry furthest below its (capped) plan
    that still has room, while one more fits in ``capacity``."""
    while int(q.sum()) < target:
        spare = capacity - float(cost @ q)
        room = (q < limit) & (values > 0) & (cost <= spare + 1e-9)
        if not room.any():
            return
        j = int(np.argmax(np.where(room, values - q, -np.inf)))
        q[j] += 1


def crawl_fractions(x: np.ndarray, b0: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x[i,t] / b[i,t-1], the share of bucket i to crawl in period t, shape (B, T).

    ``b0`` [B] is the bucket size at the start of the cycle and ``b`` [B, T] at the end of
    each period.
    """
    before = np.concatenate([np.asarray(b0, dtype=float)[:, None], b[:, :-1]], axis=1)
    return np.asarray(x, dtype=float) / before


def charge_spent(
    quotas: Mapping[int, int], new_pages: int, spent: int
) -> tuple[dict[int, int], int]:
    """A period's quotas less ``spent`` crawls already spent elsewhere: on the
    immediate-crawl lane, or by an older plan that released the period's window before this
    plan was published.

    Every quota (each bucket's and the new pages') gives up crawls in proportion to its
    size, rounded by the largest remainders, so the period's total falls by
    ``min(spent, total)`` exactly and the plan's mix is kept. Returns (quotas, new pages).
    """
    keys = sorted(quotas)
    values = np.array([quotas[k] for k in keys] + [new_pages], dtype=float)
    total = int(values.sum())
    if spent <= 0 or total == 0:
        return dict(quotas), new_pages
    left = max(total - int(spent), 0)
    rounded = largest_remainder(values * (left / total), left)
    return {k: int(v) for k, v in zip(keys, rounded[:-1], strict=True)}, int(rounded[-1])
