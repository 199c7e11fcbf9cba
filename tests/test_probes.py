"""Probes in the store: the nightly run's marks put a page in the urgent lane, and the report
of its fetch makes it due again the probe's delay later, charged to the plan as urgent work
(SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from store import Database, LeasePolicy, LeaseQueue
from store.leases import FetchResult
from store.models import PAGES, URGENT_REQUESTS
from store.probes import mark_probes
from store.urgent import URGENT_DUE, urgent_requests_between
from tests.conftest import T0
from tests.test_page_schedule import _publish
from tests.test_releases import _pages

DAY = timedelta(days=1)
DELAY = 0.01  # days: 14.4 minutes


def _state(db: Database) -> dict[int, tuple[object, object]]:
    with db.read() as conn:
        rows = conn.execute(select(PAGES.c.id, PAGES.c.probe_delay, PAGES.c.next_due_at))
        return {i: (d, due) for i, d, due in rows.tuples()}


def _sources(db: Database) -> list[tuple[int, object, str]]:
    r = URGENT_REQUESTS.c
    with db.read() as conn:
        rows = conn.execute(select(r.page_id, r.requested_at, r.source).order_by(r.id))
        return list(rows.tuples())


def _fetched_pages(db: Database, n: int) -> list[int]:
    return _pages(
        db, "q", n, status="ok", bucket=5, last_fetch_at=T0 - 3 * DAY, fetches=3, next_due_at=None
    )


def test_a_probe_is_two_crawls_its_delay_apart_both_charged(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    _publish(db, {5: [1, 1]})  # a plan: fetched pages wait for a release, but not a probe's
    assert mark_probes(db, [ids[0]], [DELAY], now=T0) == 1
    state = _state(db)
    assert state[ids[0]] == (DELAY, URGENT_DUE)
    assert state[ids[1]] == (None, None)
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    (lease,) = queue.lease("w", now=T0)
    assert [p.page_id for p in lease.pages] == [ids[0]]
    fetched_at = T0 + timedelta(seconds=5)
    queue.finish(
        lease.lease_id,
        [FetchResult(page_id=ids[0], fetched_at=fetched_at, status="ok", http_status=200)],
        now=fetched_at,
    )
    delay, due = _state(db)[ids[0]]
    assert delay is None  # the mark is spent
    assert due == fetched_at + timedelta(days=DELAY)
    assert queue.lease("w", now=fetched_at + timedelta(minutes=14)) == []
    (second,) = queue.lease("w", now=fetched_at + timedelta(minutes=15))
    assert [p.page_id for p in second.pages] == [ids[0]]
    queue.finish(
        second.lease_id,
        [FetchResult(page_id=ids[0], fetched_at=due, status="ok", http_status=200)],
        now=due,
    )
    assert _state(db)[ids[0]] == (None, None)  # back to the plan's releases
    sources = _sources(db)
    assert sources == [(ids[0], T0, "probe"), (ids[0], due, "probe")]
    assert urgent_requests_between(db, T0, T0 + DAY) == 2


def test_a_failed_fetch_keeps_the_mark_and_a_new_run_replaces_the_marks(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    _publish(db, {5: [1, 1]})
    mark_probes(db, ids[:2], [DELAY, 2 * DELAY], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    (lease,) = queue.lease("w", now=T0)
    retry = T0 + timedelta(hours=1)
    failed = FetchResult(
        page_id=ids[0], fetched_at=T0, status="error", http_status=503, next_due_at=retry
    )
    queue.finish(lease.lease_id, [failed], now=T0)
    state = _state(db)
    assert state[ids[0]] == (DELAY, retry)  # the worker's retry time; still to be probed
    assert state[ids[1]][0] == 2 * DELAY
    # the next night: only the third page is worth a probe
    assert mark_probes(db, [ids[2]], [DELAY], now=T0 + DAY) == 1
    state = _state(db)
    assert state[ids[0]][0] is None and state[ids[1]][0] is None
    assert state[ids[2]] == (DELAY, URGENT_DUE)


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)
def test_bad_marks_are_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="a delay per page"):
        mark_probes(db, [1, 2], [DELAY])
    with pytest.raises(ValueError, match="must be > 0 days"):
        mark_probes(db, [1], [0.0])
