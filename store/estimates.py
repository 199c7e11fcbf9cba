"""Reading fetch evidence page by page and writing change-rate estimates back, in chunks.

The estimators need, per page, the ordered fetches that got an answer (200 or 304) with
their change flags and Last-Modified dates. :func:`iter_fetch_rows` streams them in
chunks of whole pages (keyset pagination on page id, so each chunk is one indexed range
scan however large the store), and :func:`write_estimates` stores what the estimators
computed. Memory is bounded by the chunk size, not by the number of pages.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text

from store.database import PG_BY_ID, Database, driver_rows
from store.models import (
    DUPLICATE_STATUS,
    HOSTS,
    OBSERVATIONS,
    PAGES,
    UNPLANNED_STATUSES,
    planned_rate,
)
from store.types import UTCDateTime, epoch_seconds, sqlite_text, utcnow

__all__ = [
    "ANSWER_STATUSES",
    "CreationWindow",
    "FetchChunk",
    "FetchRow",
    "HostPageCounts",
    "PageState",
    "host_page_counts",
    "iter_fetch_chunks",
    "iter_fetch_rows",
    "iter_page_states",
    "sample_fetch_chunk",
    "write_estimates",
]

#: The answers whose fetches say whether the URL changed: pages (200), not modified (304),
#: redirects (their target, ``crawler.signature.answer_signature``) and gone pages (404, 410).
_ANSWERED = (200, 304, 301, 302, 303, 307, 308, 404, 410)


#: One answered fetch as the driver returns it: (page id, host id, fetched_at in epoch
#: seconds, changed True/False/None, last_modified in epoch seconds or None).
FetchRow = tuple[int, int, float, bool | None, float | None]

#: A page that is new, and its creation window: (page id, ``new_after``, ``first_seen``), in
#: epoch seconds.
CreationWindow = tuple[int, float, float]

#: The page statuses whose last answer a chunk reads (:attr:`FetchChunk.answers`): a redirect,
#: a gone page (404, 410), and a page whose last fetch failed, which answered as its last
#: answered fetch did. Every other fetched page (``ok``) last answered as a page.
ANSWER_STATUSES = ("redirect", "gone", "error")


@dataclass(frozen=True)
class FetchChunk:
    """The answered fetches of a chunk of whole pages (:data:`FetchRow`, by page then
    time), the creation windows of its pages that have one (``pages.new_after``: the few
    found on re-crawls; by page id), when asked for, each fetch's content signature
    (``signatures``, aligned with ``rows``; empty otherwise), and for its pages whose status
    is one of :data:`ANSWER_STATUSES`, the HTTP status of their last answered fetch
    (``answers``: (page id, HTTP status), by page id; every other page last answered as a
    page, 200 or 304)."""

    rows: list[FetchRow]
    windows: list[CreationWindow]
    signatures: list[str | None] = field(default_factory=list)
    answers: list[tuple[int, int]] = field(default_factory=list)


def iter_fetch_rows(db: Database, *, chunk_pages: int = 50_000) -> Iterator[list[FetchRow]]:
    """The rows of :func:`iter_fetch_chunks`."""
    for chunk in iter_fetch_chunks(db, chunk_pages=chunk_pages):
        yield chunk.rows


def iter_fetch_chunks(
    db: Database, *, chunk_pages: int = 50_000, signatures: bool = False
) -> Iterator[FetchChunk]:
    """Yield the answered fetches of ``chunk_pages`` pages at a time, by page then time,
    with the creation windows of those pages that are new (and, with ``signatures``, each
    fetch's content signature: the evidence of a change's size, read only when a threshold
    on it is set, for its 40-48 bytes a row).

    Keyset pagination on page id: each chunk is one indexed range scan however large the
    store. Times come out of SQL as epoch seconds, rows as the driver's tuples: no datetime
    or Row object per row, which is most of the cost at tens of millions of fetches. The
    windows are a second query of the chunk's pages, which returns only the new ones: most
    pages have none, and a per-row window column cost 11 % of the estimate's time. A
    duplicate's fetches are left out (status ``duplicate``, :mod:`store.duplicates`): they
    are its directory URL's document seen twice, not evidence of a page of its own.
    """
    p = PAGES
    after = 0
    while True:
        with db.read() as conn:
            last = conn.execute(
                select(func.max(p.c.id)).where(
                    p.c.id.in_(
                        select(p.c.id).where(p.c.id > after).order_by(p.c.id).limit(chunk_pages)
                    )
                )
            ).scalar_one_or_none()
            if last is None:
                return
            chunk = _read_chunk(
                conn,
                db.dialect,
                (OBSERVATIONS.c.page_id > after, OBSERVATIONS.c.page_id <= last),
                (p.c.id > after, p.c.id <= last),
                signatures=signatures,
            )
        after = int(last)
        if chunk.rows:
            yield chunk


#: Page ids per query of :func:`sample_fetch_chunk` (SQLite binds at most 32,766 values).
_SAMPLE_BATCH = 10_000


def sample_fetch_chunk(
    db: Database, *, pages: int = 50_000, chunk_pages: int = 50_000, signatures: bool = False
) -> FetchChunk | None:
    """The answered fetches of at most ``pages`` fetched pages spread evenly over the whole
    store (every k-th by page id; all of them when there are no more), as one chunk of
    :func:`iter_fetch_chunks`; None when the store holds at most ``chunk_pages`` pages, so
    that the first chunk of :func:`iter_fetch_chunks` is the whole store.

    What the estimators fit on the population (the rate prior, the bandwidth's price) is
    fitted once and applied to every chunk. Fitted on the first chunk, it would describe the
    oldest pages alone (ids grow with discovery: seeds and hubs first); the sample describes
    the store. A fetched page is one with a last fetch (``pages.last_fetch_at``), not a
    duplicate, as the chunks' pages are (a page whose fetches all failed is one too, and
    contributes no row). Two scans of the pages table, which pick the ids in SQL (no id of
    the store in memory), then the sample's fetches in batches of page ids, each an indexed
    lookup: about a chunk's reading.
    """
    if pages < 1:
        raise ValueError(f"a sample needs at least one page, got {pages}")
    p = PAGES
    fetched = (p.c.last_fetch_at.is_not(None), p.c.status != DUPLICATE_STATUS)
    with db.read() as conn:
        total = int(conn.execute(select(func.count()).select_from(p)).scalar_one())
        if total <= chunk_pages:
            return None
        count = int(conn.execute(select(func.count()).where(*fetched)).scalar_one())
        every = max(1, math.ceil(count / pages))
        ranked = select(p.c.id, func.row_number().over(order_by=p.c.id).label("rank")).where(
            *fetched
        )
        ranked_ids = ranked.subquery()
        chosen = list(
            conn.execute(
                select(ranked_ids.c.id)
                .where((ranked_ids.c.rank - 1) % every == 0)
                .order_by(ranked_ids.c.id)
            ).scalars()
        )
        parts = [
            _read_chunk(
                conn,
                db.dialect,
                (OBSERVATIONS.c.page_id.in_(batch),),
                (p.c.id.in_(batch),),
                signatures=signatures,
            )
            for batch in (
                chosen[k : k + _SAMPLE_BATCH] for k in range(0, len(chosen), _SAMPLE_BATCH)
            )
        ]
    return FetchChunk(
        [r for part in parts for r in part.rows],
        [w for part in parts for w in part.windows],
        [s for part in parts for s in part.signatures],
        [a for part in parts for a in part.answers],
    )


def _read_chunk(
    conn: Connection,
    dialect: str,
    observations: tuple[Any, ...],
    pages: tuple[Any, ...],
    *,
    signatures: bool,
) -> FetchChunk:
    """The answered fetches of the pages the conditions name (on ``observations`` and on
    ``pages``, the same pages), by page then time, and those pages' creation windows."""
    p, o = PAGES, OBSERVATIONS
    rows = driver_rows(
        conn,
        select(
            o.c.page_id,
            p.c.host_id,
            epoch_seconds(o.c.fetched_at, dialect),
            o.c.changed,
            epoch_seconds(o.c.last_modified, dialect),
            *([o.c.signature] if signatures else []),
        )
        .join(p, p.c.id == o.c.page_id)
        .where(*observations, o.c.http_status.in_(_ANSWERED), p.c.status != DUPLICATE_STATUS)
        .order_by(o.c.page_id, o.c.fetched_at),
    )
    windows = (
        driver_rows(
            conn,
            select(
                p.c.id,
                epoch_seconds(p.c.new_after, dialect),
                epoch_seconds(p.c.first_seen, dialect),
            )
            .where(*pages, p.c.new_after.is_not(None))
            .order_by(p.c.id),
        )
        if rows
        else []
    )
    answers = _last_answers(conn, pages) if rows else []
    if signatures:
        return FetchChunk([r[:5] for r in rows], windows, [r[5] for r in rows], answers)
    return FetchChunk(rows, windows, answers=answers)


