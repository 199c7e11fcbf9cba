"""A directory URL and its index file are one page (issue 27, "The crawler on the real web").

On nginx serving Debian's HTML documentation, ``/doc/`` and ``/doc/index.html`` were "two
pages with one signature": both stored, planned and re-crawled. A real static file server on
loopback (Python's, which sends Last-Modified as nginx does) serves a directory tree; after a
crawl the index file of each directory whose URL answered with the same document has status
``duplicate``: never released, never fetched again, in no bucket, not in the estimates'
evidence, and ``status`` shows it on a line of its own. Pages that merely look alike are kept
apart: two different files with the same tiny text, a directory whose index file is empty or
tiny, two files with the same long text (not a directory and its index). The store's part runs
on SQLite and PostgreSQL, through local workers and the worker API.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import IntegrityError
from typer.testing import CliRunner

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.remote import RemoteWorkQueue
from crawler.signature import SIGNATURE_LENGTH, page_signature
from crawler.worker import CrawlSettings, run_crawl, run_workers
from service.api.app import ApiSettings
from service.cli.app import app
from service.page_schedule import schedule_pages
from service.pipeline import aggregates_from_store, release_period
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    LeaseQueue,
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    publish_plan,
    read_status,
)
from store import duplicates as dup
from store.estimates import iter_fetch_rows
from store.models import HOSTS, PAGES, RELEASED_PAGES
from store.types import utcnow
from tests.api_server import TOKEN, ApiServer
from tests.conftest import T0
from tests.loopback import LoopbackHost

WORDS = "This chapter explains how the server stores its tables and how to tune them well."
TINY = "Nothing here yet."
#: One modification time for every file: equal Last-Modified even where files differ.
MTIME = datetime(2026, 10, 1, 8, 0, tzinfo=UTC).timestamp()


def _page(text: str, *links: str) -> str:
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return f"<html><head><title>t</title></head><body><p>{text}</p>{anchors}</body></html>"


#: The site: ``/`` and ``/doc/`` are directories with an index.html (the same document under
#: two URLs); ``/empty/`` and ``/tiny/`` are too, but their index files have no words or
#: three; ``a.html`` and ``b.html`` hold the same tiny text, ``c.html`` and ``d.html`` the
#: same long text (two files each, not a directory and its index).
FILES = {
    "index.html": _page(
        WORDS + " Home.",
        "index.html",
        "doc/",
        "doc/index.html",
        "empty/",
        "empty/index.html",
        "tiny/",
        "tiny/index.html",
        "a.html",
        "b.html",
        "c.html",
        "d.html",
    ),
    "doc/index.html": _page(WORDS + " Documentation.", "../", "intro.html"),
    "doc/intro.html": _page(WORDS + " Introduction.", "index.html"),
    "empty/index.html": "<html><body></body></html>",
    "tiny/index.html": _page(TINY),
    "a.html": _page(TINY),
    "b.html": _page(TINY),
    "c.html": _page(WORDS + " Copy."),
    "d.html": _page(WORDS + " Copy."),
}
KEPT = ("/", "/doc/", "/doc/intro.html", "/empty/", "/empty/index.html", "/tiny/")
KEPT += ("/tiny/index.html", "/a.html", "/b.html", "/c.html", "/d.html")
DUPLICATES = ("/index.html", "/doc/index.html")


@dataclass
class StaticSite(LoopbackHost):
    """A directory served by Python's static file server on loopback, and its request log."""

    root: Path = Path()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[StaticSite]:
    root = tmp_path / "site"
    for name, body in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
        os.utime(path, (MTIME, MTIME))
    served = StaticSite(root=root)

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            served.log.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    served.serve(partial(Handler, directory=str(root)))  # type: ignore[arg-type]
    yield served
    served.stop()


def _settings() -> CrawlSettings:
    return CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.01, max_delay=1.0, duration_factor=1.0),
        limits=FetchLimits(allow_private=True),
        max_urls=50,
        idle_sleep=0.05,
    )


_POLICY = LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=4)


def _crawl(db: Database, seconds: float | None = None) -> None:
    run_crawl(
        db,
        lambda: LeaseQueue(db, _POLICY),
        _settings(),
        workers=2,
        until_idle=seconds is None,
        seconds=seconds or 60,
    )


def _pages(db: Database) -> dict[str, Any]:
    with db.read() as conn:
        return {row.url: row for row in conn.execute(select(PAGES)).all()}


def _by_path(site: StaticSite, db: Database) -> dict[str, Any]:
    pages = _pages(db)
    return {url[len(site.origin) :]: page for url, page in pages.items()}


