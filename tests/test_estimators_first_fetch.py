"""A static site whose dates are weeks old, fetched twice ten minutes apart (issue 27, item 5).

The shape of what a crawl of a documentation site sees: 1,000 pages, each fetched twice ten
minutes apart, their Last-Modified 14 days before the first fetch; between the two fetches 50
pages were edited (date and content moved) and 50 touched (date moved, content not). The
unchanged pages have not changed for two weeks, and their estimates must say so: about one
change in 14 days, not what 50 changes among 1,000 ten-minute intervals say (about 7 a day).
"""

from __future__ import annotations

import numpy as np
import pytest

from estimators import assess_last_modified, last_modified_evidence_from_fetches
from estimators.defaults import CLOCK_TOLERANCE_DAYS
from estimators.fetch_table import FetchArrayEstimate, estimate_fetch_arrays

PAGES, EDITED, TOUCHED = 1000, 50, 50
INTERVAL = 10 / 1440  # days
AGE = 14.0


def _site() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    page = np.repeat(np.arange(PAGES), 2)
    fetched = np.tile([0.0, INTERVAL], PAGES)
    changed = np.tile([np.nan, 0.0], PAGES)
    modified = np.full(2 * PAGES, -AGE)
    moved = np.arange(EDITED + TOUCHED) * 2 + 1  # second fetches of pages 0-99
    modified[moved] = INTERVAL / 2
    changed[moved[:EDITED]] = 1.0  # pages 0-49 edited; 50-99 touched only
    return page, fetched, changed, modified


def _estimate() -> FetchArrayEstimate:
    page, fetched, changed, modified = _site()
    return estimate_fetch_arrays(page, fetched, changed, modified, np.zeros(2 * PAGES, np.intp))


def test_the_first_fetch_s_date_is_evidence() -> None:
    page, fetched, _changed, modified = _site()
    evidence = last_modified_evidence_from_fetches(page, fetched, modified)
    assert evidence.first_fetch_age is not None
    assert evidence.first_fetch_age == pytest.approx(np.full(PAGES, AGE))
    assert evidence.single_fetch_age is not None and np.isnan(evidence.single_fetch_age).all()
    assert (evidence.exposure[EDITED + TOUCHED :] == INTERVAL).all()  # the interval alone


def test_touched_files_leave_the_still_pages_their_dates() -> None:
    page, fetched, changed, modified = _site()
    host = np.zeros(PAGES, np.intp)
    r = assess_last_modified(page, fetched, changed, modified, host=host)
    assert r.host_reliable is not None and not r.host_reliable[0]  # half its moves invented
    assert r.reason[EDITED : EDITED + TOUCHED].tolist() == ["moved_without_change"] * TOUCHED
    # the edited pages' dates moved on a host whose moves are half invented: not believed
    assert r.reason[:EDITED].tolist() == ["host"] * EDITED
    # the still pages' dates are: "unchanged since d" whatever the other dates do
    assert r.reliable.tolist() == [False] * (EDITED + TOUCHED) + [True] * (PAGES - 100)


def test_pages_unchanged_for_weeks_are_estimated_at_about_one_change_in_their_age() -> None:
    result = _estimate()
    still = slice(EDITED + TOUCHED, PAGES)
    assert set(result.estimator[still].tolist()) == {"last_modified_eb"}
    assert np.all(result.rate[still] < 2 / AGE), np.median(result.rate[still])
    assert np.all(result.rate[still] > 0.2 / AGE)
    # every page's estimate stays far below what the ten-minute intervals alone say
    assert np.all(result.rate < 1.0)


def _woken(age: float, changes: int, gap: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One page dated ``age`` days before its first fetch, then ``changes`` fetches ``gap``
    days apart, each finding a change half a gap old."""
    fetched = np.arange(changes + 1) * gap
    modified = np.r_[-age, fetched[1:] - gap / 2]
    return np.zeros(changes + 1, np.intp), fetched, modified


def test_a_page_that_woke_up_loses_its_first_age() -> None:
    # asleep for a thousand days, then changed at each of 3 fetches a day apart
    evidence = last_modified_evidence_from_fetches(*_woken(1000.0, 3, 1.0))
    assert evidence.first_fetch_age is not None and np.isnan(evidence.first_fetch_age[0])
    assert (evidence.changes[0], evidence.exposure[0]) == (3, pytest.approx(1.5))
    # two changes are not enough to tell a woken page from a slow one that happened to change
    evidence = last_modified_evidence_from_fetches(*_woken(1000.0, 2, 1.0))
    assert evidence.first_fetch_age is not None
    assert evidence.first_fetch_age[0] == pytest.approx(1000.0)
    # nor are changes at what the age says: 3 in 30 days after 100 quiet ones
    evidence = last_modified_evidence_from_fetches(*_woken(100.0, 3, 10.0))
    assert evidence.first_fetch_age is not None
    assert evidence.first_fetch_age[0] == pytest.approx(100.0)


def test_pages_whose_rate_held_keep_their_first_age() -> None:
    """20,000 stationary pages (rates log-uniform over four decades, a fetch a day for 20
    days, honest dates): under one page in a thousand loses its first age."""
    rng = np.random.default_rng(3)
    n, fetches = 20_000, 20
    rate = np.exp(rng.uniform(np.log(1e-3), np.log(10.0), n))
    page = np.repeat(np.arange(n), fetches)
    fetched = np.tile(np.arange(fetches, dtype=float), n)
    modified = np.empty(n * fetches)
    for p in range(n):
        # the last change before the first fetch (a backward recurrence time), then Poisson
        gaps = rng.exponential(1 / rate[p], int(rate[p] * fetches * 2) + 20)
        changes = np.r_[-rng.exponential(1 / rate[p]), np.cumsum(gaps)]
        last = np.searchsorted(changes, np.arange(fetches), side="right") - 1
        modified[p * fetches : (p + 1) * fetches] = changes[last]
    evidence = last_modified_evidence_from_fetches(page, fetched, modified)
    assert evidence.first_fetch_age is not None
    aged = -modified[::fetches] > CLOCK_TOLERANCE_DAYS
    assert aged.sum() > 0.95 * n
    lost = aged & np.isnan(evidence.first_fetch_age)
    assert np.count_nonzero(lost) < 0.001 * n


def test_a_date_speaks_for_at_most_max_age_days() -> None:
    page, fetched, _changed, modified = _site()
    capped = last_modified_evidence_from_fetches(page, fetched, modified, max_age=5.0)
    assert capped.first_fetch_age is not None
    assert capped.first_fetch_age == pytest.approx(np.full(PAGES, 5.0))
    once = last_modified_evidence_from_fetches([0], [0.0], [-AGE], max_age=5.0)
    assert once.single_fetch_age is not None and once.single_fetch_age[0] == 5.0
    longer = last_modified_evidence_from_fetches(page, fetched, modified, max_age=100.0)
    assert longer.first_fetch_age == pytest.approx(np.full(PAGES, AGE))
    with pytest.raises(ValueError, match="max_age"):
        last_modified_evidence_from_fetches(page, fetched, modified, max_age=0.0)
