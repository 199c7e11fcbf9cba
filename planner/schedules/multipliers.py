"""The Lagrange multipliers of a refresh schedule, solved chunk by chunk (pure, vectorized).

:mod:`planner.schedules.optimal` states the problem: refresh rates ``f`` (crawls per period) of
pages with change rates ``lam`` and importance ``w`` that optimise a separable concave
objective subject to one budget (multiplier ``mu``), per-host capacities (``nu_h``) and
per-page bounds. This module finds the multipliers. A host binds exactly when its load
``S_h(mu)`` exceeds its capacity ``R_h``, so the budget spent at ``mu`` is
``T(mu) = sum_h min(S_h(mu), R_h)``: ``mu`` comes from ``T(mu) = budget`` first (a
safeguarded Newton/secant in log space, one ``bincount`` per pass), then ``m*_h`` only for
the hosts that bind at that ``mu`` (vectorized over hosts, on their pages alone), and every
other page keeps its rate. Both are solved to a relative residual near machine precision.

Passes over the pages work in chunks of :data:`_CHUNK` pages on a thread pool (numpy's loops
release the GIL), so temporaries stay small and reused and both cores work; sums are added
in chunk order, so results do not depend on the threads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from planner.schedules.objectives import RefreshObjective

__all__ = ["HostSetup", "PageSet", "host_loads", "objective_value", "solve_multipliers"]

_RTOL = 1e-13  # relative residual at which a multiplier is solved
_COARSE_RTOL = 1e-6  # ... and at which a search with a coarse objective stops
_GLOBAL_COARSE_RTOL = 1e-7  # the global multiplier's search: closer, as its passes are dear
_MAX_STEPS = 200


#: Pages per chunk: every pass over the pages works on slices this long, so temporaries stay
#: small instead of fresh page-faulted arrays of the full size. 2**17 (1 MB a temporary): at
#: 2**18 (2 MB) glibc hands the temporaries back to the kernel and faults them in again on
#: every chunk (1.5 M page faults in a freshness solve of 10 M pages, half its time); smaller
#: chunks add Python overhead per chunk.
_CHUNK = 1 << 17
#: Pages in the sample that starts a large problem's search (every k-th page).
_SAMPLE = 1 << 18


def _chunks(n: int) -> list[slice]:
    return [slice(k, min(k + _CHUNK, n)) for k in range(0, n, _CHUNK)]


@dataclass
class PageSet:
    """The pages of one solve; ``lo``/``hi`` None when unbounded, ``floor`` None without hosts.

    ``floor`` is the per-page host multiplier ``m*_h(i)`` (0 where the host never binds).
    Where a host's capacity falls inside a jump of its load (see :func:`_solve_groups`), its
    pages, when the host decides, take ``(1 - theta) f(floor) + theta f(floor_over)``.
    """

    lam: np.ndarray
    w: np.ndarray
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    floor: np.ndarray | None = None
    floor_over: np.ndarray | None = None
    theta: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.lam.shape[0])

    def chunks(self) -> list[slice]:
        return _chunks(self.size)

    def subset(self, pick: np.ndarray | slice) -> PageSet:
        """The pages ``pick``, copied: a strided sample is evaluated many times, and
        contiguous arrays are much faster to evaluate."""

        def take(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.ascontiguousarray(a[pick])

        return PageSet(
            np.ascontiguousarray(self.lam[pick]),
            np.ascontiguousarray(self.w[pick]),
            take(self.lo),
            take(self.hi),
            take(self.floor),
            take(self.floor_over),
            take(self.theta),
        )


def _rates_at(
    goal: RefreshObjective, pages: PageSet, part: slice, m: np.ndarray | float, slope: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rates (and df/dm) of the pages in ``part`` at multipliers ``m`` (0 <= m <= inf).

    The page's own multiplier is ``max(m, floor)``; df/dm is 0 where a bound holds, the page
    is inactive, or its host's multiplier (not ``m``) decides.
    """
    lam, w = pages.lam[part], pages.w[part]
    mm = np.asarray(m, dtype=float)
    if pages.floor is not None:
        mm = np.maximum(mm, pages.floor[part])
    mm = np.broadcast_to(mm, lam.shape)
    ok = (mm > 0) & np.isfinite(mm)
    active = (lam > 0) & (w > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        safe = np.where(ok, mm, 1.0)
        f = goal.rate(safe, lam, w)
        f = np.where(ok, f, np.where(mm <= 0, np.inf, 0.0))
    f = np.where(active, f, 0.0)
    lo = pages.lo[part] if pages.lo is not None else None
    hi = pages.hi[part] if pages.hi is not None else None
    if lo is not None or hi is not None:
        f = np.clip(f, lo if lo is not None else 0.0, hi if hi is not None else np.inf)
    if not slope:
        if pages.theta is not None:
            f = _blend_jumps(goal, pages, part, m, f)
        return f, None
    inside = active & ok
    if lo is not None:
        inside &= f > lo
    if hi is not None:
        inside &= f < hi
    if pages.floor is not None:
        inside &= pages.floor[part] < np.asarray(m)
    if pages.theta is not None:
        f = _blend_jumps(goal, pages, part, m, f)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = goal.rate_slope(safe, np.where(inside, f, 1.0), lam, w)
    return f, np.where(inside, d, 0.0)


def _blend_jumps(
    goal: RefreshObjective, pages: PageSet, part: slice, m: np.ndarray | float, f: np.ndarray
) -> np.ndarray:
    """Rates of the pages whose host sits in a jump, blended to fill its capacity exactly."""
    assert pages.theta is not None and pages.floor is not None and pages.floor_over is not None
    theta = pages.theta[part]
    blend = (theta > 0) & (pages.floor[part] >= np.asarray(m))
    if not blend.any():
        return f
    idx = np.flatnonzero(blend)
    first = part.start or 0
    mine = PageSet(pages.lam[part][idx], pages.w[part][idx])
    mine.lo = None if pages.lo is None else pages.lo[part][idx]
    mine.hi = None if pages.hi is None else pages.hi[part][idx]
    above = _rates_at(goal, mine, slice(0, idx.size), pages.floor_over[first + idx], False)[0]
    out = f.copy()
    out[idx] += theta[idx] * (above - out[idx])
    return out


#: Threads that evaluate chunks at once: numpy's ufunc loops release the GIL, so chunks of one
#: pass run on separate cores. Sums are added in chunk order, so results do not depend on it.
_THREADS = max(1, min(4, os.cpu_count() or 1))
_POOL = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="schedule")

