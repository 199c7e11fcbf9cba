"""Adding pages (seeds and discovered outlinks) in bulk, once per normalized URL.

The caller normalizes URLs and computes their host origin (``crawler.urls`` does both); the
store only persists them. Inserts are chunked and conflict-tolerant, so two workers that
discover the same URL at once, or a seed file given twice, add it once.

**Unfetchable pages.** A discovered URL its host's robots.txt disallows (the crawler
decides, :mod:`crawler.robots`) is added with status ``blocked`` (:func:`add_unfetchable`):
it is not a new page (the pool n, the new-page candidates and their releases read status
``new`` only), and its ``next_due_at`` is the time to check it again, when the rules that
blocked it expire: the lease queue then hands it to a worker, which reads robots.txt anew
and fetches the page if it is allowed now. A URL already stored keeps its row.

**Hosts given up** (``hosts.given_up_at``: their robots.txt was unreachable too many times
in a row, :mod:`store.leases`). A URL the crawl finds on such a host is added unfetchable
with no due time, as the host's other pages are: a link does not bring a host back. A user
does: adding a URL of a given-up host as a seed (:func:`add_pages` without ``discovered``:
``crawlplan seed``, ``seed --now``, ``notify``, the API's urgent and notification calls)
takes the host back in the same transaction: its failure count and ``given_up_at`` are
cleared, its robots.txt is due to be fetched again at once, and its pages without a due
time are due now (as unfetchable pages coming up for a check), so that the next lease reads
robots.txt anew and fetches them if it is reachable now, or counts one more failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import BindParameter, Connection, Insert, Table, bindparam, select, update

from store.database import Database
from store.host_ready import hold_hosts, lower_ready_to
from store.models import HOSTS, PAGES, UNFETCHABLE_STATUS, Host
from store.plans import PLAN_PUBLISHED
from store.types import UTCDateTime, utcnow

if TYPE_CHECKING:
    from store.backend import PagesSql

__all__ = [
    "CHUNK",
    "UNFETCHABLE_STATUS",
    "SeedOutcome",
    "add_pages",
    "add_pages_in",
    "add_unfetchable",
    "add_unfetchable_in",
    "insert_ignoring_conflicts",
    "lock_pages",
]

CHUNK = 5_000


@dataclass(frozen=True)
class SeedOutcome:
    """What :func:`add_pages` did: pages and hosts it added, and URLs that were known already."""

    added: int
    known: int
    hosts_added: int


#: Host ids by origin (built once: a crawl report runs it for the URLs it discovered), and
#: whether each was given up.
_HOST_IDS = select(HOSTS.c.origin, HOSTS.c.id, HOSTS.c.given_up_at.is_not(None)).where(
    HOSTS.c.origin.in_(bindparam("origins", expanding=True))
)
_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_NOW = bindparam("now", type_=UTCDateTime())
#: Taking given-up hosts back: the host, then its pages without a due time (in id order).
_REVIVE_HOSTS = (
    update(HOSTS)
    .where(HOSTS.c.id.in_(_IDS), HOSTS.c.given_up_at.is_not(None))
    .values(given_up_at=None, robots_failures=0, robots_expires_at=_NOW, backoff_until=None)
)
_RESTING_PAGES = (
    select(PAGES.c.id)
    .where(PAGES.c.host_id.in_(_IDS), PAGES.c.next_due_at.is_(None))
    .order_by(PAGES.c.id)
)
_DUE_NOW = (
    update(PAGES)
    .where(PAGES.c.id.in_(_IDS), PAGES.c.status == UNFETCHABLE_STATUS)
    .values(next_due_at=_NOW)
)


def lock_pages(
    conn: Connection, sql: PagesSql, page_ids: Iterable[int], *, lease_id: int | None = None
) -> None:
    """Lock pages ``page_ids`` (and, with ``lease_id``, the pages that lease holds) for
    update, in id order, until the transaction ends (PostgreSQL; SQLite: nothing, one writer
    at a time).

    The writers of several pages whose statements would lock them in another order (a
    report and its OPIC cash moves, a give-back, a renewal, a lease's marks, the urgent lane,
    a release's withdrawal) lock them this way before they write any page or host row; bulk
    writers lock by a nested loop over sorted ids (the page schedule, the estimates) or an
    ordered subquery (withdrawing due times). Two writers then wait for one another instead
    of deadlocking.
    """
    ids = sorted(set(page_ids))
    if ids or lease_id is not None:
        sql.lock(conn, ids, lease_id)


def insert_ignoring_conflicts(db: Database, table: Table) -> Insert:
    """``INSERT ... ON CONFLICT DO NOTHING`` for this database's engine."""
    return db.backend.pages.insert_ignoring_conflicts(table)


def _host_ids(
    db: Database,
    conn: Connection,
    origins: set[str],
    now: datetime,
    given_up: set[int] | None = None,
) -> tuple[dict[str, int], int]:
    """Host ids by origin, the missing hosts added (and how many); the ids of those given up
    go to ``given_up``."""
    found: dict[str, int] = {}
    for origin, host_id, gave_up in conn.execute(_HOST_IDS, {"origins": sorted(origins)}):
        found[origin] = host_id
        if gave_up and given_up is not None:
            given_up.add(host_id)
    missing = sorted(origins - found.keys())
    added = 0
    if missing:
        rows = [
            {"origin": o, "first_seen": now, "next_fetch_at": now, "consecutive_errors": 0}
            for o in missing
        ]
        stmt = insert_ignoring_conflicts(db, HOSTS).returning(HOSTS.c.origin, HOSTS.c.id)
        new = dict(conn.execute(stmt, rows).tuples().all())
        added = len(new)
        found.update(new)
        still = [o for o in missing if o not in found]
        if still:  # added concurrently by another writer
            # .all(): a Result has keys(), so dict.update would take it for a mapping
            found.update(
                conn.execute(select(Host.origin, Host.id).where(Host.origin.in_(still)))
                .tuples()
                .all()
            )
    return found, added


def _add_chunk(
    db: Database,
    conn: Connection,
    chunk: Sequence[tuple[str, str]],
    now: datetime,
    due: bool,
    discovered: bool,
    deferred: list[tuple[list[int], datetime]] | None = None,
    new_after: datetime | None = None,
) -> tuple[int, int, int]:
    given_up: set[int] = set()
    host_ids, hosts_added = _host_ids(db, conn, {origin for _, origin in chunk}, now, given_up)
    if given_up and not discovered:  # a user's URLs take their hosts back
        _take_back(db, conn, sorted(given_up), now)
        given_up.clear()
    seen: set[str] = set()
    urls: list[str] = []
    hosts: list[int] = []
    resting: list[str] = []  # found on given-up hosts: unfetchable, not due
    resting_hosts: list[int] = []
    # In URL order: concurrent writers of the same new URLs insert (and wait on the unique
    # index) in the same order, never in a cycle.
    for url, origin in sorted(chunk):
        if url not in seen:
            seen.add(url)
            host = host_ids[origin]
            (resting if host in given_up else urls).append(url)
            (resting_hosts if host in given_up else hosts).append(host)
    resting_added = 0
    if resting:
        resting_added, _ = db.backend.pages.insert_new(
            conn,
            resting,
            resting_hosts,
            now=now,
            due=None,
            discovered=discovered,
            status=UNFETCHABLE_STATUS,
            new_after=new_after,
        )
    # Once a plan is published, new pages wait for a period release, which picks them by
    # OPIC cash within the plan's quota of new pages (as fetched pages wait for theirs).
    planned = due and conn.execute(PLAN_PUBLISHED).first() is not None
    due_at = now if due and not planned else None
    added, hosts = (
        db.backend.pages.insert_new(
            conn, urls, hosts, now=now, due=due_at, discovered=discovered, new_after=new_after
        )
        if urls
        else (0, [])
    )
    if due_at is not None and added:
        if deferred is not None:  # the caller lowers them once it has locked its pages
            deferred.append((hosts, due_at))
        else:
            # Inserted pages hold their hosts (the foreign key's check): no lock of our own.
            lower_ready_to(conn, db.backend.host_ready, hosts, due_at, held=True)
    added += resting_added
    return added, len(chunk) - added, hosts_added


def _take_back(db: Database, conn: Connection, host_ids: list[int], now: datetime) -> None:
    """Take given-up hosts back (a user added URLs of theirs): the hosts held, their pages
    without a due time locked in id order, then the hosts written (failures and
    ``given_up_at`` cleared, robots.txt due at once, no backoff), then the unfetchable ones
    of those pages made due now, and the hosts' ready times lowered to now."""
    hold_hosts(conn, db.backend.host_ready, host_ids)
    pages = list(conn.execute(_RESTING_PAGES, {"ids": host_ids}).scalars())
    lock_pages(conn, db.backend.pages, pages)
    conn.execute(_REVIVE_HOSTS, {"ids": host_ids, "now": now})
    for start in range(0, len(pages), CHUNK):
        conn.execute(_DUE_NOW, {"ids": pages[start : start + CHUNK], "now": now})
    lower_ready_to(conn, db.backend.host_ready, host_ids, now, held=True)


def add_pages_in(
    db: Database,
    conn: Connection,
    pages: Sequence[tuple[str, str]],
    *,
    now: datetime,
    discovered: bool = True,
    deferred: list[tuple[list[int], datetime]] | None = None,
    new_after: datetime | None = None,
) -> int:
    """:func:`add_pages` of at most :data:`CHUNK` pairs in the caller's transaction (a crawl
    report adds the URLs it found with its observations); returns how many were new.

    ``new_after``: the pages are new since then (``pages.new_after``): they were found on
    re-crawls of pages last fetched then or later, which did not link to them.

    ``deferred``: the hosts whose ``ready_at`` the new pages lower, with their due time, are
    appended there for the caller to lower (:func:`store.host_ready.lower_ready_to`, held)
    after it has locked the pages it writes (a host row updated first could close a cycle
    with a writer that holds those pages and then updates the host), instead of lowered here.
    """
    if not pages:
        return 0
    return _add_chunk(db, conn, pages, now, True, discovered, deferred, new_after)[0]


def _add_unfetchable_chunk(
    db: Database,
    conn: Connection,
    chunk: Sequence[tuple[str, str, datetime]],
    now: datetime,
    deferred: list[tuple[list[int], datetime]] | None = None,
) -> int:
    host_ids, _ = _host_ids(db, conn, {origin for _, origin, _ in chunk}, now)
    by_due: dict[datetime, tuple[list[str], list[int]]] = {}
    seen: set[str] = set()
    for url, origin, check_at in sorted(chunk):  # URL order, as _add_chunk's (no deadlock)
        if url not in seen:
            seen.add(url)
            urls, hosts = by_due.setdefault(check_at, ([], []))
            urls.append(url)
            hosts.append(host_ids[origin])
    added = 0
    for check_at, (urls, hosts) in sorted(by_due.items()):
        count, touched = db.backend.pages.insert_new(
            conn,
            urls,
            hosts,
            now=now,
            due=check_at,
            discovered=True,
            status=UNFETCHABLE_STATUS,
        )
        added += count
        if count:
            if deferred is not None:
                deferred.append((touched, check_at))
            else:
                lower_ready_to(conn, db.backend.host_ready, touched, check_at, held=True)
    return added


def add_unfetchable_in(
    db: Database,
    conn: Connection,
    pages: Sequence[tuple[str, str, datetime]],
    *,
    now: datetime,
    deferred: list[tuple[list[int], datetime]] | None = None,
) -> int:
    """:func:`add_unfetchable` of at most :data:`CHUNK` triples in the caller's transaction
    (``deferred`` as for :func:`add_pages_in`); returns how many were new."""
    if not pages:
        return 0
    return _add_unfetchable_chunk(db, conn, pages, now, deferred)


def add_unfetchable(
    db: Database,
    pages: Iterable[tuple[str, str, datetime]],
    *,
    now: datetime | None = None,
    chunk_size: int = CHUNK,
) -> int:
    """Add discovered ``(normalized_url, origin, check_again_at)`` URLs that robots.txt
    disallows as unfetchable pages (status ``blocked``, due at ``check_again_at``); known
    URLs are left untouched. Returns how many were new. One transaction per chunk."""
    when = now or utcnow()
    items = list(pages)
    added = 0

    def chunk_writer(chunk: list[tuple[str, str, datetime]]) -> Callable[[Connection], int]:
        return lambda conn: _add_unfetchable_chunk(db, conn, chunk, when)

    for start in range(0, len(items), chunk_size):
        added += db.run_write(chunk_writer(items[start : start + chunk_size]))
    return added


def add_pages(
    db: Database,
    pages: Iterable[tuple[str, str]],
    *,
    now: datetime | None = None,
    due: bool = True,
    chunk_size: int = CHUNK,
    discovered: bool = False,
) -> SeedOutcome:
    """Add ``(normalized_url, origin)`` pairs as new pages; known URLs are left untouched.

    Each chunk of ``chunk_size`` pairs is one transaction, so memory stays bounded for any
    input size and an interrupted seed keeps what it committed (seeding again is harmless).
    ``due=True`` makes the pages due for their first fetch at ``now``, until a plan is
    published; from then on new pages wait (``next_due_at`` NULL) for a period release,
    which chooses never-fetched pages by OPIC cash within the plan's new-page quota.
    ``discovered`` marks pages the crawl found (outlinks, redirects), as opposed to seeds.
    """
    now = now or utcnow()
    added = known = hosts_added = 0
    chunk: list[tuple[str, str]] = []

    def flush() -> None:
        nonlocal added, known, hosts_added
        a, k, h = db.run_write(lambda conn: _add_chunk(db, conn, chunk, now, due, discovered))
        added, known, hosts_added = added + a, known + k, hosts_added + h
        chunk.clear()

    for pair in pages:
        chunk.append(pair)
        if len(chunk) >= chunk_size:
            flush()
    if chunk:
        flush()
    return SeedOutcome(added=added, known=known, hosts_added=hosts_added)
