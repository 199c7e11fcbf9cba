"""The Last-Modified reliability test: each failure mode, hosts, and honest servers."""

from __future__ import annotations

import numpy as np

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


def test_a_rare_glitch_is_tolerated_on_a_long_history() -> None:
    fetched = list(np.arange(20) * 10.0)
    changed = [np.nan] + [0.0] * 19
    modified = [-5.0] * 20
    changed[10] = 1.0  # content changed, Last-Modified did not: one glitch in 20 fetches
    r = _one_page(fetched, changed, modified)
    assert r.reliable[0] and r.violating[0] == 1


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
    strict = LastModifiedPolicy(max_page_violation_share=0.0)
    fetched = np.arange(20) * 10.0
    changed = np.r_[np.nan, np.zeros(19)]
    changed[10] = 1.0
    r = assess_last_modified(
        np.zeros(20, np.intp), fetched, changed, np.full(20, -5.0), policy=strict
    )
    assert not r.reliable[0]
