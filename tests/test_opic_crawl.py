"""OPIC inside the crawl: cash moves with every report, is conserved, persists, and the
importance is stored (store.importance, the report wiring in store.leases, crawler.worker)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import bindparam, func, select, update

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, run_crawl
from estimators.opic import CRAWL_CASH_QUANTUM, crawl_cash_split, crawl_virtual_gift
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    open_database,
    recompute_ready,
    upgrade_schema,
)
from store.database import DriverStatement
from store.errors import InvalidReportError
from store.importance import PageIds, page_ids_of, spread_virtual_cash
from store.models import Page
from store.types import utcnow
from tests.conftest import T0, orm_all

Q = CRAWL_CASH_QUANTUM


def _cash(db: Database) -> dict[str, tuple[float, float, float | None]]:
    return {p.url: (p.cash, p.history, p.importance) for p in orm_all(db, select(Page))}


def test_a_report_moves_the_cash_to_the_outlinks_exactly_once(db: Database) -> None:
    urls = [f"http://h.test/{name}" for name in ("a", "b", "c", "d")]
    add_pages(db, [(u, "http://h.test") for u in urls], now=T0)
    totals = spread_virtual_cash(db, crawl_virtual_gift)
    assert (totals.pages, totals.given, totals.virtual) == (4, 1.0, 0.0)  # one unit each
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1))
    (lease,) = queue.lease("w", now=T0)
    page = lease.pages[0]
    a = page.url
    links = (
        *[u for u in urls[:3] if u != a],
        a,
        "http://unknown.test/x",
        urls[1] if a != urls[1] else urls[2],
    )
    result = FetchResult(
        page_id=page.page_id, fetched_at=T0, status="ok", http_status=200, outlinks=links
    )
    for _ in range(2):  # a retried report moves nothing twice
        queue.report(lease.lease_id, [result], now=T0, cash_split=crawl_cash_split)
    share = math.floor(0.85 / Q / 2) * Q  # two known, distinct outlinks besides itself
    cash = _cash(db)
    assert cash[a][:2] == (0.0, 1.0)
    targets = [u for u in urls[:3] if u != a]
    for url in targets:
        assert cash[url][:2] == (1.0 + share, 0.0)
    assert cash[urls[3]][:2] == (1.0, 0.0)
    # The rest (the damping share and the rounding) is on the implicit virtual page.
    total = sum(c for c, _, _ in cash.values())
    assert 4 - total == 1.0 - 2 * share > 0
    totals = spread_virtual_cash(db, crawl_virtual_gift)
    cash = _cash(db)
    assert sum(c for c, _, _ in cash.values()) + totals.virtual == 4.0
    assert 0 <= totals.virtual < 4 * Q
    importance = {u: v[2] for u, v in cash.items()}
    assert sum(v for v in importance.values() if v is not None) == pytest.approx(1.0)
    # (H + C) / sum: the linked pages hold 1 + share; page a's unit moved to its history.
    assert importance[targets[0]] == importance[targets[1]] > importance[a]
    assert importance[a] == pytest.approx(importance[urls[3]])


def test_a_report_adds_the_pages_it_discovered_and_moves_their_cash_in_one_step(
    db: Database,
) -> None:
    add_pages(db, [("http://h.test/a", "http://h.test")], now=T0)
    spread_virtual_cash(db, crawl_virtual_gift)
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1))
    (lease,) = queue.lease("w", now=T0)
    found = ["http://h.test/new", "http://other.test/x"]
    result = FetchResult(
        page_id=lease.pages[0].page_id,
        fetched_at=T0,
        status="ok",
        http_status=200,
        outlinks=tuple(found),
    )
    outcome, _returned = queue.finish(
        lease.lease_id,
        [result],
        cash_split=crawl_cash_split,
        discovered=[(u, origin_of(u)) for u in found],
        now=T0,
    )
    assert (outcome.recorded, outcome.discovered) == (1, 2)
    cash = _cash(db)
    share = math.floor(0.85 / Q / 2) * Q
    # the new pages exist and got their share of a's cash in the same transaction
    assert cash["http://h.test/new"][0] == cash["http://other.test/x"][0] == share
    assert cash["http://h.test/a"][:2] == (0.0, 1.0)
    # a repeated report finds them known
    again = queue.report(
        lease.lease_id, [result], discovered=[(u, origin_of(u)) for u in found], now=T0
    )
    assert (again.recorded, again.duplicates, again.discovered) == (0, 1, 0)


def test_errors_move_no_cash_and_reports_without_a_split_move_none(db: Database) -> None:
    add_pages(db, [("http://h.test/a", "http://h.test"), ("http://h.test/b", "http://h.test")])
    spread_virtual_cash(db, crawl_virtual_gift)
    queue = LeaseQueue(db, LeasePolicy(max_urls=2, max_urls_per_host=2))
    (lease,) = queue.lease("w")
    first, second = lease.pages
    results = [
        FetchResult(
            page_id=first.page_id, fetched_at=utcnow(), status="error", outlinks=(second.url,)
        ),
        FetchResult(
            page_id=second.page_id, fetched_at=utcnow(), status="ok", outlinks=(first.url,)
        ),
    ]
    queue.report(lease.lease_id, results[:1], cash_split=crawl_cash_split)
    queue.report(lease.lease_id, results[1:])
    assert {c[:2] for c in _cash(db).values()} == {(1.0, 0.0)}


def _settings() -> CrawlSettings:
    return CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.02, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True, max_bytes=1_000_000),
        max_urls=40,
        idle_sleep=0.05,
    )


def _crawl(db: Database) -> None:
    policy = LeasePolicy(lease_seconds=30, max_urls=40, max_urls_per_host=40, max_hosts=4)
    run_crawl(
        db, lambda: LeaseQueue(db, policy), _settings(), workers=2, until_idle=True, seconds=60
    )


def test_crawling_the_synthetic_web_conserves_cash_and_stores_importance(tmp_path: Path) -> None:
    web = SyntheticWeb(WebConfig(hosts=3, pages_per_host=10, sections_per_host=2, seed=5))
    db = open_database(f"sqlite:///{tmp_path / 'opic.db'}", create=True)
    upgrade_schema(db)
    try:
        with WebServer(web, seed=2) as server:
            seeds = [normalize_url(origin + "/s0/p0.html") for origin in server.origins]
            add_pages(db, [(u, origin_of(u)) for u in seeds])
            _crawl(db)
            first = _cash(db)
            # A restart: every page due again; the cash and history carry on from the store.
            with db.write() as conn:
                conn.execute(update(Page).where(Page.status == "ok").values(next_due_at=utcnow()))
            recompute_ready(db)  # due times written by hand
            _crawl(db)
            second = _cash(db)
        n = len(second)
        assert n >= web.n_pages
        total = sum(c for c, _, _ in second.values())
        # Conserved: the pages hold one unit each but for less than a quantum per page (the
        # virtual page's rounding); more would be inflation, as in Nutch's plugin.
        assert n - n * Q < total <= n
        assert all(c >= 0 for c, _, _ in second.values())
        assert all(h >= first[u][1] for u, (_, h, _) in second.items() if u in first)
        assert sum(h for _, h, _ in second.values()) > sum(h for _, h, _ in first.values())
        importance = [i for _, _, i in second.values()]
        assert all(i is not None and i > 0 for i in importance)
        assert sum(importance) == pytest.approx(1.0)  # type: ignore[arg-type]
        with db.read() as conn:
            fetched = conn.execute(
                select(func.count()).select_from(Page).where(Page.history > 0)
            ).scalar_one()
        assert fetched >= web.n_pages // 2
    finally:
        db.dispose()


def test_remembered_page_ids_are_bounded_and_only_committed_lookups_are_kept(
    db: Database,
) -> None:
    ids = PageIds(capacity=4)
    ids.remember((f"u{i}", i) for i in range(5))
    assert len(ids) <= 4 and ids.get("u4") == 4 and ids.get("nowhere") is None
    urls = ["http://h.test/a", "http://h.test/b"]
    add_pages(db, [(u, "http://h.test") for u in urls], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=1, max_urls_per_host=1))
    (lease,) = queue.lease("w", now=T0)
    known = page_ids_of(db)
    assert known.get(lease.pages[0].url) == lease.pages[0].page_id  # leased pages are known
    other = next(u for u in urls if u != lease.pages[0].url)
    result = FetchResult(
        page_id=lease.pages[0].page_id, fetched_at=T0, status="ok", outlinks=(other, "x:/new")
    )
    with pytest.raises(InvalidReportError):  # rolled back: nothing it looked up is kept
        queue.report(lease.lease_id, [result, replace(result, page_id=10**9)], now=T0)
    assert known.get(other) is None
    queue.report(
        lease.lease_id,
        [result],
        now=T0,
        cash_split=crawl_cash_split,
        discovered=[("x:/new", "http://x.test")],
    )
    assert known.get(other) is not None and known.get("x:/new") is not None


def test_driver_statements_refuse_naive_times(db: Database) -> None:
    stmt = DriverStatement(
        update(Page).where(Page.id == bindparam("p")).values(last_fetch_at=bindparam("at")),
        db.engine.dialect,
    )
    with db.write() as conn, pytest.raises(ValueError, match="naive"):
        stmt.execute(conn, [{"p": 1, "at": T0.replace(tzinfo=None)}])