def _assert_settled(site: StaticSite, db: Database) -> dict[str, Any]:
    pages = _by_path(site, db)
    assert set(pages) == set(KEPT) | set(DUPLICATES)
    for path in KEPT:
        assert pages[path].status == "ok", path
    for path in DUPLICATES:
        page = pages[path]
        assert page.status == "duplicate", path
        assert page.next_due_at is None, path
        # the same document as its directory's: same signature, same Last-Modified
        directory = pages[path.removesuffix("index.html")]
        assert (page.signature, page.last_modified) == (
            directory.signature,
            directory.last_modified,
        )
    # look-alikes kept apart: same signature (and Last-Modified), yet two pages each
    for a, b in (("/a.html", "/b.html"), ("/c.html", "/d.html"), ("/tiny/", "/tiny/index.html")):
        assert pages[a].signature == pages[b].signature, (a, b)
        assert pages[a].last_modified == pages[b].last_modified, (a, b)
    assert pages["/empty/"].signature == pages["/empty/index.html"].signature
    return pages


def test_a_directory_and_its_index_html_are_one_page(
    db: Database, backend_url: str, site: StaticSite
) -> None:
    add_pages(db, [(site.url("/"), site.origin)])
    _crawl(db)
    assert Counter(site.log)["/doc/index.html"] == 1  # fetched once, to find it out
    pages = _assert_settled(site, db)
    duplicates = {pages[p].id for p in DUPLICATES}
    kept = len(KEPT)

    # Not planned: n and the buckets (class 0 included) hold the kept pages alone, the
    # estimates read none of a duplicate's fetches, and status counts them on their own line.
    aggregates = aggregates_from_store(db, period_days=1.0)
    assert aggregates.new_pages == 0
    assert int(aggregates.buckets.pages.sum()) == kept
    evidence = {row[0] for rows in iter_fetch_rows(db) for row in rows}
    assert evidence == {pages[p].id for p in KEPT}
    st = read_status(db)
    assert st.duplicates == 2 and st.by_status["duplicate"] == 2
    assert sum(st.by_bucket.values()) == kept
    shown = CliRunner().invoke(app, ["status", "--db", backend_url])
    assert shown.exit_code == 0, shown.output
    assert (
        "duplicate 2 pages, never released (index files of directory URLs that serve the same "
        "document)" in shown.output
    )

    # A plan whose quota re-crawls every fetched page: the release takes each kept page, no
    # duplicate, and the next crawl fetches the directories again, never their index files.
    period = timedelta(seconds=2)
    start = utcnow() - timedelta(seconds=0.2)
    publish_plan(
        db,
        PlanDraft(
            starts_at=start,
            period_days=period / timedelta(days=1),
            strategy="test",
            periods=[PlanPeriodDraft(1, start, start + period, 100.0, 0, {0: 100})],
            inputs={},
            solver={},
        ),
    )
    schedule_pages(db)
    released = release_period(db, min_delay_seconds=0.01)
    assert released.status == "released"
    with db.read() as conn:
        queued = set(conn.execute(select(RELEASED_PAGES.c.page_id)).scalars())
    assert queued == {pages[p].id for p in KEPT}
    assert not queued & duplicates
    seen = len(site.log)
    _crawl(db, seconds=period.total_seconds() + 1.0)
    again = Counter(site.log[seen:])
    assert again["/"] == 1 and again["/doc/"] == 1, again
    assert again["/index.html"] == 0 and again["/doc/index.html"] == 0, again
    _assert_settled(site, db)


def test_remote_workers_find_duplicates_through_the_worker_api(
    db: Database, site: StaticSite
) -> None:
    """The rule is the store's, in the report's transaction: a remote pool finds them too."""
    add_pages(db, [(site.url("/"), site.origin)])
    api_settings = ApiSettings(
        tokens=(TOKEN,), policy=_POLICY, release_every=None, allow_private=True
    )
    with ApiServer(db, api_settings) as api:
        run_workers(
            lambda: RemoteWorkQueue(api.url, TOKEN), _settings(), workers=2, until_idle=True
        )
    _assert_settled(site, db)
    assert read_status(db).duplicates == 2


# -- the store's part, report by report ------------------------------------------------------

ORIGIN = "http://docs.test"
LONG = page_signature(WORDS)
LAST_MODIFIED = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)


