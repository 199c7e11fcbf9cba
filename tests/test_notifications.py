"""Change notifications pushed by sites: the reliability test and rates (pure), sitemaps,
the store, the estimate stage and the page schedule, the CLI and the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import requests
from scipy.stats import gamma
from sqlalchemy import select
from typer.testing import CliRunner

from crawler.sitemaps import SitemapError, parse_sitemap
from estimators.notifications import notification_rates
from service.cli.app import app
from service.page_schedule import schedule_pages
from service.pipeline import estimate_from_store
from store import Database, FetchResult, LeasePolicy, LeaseQueue, add_pages, open_database
from store import upgrade_schema as migrate
from store.due_times import NOTIFIED
from store.models import OBSERVATIONS, PAGES
from store.notifications import Notification, notification_times, record_notifications
from tests.api_server import TOKEN, ApiServer
from tests.conftest import T0
from tests.test_page_schedule import _publish

DAY = timedelta(days=1)


def test_reliable_notifiers_get_their_rate_from_notifications() -> None:
    # Page 1: fetched daily, changes seen on days 2 and 4, each notified (and one more).
    # Page 2: a change seen on day 3 that was never notified. Page 3: one notification.
    fetch_page = [1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3]
    fetch_t = [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0]
    changed = [np.nan, 0, 1, 0, 1, np.nan, 1, 0, 1, np.nan, 1, 1]
    note_page = [1, 1, 1, 2, 3]
    note_t = [1.5, 3.5, 4.5, 0.5, 1.5]
    found = notification_rates(fetch_page, fetch_t, changed, note_page, note_t, tolerance=0.0)
    assert found.page.tolist() == [1]
    span = 4.5  # from the first fetch (0) to the last notification (4.5)
    old = notification_rates([1, 1], [10.0, 11.0], [np.nan, 1.0], [1, 1, 1], [2.0, 5.0, 10.5])
    assert old.page.size == 0  # notifications before the first fetch do not count
    assert found.rate[0] == pytest.approx(3 / span)
    assert found.rate_low[0] == pytest.approx(gamma.ppf(0.025, 3) / span)
    assert found.rate_high[0] == pytest.approx(gamma.ppf(0.975, 4) / span)
    empty = notification_rates([1, 1], [0.0, 1.0], [np.nan, 0.0], [], [])
    assert empty.page.size == 0


def test_sitemaps_are_read_with_their_lastmod_dates() -> None:
    xml = b"""<?xml version="1.0"?>
    <urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <url><loc>http://a.test/x</loc><lastmod>2026-01-05T10:00:00+02:00</lastmod></url>
      <url><loc> http://a.test/y </loc><lastmod>2026-01-06</lastmod></url>
      <url><loc>http://a.test/z</loc><lastmod>yesterday</lastmod></url>
      <url><lastmod>2026-01-06</lastmod></url>
    </urlset>"""
    entries = parse_sitemap(xml)
    assert [(e.loc, e.lastmod) for e in entries] == [
        ("http://a.test/x", datetime(2026, 1, 5, 8, tzinfo=UTC)),
        ("http://a.test/y", datetime(2026, 1, 6, tzinfo=UTC)),
        ("http://a.test/z", None),
    ]
    with pytest.raises(SitemapError, match="not an XML sitemap"):
        parse_sitemap(b"<urlset><url>")
    with pytest.raises(SitemapError, match="sitemap index"):
        parse_sitemap(b"<sitemapindex><sitemap><loc>x</loc></sitemap></sitemapindex>")


def _history(db: Database) -> list[int]:
    """Two pages fetched daily for 6 days, changing on every other fetch; page 0's site
    notifies each change (at the change), page 1's does not."""
    origin = "http://n.test"
    add_pages(db, [(f"{origin}/{i}", origin) for i in range(2)], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=10, max_urls_per_host=10))
    notes = []
    for day in range(6):
        now = T0 + day * DAY + timedelta(minutes=1)
        (lease,) = queue.lease("w", now=now)
        results = [
            FetchResult(
                p.page_id,
                now,
                "ok",
                200,
                changed=None if day == 0 else day % 2 == 0,
                next_due_at=now + DAY - timedelta(minutes=2),
            )
            for p in lease.pages
        ]
        queue.finish(lease.lease_id, results, now=now)
        if day % 2 == 1:  # the change fetched on the next (even) day happened now
            notes.append(Notification(f"{origin}/0", origin, now + timedelta(hours=3)))
    record_notifications(db, notes, now=T0 + 6 * DAY)
    with db.read() as conn:
        return list(conn.execute(select(PAGES.c.id).order_by(PAGES.c.id)).scalars())


def test_notifications_are_their_own_observations_and_are_recorded_once(db: Database) -> None:
    _history(db)
    origin = "http://n.test"
    again = record_notifications(
        db, [Notification(f"{origin}/0", origin, T0 + DAY + timedelta(minutes=1, hours=3))]
    )
    assert again.recorded == 0 and again.queued == 0  # a repeat of a change fetched since
    news = record_notifications(db, [Notification(f"{origin}/1", origin)])
    assert news.recorded == 1 and news.queued == 1  # newer than the last fetch: crawl soon
    with db.read() as conn:
        kinds = conn.execute(
            select(OBSERVATIONS.c.kind, OBSERVATIONS.c.http_status, OBSERVATIONS.c.changed).where(
                OBSERVATIONS.c.kind == "notification"
            )
        ).all()
    assert len(kinds) == 4 and all(k == ("notification", None, True) for k in kinds)
    assert len(notification_times(db)) == 4


