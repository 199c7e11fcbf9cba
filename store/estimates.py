"""Reading fetch evidence page by page and writing change-rate estimates back, in chunks.

The estimators need, per page, the ordered fetches that got an answer (200 or 304) with
their change flags and Last-Modified dates. :func:`iter_fetch_evidence` streams them in
chunks of whole pages (keyset pagination on page id, so each chunk is one indexed range
scan however large the store), and :func:`write_estimates` stores what the estimators
computed. Memory is bounded by the chunk size, not by the number of pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select, update

from store.database import Database
from store.models import OBSERVATIONS, PAGES
from store.types import UTCDateTime, utcnow

__all__ = [
    "FetchEvidence",
    "PageEstimate",
    "PageState",
    "iter_fetch_evidence",
    "iter_page_states",
    "write_estimates",
]

_ANSWERED = (200, 304)


@dataclass(frozen=True)
class FetchEvidence:
    """One answered fetch of one page."""

    page_id: int
    host_id: int
    fetched_at: datetime
    changed: bool | None
    last_modified: datetime | None


@dataclass(frozen=True)
class PageEstimate:
    """A page's change-rate estimate (changes per day) and bucket (0..255)."""

    page_id: int
    rate: float | None
    rate_low: float | None
    rate_high: float | None
    estimator: str
    bucket: int


def iter_fetch_evidence(
    db: Database, *, chunk_pages: int = 20_000
) -> Iterator[list[FetchEvidence]]:
    """Yield the answered fetches of ``chunk_pages`` pages at a time, by page then time."""
    p, o = PAGES, OBSERVATIONS
    after = 0
    while True:
        with db.read() as conn:
            ids = (
                conn.execute(
                    select(p.c.id).where(p.c.id > after).order_by(p.c.id).limit(chunk_pages)
                )
                .scalars()
                .all()
            )
            if not ids:
                return
            rows = conn.execute(
                select(o.c.page_id, p.c.host_id, o.c.fetched_at, o.c.changed, o.c.last_modified)
                .join(p, p.c.id == o.c.page_id)
                .where(
                    o.c.page_id >= ids[0],
                    o.c.page_id <= ids[-1],
                    o.c.http_status.in_(_ANSWERED),
                )
                .order_by(o.c.page_id, o.c.fetched_at)
            ).all()
        after = ids[-1]
        if rows:
            yield [FetchEvidence(*row) for row in rows]


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