def _last_answers(conn: Connection, pages: tuple[Any, ...]) -> list[tuple[int, int]]:
    """(page id, HTTP status of its last answered fetch) of the pages the conditions on
    ``pages`` name whose status is one of :data:`ANSWER_STATUSES`, by page id: a redirect's
    or a gone page's own answer, and for a page whose last fetch failed, the answer before.
    The pages are found first (the chunk's range of the pages table), then only their
    fetches are read, by ``ix_observations_page_time``: a few pages of a chunk, not its
    fetches again."""
    p, o = PAGES, OBSERVATIONS
    chosen = select(p.c.id).where(*pages, p.c.status.in_(ANSWER_STATUSES))
    latest = (
        select(
            o.c.page_id,
            o.c.http_status,
            func.row_number()
            .over(partition_by=o.c.page_id, order_by=o.c.fetched_at.desc())
            .label("latest"),
        )
        .where(o.c.page_id.in_(chosen), o.c.http_status.in_(_ANSWERED))
        .subquery()
    )
    found = conn.execute(
        select(latest.c.page_id, latest.c.http_status)
        .where(latest.c.latest == 1)
        .order_by(latest.c.page_id)
    )
    return [(int(page), int(status)) for page, status in found]


_PG_WRITE = text(
    """
    UPDATE pages SET rate = t.r, rate_low = t.lo, rate_high = t.hi, estimator = t.e,
                     bucket = t.b, plan_rate = t.p, estimated_at = :at
    FROM unnest(CAST(:ids AS bigint[]), CAST(:rates AS float8[]), CAST(:lows AS float8[]),
                CAST(:highs AS float8[]), CAST(:names AS text[]), CAST(:buckets AS smallint[]),
                CAST(:plan AS float8[]))
         AS t(i, r, lo, hi, e, b, p)
    WHERE pages.id = t.i
    """
).bindparams(bindparam("at", type_=UTCDateTime()))
_SQLITE_WRITE = (
    "UPDATE pages SET rate = ?, rate_low = ?, rate_high = ?, estimator = ?, bucket = ?, "
    "plan_rate = ?, estimated_at = ? WHERE id = ?"
)


