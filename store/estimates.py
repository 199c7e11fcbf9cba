"""Reading fetch evidence page by page and writing change-rate estimates back, in chunks.

The estimators need, per page, the ordered fetches that got an answer (200 or 304) with
their change flags and Last-Modified dates. :func:`iter_fetch_columns` streams them in
chunks of whole pages (keyset pagination on page id, so each chunk is one indexed range
scan however large the store), and :func:`write_estimates` stores what the estimators
computed. Memory is bounded by the chunk size, not by the number of pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, select, update

from store.database import Database
from store.models import OBSERVATIONS, PAGES
from store.types import UTCDateTime, epoch_seconds, utcnow

__all__ = [
    "FetchColumns",
    "PageEstimate",
    "PageState",
    "iter_fetch_columns",
    "iter_page_states",
    "write_estimates",
]

_ANSWERED = (200, 304)


@dataclass(frozen=True)
class PageEstimate:
    """A page's change-rate estimate (changes per day) and bucket (0..255)."""

    page_id: int
    rate: float | None
    rate_low: float | None
    rate_high: float | None
    estimator: str
    bucket: int


@dataclass(frozen=True)
class FetchColumns:
    """The answered fetches of a chunk of pages, column by column, by page then time.

    ``fetched_s`` and ``last_modified_s`` are seconds since the epoch (``last_modified_s``
    None where the server sent none); ``changed`` is True, False or None (first fetch, or
    not compared). Plain lists, so that the caller builds its arrays in one step and no
    datetime object is made per row.
    """

    page_id: list[int]
    host_id: list[int]
    fetched_s: list[float]
    changed: list[bool | None]
    last_modified_s: list[float | None]


def iter_fetch_columns(db: Database, *, chunk_pages: int = 50_000) -> Iterator[FetchColumns]:
    """Yield the answered fetches of ``chunk_pages`` pages at a time, by page then time.

    Keyset pagination on page id: each chunk is one indexed range scan however large the
    store. Times come out of SQL as epoch seconds (no datetime object per row)."""
    p, o = PAGES, OBSERVATIONS
    dialect = db.dialect
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
            rows = conn.execute(
                select(
                    o.c.page_id,
                    p.c.host_id,
                    epoch_seconds(o.c.fetched_at, dialect),
                    o.c.changed,
                    epoch_seconds(o.c.last_modified, dialect),
                )
                .join(p, p.c.id == o.c.page_id)
                .where(
                    o.c.page_id > after,
                    o.c.page_id <= last,
                    o.c.http_status.in_(_ANSWERED),
                )
                .order_by(o.c.page_id, o.c.fetched_at)
            ).all()
        after = int(last)
        if rows:
            page_id, host_id, fetched_s, changed, modified_s = map(list, zip(*rows, strict=True))
            yield FetchColumns(page_id, host_id, fetched_s, changed, modified_s)


_WRITE = (
    update(PAGES)
    .where(PAGES.c.id == bindparam("e_id"))
    .values(
        rate=bindparam("e_rate"),
        rate_low=bindparam("e_low"),
        rate_high=bindparam("e_high"),
        estimator=bindparam("e_estimator"),
        bucket=bindparam("e_bucket"),
        estimated_at=bindparam("e_at", type_=UTCDateTime()),
    )
)


def write_estimates(
    db: Database, estimates: Iterable[PageEstimate], *, now: datetime | None = None
) -> int:
    """Store estimates (one transaction per call); returns how many pages were updated."""
    when = now or utcnow()
    rows: Sequence[dict[str, object]] = [
        {
            "e_id": e.page_id,
            "e_rate": e.rate,
            "e_low": e.rate_low,
            "e_high": e.rate_high,
            "e_estimator": e.estimator,
            "e_bucket": e.bucket,
            "e_at": when,
        }
        for e in estimates
    ]
    if not rows:
        return 0
    db.run_write(lambda conn: conn.execute(_WRITE, rows))
    return len(rows)


@dataclass(frozen=True)
class PageState:
    """What the planner's bucket aggregates need of one page."""

    bucket: int
    rate: float | None
    last_fetch_at: datetime | None


def iter_page_states(db: Database, *, chunk_pages: int = 100_000) -> Iterator[list[PageState]]:
    """Yield every page's bucket, rate and last fetch, ``chunk_pages`` at a time."""
    p = PAGES
    after = 0
    while True:
        with db.read() as conn:
            rows = conn.execute(
                select(p.c.id, p.c.bucket, p.c.rate, p.c.last_fetch_at)
                .where(p.c.id > after)
                .order_by(p.c.id)
                .limit(chunk_pages)
            ).all()
        if not rows:
            return
        after = rows[-1].id
        yield [PageState(r.bucket, r.rate, r.last_fetch_at) for r in rows]
