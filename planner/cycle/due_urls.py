"""Due-URL selection: which pages to release in a plan period, and when (pure, numpy only).

The published plan says how many pages of each change-rate bucket to re-crawl in a period
(x_it) and how many never-fetched pages to fetch (z_t). This module chooses the pages:

* inside each bucket, the pages unvisited longest first: candidates in order of their last
  fetch, oldest first; ties by importance (higher first, unknown last), then page id. This is
  the order the planning model assumes: a bucket's crawls of a period take the pages that
  have waited longest, spread over the period, so every page of a bucket that gets x crawls
  a period out of b pages comes round every b / x periods (a round robin, not random draws);
  importance plays no part but breaking ties. Without due intervals every fetched page of
  a bucket is a candidate and the quota says how many are crawled; with them, only due
  pages, and pooled (what the service's releases do: "Pooled quotas" below) the quotas'
  total goes to the most overdue across buckets;
* never-fetched pages by OPIC cash, highest first (the caller gives them in that order);
* never more pages of one host than the host allows in the period: its polite delay
  ``max(configured minimum, robots crawl_delay)`` seconds between two requests, so at most
  ``floor((window - 1 ms) / delay) + 1`` requests in the window from the release to the end
  of the period; a page whose host is full is skipped and the next candidate is taken.

Buckets compete for host capacity in that order (one merged pass over all buckets'
candidates, oldest last fetch first; pooled, most overdue first); new pages take what
capacity is left after the re-crawls.

Spilling (``spill``, what the service's releases do). Crawls the quotas leave unused (a
bucket with fewer candidates than its quota, hosts full) are not lost: they go, in the same
period, to the other candidates in the order of the plan's marginal values (the value of one
more crawl of each bucket this period, and of one more new page), highest first, each
bucket's pages oldest first, within the hosts' capacity left. Candidates without a value come
after those with one: re-crawls merged oldest first, then new pages; a plan with no values
(older plans, a cold start) thus spends them on the pages unvisited longest overall, then new
pages. The spill is reported per bucket (:attr:`Selection.spilled`); crawls that found no
page are :attr:`Selection.unspent`. Shortfalls still name the quotas not met.

Due pages (``due_interval``: the service's releases, pooled, with a plan's crawl fractions).
A bucket's quota takes only its pages due by the end of the window: last fetch plus half
(:data:`DUE_SHARE`) the bucket's planned revisit interval (N / x periods). In steady state
the quota's oldest pages are a whole interval old, so it takes exactly them; after a
re-estimate moves pages between buckets, a bucket does not re-crawl a page that arrived in
it just after a visit. The crawls left spill to due pages
and new pages by value, then to the pages not due yet (by value, each bucket's soonest due
first).

Pooled quotas (``pooled``, with ``due_interval``: what the service's releases do). The
plan's quotas are whole pages a period, rounded from the model's fractional crawls x_it; a
bucket of a few pages planned 0.2 crawls a period rounds to 0 every period, and one planned
0.6 to 1, period after period: rounding alone starved the slow, small buckets and fed the
others (on the live-loop protocol's simulated web the planner kept 12 % of the optimum's gain
over a round robin, the page-level schedule on the same estimates 42 %). Pooled, the quotas
give only the period's total; it goes to the due pages most overdue for their bucket's
interval (the share of the interval elapsed by the window's end, highest first), whatever
their bucket. A bucket's interval is its pages over its planned crawls, so each bucket is
crawled at its planned rate however its crawls round, and the rounding is carried by each
page's own last fetch (the planner then kept 42 %). What the due pages cannot use spills as
above.

Release times (when the lease queue may hand the page out, ``next_due_at``): never before
``now``; each bucket's chosen pages (its quota's, then those spilled to it) are spread
evenly over the window from ``now`` in their order, the j-th of k at ``now + window j / k``,
so that every bucket's crawls are spread over the period as the model assumes, oldest
first; new pages in cash order likewise; then, per host, release times are pushed apart to at
least the host's delay, and pulled back before the period's end where needed (always
possible, since no host gets more pages than fit).

The page-level schedules' order (``scheduled_at`` instead of ``last_fetch``: last fetch plus
the page's own interval, shorter for important pages, t = K / sqrt(importance x rate)) is
kept for the simulated policies that plan page by page: inside a bucket the most overdue
first, only pages due before the period's end unless ``pull_forward`` takes the pages
scheduled soonest after it too; a page scheduled inside the window is released at its
scheduled time, overdue, pulled-forward and spilled pages spread over the window in order.
The service's releases no longer use it: ``scheduled_at`` is the page schedule's wish, not
the release's order.

Times are float seconds on any common clock (the service edge uses seconds since the Unix
epoch); arrays are 1-D, one entry per candidate page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "DUE_SHARE",
    "HOST_CAPACITY",
    "NEW_PAGES",
    "NOT_ENOUGH_DUE",
    "RECRAWLS",
    "Selection",
    "Shortfall",
    "host_capacity",
    "select_due_pages",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: ``Shortfall.bucket`` of the new-page quota.
NEW_PAGES = -1
#: ``Shortfall.bucket`` of the pooled re-crawl quota (``pooled``: every bucket's quota as one).
RECRAWLS = -2
#: Shortfall reasons.
NOT_ENOUGH_DUE = "not enough due pages"
HOST_CAPACITY = "host capacity"

#: Margin (s) kept before the end of the window: the last release is at most end - 1 ms.
_MARGIN = 1e-3
_US = 1_000_000


@dataclass(frozen=True)
class Shortfall:
    """A quota the selection could not meet.

    ``bucket`` is the change-rate bucket, :data:`NEW_PAGES`, or :data:`RECRAWLS` (the
    pooled total of the re-crawl quotas); ``reason`` is
    :data:`HOST_CAPACITY` when candidates were skipped because their host was full (more
    candidates, or a longer period, might meet it), else :data:`NOT_ENOUGH_DUE`.
    ``host_skipped`` counts those skipped candidates.
    """

    bucket: int
    quota: int
    chosen: int
    reason: str
    host_skipped: int


@dataclass(frozen=True)
class Selection:
    """The chosen pages: re-crawls (for the quotas, then spilled), then new pages (likewise).

    ``page_id`` (m,) int64; ``release_at`` (m,) float seconds, each in [now, end); ``bucket``
    (m,) int64, :data:`NEW_PAGES` for new pages; ``chosen`` maps bucket to pages chosen for its
    quota (quota buckets only; pooled, every bucket the pool took pages of); ``new_chosen``
    counts new pages chosen for theirs; ``shortfalls`` lists the quotas not met; ``spilled``
    maps bucket (or :data:`NEW_PAGES`) to the pages chosen there with the crawls the quotas left
    unused, and ``unspent`` counts those crawls that found no page (both 0 without ``spill``).
    """

    page_id: IntArray
    release_at: FloatArray
    bucket: IntArray
    chosen: dict[int, int]
    new_chosen: int
    shortfalls: tuple[Shortfall, ...] = field(default_factory=tuple)
    spilled: dict[int, int] = field(default_factory=dict)
    unspent: int = 0


def host_capacity(delay: FloatArray, window: float) -> IntArray:
    """Requests a host allows in ``window`` seconds at ``delay`` seconds apart, (h,) int64.

    ``floor((window - 1 ms) / delay) + 1``; a delay <= 0 means no limit (a very large
    number); an empty window allows nothing.
    """
    delay = np.asarray(delay, dtype=np.float64)
    big = np.iinfo(np.int64).max // 4
    if window <= _MARGIN:
        return np.zeros(delay.shape, dtype=np.int64)
    with np.errstate(divide="ignore"):
        slots = np.floor((window - _MARGIN) / np.where(delay > 0, delay, 1.0)) + 1
    return np.where(delay > 0, np.minimum(slots, big), big).astype(np.int64)


def _greedy(
    group: IntArray, host: IntArray, quota: IntArray, room: IntArray
) -> tuple[npt.NDArray[np.bool_], IntArray]:
    """Take candidates in order while their group's quota and their host's room last.

    ``group`` (n,) indexes ``quota`` (g,); ``host`` (n,) indexes ``room`` (h,), which is
    decremented in place. Returns the taken mask (n,) and per-group host skips (g,).

    The result is the sequential pass's: walk the candidates in order, take one when its
    group has quota left and its host has room, count a skip when the group has quota left
    but the host is full. Only candidates of hosts with more candidates than room (tight
    hosts: the few hosts whose politeness binds) are walked one by one; every other
    candidate is taken exactly when its group is still open, which is a prefix count.
    """
    n = len(group)
    taken = np.zeros(n, dtype=bool)
    skipped = np.zeros(len(quota), dtype=np.int64)
    if n == 0:
        return taken, skipped
    # Fast path (exact): when the first `quota` candidates of every group fit their hosts,
    # the sequential pass takes exactly those.
    rank = _rank_within(group)
    first = rank < quota[group]
    use = np.bincount(host[first], minlength=len(room))
    if np.all(use <= room):
        room -= use
        return first, skipped
    tight = (np.bincount(host, minlength=len(room)) > room)[host]
    loose = ~tight
    # A group is open at candidate k while the pages it took before k are under its quota.
    # While open it has taken every loose candidate before k (their hosts never refuse), so
    # its count at k is (loose candidates of the group before k) + (tight ones taken).
    loose_before = _count_before_within(group, loose)
    groups, hosts, before = group.tolist(), host.tolist(), loose_before.tolist()
    quota_list, room_list = quota.tolist(), room.tolist()
    tight_taken, skip_list = [0] * len(quota), [0] * len(quota)
    for k in np.flatnonzero(tight).tolist():
        g = groups[k]
        if before[k] + tight_taken[g] >= quota_list[g]:
            continue  # the group's quota is spent
        h = hosts[k]
        if room_list[h] == 0:
            skip_list[g] += 1
            continue
        room_list[h] -= 1
        tight_taken[g] += 1
        taken[k] = True
    room[:] = room_list
    tight_before = _count_before_within(group, taken)
    taken |= loose & (loose_before + tight_before < quota[group])
    room -= np.bincount(host[taken & loose], minlength=len(room))
    return taken, np.asarray(skip_list, dtype=np.int64)


def _count_before_within(group: IntArray, flag: npt.NDArray[np.bool_]) -> IntArray:
    """For each element, how many earlier elements of its group (array order) have ``flag``,
    (n,)."""
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    flags = flag[order].astype(np.int64)
    before = np.cumsum(flags) - flags
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    before -= np.repeat(before[starts], np.diff(np.r_[starts, len(group)]))
    out = np.empty(len(group), dtype=np.int64)
    out[order] = before
    return out


def _rank_within(group: IntArray) -> IntArray:
    """Position of each element among the elements of its group, in array order, (n,)."""
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    counts = np.diff(np.r_[starts, len(group)])
    ranks_sorted = np.arange(len(group)) - np.repeat(starts, counts)
    rank = np.empty(len(group), dtype=np.int64)
    rank[order] = ranks_sorted
    return rank


def _spread(count: int, start: float, end: float) -> FloatArray:
    """``count`` instants evenly spaced from ``start`` (included) over [start, end)."""
    return start + (end - start) * np.arange(count, dtype=np.float64) / max(count, 1)


def _space_per_host(
    release: FloatArray, host: IntArray, delay: FloatArray, start: float, last: float
) -> FloatArray:
    """Per host, release times at least ``delay[host]`` apart inside [start, last].

    Forward pass t'_k = max(t_k, t'_{k-1} + d), then backward pass
    t''_k = min(t'_k, t''_{k+1} - d) with t''_last <= ``last``; both are grouped
    cumulative max/min on integer microseconds (exact). Feasible whenever no host has more
    than ``floor((last - start) / d) + 1`` pages, which :func:`host_capacity` ensures.
    """
    n = len(release)
    if n < 2:
        return release
    d_all = np.round(np.clip(delay[host], 0.0, last - start) * _US).astype(np.int64)
    t = np.round((release - start) * _US).astype(np.int64)
    order = np.lexsort((t, host))
    h, t, d = host[order], t[order], d_all[order]
    new_group = np.r_[True, h[1:] != h[:-1]]
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.r_[starts, n])
    gid = np.repeat(np.arange(len(starts)), sizes)
    k = np.arange(n, dtype=np.int64) - np.repeat(starts, sizes)
    # Forward: t' = k d + cummax_group(t - k d). Offsets per group make one global cummax
    # restart at each group (values of later groups exceed every earlier one).
    v = t - k * d
    span = int(v.max() - v.min()) + 1
    offset = gid.astype(np.int64) * span
    fwd = np.maximum.accumulate(v - v.min() + offset) - offset + v.min() + k * d
    # Backward: t'' = k d + cummin_group_reversed(min(t' - k d, last - (size-1) d)).
    size = np.repeat(sizes, sizes).astype(np.int64)
    limit = round((last - start) * _US)
    w = np.minimum(fwd - k * d, limit - (size - 1) * d)
    span = int(w.max() - w.min()) + 1
    # Reversed, the groups come in decreasing id: offsets that decrease with the group id
    # make one global cummin restart at each group.
    offset = gid.astype(np.int64) * span
    shifted = (w - w.min() + offset)[::-1]
    bwd = np.minimum.accumulate(shifted)[::-1] - offset + w.min() + k * d
    out = np.empty(n, dtype=np.float64)
    out[order] = start + bwd / _US
    return out


def select_due_pages(
    *,
    page_id: IntArray,
    host_id: IntArray,
    bucket: IntArray,
    quotas: Mapping[int, int],
    new_page_id: IntArray,
    new_host_id: IntArray,
    new_quota: int,
    host_ids: IntArray,
    host_delay: FloatArray,
    start: float,
    end: float,
    now: float,
    scheduled_at: FloatArray | None = None,
    last_fetch: FloatArray | None = None,
    importance: FloatArray | None = None,
    pull_forward: bool = False,
    spill: bool = False,
    marginal: Mapping[int, float] | None = None,
    new_marginal: float | None = None,
    due_interval: Mapping[int, float] | None = None,
    due_share: float | None = None,
    pooled: bool = False,
    kept: Collection[int] = (),
) -> Selection:
    """Choose the pages to release for the period [start, end) at ``now`` and their times.

    Parameters
    ----------
    page_id, host_id, bucket : (n,) re-crawl candidates (any order; each page once). Pages
        of buckets without a quota are candidates only for spilled crawls.
    quotas : bucket -> pages to re-crawl this period.
    new_page_id, new_host_id : (k,) never-fetched candidates, highest OPIC cash first.
    new_quota : never-fetched pages to fetch this period.
    host_ids, host_delay : (h,) every candidate's host and its polite delay in seconds
        (``max(minimum delay, robots crawl_delay)``; <= 0: no limit).
    start, end, now : the period and the present, seconds, ``start <= now < end``;
        releases fall in ``[now, end)``.
    last_fetch : (n,) each candidate's last fetch, seconds: the order inside a bucket is
        longest unvisited first, every candidate is eligible, and each bucket's pages are
        released spread evenly over the window in that order (what the service's releases
        do, and what the planning model assumes).
    scheduled_at : (n,) instead of ``last_fetch``: the page-level schedule's due times; the
        order is most overdue first, and only pages due before ``end`` are eligible unless
        ``pull_forward`` (the simulated page-schedule policies).
    importance : (n,) optional; breaks ties of the order (higher first, NaN last).
    pull_forward : with ``scheduled_at``, a bucket whose pages due in the period fall short
        of its quota takes the pages scheduled soonest after the period too (released spread
        over the window, after the overdue ones), so the plan's crawls are spent; without
        it, only pages scheduled before ``end`` are candidates and the rest of the quota is
        a shortfall.
    spill : the crawls the quotas leave unused (too few candidates, hosts full) go to the
        other candidates: by ``marginal`` (bucket -> the plan's value of one more crawl of it
        this period) and ``new_marginal`` (of one more new page), highest value first, each
        bucket's pages in the order above; candidates without a value come after, re-crawls
        merged in that order (longest unvisited overall), then new pages.
    due_interval : with ``last_fetch``, bucket -> the plan's revisit interval of its pages,
        seconds (the period's length over the bucket's planned crawls per page and period):
        only pages due by the end of the window (last fetch plus :data:`DUE_SHARE` of their
        bucket's interval before ``end``) fill the quotas, longest unvisited first, and the
        crawls left spill first to the other buckets' due pages and new pages by value as
        above; with ``spill``, crawls still left then go to the pages not due yet, again by
        value, each bucket's soonest due first (buckets without a value last, soonest due
        first, those without an interval after them, longest unvisited first), so no crawl
        is left unspent while a candidate's host has room. A bucket whose pages were
        re-estimated into it does not re-crawl a page it visited a moment ago because the
        page is the oldest it holds.
    due_share : the share of the interval after which a page is due (default
        :data:`DUE_SHARE`); 1.0 makes every class a strict round robin at its interval.
    pooled : with ``due_interval``, the quotas are pooled (module docstring, "Pooled
        quotas"): their total goes to the due pages most overdue for their class's interval,
        whatever their bucket; ``chosen`` then counts each bucket's pages taken, and a total
        not met is one shortfall of :data:`RECRAWLS`.
    kept : with ``pooled``, the buckets whose quotas are not pooled: each takes its own due
        pages, most overdue first, for its own quota, and no others (a politeness-bound
        host's classes, whose capacity unused in a period is lost).

    Returns
    -------
    Selection
    """
    if (scheduled_at is None) == (last_fetch is None):
        raise ValueError("give exactly one of scheduled_at and last_fetch")
    by_fetch = last_fetch is not None
    key = np.asarray(last_fetch if by_fetch else scheduled_at, dtype=np.float64)
    page_id = np.asarray(page_id, dtype=np.int64)
    host_id = np.asarray(host_id, dtype=np.int64)
    bucket = np.asarray(bucket, dtype=np.int64)
    new_page_id = np.asarray(new_page_id, dtype=np.int64)
    new_host_id = np.asarray(new_host_id, dtype=np.int64)
    host_ids = np.asarray(host_ids, dtype=np.int64)
    host_delay = np.asarray(host_delay, dtype=np.float64)
    n = len(page_id)
    if not (len(host_id) == len(bucket) == len(key) == n):
        raise ValueError(
            "page_id, host_id, bucket and scheduled_at (or last_fetch) must have the same length"
        )
    if len(new_host_id) != len(new_page_id) or len(host_delay) != len(host_ids):
        raise ValueError("new_page_id/new_host_id and host_ids/host_delay must pair up")
    if not start <= now < end:
        raise ValueError(f"now ({now}) must fall in the period [{start}, {end})")
    if any(q < 0 for q in quotas.values()) or new_quota < 0:
        raise ValueError("quotas must be >= 0")
    t0 = now
    last = max(end - _MARGIN, t0)
    hosts = _HostIndex(host_ids)
    room = host_capacity(host_delay, end - t0)

    quota_buckets = np.array(sorted(b for b, q in quotas.items() if q > 0), dtype=np.int64)
    quota_of = np.array([quotas[int(b)] for b in quota_buckets], dtype=np.int64)
    eligible: npt.NDArray[np.bool_] | None = None if by_fetch or pull_forward else key < end
    early = np.zeros(0, dtype=np.int64)
    if pooled and due_interval is None:
        raise ValueError("pooled goes with due_interval")
    if due_interval is not None:
        if not by_fetch:
            raise ValueError("due_interval goes with last_fetch, not scheduled_at")
        share = DUE_SHARE if due_share is None else due_share
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"due_share must lie in [0, 1], got {share}")
        # pooled, most overdue first across buckets; else each bucket's soonest due first
        due, key = _due_keys(key, bucket, due_interval, share, overdue_at=end if pooled else None)
        eligible = due < end
        if spill:
            everyone = _candidate_order(page_id, key, importance, None)
            early = everyone[~eligible[everyone]]
    kept_set = {int(b) for b in kept}
    if pooled:  # one quota, the total, over every bucket but the kept ones
        own = sorted(b for b in kept_set if quotas.get(b, 0) > 0)
        pooled_total = sum(max(q, 0) for b, q in quotas.items() if int(b) not in kept_set)
        quota_buckets = np.array([RECRAWLS, *own], dtype=np.int64)
        quota_of = np.array([pooled_total, *(quotas[b] for b in own)], dtype=np.int64)
    order = _candidate_order(page_id, key, importance, eligible)
    if pooled:
        # kept buckets' pages fill their own quotas only; every other page the pooled one
        is_kept = np.isin(bucket[order], np.asarray(sorted(kept_set), dtype=np.int64))
        gpos, in_own = _positions(quota_buckets, bucket)
        first = order[~is_kept | in_own[order]]
        cand_group = np.where(in_own[first], gpos[first], 0)
    else:
        gpos, in_quota = _positions(quota_buckets, bucket)
        first = order[in_quota[order]]
        cand_group = gpos[first]
    cand_host = hosts.positions(host_id[first])
    taken, skipped = _greedy(cand_group, cand_host, quota_of, room)
    chosen_idx = first[taken]
    counts = np.bincount(cand_group[taken], minlength=len(quota_of))

    # New pages: highest cash first, with the capacity left.
    nh = hosts.positions(new_host_id)
    new_quota_arr = np.array([new_quota], dtype=np.int64)
    new_taken, new_skipped = _greedy(np.zeros(len(new_page_id), np.int64), nh, new_quota_arr, room)

    left = int(quota_of.sum()) + new_quota - int(counts.sum()) - int(new_taken.sum())
    spill_idx = np.zeros(0, dtype=np.int64)
    new_spill = np.zeros(len(new_page_id), dtype=bool)
    if spill and left > 0:
        spill_idx, new_spill = _spill(
            order,
            chosen_idx,
            bucket,
            hosts.positions(host_id),
            (new_taken, nh),
            room,
            left,
            (marginal or {}, new_marginal),
            early,
        )
    recrawl_idx = np.concatenate([chosen_idx, spill_idx])
    new_idx = np.concatenate([np.flatnonzero(new_taken), np.flatnonzero(new_spill)])

    if by_fetch:
        refresh_release = _spread_per_group(bucket[recrawl_idx], t0, last)
    else:
        # At the scheduled time inside the window; overdue pages, pages pulled forward from
        # after the period and spilled pages, spread over the window in order.
        sched = key[recrawl_idx]
        refresh_release = np.minimum(sched, last)
        spread = (sched < t0) | (sched >= end)
        spread[len(chosen_idx) :] = True
        refresh_release[spread] = _spread(int(spread.sum()), t0, last)
    release = _space_per_host(
        np.concatenate([refresh_release, _spread(len(new_idx), t0, last)]),
        np.concatenate([hosts.positions(host_id[recrawl_idx]), nh[new_idx]]),
        host_delay,
        t0,
        last,
    )
    shortfalls = _shortfalls(quota_buckets, quota_of, counts, skipped)
    new_chosen = int(new_taken.sum())
    if new_chosen < new_quota:
        shortfalls += _shortfalls(
            np.array([NEW_PAGES]), new_quota_arr, np.array([new_chosen]), new_skipped
        )
    spilled = Counter(bucket[spill_idx].tolist())
    if new_spill.any():
        spilled[NEW_PAGES] = int(new_spill.sum())
    if pooled:
        chosen = dict(sorted(Counter(bucket[chosen_idx].tolist()).items()))
    else:
        chosen = dict(zip(quota_buckets.tolist(), counts.tolist(), strict=True))
    return Selection(
        page_id=np.concatenate([page_id[recrawl_idx], new_page_id[new_idx]]),
        release_at=release,
        bucket=np.concatenate([bucket[recrawl_idx], np.full(len(new_idx), NEW_PAGES, np.int64)]),
        chosen={int(b): int(c) for b, c in chosen.items()},
        new_chosen=new_chosen,
        shortfalls=tuple(shortfalls),
        spilled={int(b): int(c) for b, c in sorted(spilled.items())},
        unspent=max(left, 0) - len(spill_idx) - int(new_spill.sum()) if spill else 0,
    )


def _candidate_order(
    page_id: IntArray,
    key: FloatArray,
    importance: FloatArray | None,
    eligible: npt.NDArray[np.bool_] | None,
) -> IntArray:
    """The re-crawl candidates' indices in the order they are taken: ``key`` ascending (last
    fetch: longest unvisited first; scheduled time: most overdue first), ties by importance
    (higher first, NaN last), then page id; only the ``eligible`` ones (None: all)."""
    n = len(page_id)
    if importance is None:
        imp = np.zeros(n)
    else:
        imp = np.asarray(importance, dtype=np.float64)
        imp = np.where(np.isnan(imp), -np.inf, imp)
    order = np.lexsort((page_id, -imp, key))
    return order if eligible is None else order[eligible[order]]


def _positions(quota_buckets: IntArray, bucket: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Each candidate's position in ``quota_buckets``, and whether its bucket is there."""
    gpos = np.searchsorted(quota_buckets, bucket)
    gpos = np.minimum(gpos, max(len(quota_buckets) - 1, 0))
    if not len(quota_buckets):
        return gpos, np.zeros(len(bucket), dtype=bool)
    return gpos, quota_buckets[gpos] == bucket


def _spill(
    order: IntArray,
    chosen_idx: IntArray,
    bucket: IntArray,
    host: IntArray,
    new: tuple[npt.NDArray[np.bool_], IntArray],
    room: IntArray,
    left: int,
    values: tuple[Mapping[int, float], float | None],
    early: IntArray,
) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Spend ``left`` crawls on the eligible candidates (``order``) the quotas did not take,
    and on the new pages not taken (``new``: taken mask, host positions), in the order of the
    plan's marginal values (``values``: per bucket, for new pages; highest first; candidates
    without a value last: re-crawls in candidate order, then new pages), then on the
    candidates not due yet (``early``, in order), within the hosts' ``room`` (decremented).
    Returns the spilled re-crawls' indices, in order, and the mask of spilled new pages."""
    new_taken, new_host = new
    marginal, new_marginal = values
    free = np.ones(len(bucket), dtype=bool)
    free[chosen_idx] = False
    due_rest = order[free[order]]
    rest = np.concatenate([due_rest, early])
    new_rest = np.flatnonzero(~new_taken)
    # Sort keys: not due yet last; minus the value (no value: +inf, last), re-crawls before
    # new pages at the same value, then candidate order.
    valued = np.array(sorted(marginal), dtype=np.int64)
    value = np.array([-float(marginal[int(b)]) for b in valued], dtype=np.float64)
    where, has = _positions(valued, bucket[rest])
    primary = np.concatenate(
        [
            np.where(has, value[where] if len(valued) else 0.0, np.inf),
            np.full(len(new_rest), np.inf if new_marginal is None else -float(new_marginal)),
        ]
    )
    is_new = np.r_[np.zeros(len(rest), dtype=np.int64), np.ones(len(new_rest), dtype=np.int64)]
    tier = np.zeros(len(primary), dtype=np.int64)
    tier[len(due_rest) : len(rest)] = 1
    position = np.arange(len(primary))
    sequence = np.lexsort((position, is_new, primary, tier))
    seq_host = np.concatenate([host[rest], new_host[new_rest]])[sequence]
    took, _ = _greedy(np.zeros(len(sequence), np.int64), seq_host, np.array([left]), room)
    picked = sequence[took]
    recrawl = rest[picked[picked < len(rest)]]
    new_mask = np.zeros(len(new_taken), dtype=bool)
    new_mask[new_rest[picked[picked >= len(rest)] - len(rest)]] = True
    return recrawl, new_mask


#: A page is due for its bucket's quota once this share of the bucket's revisit interval
#: has passed since its last fetch. In steady state a quota's oldest pages are a whole
#: interval old, so the share changes nothing there; it keeps a page that a re-estimate moved
#: into a faster bucket just after a visit from being crawled again at once, and lets a
#: quota pull a page forward by at most half an interval (a politeness-bound host, whose
#: capacity unused is lost, still fills its quota after its pages were visited early).
DUE_SHARE = 0.5

#: Seconds added to the last fetch of a page whose bucket has no revisit interval: it sorts
#: after every page with one (about 31,700 years), longest unvisited first among its kind.
_NEVER_DUE = 1e12


def _due_keys(
    last_fetch: FloatArray,
    bucket: IntArray,
    due_interval: Mapping[int, float],
    share: float,
    overdue_at: float | None = None,
) -> tuple[FloatArray, FloatArray]:
    """When each candidate becomes eligible for its bucket's quota (last fetch plus
    ``share`` of its bucket's interval; +inf without one), and the order key, ascending:
    the due time (last fetch plus the interval), or with ``overdue_at`` (pooled quotas)
    minus the share of the interval waited by then, most overdue first; a candidate without
    an interval after all those with one, longest unvisited first, (n,) each."""
    known = np.array(sorted(b for b, v in due_interval.items() if v > 0), dtype=np.int64)
    interval = np.array([float(due_interval[int(b)]) for b in known], dtype=np.float64)
    where, has = _positions(known, bucket)
    step = np.where(has, interval[where] if len(known) else 0.0, np.inf)
    eligible = last_fetch + share * step
    if overdue_at is None:
        due = last_fetch + step
        return eligible, np.where(np.isfinite(due), due, last_fetch + _NEVER_DUE)
    ratio = np.where(has, (overdue_at - last_fetch) / np.where(has, step, 1.0), 0.0)
    behind = float(np.max(np.abs(ratio), initial=0.0)) + 1.0  # past every ratio's key
    oldest = float(np.min(last_fetch, initial=np.inf)) if len(last_fetch) else 0.0
    return eligible, np.where(has, -ratio, behind + (last_fetch - oldest))


def _spread_per_group(group: IntArray, start: float, end: float) -> FloatArray:
    """Per group, its elements (in array order) spread evenly from ``start`` over
    [start, end): the j-th of a group of k at ``start + (end - start) j / k``."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.float64)
    inverse = np.unique(group, return_inverse=True)[1].ravel()
    size = np.bincount(inverse)[inverse]
    return start + (end - start) * _rank_within(group) / size


class _HostIndex:
    """Host ids mapped to positions 0..h-1 in the order ``host_ids`` gives them."""

    def __init__(self, host_ids: IntArray) -> None:
        self._order = np.argsort(host_ids, kind="stable")
        self._sorted = host_ids[self._order]

    def positions(self, ids: IntArray) -> IntArray:
        """Each id's position in ``host_ids``; every id must be there."""
        if len(ids) == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._sorted, ids), max(len(self._sorted) - 1, 0))
        if len(self._sorted) == 0 or np.any(self._sorted[pos] != ids):
            raise ValueError("every candidate's host must be in host_ids")
        return self._order[pos]


def _shortfalls(
    buckets: IntArray, quota: IntArray, chosen: IntArray, host_skipped: IntArray
) -> list[Shortfall]:
    """A :class:`Shortfall` for each bucket that got fewer pages than its quota: named for
    host capacity when a full host turned pages away, else for too few pages due."""
    return [
        Shortfall(int(b), int(q), int(c), HOST_CAPACITY if s > 0 else NOT_ENOUGH_DUE, int(s))
        for b, q, c, s in zip(buckets, quota, chosen, host_skipped, strict=True)
        if c < q
    ]
