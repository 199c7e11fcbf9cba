"""Page-level optimal refresh schedules: how often to crawl each page for a given bandwidth.

Given per-page change rates ``lam`` (changes per period), importance ``w`` and a bandwidth
``G`` (crawls per period), :func:`refresh_schedule` returns each page's refresh rate ``f``
(crawls per period) and interval ``1 / f`` (periods) that optimise one of the objectives of
:mod:`planner.schedules.objectives`, subject to

    sum_i f_i = (1 - gamma) G                        the refresh bandwidth (multiplier mu)
    sum_{i on host h} f_i <= R_h                     politeness per host (multiplier nu_h)
    1 / max_interval_i <= f_i <= 1 / min_interval_i  per-page bounds (per host or URL pattern)

where ``gamma`` is the discovery share of the bandwidth kept for new pages (Xyleme sec. 6.5).
Importance is centered on 1 (``w / mean(w)``) as Xyleme prescribes; that scales the
multipliers, not the schedule.

The KKT conditions say each page is refreshed where its marginal value equals the multiplier
it faces, ``m_i = mu + nu_{h(i)}``, clipped to its bounds. For a host, ``nu_h > 0`` only when
its capacity binds, and then its pages' common multiplier is the ``m*_h`` at which they exactly
fill ``R_h``, which does not depend on ``mu``. A host binds exactly when its load ``S_h(mu)``
exceeds ``R_h``, so the budget spent at ``mu`` is ``T(mu) = sum_h min(S_h(mu), R_h)``: the
solve finds ``mu`` from ``T(mu) = (1 - gamma) G`` first (a safeguarded Newton/secant in log
space, one ``bincount`` per pass), then ``m*_h`` only for the hosts that bind at that ``mu``
(vectorized over hosts, on their pages alone), and keeps the rates of every other page. Both
are solved to a relative residual near machine precision (:mod:`planner.schedules.multipliers`);
``nu_h = max(0, m*_h - mu)``.

When the bandwidth cannot be spent (every page at its upper bound or on a saturated host),
``mu = 0`` and :attr:`Schedule.unspent` says how much is left. When a host's pages need more
than its capacity at their lower bounds (max intervals), the lower bounds on that host are
scaled down to fit and the host is listed in :attr:`Schedule.overcommitted_hosts`.

Without hosts or bounds the obsolescence schedule is Xyleme's closed form
``t_i = K / sqrt(w_i lam_i)``, ``K = S / G``, ``S = sum_j sqrt(w_j lam_j)``, and its average
obsolescence is ``S^2 / (2 G)``; :class:`XylemeSum` keeps ``S`` up to date as estimates change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.schedules.multipliers import (
    HostSetup,
    PageSet,
    host_loads,
    objective_value,
    solve_multipliers,
)
from planner.schedules.objectives import OBJECTIVES, objective_named

__all__ = [
    "MAX_BANDWIDTH",
    "MIN_BANDWIDTH",
    "OBJECTIVES",
    "Schedule",
    "ScheduleError",
    "XylemeSum",
    "binary_closed_form",
    "bucket_intervals",
    "refresh_schedule",
    "xyleme_intervals",
]


class ScheduleError(ValueError):
    """Input a schedule cannot be computed from; ``str(err)`` names what and how to fix it."""


#: The bandwidths (crawls per period) a schedule is computed for. The multipliers scale as
#: the square of the rates' sum over the bandwidth, so past about 1e-150 or 1e150 a double
#: overflows (an OverflowError, or a schedule of NaN); inside these bounds every objective
#: is finite for rates from 1e-100 to 1e100 per period. No crawl spends a quadrillion
#: fetches a period, nor one per trillion periods.
MIN_BANDWIDTH = 1e-12
MAX_BANDWIDTH = 1e15


@dataclass(frozen=True)
class Schedule:
    """An optimal refresh schedule.

    Attributes
    ----------
    objective : the objective's name.
    refresh_rate : ndarray (n,), crawls per period of each page (0: never refreshed).
    multiplier : mu, the bandwidth constraint's Lagrange multiplier (marginal value of one
        more crawl per period, in units of the objective with importance centered on 1).
    host_multiplier : ndarray (H,), nu_h >= 0 per host (0 where the capacity does not bind,
        ``inf`` where the host is over-committed at its lower bounds).
    host_load : ndarray (H,), scheduled crawls per period per host.
    host_capacity : ndarray (H,), the capacities given (``inf`` when none).
    bandwidth : G, crawls per period given.
    discovery : gamma G, crawls per period kept for new pages.
    value : the objective at ``refresh_rate`` (see :mod:`planner.schedules.objectives`).
    unspent : refresh bandwidth that bounds and host capacities left unused (crawls/period).
    overcommitted_hosts : ndarray of host indexes whose lower bounds exceed their capacity.
    """

    objective: str
    refresh_rate: np.ndarray
    multiplier: float
    host_multiplier: np.ndarray
    host_load: np.ndarray
    host_capacity: np.ndarray
    bandwidth: float
    discovery: float
    value: float
    unspent: float
    overcommitted_hosts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def interval(self) -> np.ndarray:
        """ndarray (n,): periods between two crawls of each page (``inf``: never)."""
        with np.errstate(divide="ignore"):
            return 1.0 / self.refresh_rate

    @property
    def binding_hosts(self) -> np.ndarray:
        """Indexes of the hosts whose capacity binds (``nu_h > 0``)."""
        return np.flatnonzero(self.host_multiplier > 0)

    @property
    def spent(self) -> float:
        """Crawls per period the schedule uses."""
        return float(self.refresh_rate.sum())


# -- input -----------------------------------------------------------------------------------


def _pages_array(name: str, values: object, n: int | None, *, default: float) -> np.ndarray:
    if values is None:
        if n is None:
            raise ScheduleError(f"{name} is required")
        return np.full(n, default)
    arr = np.asarray(values, dtype=float)
    if arr.ndim == 0 and n is not None:
        return np.full(n, float(arr))
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise ScheduleError(f"{name} must hold one value per page ({n} pages), got {arr.shape}")
    return arr


def _check(name: str, arr: np.ndarray, *, allow_inf: bool = False, positive: bool = False) -> None:
    bad = ~np.isfinite(arr) if not allow_inf else np.isnan(arr)
    if positive:
        bad |= ~(arr > 0)
    else:
        bad |= arr < 0
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        what = "> 0" if positive else ">= 0"
        finite = "" if allow_inf else " and finite"
        raise ScheduleError(
            f"{int(bad.sum())} {name} value(s) are not {what}{finite} "
            f"(first at row {k}: {arr[k]!r}); fix or drop those pages"
        )


# -- the schedule ----------------------------------------------------------------------------


def refresh_schedule(
    rate: np.ndarray,
    bandwidth: float,
    *,
    objective: str = "obsolescence",
    importance: np.ndarray | None = None,
    host: np.ndarray | None = None,
    host_capacity: np.ndarray | None = None,
    min_interval: np.ndarray | float | None = None,
    max_interval: np.ndarray | float | None = None,
    discovery_share: float = 0.0,
) -> Schedule:
    """The optimal refresh schedule of ``n`` pages for ``bandwidth`` crawls per period.

    Parameters
    ----------
    rate : (n,) change rates, changes per period, finite and >= 0.
    bandwidth : G, crawls per period, > 0.
    objective : one of :data:`OBJECTIVES`.
    importance : (n,) weights >= 0 (default 1), centered on 1 before use.
    host : (n,) int host index in [0, H) of each page, or -1 for none (default: none).
    host_capacity : (H,) crawls per period each host allows (politeness), >= 0, ``inf`` = none.
    min_interval, max_interval : (n,) or scalar, periods; NaN or ``inf`` = no bound.
    discovery_share : gamma in [0, 1): the share of G kept for new pages.

    Raises
    ------
    ScheduleError : bad input, or a bandwidth below what the max intervals require.
    """
    try:
        goal = objective_named(objective)
    except ValueError as error:
        raise ScheduleError(str(error)) from None
    if not (isinstance(bandwidth, int | float) and math.isfinite(bandwidth) and bandwidth > 0):
        raise ScheduleError(
            f"bandwidth must be a finite number > 0 (crawls per period), got {bandwidth!r}"
        )
    if not (MIN_BANDWIDTH <= bandwidth <= MAX_BANDWIDTH):
        raise ScheduleError(
            f"bandwidth must be between {MIN_BANDWIDTH:g} and {MAX_BANDWIDTH:g} crawls per "
            f"period, got {bandwidth:g}"
        )
    if not (0.0 <= discovery_share < 1.0):
        raise ScheduleError(f"discovery share must be in [0, 1), got {discovery_share!r}")
    lam = _pages_array("rate", rate, None, default=0.0)
    n = lam.shape[0]
    _check("rate", lam)
    w = _pages_array("importance", importance, n, default=1.0)
    _check("importance", w)
    if n and w.sum() > 0:
        w = w / w.mean()
    lo, hi = _bounds(min_interval, max_interval, n)
    codes, capacity = _hosts(host, host_capacity, n)

    refresh = float(bandwidth) * (1.0 - discovery_share)
    pages = PageSet(lam, w, lo, hi)
    hosts = HostSetup.of(pages, codes, capacity)
    floor_total = float(pages.lo.sum()) if pages.lo is not None else 0.0
    if floor_total > refresh * (1 + 1e-12):
        raise ScheduleError(
            f"bandwidth {bandwidth:g} crawls per period (refresh share {refresh:g}) is below the "
            f"{floor_total:.6g} that the pages' max intervals require; raise the bandwidth or "
            "relax max_interval"
        )
    mu, f, m_star = solve_multipliers(goal, pages, hosts, refresh, floor_total)
    nu = np.where(np.isinf(m_star), np.inf, np.maximum(m_star - mu, 0.0))
    load = host_loads(f, hosts.bins, capacity.shape[0])
    return Schedule(
        objective=goal.name,
        refresh_rate=f,
        multiplier=mu,
        host_multiplier=nu,
        host_load=load,
        host_capacity=capacity,
        bandwidth=float(bandwidth),
        discovery=float(bandwidth) * discovery_share,
        value=objective_value(goal, pages, f),
        unspent=max(refresh - float(f.sum()), 0.0),
        overcommitted_hosts=np.flatnonzero(hosts.over),
    )


def bucket_intervals(
    rate: np.ndarray,
    importance: np.ndarray,
    crawls: float,
    *,
    objective: str = "obsolescence",
) -> np.ndarray:
    """Refresh intervals (periods) of one bucket's pages sharing ``crawls`` per period.

    The plan gives a bucket a number of crawls per period; this splits them among its pages
    by the page-level schedule, so that important and faster pages come round sooner. ``rate``
    (changes per period) and ``importance``, shape (n,), may hold NaN where unknown: a missing
    rate is the median of the bucket's known rates (the bucket is a narrow band of rates), or
    1 when none is known (then every page is alike); a missing importance is 1. With no
    crawls every interval is ``inf`` (the plan does not refresh the bucket this cycle).
    """
    n = rate.shape[0]
    if n == 0 or not crawls > 0:
        return np.full(n, np.inf)
    known = rate[np.isfinite(rate) & (rate >= 0)]
    fill = float(np.median(known)) if known.size else 1.0
    lam = np.where(np.isfinite(rate) & (rate >= 0), rate, fill)
    if not (lam > 0).any():
        lam = np.ones(n)
    w = np.where(np.isfinite(importance) & (importance >= 0), importance, 1.0)
    if not w.sum() > 0:
        w = np.ones(n)
    return refresh_schedule(lam, float(crawls), objective=objective, importance=w).interval


def _bounds(
    min_interval: np.ndarray | float | None, max_interval: np.ndarray | float | None, n: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Rate bounds (lo, hi), crawls per period, from interval bounds in periods (None: none)."""
    lo = hi = None
    if min_interval is not None:
        shortest = _pages_array("min_interval", min_interval, n, default=np.nan)
        _positive_where_given("min_interval", shortest)
        with np.errstate(divide="ignore"):
            hi = np.where(np.isnan(shortest), np.inf, 1.0 / shortest)
    if max_interval is not None:
        longest = _pages_array("max_interval", max_interval, n, default=np.nan)
        _positive_where_given("max_interval", longest)
        with np.errstate(divide="ignore"):
            lo = np.where(np.isnan(longest), 0.0, 1.0 / longest)
    if lo is not None and hi is not None:
        clash = lo > hi
        if clash.any():
            k = int(np.flatnonzero(clash)[0])
            raise ScheduleError(
                f"{int(clash.sum())} page(s) have min_interval > max_interval (first at row "
                f"{k}: {1 / hi[k]:g} > {1 / lo[k]:g}); fix the bounds"
            )
    return lo, hi


