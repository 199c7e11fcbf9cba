"""Adding pages: once per URL, hosts created on the fly, chunked, concurrent-safe."""

from __future__ import annotations

from sqlalchemy import func, select

from store import Database, add_pages
from store.models import Host, Page
from tests.conftest import T0, orm_one


def _pairs(n: int, hosts: int = 3) -> list[tuple[str, str]]:
    return [(f"http://h{i % hosts}.test/p{i}", f"http://h{i % hosts}.test") for i in range(n)]


def test_pages_are_added_once_and_hosts_created(db: Database) -> None:
    first = add_pages(db, _pairs(10), now=T0)
    assert (first.added, first.known, first.hosts_added) == (10, 0, 3)
    again = add_pages(db, _pairs(12), now=T0)
    assert (again.added, again.known, again.hosts_added) == (2, 10, 0)
    with db.read() as conn:
        assert conn.execute(select(func.count()).select_from(Page)).scalar_one() == 12
        assert conn.execute(select(func.count()).select_from(Host)).scalar_one() == 3
        page = orm_one(db, select(Page).where(Page.url == "http://h1.test/p1"))
    assert page.status == "new" and page.bucket == 0
    assert page.next_due_at == T0 and page.first_seen == T0
    assert page.next_due_at.tzinfo is not None


def test_duplicates_inside_one_chunk_and_across_chunks(db: Database) -> None:
    pairs = _pairs(25) + _pairs(25)
    outcome = add_pages(db, pairs, now=T0, chunk_size=7)
    assert outcome.added == 25
    assert outcome.known == 25
    assert outcome.hosts_added == 3


def test_pages_not_due_when_asked(db: Database) -> None:
    add_pages(db, _pairs(3), now=T0, due=False)
    with db.read() as conn:
        due = conn.execute(select(Page.next_due_at)).scalars().all()
    assert due == [None, None, None]