_T = TypeVar("_T")


def _map_chunks(work: Callable[[slice], _T], parts: list[slice]) -> list[_T]:
    if _THREADS == 1 or len(parts) < 2:
        return [work(part) for part in parts]
    return list(_POOL.map(work, parts))


def _total(
    goal: RefreshObjective,
    pages: PageSet,
    mu: float,
    slope: bool = True,
    out: np.ndarray | None = None,
) -> tuple[float, float]:
    """(sum f, d sum f / d mu) at the global multiplier ``mu``, chunk by chunk (slope 0 when
    not asked for); the rates themselves go to ``out`` when given."""

    def work(part: slice) -> tuple[float, float]:
        f, d = _rates_at(goal, pages, part, mu, slope=slope)
        if out is not None:
            out[part] = f
        return float(f.sum()), float(d.sum()) if d is not None else 0.0

    sums = _map_chunks(work, pages.chunks())
    return math.fsum(t for t, _ in sums), math.fsum(d for _, d in sums)


def _all_rates(goal: RefreshObjective, pages: PageSet, mu: float) -> np.ndarray:
    out = np.empty(pages.size)
    _total(goal, pages, mu, slope=False, out=out)
    return out


@dataclass(frozen=True)
class _Caps:
    """Host capacities for the capped total ``T(mu) = sum_h min(S_h(mu), R_h)``.

    ``bins`` is each page's host, or ``H`` for a page on none (``capacity[H]`` is ``inf``), so
    one ``bincount`` per chunk gives every host's load ``S_h`` without masking.
    """

    bins: np.ndarray
    capacity: np.ndarray


@dataclass(frozen=True)
class _Capped:
    """``T(mu)``, ``dT/dmu`` (0 when not asked for) and the loads and slopes per host bin."""

    total: float
    slope: float
    load: np.ndarray
    load_slope: np.ndarray | None