def _positive_where_given(name: str, arr: np.ndarray) -> None:
    bad = ~np.isnan(arr) & ~(arr > 0)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ScheduleError(
            f"{name} must be > 0 periods where given (NaN or empty for none); row {k} has "
            f"{arr[k]!r}"
        )


def _hosts(
    host: np.ndarray | None, capacity: np.ndarray | None, n: int
) -> tuple[np.ndarray, np.ndarray]:
    if host is None:
        if capacity is not None and len(capacity):
            raise ScheduleError("host capacities were given but no page names a host")
        return np.full(n, -1, np.int64), np.zeros(0)
    codes = np.asarray(host)
    if codes.shape != (n,) or not np.issubdtype(codes.dtype, np.integer):
        raise ScheduleError(f"host must hold one integer index per page ({n} pages)")
    cap = np.asarray(capacity if capacity is not None else [], dtype=float)
    if cap.ndim != 1:
        raise ScheduleError("host capacities must be one value per host")
    _check("host capacity", cap, allow_inf=True)
    if codes.size and (codes.max() >= cap.shape[0] or codes.min() < -1):
        raise ScheduleError(
            f"host index out of range: pages name hosts up to {int(codes.max())}, "
            f"but {cap.shape[0]} capacities were given"
        )
    return codes.astype(np.int64, copy=False), cap


