"""Probes in the store: the nightly run's marks put a page in the urgent lane, and the report
of its fetch makes it due again the probe's delay later, charged to the plan as urgent work,
a due time a new plan does not withdraw (SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from estimators.bayes_action import PROBE_HORIZON_PERIODS
from service.cli.app import app
from service.config import load_settings
from service.errors import ConfigError
from service.nightly import NightlySettings, _probe_settings
from store import Database, LeasePolicy, LeaseQueue, read_status
from store.due_times import withdraw_due_pages
from store.leases import FetchResult
from store.models import PAGES, URGENT_REQUESTS
from store.probes import mark_probes
from store.releases import host_candidates, refresh_candidates
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


def _fetch(
    queue: LeaseQueue, at: datetime, status: str = "ok", code: int = 200, **kw: object
) -> list[int]:
    """Lease what is due at ``at`` and report every page fetched then; the pages' ids."""
    leases = queue.lease("w", now=at)
    ids = []
    for lease in leases:
        results = [
            FetchResult(page_id=p.page_id, fetched_at=at, status=status, http_status=code, **kw)  # type: ignore[arg-type]
            for p in lease.pages
        ]
        queue.finish(lease.lease_id, results, now=at)
        ids += [p.page_id for p in lease.pages]
    return ids


def test_a_probe_is_two_crawls_its_delay_apart_both_charged(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    _publish(db, {5: [1, 1]})  # a plan: fetched pages wait for a release, but not a probe's
    assert mark_probes(db, [ids[0]], [DELAY], now=T0).probes == 1
    state = _state(db)
    assert state[ids[0]] == (DELAY, URGENT_DUE)
    assert state[ids[1]] == (None, None)
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    first = T0 + timedelta(seconds=5)
    assert _fetch(queue, first) == [ids[0]]
    delay, due = _state(db)[ids[0]]
    assert delay == -DELAY  # the second crawl is pending
    assert due == first + timedelta(days=DELAY)
    # a new plan takes over before the second crawl: it keeps its due time
    _publish(db, {5: [1, 1]})
    withdraw_due_pages(db, 2, now=first)
    assert _state(db)[ids[0]] == (-DELAY, due)
    # and a new night's marks leave it alone
    assert mark_probes(db, [ids[0], ids[1]], [DELAY, DELAY], now=first).probes == 1
    assert _state(db)[ids[0]] == (-DELAY, due)
    assert _state(db)[ids[1]] == (DELAY, URGENT_DUE)
    assert _fetch(queue, first + timedelta(minutes=1)) == [ids[1]]
    assert queue.lease("w", now=first + timedelta(minutes=14)) == []
    assert isinstance(due, datetime)
    assert ids[0] in _fetch(queue, due)
    assert _state(db)[ids[0]] == (None, None)  # done: back to the plan's releases
    sources = [(page, at, source) for page, at, source in _sources(db) if page == ids[0]]
    assert sources == [(ids[0], T0, "probe"), (ids[0], due, "probe")]
    assert urgent_requests_between(db, T0, T0 + DAY) == 4


def test_a_follow_up_rides_on_the_pages_planned_crawl_one_crawl_charged(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    _publish(db, {5: [1, 1]})
    marks = mark_probes(db, [ids[0]], [DELAY], follow_ups=[ids[1]], follow_delays=[DELAY], now=T0)
    assert marks == (1, 1)
    state = _state(db)
    assert state[ids[0]] == (DELAY, URGENT_DUE)  # a probe: in the urgent lane
    assert state[ids[1]] == (DELAY, None)  # a follow-up: left where the plan put it
    assert [page for page, _, _ in _sources(db)] == [ids[0]]  # only the probe charged now
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    assert _fetch(queue, T0 + timedelta(seconds=5)) == [ids[0]]
    # the plan's crawl of the follow-up's page (a release made it due) is the probe's first
    planned = T0 + timedelta(hours=2)
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == ids[1]).values(next_due_at=planned))
    # (and the probe's second crawl, due by then)
    assert sorted(_fetch(queue, planned)) == ids[:2]
    assert _state(db)[ids[1]] == (-DELAY, planned + timedelta(days=DELAY))
    # its second crawl is extra work: an urgent request at its due time
    assert _sources(db)[-1] == (ids[1], planned + timedelta(days=DELAY), "probe")
    # a new night's marks leave it alone (its second crawl is pending); others are replaced
    assert mark_probes(db, [], [], follow_ups=[ids[1], ids[2]], follow_delays=[DELAY] * 2) == (
        0,
        1,
    )
    assert _state(db)[ids[1]][0] == -DELAY
    assert _state(db)[ids[2]] == (DELAY, None)
    assert ids[1] in _fetch(queue, planned + timedelta(days=DELAY))
    assert _state(db)[ids[1]] == (None, None)  # done
    assert mark_probes(db, [], []) == (0, 0)  # a night with none clears the marks
    assert _state(db)[ids[2]] == (None, None)


def test_status_counts_the_probes_waiting_for_each_crawl(db: Database, backend_url: str) -> None:
    ids = _fetched_pages(db, 4)
    _publish(db, {5: [1, 1]})
    mark_probes(db, ids[:3], [DELAY] * 3, now=T0)
    st = read_status(db)
    assert (st.probes_marked, st.probes_pending) == (3, 0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1))
    assert _fetch(queue, T0 + timedelta(seconds=5)) == [ids[0]]
    st = read_status(db)
    assert (st.probes_marked, st.probes_pending) == (2, 1)
    shown = CliRunner().invoke(app, ["status", "--db", backend_url])
    assert shown.exit_code == 0, shown.output
    assert (
        "probes   2 pages to probe, 0 to follow up, 1 waiting for the second crawl" in shown.output
    )