def _capped_total(
    goal: RefreshObjective,
    pages: PageSet,
    caps: _Caps,
    mu: float,
    slope: bool,
    out: np.ndarray | None = None,
) -> _Capped:
    """The bandwidth the schedule spends at ``mu`` when every host is held to its capacity.

    A host binds exactly when its load at ``mu`` exceeds its capacity (``m*_h > mu``), and then
    spends its capacity, so the spent total is ``T(mu) = sum_h min(S_h(mu), R_h)``: the one
    equation ``T(mu) = (1 - gamma) G`` gives ``mu`` without knowing any ``m*_h``, and then only
    the binding hosts need theirs. ``dT/dmu`` sums the slopes of the hosts that do not bind.
    The rates (without the binding hosts' floors) go to ``out`` when given.
    """
    size = caps.capacity.shape[0]

    def work(part: slice) -> tuple[np.ndarray, np.ndarray | None]:
        f, d = _rates_at(goal, pages, part, mu, slope=slope)
        if out is not None:
            out[part] = f
        b = caps.bins[part]
        load = np.bincount(b, weights=f, minlength=size)
        return load, None if d is None else np.bincount(b, weights=d, minlength=size)

    parts = _map_chunks(work, pages.chunks())
    load = parts[0][0].copy()
    for more, _ in parts[1:]:
        load += more
    load_slope = None
    if slope:
        load_slope = np.zeros(size)
        for _, d in parts:
            assert d is not None
            load_slope += d
    free = load < caps.capacity
    total = float(np.minimum(load, caps.capacity).sum())
    dtotal = float(load_slope[free].sum()) if load_slope is not None else 0.0
    return _Capped(total, dtotal, load, load_slope)


def _solve_groups(
    spend: Callable[[np.ndarray, np.ndarray, bool], tuple[np.ndarray, np.ndarray]],
    target: np.ndarray,
    start: np.ndarray,
    rtol: float = _RTOL,
    dlog0: np.ndarray | None = None,
    lower: np.ndarray | None = None,
    width: float | None = None,
) -> _Roots:
    """Per group g, the multiplier m_g > 0 with ``spend(m, ...)[0][g] == target[g]``.

    ``spend(m, todo, slope)`` returns (S, dS/dm), each of shape (G,), for the groups in the
    boolean mask ``todo`` (others may hold anything), dS/dm only when ``slope`` is asked
    for. S is decreasing in m, runs from above
    ``target`` as m -> 0 to below it as m -> inf (the caller checks). Newton's method on
    ``ln S`` against ``ln m`` (exact in one step for power laws such as Xyleme's), safeguarded
    by a bracket that opens by factors of e^3 until it closes and then bisects in log space.
    ``lower`` (where finite) is a multiplier known to spend above the target: the bracket
    starts closed on that side.

    S can jump: a page whose marginal value at rate 0 equals m exactly (the starvation
    threshold of ``freshness``) goes from rate ``lam / 37`` to 0 between two neighbouring
    floats of m. Then the bracket closes to one ulp with the target inside the jump, and the
    result keeps both ends so the caller can blend them (see :class:`_Roots`). A bracket
    stops narrowing at a relative ``width`` (default: near one ulp, from ``rtol``).
    """
    if width is None:
        width = max(4e-16, 0.1 * rtol)
    s = np.log(start)
    lo = np.full_like(s, -np.inf) if lower is None else np.log(lower)
    hi = np.full_like(s, np.inf)
    log_target = np.log(target)
    todo = np.ones(s.shape, dtype=bool)
    solved = np.zeros(s.shape, dtype=bool)
    s_prev = np.full_like(s, np.nan)
    gap_prev = np.full_like(s, np.nan)
    last_dlog = np.full_like(s, -0.5)
    for _ in range(_MAX_STEPS):
        seeded = dlog0 is not None and bool(np.isnan(gap_prev).all())
        need_slope = not seeded and bool(np.isnan(gap_prev[todo]).any())
        total, slope = spend(np.exp(s), todo, need_slope)
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = np.log(total) - log_target
        done = todo & (np.abs(total - target) <= rtol * target)
        solved |= done
        todo = todo & ~done
        if not todo.any():
            break
        above = gap > 0  # spending too much: the multiplier must grow
        lo = np.where(todo & above, s, lo)
        hi = np.where(todo & ~above, s, hi)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # d ln S / d ln m (< 0): the secant through the last two points where there is
            # one (robust when a few pages near their starvation threshold dominate the
            # analytic slope), else the analytic slope
            secant = (gap - gap_prev) / (s - s_prev)
            analytic = dlog0 if seeded and dlog0 is not None else np.exp(s) * slope / total
            dlog = np.where(np.isfinite(secant) & (secant < 0), secant, analytic)
            last_dlog = np.where(todo, dlog, last_dlog)
            newton = s - gap / dlog
        ok = np.isfinite(newton) & (newton > lo) & (newton < hi)
        closed = np.isfinite(lo) & np.isfinite(hi)
        with np.errstate(invalid="ignore"):  # lo + hi is inf - inf where the bracket is open
            middle = 0.5 * (lo + hi)
        fallback = np.where(closed, middle, np.where(np.isfinite(lo), s + 3.0, s - 3.0))
        step = np.where(ok, newton, fallback)
        if closed.any():
            narrow = closed & (hi - lo <= width * np.maximum(1.0, np.abs(s)))
            todo = todo & ~narrow
        s_prev, gap_prev = np.where(todo, s, s_prev), np.where(todo, gap, gap_prev)
        s = np.where(todo, step, s)
    m = np.exp(s)
    return _Roots(
        m=m,
        under=np.where(solved | ~np.isfinite(hi), m, np.exp(hi)),
        over=np.where(solved | ~np.isfinite(lo), m, np.exp(lo)),
        solved=solved,
        dlog=last_dlog,
    )