def write_estimates(
    db: Database,
    page_ids: Sequence[int],
    rates: Sequence[float | None],
    rate_lows: Sequence[float | None],
    rate_highs: Sequence[float | None],
    estimators: Sequence[str],
    buckets: Sequence[int],
    *,
    plan_rates: Sequence[float | None] | None = None,
    now: datetime | None = None,
) -> int:
    """Store pages' estimates, given column by column (changes per day; None: no estimate),
    and the rates the plan uses where not the estimate (``plan_rates``, changes per day; None
    for all or for a page: the estimate, ``pages.plan_rate`` NULL); ``buckets`` are the
    plan's rates'.

    One transaction and one statement per call: arrays unnested on PostgreSQL, the
    driver's executemany on SQLite (no per-row parameter processing by SQLAlchemy).
    Returns how many pages were given.
    """
    plan = [None] * len(page_ids) if plan_rates is None else plan_rates
    columns = (page_ids, rates, rate_lows, rate_highs, estimators, buckets, plan)
    if len({len(c) for c in columns}) != 1:
        raise ValueError("write_estimates needs columns of one length")
    if not page_ids:
        return 0
    when = now or utcnow()

    def work(conn: Connection) -> None:
        if db.dialect == "postgresql":
            # Rows in id order through a nested loop of primary-key lookups: locked in id
            # order, as every writer of pages locks them (store.pages.lock_pages).
            names = ("ids", "rates", "lows", "highs", "names", "buckets", "plan")
            params: dict[str, Any] = {n: list(c) for n, c in zip(names, columns, strict=True)}
            if any(a > b for a, b in pairwise(params["ids"])):  # the store's reads give them sorted
                order = sorted(range(len(page_ids)), key=params["ids"].__getitem__)
                params = {n: [c[k] for k in order] for n, c in params.items()}
            conn.exec_driver_sql(PG_BY_ID)
            conn.execute(_PG_WRITE, {**params, "at": when})
            return
        at = sqlite_text(when)
        conn.exec_driver_sql(
            _SQLITE_WRITE,
            list(
                zip(
                    rates,
                    rate_lows,
                    rate_highs,
                    estimators,
                    buckets,
                    plan,
                    [at] * len(page_ids),
                    page_ids,
                    strict=True,
                )
            ),
        )

    db.run_write(work)
    return len(page_ids)