# -- closed forms --------------------------------------------------------------------------


def xyleme_intervals(rate: np.ndarray, importance: np.ndarray, bandwidth: float) -> np.ndarray:
    """Xyleme's ``t_i = K / sqrt(r_i lam_i)``, ``K = sum_j sqrt(r_j lam_j) / G`` (periods).

    ``importance`` is centered on 1 first. Pages with ``r lam = 0`` get ``inf``.
    """
    r = importance / importance.mean()
    root = np.sqrt(r * rate)
    with np.errstate(divide="ignore"):
        return (root.sum() / bandwidth) / root


def binary_closed_form(
    rate: np.ndarray, importance: np.ndarray, bandwidth: float
) -> tuple[np.ndarray, float]:
    """Azar et al.'s O(n log n) binary-freshness optimum: (rates, multiplier).

    Sort pages by ``w / lam`` descending; with the top k active the multiplier is
    ``m = (sum_k sqrt(w lam) / (G + sum_k lam))^2`` and a page is active iff ``w / lam > m``.
    The answer is the largest k consistent with that. Used to check the general solver.
    """
    w = importance / importance.mean()
    live = (w * rate) > 0
    order = np.argsort(-(np.where(live, w / np.where(live, rate, 1.0), -np.inf)), kind="stable")
    order = order[live[order]]
    root = np.cumsum(np.sqrt(w[order] * rate[order]))
    lam_sum = np.cumsum(rate[order])
    m = (root / (bandwidth + lam_sum)) ** 2
    ratio = w[order] / rate[order]
    k = int(np.flatnonzero(ratio > m)[-1]) + 1
    mu = float(m[k - 1])
    f = np.maximum(np.sqrt(w * rate / mu) - rate, 0.0)
    return np.where(live, f, 0.0), mu


