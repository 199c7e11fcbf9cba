"""Due-URL selection, the pure part: exact small cases and properties on random instances."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cycle.due_urls import (
    HOST_CAPACITY,
    NEW_PAGES,
    NOT_ENOUGH_DUE,
    Selection,
    host_capacity,
    select_due_pages,
)
from planner.cycle.quotas import integer_quotas


def _select(
    pages: list[tuple[int, int, int, float]],
    quotas: dict[int, int],
    *,
    new: list[tuple[int, int]] = (),  # type: ignore[assignment]
    new_quota: int = 0,
    delays: dict[int, float],
    start: float = 0.0,
    end: float = 100.0,
    now: float = 0.0,
    pull_forward: bool = False,
) -> Selection:
    """pages: (page_id, host_id, bucket, scheduled_at); new: (page_id, host_id) by cash."""
    arr = np.array(pages, dtype=float).reshape(-1, 4)
    new_arr = np.array(new, dtype=np.int64).reshape(-1, 2)
    return select_due_pages(
        page_id=arr[:, 0].astype(np.int64),
        host_id=arr[:, 1].astype(np.int64),
        bucket=arr[:, 2].astype(np.int64),
        scheduled_at=arr[:, 3],
        quotas=quotas,
        new_page_id=new_arr[:, 0],
        new_host_id=new_arr[:, 1],
        new_quota=new_quota,
        host_ids=np.array(sorted(delays), dtype=np.int64),
        host_delay=np.array([delays[h] for h in sorted(delays)], dtype=float),
        start=start,
        end=end,
        now=now,
        pull_forward=pull_forward,
    )


def _release(sel: Selection) -> dict[int, float]:
    return dict(zip(sel.page_id.tolist(), sel.release_at.tolist(), strict=True))


def test_most_overdue_first_and_quota_met_exactly() -> None:
    # Bucket 1: five pages on many hosts, given out of order; quota 3.
    pages = [(10, 1, 1, 5.0), (11, 2, 1, -30.0), (12, 3, 1, -10.0), (13, 4, 1, 2.0)]
    pages += [(14, 5, 1, -20.0), (20, 6, 2, 1.0)]
    sel = _select(pages, {1: 3}, delays=dict.fromkeys(range(1, 7), 0.0), now=0.0)
    assert sel.page_id.tolist() == [11, 14, 12]  # most overdue first; bucket 2 has no quota
    assert sel.chosen == {1: 3} and sel.shortfalls == ()
    # Three overdue pages spread evenly over [now, end - 1 ms), most overdue first.
    span = 100.0 - 1e-3
    assert sel.release_at == pytest.approx([0.0, span / 3, 2 * span / 3])


def test_pull_forward_fills_a_quota_with_the_pages_scheduled_soonest_after_the_period() -> None:
    # Bucket 4, quota 4: one page overdue, one inside the period, three after it.
    pages = [(1, 1, 4, -5.0), (2, 2, 4, 70.0), (3, 3, 4, 300.0), (4, 4, 4, 120.0)]
    pages += [(5, 5, 4, 200.0)]
    delays = dict.fromkeys(range(1, 6), 0.0)
    sel = _select(pages, {4: 4}, delays=delays, start=0, end=100, now=10, pull_forward=True)
    release = _release(sel)
    assert set(release) == {1, 2, 4, 5}  # the soonest after the period: 120 and 200, not 300
    assert sel.chosen == {4: 4} and sel.shortfalls == ()
    assert release[2] == 70.0  # inside the period: at its time
    # overdue, then pulled forward in schedule order, spread over [now, end - 1 ms)
    span = 100.0 - 1e-3 - 10.0
    expected = [10.0, 10 + span / 3, 10 + 2 * span / 3]
    assert [release[p] for p in (1, 4, 5)] == pytest.approx(expected)
    # Without it the quota stops at the pages due in the period.
    strict = _select(pages, {4: 4}, delays=delays, start=0, end=100, now=10)
    assert set(_release(strict)) == {1, 2} and strict.shortfalls[0].reason == NOT_ENOUGH_DUE


def test_pages_scheduled_inside_the_period_are_released_at_their_time() -> None:
    pages = [(1, 1, 4, 30.0), (2, 2, 4, 70.0), (3, 3, 4, -5.0), (4, 4, 4, 120.0)]
    sel = _select(pages, {4: 4}, delays=dict.fromkeys(range(1, 5), 1.0), start=0, end=100, now=10)
    release = _release(sel)
    assert release[1] == 30.0 and release[2] == 70.0  # fixed order: at the scheduled time
    assert release[3] == 10.0  # overdue: from now, never in the past
    assert 4 not in release  # scheduled after the period: not due
    (short,) = sel.shortfalls
    assert (short.bucket, short.quota, short.chosen, short.reason) == (4, 4, 3, NOT_ENOUGH_DUE)


def test_a_full_host_is_skipped_and_the_next_candidate_taken() -> None:
    # Host 1 allows floor((100 - 0.001) / 40) + 1 = 3 requests in the period.
    assert host_capacity(np.array([40.0, 0.0]), 100.0).tolist()[0] == 3
    pages = [(i, 1, 7, float(-100 + i)) for i in range(5)] + [(9, 2, 7, 0.0)]
    sel = _select(pages, {7: 4}, delays={1: 40.0, 2: 0.0})
    assert sel.page_id.tolist() == [0, 1, 2, 9]
    assert sel.shortfalls == ()
    times = sorted(t for pid, t in _release(sel).items() if pid < 5)
    assert np.diff(times).min() >= 40.0 - 1e-6  # polite spacing inside the period
    assert max(times) < 100.0


def test_host_capacity_shortfall_is_named_and_shared_with_new_pages() -> None:
    pages = [(i, 1, 3, float(i)) for i in range(4)]
    new = [(50, 1), (51, 2), (52, 1)]
    sel = _select(pages, {3: 4}, new=new, new_quota=3, delays={1: 30.0, 2: 10.0})
    # Host 1 allows floor((100 - 0.001) / 30) + 1 = 4 requests: the four re-crawls fill it.
    assert sel.chosen == {3: 4}
    assert sel.page_id.tolist() == [0, 1, 2, 3, 51]
    assert sel.new_chosen == 1
    (short,) = sel.shortfalls
    assert (short.bucket, short.chosen, short.reason, short.host_skipped) == (
        NEW_PAGES,
        1,
        HOST_CAPACITY,
        2,
    )
    assert (sel.bucket == NEW_PAGES).sum() == 1


def test_new_pages_follow_cash_order() -> None:
    new = [(7, 1), (3, 2), (9, 3), (1, 4)]
    sel = _select([], {}, new=new, new_quota=3, delays=dict.fromkeys(range(1, 5), 0.0), now=40)
    assert sel.page_id.tolist() == [7, 3, 9]
    assert sel.release_at == pytest.approx([40.0, 40 + 60 / 3 - 1e-3 / 3, 40 + 2 * (60 - 1e-3) / 3])


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="fall in the period"):
        _select([], {}, delays={}, start=0, end=10, now=10)
    with pytest.raises(ValueError, match="host_ids"):
        _select([(1, 5, 1, 0.0)], {1: 1}, delays={1: 0.0})


def _reference(
    cands: list[tuple[int, int, int, float]],
    quotas: dict[int, int],
    new: list[tuple[int, int]],
    new_quota: int,
    caps: dict[int, int],
    end: float,
) -> tuple[list[int], list[int]]:
    """The greedy rule, written plainly: merged overdue order, then new pages."""
    room = dict(caps)
    left = dict(quotas)
    chosen = []
    for pid, host, bucket, _ in sorted(cands, key=lambda c: (c[3], c[0])):
        if _ >= end or left.get(bucket, 0) <= 0 or room[host] <= 0:
            continue
        left[bucket] -= 1
        room[host] -= 1
        chosen.append(pid)
    new_chosen = []
    for pid, host in new:
        if len(new_chosen) < new_quota and room[host] > 0:
            room[host] -= 1
            new_chosen.append(pid)
    return chosen, new_chosen


@st.composite
def _instances(draw: Any) -> dict[str, Any]:
    hosts = draw(st.integers(1, 6))
    n = draw(st.integers(0, 60))
    buckets = draw(st.lists(st.integers(0, 255), min_size=1, max_size=4, unique=True))
    times = st.integers(-200, 200).map(float)
    cands = [
        (i, draw(st.integers(0, hosts - 1)), draw(st.sampled_from(buckets)), draw(times))
        for i in range(n)
    ]
    quotas = {b: draw(st.integers(0, 25)) for b in buckets}
    k = draw(st.integers(0, 20))
    new = [(1000 + i, draw(st.integers(0, hosts - 1))) for i in range(k)]
    delays = {h: draw(st.sampled_from([0.0, 5.0, 13.0, 30.0, 60.0])) for h in range(hosts)}
    now = draw(st.integers(0, 99).map(float))
    return {
        "cands": cands,
        "quotas": quotas,
        "new": new,
        "new_quota": draw(st.integers(0, 15)),
        "delays": delays,
        "now": now,
    }


@settings(max_examples=300, deadline=None)
@given(_instances())
def test_properties_on_random_instances(inst: dict[str, Any]) -> None:
    start, end, now = 0.0, 100.0, inst["now"]
    delays: dict[int, float] = inst["delays"]
    sel = _select(
        inst["cands"],
        inst["quotas"],
        new=inst["new"],
        new_quota=inst["new_quota"],
        delays=delays,
        start=start,
        end=end,
        now=now,
    )
    hosts = sorted(delays)
    caps = dict(
        zip(
            hosts,
            host_capacity(np.array([delays[h] for h in hosts]), end - now).tolist(),
            strict=True,
        )
    )
    # The same pages as the plain greedy rule (most overdue first, host caps, then new).
    chosen, new_chosen = _reference(
        inst["cands"], inst["quotas"], inst["new"], inst["new_quota"], caps, end
    )
    assert sel.page_id.tolist() == chosen + new_chosen
    host_of = {pid: h for pid, h, _, _ in inst["cands"]} | dict(inst["new"])
    # Per-host capacity never exceeded; polite spacing; never in the past nor after the end.
    per_host = Counter(host_of[p] for p in sel.page_id.tolist())
    assert all(per_host[h] <= caps[h] for h in per_host)
    assert np.all(sel.release_at >= now) and np.all(sel.release_at < end)
    for h in per_host:
        times = np.sort(sel.release_at[[host_of[p] == h for p in sel.page_id.tolist()]])
        if delays[h] > 0 and len(times) > 1:
            assert np.diff(times).min() >= delays[h] - 1e-5
    # Quotas met exactly when enough pages are due and no host got in the way.
    due = Counter(b for _, _, b, t in inst["cands"] if t < end)
    short = {s.bucket: s for s in sel.shortfalls}
    for b, q in inst["quotas"].items():
        got = sel.chosen.get(b, 0)
        assert got <= q
        if got < q:
            assert short[b].reason == (HOST_CAPACITY if short[b].host_skipped else NOT_ENOUGH_DUE)
            if short[b].reason == NOT_ENOUGH_DUE:
                assert got == due[b]
        else:
            assert b not in short
    # Pages released where they were scheduled when inside the period and their host is free.
    sched = {pid: t for pid, _, _, t in inst["cands"]}
    lonely = {h for h, c in per_host.items() if c == 1 or delays[h] == 0}
    for pid, t in _release(sel).items():
        if pid in sched and now <= sched[pid] < end - 1e-3 and host_of[pid] in lonely:
            assert t == sched[pid]


def _sequential_greedy(
    group: list[int], host: list[int], quota: list[int], room: list[int]
) -> tuple[list[bool], list[int], list[int]]:
    """The rule _greedy implements, one candidate at a time: taken, skips, room left."""
    left, room, skips = list(quota), list(room), [0] * len(quota)
    taken = []
    for g, h in zip(group, host, strict=True):
        take = left[g] > 0 and room[h] > 0
        skips[g] += left[g] > 0 and room[h] == 0
        if take:
            left[g] -= 1
            room[h] -= 1
        taken.append(take)
    return taken, skips, room


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda groups: st.integers(1, 6).flatmap(
            lambda hosts: st.tuples(
                st.lists(st.tuples(st.integers(0, groups - 1), st.integers(0, hosts - 1))),
                st.lists(st.integers(0, 12), min_size=groups, max_size=groups),
                # a host's room: small, or no limit (host_capacity's value for no delay)
                st.lists(
                    st.one_of(st.integers(0, 12), st.just(np.iinfo(np.int64).max // 4)),
                    min_size=hosts,
                    max_size=hosts,
                ),
            )
        )
    )
)
def test_greedy_is_the_sequential_pass(
    inst: tuple[list[tuple[int, int]], list[int], list[int]],
) -> None:
    from planner.cycle.due_urls import _greedy

    cands, quota, room = inst
    group = [g for g, _ in cands]
    host = [h for _, h in cands]
    room_arr = np.array(room, dtype=np.int64)
    taken, skips = _greedy(
        np.array(group, dtype=np.int64),
        np.array(host, dtype=np.int64),
        np.array(quota, dtype=np.int64),
        room_arr,
    )
    want_taken, want_skips, want_room = _sequential_greedy(group, host, quota, room)
    assert taken.tolist() == want_taken
    assert skips.tolist() == want_skips
    assert room_arr.tolist() == want_room


# -- longest unvisited first, and spilling (what the service's releases do) ------------------


def _by_fetch(
    pages: list[tuple[int, int, int, float]],
    quotas: dict[int, int],
    *,
    new: list[tuple[int, int]] = (),  # type: ignore[assignment]
    new_quota: int = 0,
    delays: dict[int, float],
    importance: list[float] | None = None,
    now: float = 0.0,
    spill: bool = True,
    marginal: dict[int, float] | None = None,
    new_marginal: float | None = None,
    due_interval: dict[int, float] | None = None,
) -> Selection:
    """pages: (page_id, host_id, bucket, last_fetch); new: (page_id, host_id) by cash; the
    period is [0, 100)."""
    arr = np.array(pages, dtype=float).reshape(-1, 4)
    new_arr = np.array(new, dtype=np.int64).reshape(-1, 2)
    return select_due_pages(
        page_id=arr[:, 0].astype(np.int64),
        host_id=arr[:, 1].astype(np.int64),
        bucket=arr[:, 2].astype(np.int64),
        last_fetch=arr[:, 3],
        importance=None if importance is None else np.array(importance, dtype=float),
        quotas=quotas,
        new_page_id=new_arr[:, 0],
        new_host_id=new_arr[:, 1],
        new_quota=new_quota,
        host_ids=np.array(sorted(delays), dtype=np.int64),
        host_delay=np.array([delays[h] for h in sorted(delays)], dtype=float),
        start=0.0,
        end=100.0,
        now=now,
        spill=spill,
        marginal=marginal,
        new_marginal=new_marginal,
        due_interval=due_interval,
    )


def test_longest_unvisited_first_whatever_the_schedule_and_spread_per_bucket() -> None:
    # Bucket 1: pages fetched at -50, -10, -30, -90, -5 (ids 10..14); ties broken by
    # importance, then id. Bucket 2 (quota 2): 20, 21. No page is "due": the quota decides.
    pages = [(10, 1, 1, -50.0), (11, 2, 1, -10.0), (12, 3, 1, -30.0), (13, 4, 1, -90.0)]
    pages += [(14, 5, 1, -5.0), (15, 6, 1, -30.0), (20, 7, 2, -1.0), (21, 8, 2, -2.0)]
    importance = [0.1, 0.1, 0.2, 0.1, 0.1, 0.5, 0.0, 0.0]
    sel = _by_fetch(
        pages, {1: 4, 2: 2}, delays=dict.fromkeys(range(1, 9), 0.0), importance=importance, now=4.0
    )
    assert sel.page_id.tolist() == [13, 10, 15, 12, 21, 20]
    assert sel.chosen == {1: 4, 2: 2} and sel.shortfalls == () and sel.spilled == {}
    span = 100.0 - 1e-3 - 4.0
    release = _release(sel)
    assert [release[p] for p in (13, 10, 15, 12)] == pytest.approx(
        [4.0 + span * j / 4 for j in range(4)]
    )
    assert [release[p] for p in (21, 20)] == pytest.approx([4.0, 4.0 + span / 2])


def test_unusable_quota_spills_by_marginal_value() -> None:
    # Bucket 3: quota 10, 4 pages. Bucket 5 (value 3): quota 1, 4 pages. New pages (value 2):
    # quota 1, 3 pages. Bucket 7 (value 1): no quota, 5 pages. Bucket 9 (value 5): quota 2,
    # 2 pages (nothing left). 6 crawls to spill: 3 to bucket 5, 2 to new pages, 1 to bucket 7.
    pages = [(30 + i, 1, 3, -float(i)) for i in range(4)]
    pages += [(50 + i, 2, 5, -10.0 - i) for i in range(4)]
    pages += [(70 + i, 3, 7, -100.0 + i) for i in range(5)]
    pages += [(90 + i, 4, 9, -1.0) for i in range(2)]
    new = [(200, 5), (201, 5), (202, 5)]
    sel = _by_fetch(
        pages,
        {3: 10, 5: 1, 9: 2},
        new=new,
        new_quota=1,
        delays=dict.fromkeys(range(1, 6), 0.0),
        marginal={3: 4.0, 5: 3.0, 7: 1.0, 9: 5.0},
        new_marginal=2.0,
    )
    assert sel.chosen == {3: 4, 5: 1, 9: 2} and sel.new_chosen == 1
    assert sel.spilled == {5: 3, 7: 1, NEW_PAGES: 2} and sel.unspent == 0
    assert len(sel.page_id) == 10 + 1 + 2 + 1  # every crawl of the quotas spent
    ids = set(sel.page_id.tolist())
    assert {53, 52, 51, 50} <= ids and {70} <= ids and not {71, 72} & ids  # oldest first
    assert {200, 201, 202} <= ids
    ((reason, chosen),) = [(s.reason, s.chosen) for s in sel.shortfalls]
    assert (reason, chosen) == (NOT_ENOUGH_DUE, 4)


def test_without_values_the_spill_goes_to_the_longest_unvisited_then_new_pages() -> None:
    pages = [(1, 1, 3, -5.0), (2, 2, 4, -50.0), (3, 3, 4, -1.0), (4, 4, 6, -20.0)]
    new = [(100, 5)]
    sel = _by_fetch(pages, {3: 4}, new=new, new_quota=0, delays=dict.fromkeys(range(1, 6), 0.0))
    assert sel.page_id.tolist() == [1, 2, 4, 3]  # quota page, then oldest overall: 3 left
    assert sel.spilled == {4: 2, 6: 1} and sel.unspent == 0
    more = _by_fetch(pages, {3: 6}, new=new, delays=dict.fromkeys(range(1, 6), 0.0))
    assert more.spilled == {4: 2, 6: 1, NEW_PAGES: 1} and more.unspent == 1
    off = _by_fetch(pages, {3: 4}, new=new, delays=dict.fromkeys(range(1, 6), 0.0), spill=False)
    assert off.page_id.tolist() == [1] and off.spilled == {} and off.unspent == 0


def test_spilled_crawls_respect_host_capacity() -> None:
    # Bucket 3 has 1 page for a quota of 4; bucket 5 (the best value) has pages on a host
    # that allows 2 requests in the period, bucket 6 pages on free hosts.
    pages = [(1, 1, 3, -5.0)] + [(10 + i, 2, 5, -9.0 - i) for i in range(4)]
    pages += [(20 + i, 3 + i, 6, -1.0) for i in range(3)]
    delays = {1: 0.0, 2: 60.0, 3: 0.0, 4: 0.0, 5: 0.0}
    sel = _by_fetch(pages, {3: 4}, delays=delays, marginal={5: 2.0, 6: 1.0})
    assert sel.spilled == {5: 2, 6: 1} and sel.unspent == 0
    times = sorted(_release(sel)[p] for p in sel.page_id.tolist() if 10 <= p < 20)
    assert len(times) == 2 and times[1] - times[0] >= 60.0 - 1e-6


def test_due_pages_fill_quotas_then_spill_by_value_then_the_soonest_due() -> None:
    # Due: half the interval since the last fetch before the period's end (100). Bucket 1
    # (interval 600 s, value 2): due when last fetched before -200: ids 10, 11 of 10..13
    # (fetched -400, -250, -150, -50); quota 3, so 1 crawl to spill. Bucket 2 (interval 300 s,
    # value 1, no quota): due before -50: ids 20, 21 (-200, -60), not 22 (-40). New pages
    # (value 1.5): quota 0, one page. Bucket 3 has no interval: never due.
    pages = [(10, 1, 1, -400.0), (11, 2, 1, -250.0), (12, 3, 1, -150.0), (13, 4, 1, -50.0)]
    pages += [(20, 5, 2, -200.0), (21, 6, 2, -60.0), (22, 7, 2, -40.0), (30, 8, 3, -9e3)]
    delays = dict.fromkeys(range(1, 10), 0.0)
    due = {1: 600.0, 2: 300.0}
    values = {"marginal": {1: 2.0, 2: 1.0}, "new_marginal": 1.5}
    sel = _by_fetch(pages, {1: 3}, new=[(100, 9)], delays=delays, due_interval=due, **values)
    # quota: the due pages of bucket 1; its third crawl: the new page (1.5 > 1.0)
    assert sel.page_id.tolist() == [10, 11, 100]
    assert sel.chosen == {1: 2} and sel.spilled == {NEW_PAGES: 1} and sel.unspent == 0
    ((short,),) = [sel.shortfalls]
    assert (short.bucket, short.reason) == (1, NOT_ENOUGH_DUE)
    # Four more crawls: the due pages by value (the new page, bucket 2's 20 and 21), then the
    # pages not due yet by value, each bucket's soonest due first: 12 (due 450), 13 (550).
    more = _by_fetch(pages, {1: 7}, new=[(100, 9)], delays=delays, due_interval=due, **values)
    assert more.page_id.tolist() == [10, 11, 20, 21, 12, 13, 100]
    assert more.spilled == {1: 2, 2: 2, NEW_PAGES: 1} and more.unspent == 0
    # Every page: bucket 2's last one (22), then bucket 3's, which has no interval or value.
    every = _by_fetch(pages, {1: 10}, delays=delays, due_interval=due, **values)
    assert every.page_id.tolist()[-2:] == [22, 30] and every.unspent == 10 - 8
    # Without spill, only due pages: the rest is a shortfall, nothing pulled early.
    off = _by_fetch(pages, {1: 3}, delays=delays, due_interval=due, spill=False, **values)
    assert off.page_id.tolist() == [10, 11] and off.spilled == {}
    with pytest.raises(ValueError, match="due_interval"):
        select_due_pages(
            page_id=np.array([1]),
            host_id=np.array([1]),
            bucket=np.array([1]),
            scheduled_at=np.array([0.0]),
            quotas={1: 1},
            new_page_id=np.zeros(0, np.int64),
            new_host_id=np.zeros(0, np.int64),
            new_quota=0,
            host_ids=np.array([1]),
            host_delay=np.array([0.0]),
            start=0.0,
            end=1.0,
            now=0.0,
            due_interval={1: 1.0},
        )


def test_with_due_intervals_a_steady_bucket_takes_what_longest_unvisited_takes() -> None:
    # 40 pages of one bucket fetched one every 10 s over the last 400 s, 10 crawls a period of
    # 100 s: an interval of 400 s makes the 10 oldest due, the same pages the plain order takes.
    pages = [(i, i, 1, -400.0 + 10.0 * i) for i in range(40)]
    delays = dict.fromkeys(range(40), 0.0)
    plain = _by_fetch(pages, {1: 10}, delays=delays)
    due = _by_fetch(pages, {1: 10}, delays=delays, due_interval={1: 400.0})
    assert due.page_id.tolist() == plain.page_id.tolist() == list(range(10))
    assert due.spilled == {} and due.shortfalls == ()
    # Half the interval (the default) makes 30 of them due, so a quota of 20 is met from
    # its own bucket; a whole interval (a strict round robin) makes 10 due, and spills 10.
    half = _by_fetch(pages, {1: 20}, delays=delays, due_interval={1: 400.0}, spill=False)
    assert half.page_id.tolist() == list(range(20))
    strict = select_due_pages(
        page_id=np.arange(40),
        host_id=np.arange(40),
        bucket=np.ones(40, np.int64),
        last_fetch=-400.0 + 10.0 * np.arange(40),
        quotas={1: 20},
        new_page_id=np.zeros(0, np.int64),
        new_host_id=np.zeros(0, np.int64),
        new_quota=0,
        host_ids=np.arange(40),
        host_delay=np.zeros(40),
        start=0.0,
        end=100.0,
        now=0.0,
        due_interval={1: 400.0},
        due_share=1.0,
    )
    assert strict.page_id.tolist() == list(range(10)) and strict.chosen == {1: 10}
    with pytest.raises(ValueError, match="due_share"):
        _ = select_due_pages(
            page_id=np.arange(1),
            host_id=np.arange(1),
            bucket=np.ones(1, np.int64),
            last_fetch=np.zeros(1),
            quotas={1: 1},
            new_page_id=np.zeros(0, np.int64),
            new_host_id=np.zeros(0, np.int64),
            new_quota=0,
            host_ids=np.arange(1),
            host_delay=np.zeros(1),
            start=0.0,
            end=100.0,
            now=0.0,
            due_interval={1: 400.0},
            due_share=1.5,
        )


def _spill_reference(
    inst: dict[str, Any],
    marginal: dict[int, float],
    new_marginal: float | None,
    caps: dict[int, int],
) -> list[int]:
    """The rule, written plainly: quota re-crawls oldest first, new pages by cash, then the
    crawls left by value (unvalued last: re-crawls oldest first, then new pages)."""
    room, left = dict(caps), dict(inst["quotas"])
    order = sorted(inst["cands"], key=lambda c: (c[3], c[0]))
    quota_picks = []
    for pid, host, bucket, _ in order:
        if left.get(bucket, 0) > 0 and room[host] > 0:
            left[bucket] -= 1
            room[host] -= 1
            quota_picks.append(pid)
    new_picks: list[int] = []
    for pid, host in inst["new"]:
        if len(new_picks) < inst["new_quota"] and room[host] > 0:
            room[host] -= 1
            new_picks.append(pid)
    spare = sum(inst["quotas"].values()) + inst["new_quota"] - len(quota_picks) - len(new_picks)
    rest = [(pid, host, b) for pid, host, b, _ in order if pid not in quota_picks]
    seq = [
        (-marginal[b] if b in marginal else np.inf, 0, k, pid, host)
        for k, (pid, host, b) in enumerate(rest)
    ]
    nv = np.inf if new_marginal is None else -new_marginal
    seq += [
        (nv, 1, k, pid, host)
        for k, (pid, host) in enumerate(p for p in inst["new"] if p[0] not in new_picks)
    ]
    spilled_old: list[int] = []
    spilled_new: list[int] = []
    for *_, pid, host in sorted(seq, key=lambda s: s[:3]):
        if spare > 0 and room[host] > 0:
            room[host] -= 1
            spare -= 1
            (spilled_new if pid >= 1000 else spilled_old).append(pid)
    new_all = [p for p, _ in inst["new"] if p in set(new_picks) | set(spilled_new)]
    return quota_picks + spilled_old + new_all


@settings(max_examples=300, deadline=None)
@given(_instances(), st.data())
def test_spill_properties_on_random_instances(inst: dict[str, Any], data: Any) -> None:
    delays: dict[int, float] = inst["delays"]
    buckets = sorted({b for _, _, b, _ in inst["cands"]} | set(inst["quotas"]))
    valued = data.draw(st.lists(st.sampled_from(buckets), unique=True)) if buckets else []
    marginal = {b: float(data.draw(st.integers(0, 5))) for b in valued}
    new_marginal = data.draw(st.one_of(st.none(), st.integers(0, 5).map(float)))
    sel = _by_fetch(
        inst["cands"],
        inst["quotas"],
        new=inst["new"],
        new_quota=inst["new_quota"],
        delays=delays,
        now=inst["now"],
        marginal=marginal,
        new_marginal=new_marginal,
    )
    hosts = sorted(delays)
    caps = dict(
        zip(
            hosts,
            host_capacity(np.array([delays[h] for h in hosts]), 100.0 - inst["now"]).tolist(),
            strict=True,
        )
    )
    assert sel.page_id.tolist() == _spill_reference(inst, marginal, new_marginal, caps)
    planned = sum(inst["quotas"].values()) + inst["new_quota"]
    assert len(sel.page_id) + sel.unspent == planned
    assert sum(sel.spilled.values()) + sum(sel.chosen.values()) + sel.new_chosen == len(sel.page_id)
    # The quota picks of each bucket are its oldest pages but for hosts' caps; with no delay
    # anywhere, exactly the oldest.
    if all(d == 0 for d in delays.values()):
        for b, q in inst["quotas"].items():
            mine = sorted((t, pid) for pid, _, bb, t in inst["cands"] if bb == b)[:q]
            assert set(sel.page_id[: sum(sel.chosen.values())].tolist()) >= {p for _, p in mine}
    assert np.all(sel.release_at >= inst["now"]) and np.all(sel.release_at < 100.0)


# -- pooled quotas (what the service's releases do) ------------------------------------------


def _crawls_per_bucket(pooled: bool, periods: int = 300) -> np.ndarray:
    """Run releases period after period on a fixed plan and count each bucket's crawls.

    Six buckets of 3, 5, 2, 40, 11 and 4 pages, planned x = 0.15, 0.5, 0.4, 1.6, 0.55, 0.8
    crawls a period (4 in all); the quotas are what :func:`integer_quotas` makes of x every
    period (the same whole numbers each time). Periods of 100 s; a chosen page is fetched at
    its release time."""
    sizes = [3, 5, 2, 40, 11, 4]
    x = np.array([0.15, 0.5, 0.4, 1.6, 0.55, 0.8])
    bucket = np.repeat(np.arange(1, 7), sizes)
    n = bucket.size
    page_id = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(5)
    last_fetch = -rng.uniform(0, 2000.0, n)
    quotas_bt = integer_quotas(
        x[:, None], np.zeros(1), np.ones((6, 1)), np.ones(1), np.array([10.0])
    ).old[:, 0]
    quotas = {b + 1: int(q) for b, q in enumerate(quotas_bt)}
    interval = {b + 1: 100.0 * sizes[b] / x[b] for b in range(6)}
    crawls = np.zeros(6, dtype=np.int64)
    for t in range(periods):
        start = 100.0 * t
        sel = select_due_pages(
            page_id=page_id,
            host_id=page_id,
            bucket=bucket,
            last_fetch=last_fetch,
            quotas=quotas,
            new_page_id=np.zeros(0, np.int64),
            new_host_id=np.zeros(0, np.int64),
            new_quota=0,
            host_ids=page_id,
            host_delay=np.zeros(n),
            start=start,
            end=start + 100.0,
            now=start,
            spill=True,
            due_interval=interval,
            pooled=pooled,
        )
        assert sel.page_id.size == 4
        last_fetch[sel.page_id] = sel.release_at
        crawls += np.bincount(bucket[sel.page_id] - 1, minlength=6)
    return crawls


def test_pooled_quotas_crawl_every_bucket_at_its_planned_rate_however_it_rounds() -> None:
    # Every period rounds the same way: buckets 1-3 (x = 0.15, 0.5, 0.4) get no quota and
    # buckets 4-6 get 2, 1, 1. Pooled, each bucket still gets its x crawls a period.
    x = np.array([0.15, 0.5, 0.4, 1.6, 0.55, 0.8])
    pooled = _crawls_per_bucket(pooled=True)
    assert np.all(np.abs(pooled - 300 * x) <= 0.03 * 300 * x + 2), pooled
    # Quota by quota, the rounding decides: buckets 4-6 take 2, 1, 1 every period (their
    # pages are always due at half an interval) and buckets 1-3 are never crawled.
    per_quota = _crawls_per_bucket(pooled=False)
    assert per_quota.tolist() == [0, 0, 0, 600, 300, 300]


def test_pooled_takes_the_most_overdue_share_of_an_interval_first() -> None:
    # Bucket 1 (interval 1000 s): pages fetched 1500 and 900 s before the period's end (1.5,
    # 0.9 intervals); bucket 2 (interval 100 s): fetched 130 and 40 s before it (1.3, 0.4:
    # not due at half). Two crawls: 1.5 and 1.3, not the oldest two.
    pages = [(1, 1, 1, -1400.0), (2, 2, 1, -800.0), (3, 3, 2, -30.0), (4, 4, 2, 60.0)]
    delays = dict.fromkeys(range(1, 5), 0.0)
    arr = np.array(pages, dtype=float)
    sel = select_due_pages(
        page_id=arr[:, 0].astype(np.int64),
        host_id=arr[:, 1].astype(np.int64),
        bucket=arr[:, 2].astype(np.int64),
        last_fetch=arr[:, 3],
        quotas={1: 2},
        new_page_id=np.zeros(0, np.int64),
        new_host_id=np.zeros(0, np.int64),
        new_quota=0,
        host_ids=np.array(sorted(delays), dtype=np.int64),
        host_delay=np.zeros(4),
        start=0.0,
        end=100.0,
        now=0.0,
        spill=True,
        due_interval={1: 1000.0, 2: 100.0},
        pooled=True,
    )
    assert sorted(sel.page_id.tolist()) == [1, 3]
    assert sel.chosen == {1: 1, 2: 1} and sel.shortfalls == () and sel.spilled == {}