def test_a_reliable_notifier_gets_no_blind_recrawls(db: Database) -> None:
    ids = _history(db)
    estimate_from_store(db)
    with db.read() as conn:
        rows = dict(conn.execute(select(PAGES.c.id, PAGES.c.estimator)).tuples().all())
    assert rows[ids[0]] == NOTIFIED and rows[ids[1]] != NOTIFIED
    with db.write() as conn:  # the same bucket, so both share its quota
        conn.execute(PAGES.update().values(bucket=9))
    _publish(db, {9: [2, 2]})
    schedule_pages(db)
    with db.read() as conn:
        intervals = dict(conn.execute(select(PAGES.c.id, PAGES.c.refresh_interval)).tuples().all())
    # The notifier keeps only a slow check crawl: its interval is 8 times its bucket share's.
    assert intervals[ids[0]] is not None and intervals[ids[1]] is not None
    assert intervals[ids[0]] > 4 * intervals[ids[1]]


def test_notify_cli_and_api(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db = open_database(url, create=True)
    migrate(db)
    sitemap = tmp_path / "sitemap.xml"
    sitemap.write_text(
        "<urlset><url><loc>http://s.test/a</loc><lastmod>2026-01-05</lastmod></url>"
        "<url><loc>http://s.test/b</loc></url></urlset>"
    )
    result = CliRunner().invoke(
        app, ["notify", "--db", url, "--sitemap", str(sitemap), "http://s.test/c"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("recorded 2 notifications (2 pages new to the store)")
    bad = CliRunner().invoke(app, ["notify", "--db", url, "--changed-at", "soon", "http://x.test/"])
    assert bad.exit_code == 2 and "--changed-at must be an ISO-8601 time" in bad.stderr
    broken = tmp_path / "broken.xml"
    broken.write_text("<urlset>")
    result = CliRunner().invoke(app, ["notify", "--db", url, "--sitemap", str(broken)])
    assert result.exit_code == 2 and "not an XML sitemap" in result.stderr
    with ApiServer(db) as api:
        response = requests.post(
            api.url + "/v1/notifications",
            json={
                "notifications": [
                    {"url": "http://s.test/a", "changed_at": "2026-01-07T00:00:00Z"},
                    {"url": "not a url"},
                ]
            },
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        # a is in the immediate-crawl lane already (from the sitemap): recorded, not queued again
        assert response.json() == {"recorded": 1, "added": 0, "queued": 0, "rejected": 1}
        naive = requests.post(
            api.url + "/v1/notifications",
            json={"notifications": [{"url": "http://s.test/a", "changed_at": "2026-01-07"}]},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        assert naive.status_code == 422


def test_concurrent_writers_record_a_notification_once(db: Database) -> None:
    """The store, not a read-then-write, refuses the second copy: writers racing with the
    same notifications record each once between them, and a raw duplicate is refused."""
    import threading

    from sqlalchemy.exc import IntegrityError

    items = [Notification(f"http://n.test/{i}", "http://n.test", T0) for i in range(50)]
    totals: list[int] = []
    barrier = threading.Barrier(3)

    def write() -> None:
        barrier.wait()
        totals.append(record_notifications(db, items, now=T0 + timedelta(hours=1)).recorded)

    threads = [threading.Thread(target=write) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(totals) == 50
    assert len(notification_times(db)) == 50
    page, at = notification_times(db)[0]
    with pytest.raises(IntegrityError):
        db.run_write(
            lambda conn: conn.execute(
                OBSERVATIONS.insert(),
                {
                    "page_id": page,
                    "kind": "notification",
                    "fetched_at": datetime.fromtimestamp(at, UTC),
                    "recorded_at": T0,
                    "changed": True,
                },
            )
        )


def test_the_shipped_sitemap_example_is_read_by_notify(tmp_path: Path) -> None:
    """docs/examples/sitemap.xml (the tour's `crawlplan notify --sitemap`): its two entries
    with a <lastmod> are notifications at those times; the one without is skipped."""
    sitemap = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sitemap.xml"
    url = f"sqlite:///{tmp_path / 'n.db'}"
    migrate(open_database(url, create=True))
    result = CliRunner().invoke(app, ["notify", "--db", url, "--sitemap", str(sitemap)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "recorded 2 notifications (2 pages new to the store); 2 pages queued for a crawl"
    )
    db = open_database(url)
    with db.read() as conn:
        urls = set(conn.execute(select(PAGES.c.url)).scalars())
    assert urls == {"https://example.org/", "https://example.org/prices"}
    assert [e.lastmod for e in parse_sitemap(sitemap.read_bytes())] == [
        datetime(2026, 11, 21, tzinfo=UTC),
        datetime(2026, 11, 22, 9, 30, tzinfo=UTC),
        None,
    ]