class XylemeSum:
    """``S = sum_i sqrt(r_i lam_i)`` with r centered on 1, kept up to date incrementally.

    Xyleme's schedule needs only ``K = S / G``: when a page's importance or change rate is
    re-estimated, :meth:`update` moves the sums by the page's old and new terms instead of
    summing over every page again. The raw sums (``sum sqrt(r lam)``, ``sum r``, ``n``) are
    exact under updates up to rounding; centering divides by ``sqrt(mean r)`` at read time.
    """

    def __init__(self, rate: np.ndarray, importance: np.ndarray) -> None:
        self._root = math.fsum(np.sqrt(importance * rate).tolist())
        self._weight = math.fsum(importance.tolist())
        self._count = int(rate.shape[0])

    def update(
        self,
        old_rate: np.ndarray,
        old_importance: np.ndarray,
        new_rate: np.ndarray,
        new_importance: np.ndarray,
    ) -> None:
        """Replace pages' (rate, importance) terms; pass empty old arrays for new pages."""
        removed = old_rate.shape[0]
        added = new_rate.shape[0]
        self._root += float(np.sqrt(new_importance * new_rate).sum()) - float(
            np.sqrt(old_importance * old_rate).sum()
        )
        self._weight += float(new_importance.sum()) - float(old_importance.sum())
        self._count += added - removed

    @property
    def total(self) -> float:
        """S with importance centered on 1: ``sum sqrt(r_i / mean(r) * lam_i)``."""
        if self._count == 0 or self._weight <= 0:
            return 0.0
        return self._root / math.sqrt(self._weight / self._count)

    def interval(self, rate: np.ndarray, importance: np.ndarray, bandwidth: float) -> np.ndarray:
        """Xyleme intervals (periods) of the given pages under the current ``S``."""
        mean = self._weight / self._count
        with np.errstate(divide="ignore"):
            return (self.total / bandwidth) / np.sqrt(importance / mean * rate)
