"""A new page's first Last-Modified is its creation, not a change.

A page first linked from pages the crawl had read before without the link was most likely
created between their previous fetches and its discovery. Read as a change seen A days ago,
its date made a page that never changes look as fast as one that changes every A days (on
the simulated births web, new pages below 0.01 changes a day were estimated e^2.7 times too
fast after four fetches). The store keeps that window (``pages.new_after`` to
``first_seen``); a first date inside it counts as "unchanged since", without the change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import select, update

from estimators import ChangeRateEstimator, last_modified_evidence_from_fetches
from estimators.evidence import LastModifiedEvidence
from estimators.fetch_table import estimate_fetch_arrays
from estimators.last_modified import EmpiricalBayesLastModifiedRate
from estimators.prior import LogNormalRatePrior
from service.pipeline import estimate_from_store
from store import Database, FetchResult, LeasePolicy, LeaseQueue, add_pages
from store.estimates import iter_fetch_chunks
from store.models import HOSTS, PAGES

NAN = np.nan


def test_a_first_date_inside_the_window_is_the_creation() -> None:
    # five pages fetched at day 10 and 20, one date each; windows: inside, before, after,
    # none, and inside within the tolerance
    page = np.repeat(np.arange(5), 2)
    fetched = np.tile([10.0, 20.0], 5)
    dates = np.repeat([8.0, 3.0, 9.5, 8.0, 6.0 - 1e-6], 2)
    since = np.array([7.0, 5.0, 7.0, NAN, 6.0])
    until = np.array([9.0, 9.0, 9.0, NAN, 9.0])
    evidence = last_modified_evidence_from_fetches(
        page, fetched, dates, n_pages=5, created_between=(since, until)
    )
    assert evidence.first_is_creation is not None
    assert evidence.first_is_creation.tolist() == [True, False, False, False, True]
    assert evidence.first_age_changes().tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert evidence.first_fetch_age == pytest.approx(10.0 - dates[::2])
    plain = last_modified_evidence_from_fetches(page, fetched, dates, n_pages=5)
    assert plain.first_is_creation is None
    assert plain.first_age_changes().tolist() == [1.0] * 5
    with pytest.raises(ValueError, match="created_between"):
        last_modified_evidence_from_fetches(
            page, fetched, dates, n_pages=5, created_between=(since[:4], until[:4])
        )


def _new_and_old_site() -> tuple[np.ndarray, ...]:
    """200 pages that never change, dated 2 days before their first fetch (day 0), fetched
    at days 0, 7 and 14; pages 0-99 are new (created in their window), 100-199 are not known
    to be; 200 pages changing about daily give the population prior its spread."""
    rng = np.random.default_rng(5)
    still = np.arange(200)
    page = np.repeat(still, 3)
    fetched = np.tile([0.0, 7.0, 14.0], 200)
    dates = np.full(page.size, -2.0)
    changed = np.tile([NAN, 0.0, 0.0], 200)
    fast = np.repeat(np.arange(200, 400), 3)
    fast_at = np.tile([0.0, 7.0, 14.0], 200)
    fast_dates = fast_at - rng.exponential(1.0, fast.size)
    fast_changed = np.tile([NAN, 1.0, 1.0], 200)
    since = np.where(page < 100, -3.0, NAN)
    until = np.where(page < 100, -1.0, NAN)
    return (
        np.r_[page, fast],
        np.r_[fetched, fast_at],
        np.r_[changed, fast_changed],
        np.r_[dates, fast_dates],
        np.r_[since, np.full(fast.size, NAN)],
        np.r_[until, np.full(fast.size, NAN)],
    )


def _modes(
    prior: LogNormalRatePrior | None, *, intervals: int, exposure: float
) -> tuple[float, float]:
    """The empirical-Bayes posterior modes under ``prior`` of no change and of one change
    seen in ``exposure`` days over ``intervals`` Last-Modified intervals (the first fetch's
    age, 2 days, among them)."""
    assert prior is not None
    twins = LastModifiedEvidence(
        intervals=np.array([intervals, intervals]),
        changes=np.array([0, 1]),
        exposure=np.array([exposure, exposure]),
        age_sum=np.array([2.0, 2.0]),
    )
    new, old = EmpiricalBayesLastModifiedRate(prior=prior).fit(twins).rate_
    return float(new), float(old)


def test_a_new_page_that_never_changed_is_estimated_slower_than_its_age_says() -> None:
    page, fetched, changed, dates, since, until = _new_and_old_site()
    hosts = np.zeros(page.size, np.int64)
    without = estimate_fetch_arrays(page, fetched, changed, dates, hosts)
    with_windows = estimate_fetch_arrays(  # under the same population prior
        page,
        fetched,
        changed,
        dates,
        hosts,
        estimator=ChangeRateEstimator(prior=without.fitted.prior_),
        created_between=(since, until),
    )
    new, old = with_windows.rate[:100], with_windows.rate[100:200]
    # old pages: one change 2 days before the first fetch, then 14 days still, as before
    assert with_windows.rate[100:] == pytest.approx(without.rate[100:], rel=1e-6)
    assert (with_windows.estimator[:200] == "last_modified_eb").all()
    # the posterior modes of "no change in 16 days" and "one change in 16 days" under the
    # same prior: the first fetch's 2 days and the two intervals' 14, the change or not
    expected_new, expected_old = _modes(without.fitted.prior_, intervals=2, exposure=16.0)
    assert new == pytest.approx(np.full(100, expected_new), rel=1e-6)
    assert old == pytest.approx(np.full(100, expected_old), rel=1e-6)
    assert expected_new < 1 / 16 < expected_old


def test_a_single_fetch_of_a_new_page_says_unchanged_since_its_creation() -> None:
    # fetched once, two days after its creation: "no change in 2 days", not "a change
    # 2 days ago" (a page that changes every other day)
    page, fetched, changed, dates, since, until = _new_and_old_site()
    first = np.r_[True, page[1:] != page[:-1]]
    singles = first | (page >= 200)  # the still pages once, the fast ones as before
    args = (page[singles], fetched[singles], changed[singles], dates[singles])
    hosts = np.zeros(int(singles.sum()), np.int64)
    windows = (since[singles], until[singles])
    plain = estimate_fetch_arrays(*args, hosts)
    got = estimate_fetch_arrays(
        *args,
        hosts,
        estimator=ChangeRateEstimator(prior=plain.fitted.prior_),
        created_between=windows,
    )
    assert got.rate[100:200] == pytest.approx(plain.rate[100:200], rel=1e-6)
    expected_new, expected_old = _modes(plain.fitted.prior_, intervals=1, exposure=2.0)
    assert got.rate[:100] == pytest.approx(np.full(100, expected_new), rel=1e-6)
    assert plain.rate[:100] == pytest.approx(np.full(100, expected_old), rel=1e-6)
    assert expected_new < expected_old


T0 = datetime(2026, 9, 1, tzinfo=UTC)  # every fetch before today: the estimate uses them
ORIGIN = "http://new.example"


def _crawl(
    db: Database, queue: LeaseQueue, at: datetime, found: list[str], modified: datetime
) -> dict[str, int]:
    """Fetch the index alone at ``at``; it links to ``found``."""
    with db.write() as conn:
        conn.execute(update(PAGES).values(next_due_at=None))
        conn.execute(update(PAGES).where(PAGES.c.url == ORIGIN + "/").values(next_due_at=at))
        conn.execute(update(HOSTS).values(ready_at=at, next_fetch_at=at))
    (lease,) = queue.lease("w", now=at)
    results = [
        FetchResult(
            p.page_id, at, "ok", http_status=200, signature="a" * 16, last_modified=modified
        )
        for p in lease.pages
    ]
    queue.finish(lease.lease_id, results, now=at, discovered=[(u, ORIGIN) for u in found])
    return {p.url: p.page_id for p in lease.pages}


def _new_after(db: Database) -> dict[str, datetime | None]:
    with db.read() as conn:
        rows = conn.execute(select(PAGES.c.url, PAGES.c.new_after)).tuples()
        return {url.removeprefix(ORIGIN): when for url, when in rows}


def test_the_store_keeps_the_window_and_the_estimate_reads_it(db: Database) -> None:
    add_pages(db, [(ORIGIN + "/", ORIGIN)], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls_per_host=50))
    # the index's first fetch finds the site's old pages: nothing says they are new
    _crawl(db, queue, T0, [ORIGIN + "/old"], T0 - timedelta(days=30))
    assert _new_after(db) == {"/": None, "/old": None}
    # its re-crawl a week later finds a page it did not link to then: new since T0
    week = T0 + timedelta(days=7)
    _crawl(db, queue, week, [ORIGIN + "/new"], T0 - timedelta(days=30))
    assert _new_after(db)["/new"] == T0
    assert _new_after(db)["/old"] is None
    # a report that holds a page's first fetch may owe its links to it: no window
    _crawl(db, queue, week + timedelta(days=1), [ORIGIN + "/other"], T0)
    assert _new_after(db)["/other"] == week
    # /old and /new then fetched three times a week apart, never changing; /old dated 2 days
    # before its first fetch (a page that last changed then), /new inside its window (its
    # creation: the index was fetched without the link on T0, then with it on T0 + 7)
    created = T0 + timedelta(days=5)
    for k in range(3):
        at = T0 + timedelta(days=14 + 7 * k)
        with db.write() as conn:
            conn.execute(update(PAGES).values(next_due_at=None))
            mine = PAGES.c.url.in_([ORIGIN + "/old", ORIGIN + "/new"])
            conn.execute(update(PAGES).where(mine).values(next_due_at=at))
            conn.execute(update(HOSTS).values(ready_at=at, next_fetch_at=at))
        (lease,) = queue.lease("w", now=at)
        dates = {"/old": T0 + timedelta(days=12), "/new": created}
        results = [
            FetchResult(
                p.page_id,
                at,
                "ok",
                http_status=200,
                signature="a" * 16,
                last_modified=dates[p.url.removeprefix(ORIGIN)],
                changed=None if k == 0 else False,
            )
            for p in lease.pages
        ]
        queue.finish(lease.lease_id, results, now=at)
    # the estimate reads the window with the fetches: the same as the estimator given them
    (chunk,) = list(iter_fetch_chunks(db))
    ids = {url.removeprefix(ORIGIN): pid for url, pid in _ids(db).items()}
    assert chunk.windows == [
        (ids["/new"], T0.timestamp(), week.timestamp()),
        (ids["/other"], week.timestamp(), (week + timedelta(days=1)).timestamp()),
    ]
    columns = np.array(chunk.rows, dtype=np.float64).T
    day = 86_400.0
    new_rows = columns[0] == ids["/new"]
    since = np.where(new_rows, T0.timestamp() / day, NAN)
    until = np.where(new_rows, week.timestamp() / day, NAN)
    expected = estimate_fetch_arrays(
        columns[0].astype(np.int64),
        columns[2] / day,
        columns[3],
        columns[4] / day,
        columns[1].astype(np.int64),
        created_between=(since, until),
    )
    plain = estimate_fetch_arrays(
        columns[0].astype(np.int64),
        columns[2] / day,
        columns[3],
        columns[4] / day,
        columns[1].astype(np.int64),
    )
    new = int(np.flatnonzero(expected.page == ids["/new"])[0])
    assert expected.estimator[new] == "last_modified_eb"
    assert expected.rate[new] < plain.rate[new]  # read as its creation, not a change
    estimate_from_store(db)
    with db.read() as conn:
        stored = dict(conn.execute(select(PAGES.c.id, PAGES.c.rate)).tuples().all())
    assert [stored[int(pid)] or NAN for pid in expected.page] == pytest.approx(
        expected.rate.tolist(), rel=1e-9, nan_ok=True
    )


def _ids(db: Database) -> dict[str, int]:
    with db.read() as conn:
        return dict(conn.execute(select(PAGES.c.url, PAGES.c.id)).tuples().all())
