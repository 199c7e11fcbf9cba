"""The immediate-crawl lane: urgent pages go first on their host, politely, and are charged
to the plan's next period (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select, update
from typer.testing import CliRunner

from planner.cycle.quotas import charge_spent
from service.cli.app import app
from service.page_schedule import schedule_pages
from service.pipeline import release_period
from store import Database, LeasePolicy, LeaseQueue, open_database, upgrade_schema
from store.due_times import withdraw_due_pages
from store.models import HOSTS, PAGES
from store.urgent import URGENT_DUE, request_urgent, urgent_requests_between
from tests.api_server import TOKEN, ApiServer
from tests.conftest import T0
from tests.test_page_schedule import _publish
from tests.test_releases import _pages

DAY = timedelta(days=1)


def test_charge_spent_is_proportional_and_exact() -> None:
    assert charge_spent({1: 6, 2: 3}, 1, 5) == ({1: 3, 2: 2}, 0)
    assert charge_spent({1: 6, 2: 3}, 1, 0) == ({1: 6, 2: 3}, 1)
    assert charge_spent({1: 2}, 1, 50) == ({1: 0}, 0)


@given(
    st.dictionaries(st.integers(1, 255), st.integers(0, 1000), max_size=8),
    st.integers(0, 1000),
    st.integers(0, 3000),
)
def test_charge_spent_invariants(quotas: dict[int, int], new: int, urgent: int) -> None:
    charged, new_left = charge_spent(quotas, new, urgent)
    total = sum(quotas.values()) + new
    assert sum(charged.values()) + new_left == max(total - urgent, 0)
    assert all(0 <= charged[b] <= quotas[b] for b in quotas) and 0 <= new_left <= new


def test_urgent_pages_lead_their_host_politely(db: Database) -> None:
    ids = _pages(db, "u", 4, next_due_at=T0 - DAY)  # due for a day
    origin = "http://u.test"
    done = request_urgent(
        db, [(f"{origin}/u-3", origin), (f"{origin}/fresh", origin)], source="cli", now=T0
    )
    assert (done.added, done.queued, done.leased) == (1, 2, 0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=2, max_urls_per_host=2))
    (lease,) = queue.lease("w", now=T0)
    assert [p.url for p in lease.pages] == [f"{origin}/u-3", f"{origin}/fresh"]
    queue.release(lease.lease_id, now=T0)
    with db.write() as conn:  # the host may not be asked again for an hour: urgent waits too
        conn.execute(update(HOSTS).values(next_fetch_at=T0 + timedelta(hours=1)))
    assert request_urgent(db, [(f"{origin}/u-0", origin)], source="api", now=T0).queued == 1
    assert queue.lease("w", now=T0 + timedelta(minutes=59)) == []
    (later,) = queue.lease("w", now=T0 + timedelta(hours=1))
    assert later.pages[0].page_id == ids[0]
    assert urgent_requests_between(db, T0, T0 + DAY) == 3


def test_the_plan_neither_withdraws_nor_moves_urgent_pages_and_charges_them(
    db: Database,
) -> None:
    ids = _pages(
        db,
        "p",
        6,
        status="ok",
        bucket=5,
        last_fetch_at=T0 - 3 * DAY,
        rate=1.0,
        fetches=2,
        next_due_at=T0 + DAY,
    )
    origin = "http://p.test"
    request_urgent(
        db,
        [(f"{origin}/p-0", origin), (f"{origin}/p-1", origin)],
        source="api",
        now=T0 - timedelta(hours=2),
    )
    _publish(db, {5: [4, 4]})
    withdraw_due_pages(db, 1, now=T0)
    schedule_pages(db)
    with db.read() as conn:
        due = dict(conn.execute(select(PAGES.c.id, PAGES.c.next_due_at)).tuples().all())
    assert due[ids[0]] == due[ids[1]] == URGENT_DUE  # still first in line
    assert all(due[i] is None for i in ids[2:])  # the old regime's due times withdrawn
    summary = release_period(db, now=T0 + timedelta(minutes=1), min_delay_seconds=0.1)
    assert summary.status == "released"
    assert summary.urgent == 2 and summary.by_bucket == {5: 2}  # 4 planned - 2 urgent
    with db.read() as conn:
        due = dict(conn.execute(select(PAGES.c.id, PAGES.c.next_due_at)).tuples().all())
    assert due[ids[0]] == due[ids[1]] == URGENT_DUE


def test_seed_now_and_the_api_lane(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db = open_database(url, create=True)
    upgrade_schema(db)
    result = CliRunner().invoke(
        app, ["seed", "--now", "--db", url, "http://a.test/x", "http://a.test/y"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("queued 2 pages ahead of the plan (2 new to the store")
    with ApiServer(db) as api:
        response = requests.post(
            api.url + "/v1/urgent",
            json={"urls": ["http://a.test/x", "http://b.test/z", "::bad::"]},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
    # x is in the lane already: only z joins it, and only z is charged to the plan.
    assert response.json() == {"added": 1, "queued": 1, "leased": 0, "rejected": 1}
    assert urgent_requests_between(db, T0 - 365 * DAY, T0 + 3650 * DAY) == 3


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)
def test_unknown_source_is_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="source must be one of"):
        request_urgent(db, [], source="mail")
