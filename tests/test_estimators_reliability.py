"""The Last-Modified reliability test: each failure mode, hosts, and honest servers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimators import LastModifiedPolicy, assess_last_modified

MINUTE = 1.0 / 1440.0


def _one_page(fetched: list[float], changed: list[float], modified: list[float]):
    n = len(fetched)
    return assess_last_modified(
        np.zeros(n, np.intp), np.array(fetched), np.array(changed), np.array(modified)
    )


def test_an_honest_page_is_reliable() -> None:
    r = _one_page([0, 10, 20, 30], [np.nan, 1, 0, 1], [-3, 4, 4, 25])
    assert r.reliable.tolist() == [True]
    assert r.reason.tolist() == ["ok"]
    assert r.violating.tolist() == [0]


def test_last_modified_equal_to_fetch_time() -> None:
    r = _one_page([0, 10, 20], [np.nan, 0, 0], [0, 10 + 0.5 * MINUTE, 20])
    assert not r.reliable[0]
    assert r.reason[0] == "equals_fetch_time"
    assert r.violations["equals_fetch_time"][0] == 3


def test_last_modified_in_the_future() -> None:
    r = _one_page([0, 10], [np.nan, 0], [400, 400])
    assert r.reason[0] == "in_future" and not r.reliable[0]


def test_last_modified_moving_without_content_change() -> None:
    r = _one_page([0, 10, 20], [np.nan, 0, 0], [-1, 5, 15])
    assert r.reason[0] == "moved_without_change"
    assert r.violations["moved_without_change"][0] == 2


def test_last_modified_static_while_content_changes() -> None:
    r = _one_page([0, 10, 20], [np.nan, 1, 1], [-100, -100, -100])
    assert r.reason[0] == "static_while_changed"
    assert r.violations["static_while_changed"][0] == 2


def test_last_modified_moving_outside_the_interval() -> None:
    # moved at the third fetch, to a date before the second fetch
    r = _one_page([0, 10, 20], [np.nan, 0, 1], [-5, -5, 8])
    assert r.reason[0] == "outside_interval"


def test_missing_last_modified_is_unreliable() -> None:
    r = _one_page([0, 10], [np.nan, 1], [-5, np.nan])
    assert r.reason[0] == "missing" and not r.reliable[0]


def _glitch_page() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """20 fetches 10 days apart, 12 content changes; Last-Modified 3 days before each fetch
    after a change, except at fetch 10, where it missed the change (one glitch)."""
    fetched = np.arange(20) * 10.0
    changed = np.r_[np.nan, np.zeros(19)]
    changed[[1, 2, 4, 5, 7, 8, 10, 11, 13, 14, 16, 17]] = 1.0
    modified = np.empty(20)
    modified[0] = -5.0
    for i in range(1, 20):
        moves = changed[i] == 1 and i != 10
        modified[i] = fetched[i] - 3.0 if moves else modified[i - 1]
    return fetched, changed, modified


def test_a_rare_glitch_is_tolerated_on_a_long_history() -> None:
    # one missed change of 12 (8 %), one failed fetch of 20 (5 %): within the 10 % tolerance
    r = _one_page(*(list(a) for a in _glitch_page()))
    assert r.reliable[0] and r.reason[0] == "ok"
    assert r.violating[0] == 1 and r.violations["static_while_changed"][0] == 1
    assert (r.content_changes[0], r.moves[0]) == (12, 11)
    assert r.rate_deviance[0] < 5.41


def test_a_static_date_on_a_slow_page_is_caught_by_its_one_change() -> None:
    # a template date that never moves on a page that changed once in 20 fetches: one fetch in
    # 20 fails (within the fetch tolerance), but the date missed the only change seen
    fetched = list(np.arange(20) * 10.0)
    changed = [np.nan] + [0.0] * 19
    changed[10] = 1.0
    r = _one_page(fetched, changed, [-5.0] * 20)
    assert not r.reliable[0] and r.reason[0] == "static_while_changed"
    assert r.violating[0] == 1 and r.content_changes[0] == 1 and r.moves[0] == 0


def test_a_date_that_moved_once_without_change_is_caught() -> None:
    # a slow page that never changed in 20 fetches; its date moved once (a server touching its
    # files): the only change the date reports is invented
    fetched = list(np.arange(20) * 10.0)
    modified = [-5.0] * 7 + [63.0] * 13
    r = _one_page(fetched, [np.nan] + [0.0] * 19, modified)
    assert not r.reliable[0] and r.reason[0] == "moved_without_change"
    assert r.violating[0] == 1 and r.moves[0] == 1 and r.content_changes[0] == 0


def _cache_dated_page(age: float) -> tuple[list[float], list[float], list[float]]:
    """20 fetches 7 days apart, the content changed in every interval but the 10th;
    Last-Modified ``age`` days before every fetch (a cache or render time)."""
    fetched = list(np.arange(20) * 7.0)
    changed = [np.nan] + [1.0] * 19
    changed[10] = 0.0
    return fetched, changed, [t - age for t in fetched]


def test_a_recent_date_on_every_fetch_is_caught_by_its_rate() -> None:
    # Every check passes but one (moved without change at the quiet fetch: 1 fetch in 20, 1 move
    # in 19); Last-Modified says 19 changes in 19 x 0.25 change-free days, 4 per day, where
    # 18 changes in 19 intervals of 7 days allow about 0.42 per day.
    r = _one_page(*_cache_dated_page(0.25))
    assert r.violating[0] == 1 and (r.moves[0], r.content_changes[0]) == (19, 18)
    assert not r.reliable[0] and r.reason[0] == "rate_mismatch"
    # l(lambda) = 18 ln(1 - exp(-7 lambda)) - 7 lambda; its maximum is at exp(7 lambda) = 19
    at_max = 18 * math.log(18 / 19) - math.log(19)
    at_lm = 18 * math.log(-math.expm1(-28.0)) - 28.0
    assert r.rate_deviance[0] == pytest.approx(at_max - at_lm, rel=1e-9)


def test_an_honest_date_on_the_same_page_passes_the_rate_test() -> None:
    # the same changes, Last-Modified 3 days before the fetch after each change and unmoved at
    # the quiet fetch: rate 18 / (18 x 3 + 7) per day, near the change observations' maximum
    fetched, changed, _ = _cache_dated_page(0.0)
    modified = [-3.0]
    for i in range(1, 20):
        modified.append(fetched[i] - 3.0 if changed[i] == 1 else modified[-1])
    r = _one_page(fetched, changed, modified)
    assert r.reliable[0] and r.violating[0] == 0
    lm_rate = 18 / 61
    at_max = 18 * math.log(18 / 19) - math.log(19)
    at_lm = 18 * math.log(-math.expm1(-7 * lm_rate)) - 7 * lm_rate
    assert r.rate_deviance[0] == pytest.approx(at_max - at_lm, rel=1e-9)
    assert r.rate_deviance[0] < 1.0  # 0.59, far below the 5.41 of the test


def test_the_rate_test_can_be_turned_off() -> None:
    fetched, changed, modified = _cache_dated_page(0.25)
    r = assess_last_modified(
        np.zeros(20, np.intp),
        np.array(fetched),
        np.array(changed),
        np.array(modified),
        policy=LastModifiedPolicy(rate_confidence=None),
    )
    assert r.reliable[0] and np.isnan(r.rate_deviance[0])


def test_a_host_whose_dates_miss_changes_taints_its_unchanged_pages() -> None:
    # host 0: ten pages with a static date, each changed once in 10 fetches (missed), and page
    # 10 that has not changed yet (nothing to show on its own); page 11 alone on host 1
    pages, fetched, changed = [], [], []
    for p in range(12):
        for i in range(10):
            pages.append(p)
            fetched.append(10.0 * i)
            changed.append(np.nan if i == 0 else float(p < 10 and i == 5))
    modified = np.full(len(pages), -5.0)
    host = np.array([0] * 11 + [1])
    r = assess_last_modified(
        np.array(pages), np.array(fetched), np.array(changed), modified, host=host
    )
    assert r.host_reliable is not None and r.host_reliable.tolist() == [False, True]
    assert r.reason.tolist() == ["static_while_changed"] * 10 + ["host", "ok"]
    assert r.reliable.tolist() == [False] * 11 + [True]


def test_a_lying_host_taints_its_pages_with_little_evidence() -> None:
    # host 0: ten pages stamping the fetch time; page 10 on host 0 looks fine; page 11 on host 1
    pages, fetched, changed, modified = [], [], [], []
    for p in range(10):
        for i, t in enumerate([0.0, 5.0]):
            pages.append(p)
            fetched.append(t)
            changed.append(np.nan if i == 0 else 0.0)
            modified.append(t)
    for p in (10, 11):
        pages += [p, p]
        fetched += [0.0, 5.0]
        changed += [np.nan, 0.0]
        modified += [-2.0, -2.0]
    host = np.array([0] * 11 + [1])
    r = assess_last_modified(
        np.array(pages), np.array(fetched), np.array(changed), np.array(modified), host=host
    )
    assert r.host_reliable is not None and r.host_reliable.tolist() == [False, True]
    assert r.reason[10] == "host" and not r.reliable[10]
    assert r.reliable[11]


def test_policy_thresholds_are_configurable() -> None:
    fetched, changed, modified = _glitch_page()
    strict = LastModifiedPolicy(max_page_violation_share=0.0)
    r = assess_last_modified(np.zeros(20, np.intp), fetched, changed, modified, policy=strict)
    assert not r.reliable[0] and r.reason[0] == "static_while_changed"


def test_a_host_whose_dates_move_without_change_is_caught_on_first_refetches() -> None:
    # host 0: 30 pages fetched twice, none changed; 10 dates moved (a random or cache date,
    # or a touched file). Failed fetches are 10 of 60 (17 %: first fetches cannot fail),
    # under the 20 % host tolerance, but all 10 moves of the host's dates are invented.
    # Page 30 is on host 1; page 31, on host 0, was fetched once.
    pages = np.append(np.repeat(np.arange(31), 2), 31)
    fetched = np.append(np.tile([0.0, 5.0], 31), 5.0)
    changed = np.append(np.tile([np.nan, 0.0], 31), np.nan)
    modified = np.append(np.tile([-2.0, -2.0], 31), 4.0)
    modified[1:20:2] = 4.0  # pages 0-9: the date moved to just before the second fetch
    host = np.array([0] * 30 + [1, 0])
    r = assess_last_modified(pages, fetched, changed, modified, host=host)
    assert r.violating.sum() == 10 and r.moves.sum() == 10
    assert r.host_reliable is not None and r.host_reliable.tolist() == [False, True]
    # pages 10-29: their dates stayed put while their content did: "unchanged since d" is
    # true whatever the host's other dates do (issue 27: weeks-old pages at 2 changes a day)
    assert r.reason.tolist() == ["moved_without_change"] * 10 + ["ok"] * 21 + ["host"]
    assert r.reliable.tolist() == [False] * 10 + [True] * 21 + [False]


def test_a_host_whose_dates_also_miss_changes_taints_its_still_pages() -> None:
    # as above, and 10 more pages whose static dates missed their change: the host's dates
    # miss changes, so a date that stayed put proves nothing there
    pages = np.repeat(np.arange(40), 2)
    fetched = np.tile([0.0, 5.0], 40)
    changed = np.tile([np.nan, 0.0], 40)
    changed[61::2] = 1.0  # pages 30-39 changed
    modified = np.tile([-2.0, -2.0], 40)
    modified[1:20:2] = 4.0
    r = assess_last_modified(pages, fetched, changed, modified, host=np.zeros(40, np.intp))
    assert r.host_reliable is not None and r.host_reliable.tolist() == [False]
    assert r.reason.tolist() == (
        ["moved_without_change"] * 10 + ["host"] * 20 + ["static_while_changed"] * 10
    )