def _lease(db: Database, urls: list[str], now: datetime) -> tuple[LeaseQueue, int, dict[str, int]]:
    add_pages(db, [(u, ORIGIN) for u in urls], now=now)
    with db.write() as conn:  # due now, whatever the page's state
        conn.execute(update(PAGES).where(PAGES.c.url.in_(urls)).values(next_due_at=now))
        conn.execute(update(HOSTS).values(ready_at=now, next_fetch_at=now))
    queue = LeaseQueue(db, LeasePolicy(max_urls_per_host=50))
    (lease,) = queue.lease("w", now=now)
    return queue, lease.lease_id, {p.url: p.page_id for p in lease.pages}


def _ok(page_id: int, at: datetime, signature: str = LONG, **validators: Any) -> FetchResult:
    values = {"last_modified": LAST_MODIFIED} | validators
    return FetchResult(page_id, at, "ok", http_status=200, signature=signature, **values)


def _statuses(db: Database) -> dict[str, str]:
    with db.read() as conn:
        rows = conn.execute(select(PAGES.c.url, PAGES.c.status)).tuples()
        return {url.removeprefix(ORIGIN): status for url, status in rows}


@pytest.mark.parametrize("directory_first", [True, False])
def test_the_index_file_is_the_duplicate_whichever_is_fetched_first(
    db: Database, directory_first: bool
) -> None:
    home, index = ORIGIN + "/doc/", ORIGIN + "/doc/index.html"
    order = [home, index] if directory_first else [index, home]
    for k, url in enumerate(order):
        at = T0 + timedelta(minutes=k)
        queue, lease, ids = _lease(db, [url], at)
        queue.finish(lease, [_ok(ids[url], at)], now=at)
    assert _statuses(db) == {"/doc/": "ok", "/doc/index.html": "duplicate"}


def test_a_duplicate_leaves_the_release_queue_and_the_due_set(db: Database) -> None:
    home, index = ORIGIN + "/doc/", ORIGIN + "/doc/index.html"
    queue, lease, ids = _lease(db, [index], T0)
    queue.finish(lease, [_ok(ids[index], T0)], now=T0)
    with db.write() as conn:  # a release queued it meanwhile
        conn.execute(
            insert(RELEASED_PAGES).values(
                host_id=select(HOSTS.c.id).scalar_subquery(),
                due_at=T0 + timedelta(hours=1),
                page_id=ids[index],
                plan_id=1,
                period=1,
                url=index,
                status="ok",
            )
        )
    later = T0 + timedelta(minutes=5)
    queue, lease, ids2 = _lease(db, [home], later)
    queue.finish(lease, [_ok(ids2[home], later)], now=later)
    pages = {p.url: p for p in _pages(db).values()}
    assert pages[index].status == "duplicate" and pages[index].next_due_at is None
    with db.read() as conn:
        assert conn.execute(select(RELEASED_PAGES.c.page_id)).all() == []


@pytest.mark.parametrize(
    ("why", "index_result"),
    [
        ("another text", {"signature": page_signature(WORDS + " More.")}),
        ("another Last-Modified", {"last_modified": LAST_MODIFIED + timedelta(seconds=1)}),
        ("another ETag", {"etag": '"b"'}),
        ("no validator in common", {"last_modified": None, "etag": '"a"'}),
        ("empty", {"signature": page_signature("")}),
        ("tiny", {"signature": page_signature(TINY)}),
        ("an answer, not a page", {"signature": "0" * 32}),
    ],
)
def test_an_alias_that_is_not_the_same_file_is_kept(
    db: Database, why: str, index_result: dict[str, Any]
) -> None:
    home, index = ORIGIN + "/doc/", ORIGIN + "/doc/index.html"
    queue, lease, ids = _lease(db, [home, index], T0)
    home_result = {"etag": '"a"'} if "ETag" in why else {}
    if why in ("empty", "tiny", "an answer, not a page"):
        home_result = {"signature": index_result["signature"]}
    results = [_ok(ids[home], T0, **home_result), _ok(ids[index], T0, **index_result)]
    queue.finish(lease, results, now=T0)
    assert _statuses(db) == {"/doc/": "ok", "/doc/index.html": "ok"}, why


def test_pages_that_are_not_a_directory_and_its_index_are_never_merged(db: Database) -> None:
    """Same long text, same validators, same host: two files all the same."""
    urls = [ORIGIN + p for p in ("/a.html", "/b.html", "/doc", "/doc/index.html?x=1", "/x/")]
    urls += [ORIGIN + "/x/INDEX.HTML", ORIGIN + "/x/default.htm"]
    queue, lease, ids = _lease(db, urls, T0)
    queue.finish(lease, [_ok(ids[u], T0, etag='"same"') for u in urls], now=T0)
    assert set(_statuses(db).values()) == {"ok"}