def test_a_page_waiting_for_its_second_crawl_is_no_release_candidate(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    _publish(db, {5: [1, 1]})
    mark_probes(db, [ids[0]], [DELAY], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    first = T0 + timedelta(seconds=5)
    assert _fetch(queue, first) == [ids[0]]
    assert _state(db)[ids[0]][0] == -DELAY
    # its second crawl is charged as urgent work: a release taking it would charge it again
    later = first + timedelta(minutes=1)
    found = refresh_candidates(db, {5: 10}, now=later)[5]
    assert sorted(found.page_id) == ids[1:]
    assert found.exhausted == {5: True}
    assert found.pending == [False, False]
    # the bucket read to its limit: not exhausted, though a candidate was left out
    found = refresh_candidates(db, {5: 3}, now=later)[5]
    assert (sorted(found.page_id), found.exhausted) == (ids[1:], {5: False})
    with db.read() as conn:
        host = conn.execute(select(PAGES.c.host_id).where(PAGES.c.id == ids[0])).scalar_one()
    assert sorted(host_candidates(db, [host], 10, now=later).page_id) == ids[1:]
    # once the second crawl is reported the page is a candidate again
    due = _state(db)[ids[0]][1]
    assert isinstance(due, datetime)
    assert ids[0] in _fetch(queue, due)
    assert ids[0] in refresh_candidates(db, {5: 10}, now=due)[5].page_id


def test_a_report_later_than_the_second_crawls_due_time_charges_it_when_made(
    db: Database,
) -> None:
    ids = _fetched_pages(db, 1)
    _publish(db, {5: [1, 1]})
    mark_probes(db, ids, [DELAY], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=5, max_urls_per_host=5))
    first = T0 + timedelta(seconds=5)
    (lease,) = queue.lease("w", now=first)
    late = first + timedelta(days=3 * DELAY)  # the report comes after the second crawl's due
    queue.finish(lease.lease_id, [FetchResult(ids[0], first, "ok", 200)], now=late)
    assert _state(db)[ids[0]] == (-DELAY, first + timedelta(days=DELAY))
    # charged when the report made it known: a release of the period before would miss it
    assert _sources(db)[-1] == (ids[0], late, "probe")


def test_a_failed_fetch_keeps_the_mark_an_answer_without_a_rate_ends_it(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    _publish(db, {5: [1, 1]})
    mark_probes(db, ids[:2], [DELAY, 2 * DELAY], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1))
    retry = T0 + timedelta(hours=1)
    assert _fetch(queue, T0, "error", 503, next_due_at=retry) == [ids[0]]
    state = _state(db)
    assert state[ids[0]] == (DELAY, retry)  # the worker's retry time; still to be probed
    assert _fetch(queue, T0 + timedelta(seconds=1), "gone", 404) == [ids[1]]
    assert _state(db)[ids[1]][0] is None  # a gone page has no rate to learn
    assert len(_sources(db)) == 2  # no second crawl charged for either
    # the next night: only the third page is worth a probe
    assert mark_probes(db, [ids[2]], [DELAY], now=T0 + DAY).probes == 1
    state = _state(db)
    assert state[ids[0]][0] is None
    assert state[ids[2]] == (DELAY, URGENT_DUE)


def test_only_pages_that_answered_are_marked(db: Database) -> None:
    ids = _fetched_pages(db, 3)
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.id == ids[1]).values(status="redirect"))
    assert mark_probes(db, ids, [DELAY] * 3, now=T0).probes == 2
    assert _state(db)[ids[1]] == (None, None)


def test_a_run_probes_a_share_of_the_periods_since_the_last() -> None:
    settings = NightlySettings(
        period_days=1.0, periods=14, min_delay_seconds=2.0, probe_horizon=180.0
    )
    one = _probe_settings(settings, 1000.0, 1)
    assert one.limit == 150  # 30 % of a period's 1,000 crawls, two crawls a probe
    assert one.horizon_days == 180.0 and one.shortest_days == pytest.approx(2 / 86_400)
    assert _probe_settings(settings, 1000.0, 3).limit == 450
    assert _probe_settings(settings, 1000.0, None).limit == 2100  # no plan yet: the cycle
    assert _probe_settings(settings, 1000.0, 99).limit == 2100
    assert NightlySettings().probe_horizon == PROBE_HORIZON_PERIODS  # on by default
    off = NightlySettings(period_days=1.0, periods=14, probe_horizon=0.0)
    assert _probe_settings(off, 1000.0, 1).limit == 0
    # follow-ups: off by default, on with plan.follow_ups = "on", never without a horizon
    assert not _probe_settings(settings, 1000.0, 1).follow_ups
    env = {"CRAWLPLAN_FOLLOW_UPS": "on"}
    following = NightlySettings.from_config(load_settings(environ=env))
    assert following.follow_ups and _probe_settings(following, 1000.0, 1).follow_ups
    assert not _probe_settings(replace(following, probe_horizon=0.0), 1000.0, 1).follow_ups
    with pytest.raises(ConfigError, match=r"plan\.follow_ups must be one of on, off, got 'yes'"):
        load_settings(environ={"CRAWLPLAN_FOLLOW_UPS": "yes"})


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)
def test_bad_marks_are_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="a delay per probe"):
        mark_probes(db, [1, 2], [DELAY])
    with pytest.raises(ValueError, match="a delay per follow-up"):
        mark_probes(db, [], [], follow_ups=[1], follow_delays=[])
    with pytest.raises(ValueError, match="a follow-up's delay must be > 0 days"):
        mark_probes(db, [], [], follow_ups=[1], follow_delays=[-1.0])
    with pytest.raises(ValueError, match="must be > 0 days"):
        mark_probes(db, [1], [0.0])