@dataclass(frozen=True)
class _Roots:
    """Multipliers per group: ``m`` where ``solved``; elsewhere the target lies in a jump of S
    between ``over`` (S above target) and ``under`` (S below), one float apart."""

    m: np.ndarray
    under: np.ndarray
    over: np.ndarray
    solved: np.ndarray
    dlog: np.ndarray  # the last slope d ln S / d ln m used: a good first step for a refinement


def _overcommitted(
    pages: PageSet, bins: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(over-committed, may bind) host masks and the load per host bin at ``mu = 0``.

    ``bins`` is each page's host, or ``H`` for none. A host is over-committed when the lower
    bounds alone exceed its capacity, or meet it while the pages want more (a host of capacity
    0 with pages to crawl; not an empty host of capacity 0): its lower bounds are scaled down
    to fit and its pages pinned there, in place. A host may bind only when its pages could take
    more than its capacity: at ``mu = 0`` every active page wants its upper bound (or ``inf``),
    the others their lower bound. That load (before the scaling) is returned too: capped by the
    capacities it is what the schedule can spend at most.
    """
    n_hosts = capacity.shape[0]

    def work(part: slice) -> tuple[np.ndarray, np.ndarray | None]:
        active = (pages.lam[part] > 0) & (pages.w[part] > 0)
        top = np.where(active, np.inf if pages.hi is None else pages.hi[part], 0.0)
        b = bins[part]
        if pages.lo is None:
            return np.bincount(b, weights=top, minlength=n_hosts + 1), None
        lo = pages.lo[part]
        top = np.where(active, top, lo)
        low = np.bincount(b, weights=lo, minlength=n_hosts + 1)
        return np.bincount(b, weights=top, minlength=n_hosts + 1), low

    ceiling = np.zeros(n_hosts + 1)
    floor = np.zeros(n_hosts + 1)
    for high, low in _map_chunks(work, pages.chunks()):
        ceiling += high
        if low is not None:
            floor += low
    floor = floor[:n_hosts]
    most = ceiling[:n_hosts]
    over = (floor > capacity) | ((floor >= capacity) & (most > capacity))
    if over.any():
        if pages.lo is None:  # a host of capacity 0
            pages.lo = np.zeros(pages.size)
        if pages.hi is None:
            pages.hi = np.full(pages.size, np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            shrink = np.where(floor > 0, capacity / floor, 1.0)
        mine = np.flatnonzero(np.append(over, False)[bins])
        pages.lo[mine] *= shrink[bins[mine]]
        pages.hi[mine] = pages.lo[mine]
    return over, ~over & (most > capacity), ceiling


def _host_roots(
    goal: RefreshObjective,
    pages: PageSet,
    bins: np.ndarray,
    capacity: np.ndarray,
    groups: np.ndarray,
    start: np.ndarray,
    lower: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m*_h of the hosts ``groups``: the multiplier at which their pages fill them exactly.

    Returns (under, over, theta) per group: ``under`` is m*_h; where the capacity sits inside
    a jump of the host's load (see :func:`_solve_groups`), ``over`` is the float below it and
    ``theta`` the blend of the rates at both that fills the capacity (elsewhere ``over ==
    under`` and ``theta == 0``). Only these hosts' pages are evaluated, and as hosts are solved
    the pages evaluated shrink to those of the hosts left (re-gathered when half are gone).
    """
    size = groups.shape[0]
    code_of = np.full(capacity.shape[0] + 1, -1, np.int64)
    code_of[groups] = np.arange(size)
    pick = _pages_of(code_of >= 0, bins)
    sub = PageSet(
        pages.lam[pick],
        pages.w[pick],
        None if pages.lo is None else pages.lo[pick],
        None if pages.hi is None else pages.hi[pick],
    )
    codes = code_of[bins[pick]]
    target = capacity[groups]

    def loads(
        obj: RefreshObjective, live: PageSet, live_codes: np.ndarray, m: np.ndarray, slope: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        def work(part: slice) -> tuple[np.ndarray, np.ndarray | None]:
            c = live_codes[part]
            f, d = _rates_at(obj, live, part, m[c], slope=slope)
            s = np.bincount(c, weights=f, minlength=size)
            return s, None if d is None else np.bincount(c, weights=d, minlength=size)

        total, dtotal = np.zeros(size), np.zeros(size)
        for s, d in _map_chunks(work, live.chunks()):
            total += s
            if d is not None:
                dtotal += d
        return total, dtotal

    def spender(
        obj: RefreshObjective,
    ) -> Callable[[np.ndarray, np.ndarray, bool], tuple[np.ndarray, np.ndarray]]:
        state = [sub, codes]

        def spend(m: np.ndarray, todo: np.ndarray, slope: bool) -> tuple[np.ndarray, np.ndarray]:
            live, live_codes = state
            mine = todo[live_codes]
            if 2 * int(np.count_nonzero(mine)) < live.size:  # drop the solved hosts' pages
                keep = np.flatnonzero(mine)
                live, live_codes = live.subset(keep), live_codes[keep]
                state[:] = [live, live_codes]
            total, dtotal = loads(obj, live, live_codes, m, slope)
            return np.where(todo, total, 1.0), dtotal

        return spend

    dlog0 = None
    search = goal.coarse()
    if search is not goal:
        found = _solve_groups(
            spender(search), target, start, _COARSE_RTOL, lower=lower, width=_COARSE_RTOL
        )
        start, dlog0 = found.m, found.dlog
    # a host whose capacity falls in a jump of its load (or between two floats of m) is
    # blended at both ends of its bracket, which fills it exactly; the pages' multipliers
    # then differ by at most the bracket, so 1e-12 keeps their KKT conditions to 1e-12
    roots = _solve_groups(spender(goal), target, start, dlog0=dlog0, lower=lower, width=1e-12)
    theta = np.zeros(size)
    jump = ~roots.solved & (roots.over < roots.under)
    if jump.any():
        keep = np.flatnonzero(jump[codes])
        mine, mine_codes = sub.subset(keep), codes[keep]
        below = loads(goal, mine, mine_codes, roots.under, False)[0]
        above = loads(goal, mine, mine_codes, roots.over, False)[0]
        fill = (target - below) / np.where(above > below, above - below, np.inf)
        theta[jump] = np.clip(fill[jump], 0.0, 1.0)
    return roots.under, roots.over, theta


def _hosted_rates(
    goal: RefreshObjective,
    pages: PageSet,
    bins: np.ndarray,
    capacity: np.ndarray,
    over: np.ndarray,
    ceiling: np.ndarray,
    refresh: float,
    floor_total: float,
) -> tuple[float, np.ndarray, np.ndarray]:
    """(mu, rates, m*_h per host) under host capacities: an active set of binding hosts.

    First ``mu`` from ``T(mu) = sum_h min(S_h(mu), R_h) = refresh`` (:func:`_capped_total`),
    which needs no ``m*_h``; the hosts whose load at ``mu`` exceeds their capacity bind, and
    only theirs are solved, on their pages alone (``mu`` is the lower end of each bracket).
    The capped solve's rates stand but on those hosts' pages, which are evaluated again with
    their floors; should the budget then not be spent to ``_RTOL`` (a jump of T), ``mu`` is
    solved again with the floors, from the ``mu`` found. Should rounding leave another host
    above its capacity, it joins the set and its ``m*_h`` is solved too (``m*_h`` depends on
    neither ``mu`` nor the other hosts).

    ``bins`` is each page's host or ``H`` for none; ``ceiling`` the load per bin at ``mu = 0``
    (see :func:`_overcommitted`).
    """
    n_hosts = capacity.shape[0]
    caps = _Caps(bins, np.append(capacity, np.inf))
    m_star = np.where(over, np.inf, 0.0)
    m_over = m_star.copy()
    theta = np.zeros(n_hosts)

    def set_floors() -> None:
        if (m_star > 0).any():
            pages.floor = _per_page(m_star, bins)
        if (theta > 0).any():
            pages.floor_over = _per_page(m_over, bins)
            pages.theta = _per_page(theta, bins)

    set_floors()
    at_zero = _Capped(float(np.minimum(ceiling, caps.capacity).sum()), 0.0, ceiling, None)
    probe: _Capped | None = at_zero
    low, dlog, rates = 0.0, None, None
    if at_zero.total <= refresh * (1 + _RTOL):
        mu = 0.0
    elif floor_total >= refresh * (1 - _RTOL):
        mu, probe = math.inf, None
    else:
        mu, low, dlog, probe, rates = _capped_multiplier(goal, pages, caps, refresh)
    solved = over.copy()
    new = np.zeros(n_hosts, bool)
    start = np.full(n_hosts, _start_scale(pages, refresh) if mu == 0 else mu)
    lower: np.ndarray | None = None
    if probe is not None:
        load = probe.load[:n_hosts]
        new = ~solved & (load > capacity)
        if mu > 0:
            # every objective's rates fall at least as fast as m^(-1/2) (Xyleme's exactly), so
            # unless bounds hold pages, m*_h is at most low (load / capacity)^2: a start
            # near the root from above (exact for obsolescence), with ``low`` below it
            lower = np.full(n_hosts, low)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(new, load / capacity, 1.0)
            start = low * np.minimum(ratio, 1e6) ** 2
    while True:
        if new.any():
            groups = np.flatnonzero(new)
            bracket = None if lower is None else lower[groups]
            under, above, blend = _host_roots(
                goal, pages, bins, capacity, groups, start[groups], bracket
            )
            m_star[groups], m_over[groups], theta[groups] = under, above, blend
            solved |= new
            set_floors()
        if rates is not None:
            # the capped solve's rates are right but on the binding hosts: redo only theirs
            f, rates = rates, None
            if new.any():
                mine = _pages_of(np.append(new, False), bins)
                f[mine] = _all_rates(goal, pages.subset(mine), mu)
            spent = _sum(f)
            if not abs(spent - refresh) <= _RTOL * refresh:
                mu, f = _global_rates(goal, pages, refresh, start=mu, dlog0=dlog)
        elif 0 < mu < math.inf:
            mu, f = _global_rates(goal, pages, refresh, start=mu, dlog0=dlog)
        else:
            f = _all_rates(goal, pages, mu)
        load = host_loads(f, bins, n_hosts)
        new = ~solved & (load > capacity)
        if not new.any():
            return mu, f, m_star
        start = np.full(n_hosts, _start_scale(pages, refresh) if mu == 0 else mu)
        lower = None


def _capped_multiplier(
    goal: RefreshObjective, pages: PageSet, caps: _Caps, refresh: float
) -> tuple[float, float, np.ndarray, _Capped, np.ndarray | None]:
    """mu with ``T(mu) = refresh`` (see :func:`_capped_total`), the smaller end of its bracket
    (``mu`` unless T jumps there), the last slope d ln T / d ln mu, T's parts at the smaller
    end (the larger loads: no binding host is missed where T jumps), and the rates at ``mu``
    without host floors (None where T jumps).

    Like :func:`_global_rates`: large problems start from a sample (its capacities scaled by
    its share of the pages), then the coarse objective's root, then the exact one's.
    """
    start = _start_scale(pages, refresh)
    search = goal.coarse()
    if pages.size > 4 * _SAMPLE:
        step = pages.size // _SAMPLE
        sample = pages.subset(slice(None, None, step))
        share = sample.size / pages.size
        small = _Caps(np.ascontiguousarray(caps.bins[::step]), caps.capacity * share)
        if sample.lo is None or float(sample.lo.sum()) < refresh * share:
            start = float(_solve_capped(search, sample, small, refresh * share, start, 1e-6).m[0])
    dlog0 = None
    if search is not goal:
        found = _solve_capped(search, pages, caps, refresh, start, _GLOBAL_COARSE_RTOL)
        start, dlog0 = float(found.m[0]), found.dlog
    last: dict[float, _Capped] = {}
    out = np.empty(pages.size)
    roots = _solve_capped(goal, pages, caps, refresh, start, _RTOL, dlog0, last, out)
    mu, low = float(roots.m[0]), float(roots.over[0])
    rates = out if bool(roots.solved[0]) and mu in last else None
    probe = last.get(low) or _capped_total(goal, pages, caps, low, slope=True)
    return mu, low, roots.dlog, probe, rates


def _solve_capped(
    goal: RefreshObjective,
    pages: PageSet,
    caps: _Caps,
    target: float,
    start: float,
    rtol: float,
    dlog0: np.ndarray | None = None,
    keep: dict[float, _Capped] | None = None,
    out: np.ndarray | None = None,
) -> _Roots:
    """The root of ``T(mu) = target``; ``keep`` receives the last evaluation ``{mu: T's}``
    (and ``out`` its rates)."""

    def spend(mu: np.ndarray, todo: np.ndarray, slope: bool) -> tuple[np.ndarray, np.ndarray]:
        found = _capped_total(goal, pages, caps, float(mu[0]), slope, out)
        if keep is not None:
            keep.clear()
            keep[float(mu[0])] = found
        return np.array([found.total]), np.array([found.slope])

    return _solve_groups(spend, np.array([target]), np.array([start]), rtol=rtol, dlog0=dlog0)


def _per_page(table: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """``table[h]`` of each page's host bin ``h`` (0 for bin ``H``: no host), filled chunk by
    chunk on all cores (one output array, no full-size temporaries)."""
    padded = np.append(table, 0.0)
    out = np.empty(bins.shape[0])

    def work(part: slice) -> None:
        np.take(padded, bins[part], out=out[part])

    _map_chunks(work, _chunks(out.shape[0]))
    return out


def _pages_of(member: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Indexes of the pages whose host bin is in ``member`` (bool, one per bin), in order."""
    parts = _chunks(bins.shape[0])
    found = _map_chunks(lambda p: np.flatnonzero(member[bins[p]]) + (p.start or 0), parts)
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _sum(a: np.ndarray) -> float:
    """``sum(a)``, chunk by chunk on all cores."""
    return math.fsum(_map_chunks(lambda p: float(a[p].sum()), _chunks(a.shape[0])))


def host_loads(f: np.ndarray, bins: np.ndarray, n_hosts: int) -> np.ndarray:
    """Crawls per period per host (pages in bin ``H`` have none)."""
    if n_hosts == 0:
        return np.zeros(0)
    return np.bincount(bins, weights=f, minlength=n_hosts + 1)[:n_hosts]


def objective_value(goal: RefreshObjective, pages: PageSet, f: np.ndarray) -> float:
    """The objective at rates ``f``, chunk by chunk on all cores (see ``goal.terms``)."""
    parts = pages.chunks()
    total = math.fsum(
        _map_chunks(lambda p: float(goal.terms(f[p], pages.lam[p], pages.w[p]).sum()), parts)
    )
    if not goal.mean:
        return total
    weight = math.fsum(_map_chunks(lambda p: float(pages.w[p].sum()), parts))
    return total / weight if weight > 0 else goal.value(f, pages.lam, pages.w)


def _start_scale(pages: PageSet, bandwidth: float) -> float:
    """A multiplier of the right order: Xyleme's closed form ``(sum sqrt(w lam / 2) / G)^2``."""
    root = math.fsum(
        _map_chunks(
            lambda part: float(np.sqrt(pages.w[part] * pages.lam[part] / 2.0).sum()),
            pages.chunks(),
        )
    )
    scale = (root / bandwidth) ** 2 if root > 0 else 1.0
    return scale if np.isfinite(scale) and scale > 0 else 1.0


def _global_rates(
    goal: RefreshObjective,
    pages: PageSet,
    refresh: float,
    start: float | None = None,
    dlog0: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """mu and the rates that spend exactly ``refresh``; large problems start from a sample.

    Where the budget falls inside a jump of the total (see :func:`_solve_groups`), the pages
    at their threshold get the blend of their rates on both sides that spends it exactly:
    their marginal value equals mu to one ulp, so the KKT conditions hold. Given a ``start``
    already near the root (the capped solve's, with its slope ``dlog0``), the exact objective
    starts there directly.
    """
    if start is None:
        start = _start_scale(pages, refresh)
        search = goal.coarse()
        if pages.size > 4 * _SAMPLE and pages.floor is None:
            step = pages.size // _SAMPLE
            sample = pages.subset(slice(None, None, step))
            share = refresh * sample.size / pages.size
            if sample.lo is None or float(sample.lo.sum()) < share:
                start = float(_solve_one(search, sample, share, start, rtol=1e-6).m[0])
        if search is not goal:
            found = _solve_one(search, pages, refresh, start, rtol=_GLOBAL_COARSE_RTOL)
            start, dlog0 = float(found.m[0]), found.dlog
    last: dict[float, np.ndarray] = {}
    roots = _solve_one(goal, pages, refresh, start, keep=last, dlog0=dlog0)
    mu = float(roots.m[0])
    if bool(roots.solved[0]):
        return mu, last[mu] if mu in last else _all_rates(goal, pages, mu)
    under = _all_rates(goal, pages, float(roots.under[0]))
    over = _all_rates(goal, pages, float(roots.over[0]))
    low, high = float(under.sum()), float(over.sum())
    theta = (refresh - low) / (high - low) if high > low else 0.0
    return mu, under + theta * (over - under)


def _solve_one(
    goal: RefreshObjective,
    pages: PageSet,
    target: float,
    start: float,
    *,
    rtol: float = _RTOL,
    keep: dict[float, np.ndarray] | None = None,
    dlog0: np.ndarray | None = None,
) -> _Roots:
    """The global multiplier; ``keep`` receives the rates of the last multiplier evaluated
    (``{mu: rates}``), which saves the caller one pass over the pages."""
    out = np.empty(pages.size) if keep is not None else None

    def spend(mu: np.ndarray, todo: np.ndarray, slope: bool) -> tuple[np.ndarray, np.ndarray]:
        total, dtotal = _total(goal, pages, float(mu[0]), slope, out)
        if keep is not None and out is not None:
            keep.clear()
            keep[float(mu[0])] = out
        return np.array([total]), np.array([dtotal])

    return _solve_groups(spend, np.array([target]), np.array([start]), rtol=rtol, dlog0=dlog0)


@dataclass(frozen=True)
class HostSetup:
    """Hosts of a solve: each page's host bin (``H`` for pages on no host), the capacities
    (H,), over-committed hosts, hosts whose pages could ever exceed their capacity, and each
    host's most possible load."""

    bins: np.ndarray
    capacity: np.ndarray
    over: np.ndarray
    may_bind: np.ndarray
    ceiling: np.ndarray

    @classmethod
    def of(cls, pages: PageSet, codes: np.ndarray, capacity: np.ndarray) -> HostSetup:
        """Set up the hosts of ``pages`` (codes (n,), -1 for none); scales down, in place, the
        lower bounds of over-committed hosts to fit their capacity."""
        n = pages.size
        # each page's host bin, H for none (codes themselves when every page has a host)
        bins = codes
        if capacity.shape[0] and n and codes.min() < 0:
            bins = np.where(codes >= 0, codes, capacity.shape[0])
        if capacity.shape[0]:
            over, may_bind, ceiling = _overcommitted(pages, bins, capacity)
        else:
            over = may_bind = ceiling = np.zeros(0, bool)
        return cls(bins, capacity, over, may_bind, ceiling)


def solve_multipliers(
    goal: RefreshObjective, pages: PageSet, hosts: HostSetup, refresh: float, floor_total: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """(mu, rates (n,), m*_h (H,)) spending ``refresh`` crawls per period.

    ``floor_total`` is the sum of the pages' lower bounds (no more than ``refresh``: the
    caller checks). ``mu`` is 0 when the bandwidth cannot be spent, ``inf`` when the lower
    bounds take all of it.
    """
    n = pages.size
    m_star = np.zeros(hosts.capacity.shape[0])
    if hosts.over.any() or hosts.may_bind.any():
        return _hosted_rates(
            goal,
            pages,
            hosts.bins,
            hosts.capacity,
            hosts.over,
            hosts.ceiling,
            refresh,
            floor_total,
        )
    active = bool(((pages.lam > 0) & (pages.w > 0)).any())
    if n == 0 or (
        not (pages.hi is None and active)
        and _total(goal, pages, 0.0, False)[0] <= refresh * (1 + _RTOL)
    ):
        return 0.0, _all_rates(goal, pages, 0.0), m_star
    if floor_total >= refresh * (1 - _RTOL):
        return math.inf, _all_rates(goal, pages, math.inf), m_star
    mu, f = _global_rates(goal, pages, refresh)
    return mu, f, m_star