def test_a_duplicate_is_a_page_again_when_its_directory_goes(db: Database) -> None:
    home, index = ORIGIN + "/doc/", ORIGIN + "/doc/index.html"
    queue, lease, ids = _lease(db, [home, index], T0)
    queue.finish(lease, [_ok(ids[home], T0), _ok(ids[index], T0)], now=T0)
    assert _statuses(db)["/doc/index.html"] == "duplicate"
    # The directory answers 404 now: the index file may be the document's one URL now.
    later = T0 + timedelta(hours=1)
    queue, lease, _ = _lease(db, [home], later)
    gone = FetchResult(ids[home], later, "gone", http_status=404, signature="1" * 32)
    queue.finish(lease, [gone], now=later)
    pages = {p.url: p for p in _pages(db).values()}
    assert pages[index].status == "ok"
    assert pages[index].next_due_at == later  # no plan yet: due at once
    # and it is fetched again, a page like any other
    assert read_status(db, now=later).duplicates == 0
    queue, lease, ids2 = _lease(db, [], later)
    assert index in ids2


def test_a_duplicate_asked_for_again_is_checked_and_marked_again(db: Database) -> None:
    """A user's crawl of a duplicate (seed --now, a notification) fetches it; the report
    settles the pair anew: the same document, so a duplicate again; another, a page."""
    home, index = ORIGIN + "/doc/", ORIGIN + "/doc/index.html"
    queue, lease, ids = _lease(db, [home, index], T0)
    queue.finish(lease, [_ok(ids[home], T0), _ok(ids[index], T0)], now=T0)
    later = T0 + timedelta(hours=1)
    queue, lease, _ = _lease(db, [index], later)
    queue.finish(lease, [_ok(ids[index], later)], now=later)
    assert _statuses(db)["/doc/index.html"] == "duplicate"
    later += timedelta(hours=1)
    queue, lease, _ = _lease(db, [index], later)
    other = page_signature(WORDS + " A page of its own now.")
    queue.finish(lease, [_ok(ids[index], later, signature=other)], now=later)
    assert _statuses(db)["/doc/index.html"] == "ok"


def test_the_rule() -> None:
    assert dup.index_aliases("http://h/") == ("http://h/index.html", "http://h/index.htm")
    assert dup.index_aliases("http://h/a/index.htm") == ("http://h/a/",)
    assert dup.index_aliases("http://h/a/index.html") == ("http://h/a/",)
    for other in ("http://h/a", "http://h/a/?q=1", "http://h/a/x.html", "http://h/aindex.html"):
        assert dup.index_aliases(other) == (), other
    # the store reads the crawler's signature layout: 40 hex digits, the word count last
    assert dup.SIGNATURE_LENGTH == SIGNATURE_LENGTH
    assert dup.signature_words(page_signature(WORDS)) == len(WORDS.split())
    assert dup.signature_words(page_signature("")) == 0
    assert dup.signature_words("0" * 32) is None
    page = dup.PageAnswer("ok", LONG, None, LAST_MODIFIED)
    assert dup.same_document(page, page)
    assert not dup.same_document(page, dup.PageAnswer("ok", LONG, None, None))
    assert not dup.same_document(page, dup.PageAnswer("error", LONG, None, LAST_MODIFIED))


# -- the schema --------------------------------------------------------------------------------


def test_the_status_migrates_in_place_on_a_populated_store(db: Database) -> None:
    """Migration 0018 only widens ck_pages_status (SQLite: the table's SQL text rewritten,
    no rebuild, which the foreign keys would refuse); down again, duplicates are pages."""
    from alembic import command

    from store.schema import _config

    home, index = ORIGIN + "/doc/", ORIGIN + "/doc/index.html"
    queue, lease, ids = _lease(db, [home, index], T0)
    queue.finish(lease, [_ok(ids[home], T0), _ok(ids[index], T0)], now=T0)
    cfg = _config()
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0017")
    assert _statuses(db) == {"/doc/": "ok", "/doc/index.html": "ok"}
    with pytest.raises(IntegrityError), db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.url == index).values(status="duplicate"))
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0018")
    with db.write() as conn:  # a pooled connection sees the new constraint
        conn.execute(update(PAGES).where(PAGES.c.url == index).values(status="duplicate"))
    with pytest.raises(IntegrityError), db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.url == index).values(status="bogus"))
    assert _statuses(db) == {"/doc/": "ok", "/doc/index.html": "duplicate"}
    if db.dialect == "sqlite":
        with db.read() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
            assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
