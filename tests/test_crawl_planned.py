"""A crawl to a published plan's quotas, for real over HTTP on loopback (the synthetic web).

Before any plan the crawler fetches whatever is due. Once a plan is published, fetched pages
wait for a period release: the page schedule gives each page its interval, the release
chooses per bucket the most overdue pages up to the quota, and the workers fetch exactly
those, which the server's own request log confirms.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select, update

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, run_crawl
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from service.page_schedule import schedule_pages
from service.pipeline import release_period
from store import (
    Database,
    LeasePolicy,
    LeaseQueue,
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    open_database,
    publish_plan,
)
from store import upgrade_schema as migrate
from store.models import OBSERVATIONS, PAGES, RELEASED_PAGES
from store.types import utcnow

pytestmark = pytest.mark.slow


def _crawl(db: Database, seconds: float | None = None) -> None:
    """Until idle, or for ``seconds`` (released work comes due over the period)."""
    settings = CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.05, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True, max_bytes=1_000_000),
        max_urls=50,
        idle_sleep=0.05,
        error_retry=timedelta(seconds=0.5),
    )
    policy = LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=4)
    run_crawl(
        db,
        lambda: LeaseQueue(db, policy),
        settings,
        workers=3,
        until_idle=seconds is None,
        seconds=seconds or 60,
    )


def test_crawl_fetches_exactly_the_released_quota(tmp_path: Path) -> None:
    web = SyntheticWeb(WebConfig(hosts=3, pages_per_host=10, sections_per_host=2, seed=5))
    db = open_database(f"sqlite:///{tmp_path / 'planned.db'}", create=True)
    migrate(db)
    with WebServer(web, seed=2) as server:
        seeds = [normalize_url(origin + "/s0/p0.html") for origin in server.origins]
        add_pages(db, [(u, origin_of(u)) for u in seeds])
        _crawl(db)  # no plan yet: everything reachable is fetched once
        with db.read() as conn:
            fetched = conn.execute(
                select(PAGES.c.id, PAGES.c.url)
                .where(PAGES.c.status == "ok", PAGES.c.url.like("%.html"))
                .order_by(PAGES.c.id)
            ).all()
        assert len(fetched) >= 20
        # Estimates: alternate pages in buckets 40 and 90; all last fetched 10 hours ago, so
        # every page is overdue once the plan's page schedule has run.
        now = utcnow()
        with db.write() as conn:
            for k, row in enumerate(fetched):
                bucket, rate = (40, 2.0) if k % 2 else (90, 20.0)
                conn.execute(
                    update(PAGES)
                    .where(PAGES.c.id == row.id)
                    .values(
                        bucket=bucket,
                        rate=rate,
                        importance=1.0 + k,
                        last_fetch_at=now - timedelta(hours=10),
                    )
                )
        # Periods of 3 s: the release spreads the overdue pages over the period.
        period = timedelta(seconds=3)
        start = utcnow() - timedelta(seconds=0.5)
        publish_plan(
            db,
            PlanDraft(
                starts_at=start,
                period_days=period / timedelta(days=1),
                strategy="test",
                periods=[
                    PlanPeriodDraft(
                        period=t,
                        starts_at=start + (t - 1) * period,
                        ends_at=start + t * period,
                        capacity=100.0,
                        new_pages=0,
                        quotas={40: 3, 90: 5},
                    )
                    for t in (1, 2)
                ],
                inputs={},
                solver={},
            ),
        )
        scheduled = schedule_pages(db)
        assert scheduled.scheduled == len(fetched)
        released = release_period(db, min_delay_seconds=0.05)
        assert released.status == "released"
        assert released.by_bucket == {40: 3, 90: 5}
        with db.read() as conn:
            pending = conn.execute(
                select(PAGES.c.id, PAGES.c.status).where(PAGES.c.next_due_at.is_not(None))
            ).all()
            queued = conn.execute(select(RELEASED_PAGES.c.page_id, RELEASED_PAGES.c.status)).all()
            before = conn.execute(select(OBSERVATIONS.c.id)).all()
        # The release is in the release queue; due in pages: only error and robots-blocked
        # pages whose retry time the worker owns.
        chosen = {r.page_id for r in queued}
        assert {r.status for r in queued} == {"ok"}
        assert {r.status for r in pending} <= {"error", "blocked"}
        assert len(chosen) == 8
        seen = len(server.log)

        _crawl(db, seconds=3.5)

        with db.read() as conn:
            new_obs = conn.execute(
                select(OBSERVATIONS.c.page_id).where(
                    OBSERVATIONS.c.id.not_in([r.id for r in before])
                )
            ).scalars()
            refetched = Counter(new_obs)
            due_after = conn.execute(
                select(PAGES.c.id, PAGES.c.status).where(PAGES.c.next_due_at.is_not(None))
            ).all()
            queued_after = conn.execute(select(RELEASED_PAGES.c.page_id)).all()
    urls = {row.id: row.url for row in fetched}
    assert {pid for pid in refetched if pid in urls} == chosen  # all of it, nothing else
    assert all(refetched[pid] == 1 for pid in chosen)
    requests = Counter((server.origins[r.host], r.path) for r in server.log[seen:])
    for pid, url in urls.items():  # as the server saw it
        assert requests[(origin_of(url), urlsplit(url).path)] == (1 if pid in chosen else 0), url
    # fetched pages left the queue and wait for the next period's release
    assert not [r for r in due_after if r.status == "ok"] and not queued_after
    db.dispose()