#: What the planner's bucket aggregates need of one page, as the driver returns it: (page id,
#: host id, bucket, the rate the plan uses per day (``plan_rate``, else ``rate``) or None,
#: last fetch in epoch seconds or None, OPIC importance or None).
PageState = tuple[int, int, int, float | None, float | None, float | None]


def iter_page_states(db: Database, *, chunk_pages: int = 100_000) -> Iterator[list[PageState]]:
    """Yield every fetchable page's host, bucket, rate, last fetch and importance,
    ``chunk_pages`` at a time (driver tuples, times in epoch seconds: no datetime object
    per page).

    Unfetchable pages (status ``blocked``: robots.txt disallows them) and duplicates (status
    ``duplicate``: another URL of a page kept, :mod:`store.duplicates`) are left out: the
    plan crawls none of them, so they are neither new pages (n) nor fetched ones of any
    bucket, class 0 included."""
    p = PAGES
    after = 0
    while True:
        with db.read() as conn:
            rows = driver_rows(
                conn,
                select(
                    p.c.id,
                    p.c.host_id,
                    p.c.bucket,
                    planned_rate(),
                    epoch_seconds(p.c.last_fetch_at, db.dialect),
                    p.c.importance,
                )
                .where(p.c.id > after, p.c.status.not_in(UNPLANNED_STATUSES))
                .order_by(p.c.id)
                .limit(chunk_pages),
            )
        if not rows:
            return
        after = int(rows[-1][0])
        yield rows


@dataclass(frozen=True)
class HostPageCounts:
    """Per host with plannable pages (not blocked, not duplicate), columns of equal length:
    its id, its fetched pages, its never-fetched pages, and its robots.txt ``crawl_delay``
    (seconds; NaN when it names none)."""

    host_id: list[int]
    fetched: list[int]
    new: list[int]
    crawl_delay: list[float]


def host_page_counts(db: Database) -> HostPageCounts:
    """Every host's plannable pages, fetched and never fetched, and its crawl delay: what
    tells the nightly run which hosts' politeness could bind its plan (one grouped scan of
    the pages)."""
    p, h = PAGES, HOSTS
    stmt = (
        select(h.c.id, func.count(), func.count(p.c.last_fetch_at), h.c.crawl_delay)
        .select_from(p.join(h, h.c.id == p.c.host_id))
        .where(p.c.status.not_in(UNPLANNED_STATUSES))
        .group_by(h.c.id, h.c.crawl_delay)
        .order_by(h.c.id)
    )
    with db.read() as conn:
        rows = conn.execute(stmt).tuples().all()
    out = HostPageCounts([], [], [], [])
    for host, pages, fetched, delay in rows:
        out.host_id.append(int(host))
        out.fetched.append(int(fetched))
        out.new.append(int(pages) - int(fetched))
        out.crawl_delay.append(math.nan if delay is None else float(delay))
    return out
