"""The interfaces each engine's SQL implements, and the values that cross them.

:class:`ReleaseSql` reads a period's candidates and writes its release queue;
:class:`LeaseSql` reads a lease batch's due pages and marks them leased;
:class:`HostReadySql` spells the expressions and row locks of ``hosts.ready_at``;
:class:`PagesSql` adds new pages and locks pages. Their callers (:mod:`store.releases`,
:mod:`store.leases`, :mod:`store.host_ready`, :mod:`store.pages`) own the transaction:
every method runs in the connection it is given and commits nothing.

This module sits below :mod:`store.database` (a :class:`~store.database.Database` holds a
:class:`Backend`) and below the engines' modules (:mod:`store.dialects`) that implement it,
so neither imports the other: what an engine needs of the generic modules (the
:class:`LeasedPage` it builds, :data:`CHUNK`) lives here, and the store's imports go one way
(the layers contract of ``pyproject.toml``).

Imports: the standard library, ``sqlalchemy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy import ColumnElement, Connection, FromClause, Insert, Select, Table, Update

__all__ = [
    "CHUNK",
    "Backend",
    "ChosenPages",
    "HostReadySql",
    "LeaseBatch",
    "LeaseSql",
    "LeasedPage",
    "PagesSql",
    "ReleaseSql",
]

#: Hosts per statement when holding, taking, recomputing or lowering by id (a list parameter
#: of up to this many ids).
CHUNK = 5_000


class LeasedPage(NamedTuple):
    """A page handed to a worker, with the validators it needs for a conditional GET.

    A named tuple, not a dataclass: a lease batch builds one per page (100,000 for a
    period's release), and a tuple is built four times faster than a frozen dataclass.
    Exported by :mod:`store.leases`; defined here, where each engine's
    :meth:`LeaseSql.leased_pages` builds it.
    """

    page_id: int
    url: str
    status: str
    last_fetch_at: datetime | None
    etag: str | None
    last_modified: datetime | None
    signature: str | None


@dataclass(frozen=True)
class ChosenPages:
    """The pages a release queues, one entry per page in each list, each page once.

    ``due_s``: the release time, seconds since the Unix epoch; ``fetches``: the page's fetch
    count when its candidate was read (it is queued only if unchanged). ``buckets`` and
    ``keys`` (both or neither): the candidate's bucket (-1: a new page) and index key
    (:attr:`store.releases.Candidates.key`), with which the page's entry is found in the
    index its candidate query read; pages in the order they were read are looked up
    fastest.
    """

    plan_id: int
    period: int
    now: datetime
    ids: list[int]
    due_s: list[float]
    fetches: list[int]
    buckets: list[int] | None = None
    keys: list[Any] | None = None


class ReleaseSql(Protocol):
    """One engine's statements of a period release."""

    def refresh_rows(
        self, conn: Connection, asked: Sequence[tuple[int, int]], *, now: datetime
    ) -> list[list[Any]]:
        """Per ``(bucket, limit)`` of ``asked``, in that order, up to ``limit`` candidate rows
        ``(id, host_id, last fetch seconds, importance, pending, fetches, key)``, longest
        unvisited first: ``(last_fetch_at, importance desc, id)`` order
        (:func:`store.releases.refresh_candidates`)."""
        ...

    def host_rows(
        self, conn: Connection, hosts: Sequence[int], limit: int, *, now: datetime
    ) -> list[list[Any]]:
        """Per host of ``hosts``, in that order, its candidate rows as :meth:`refresh_rows`
        gives a bucket's, with the page's bucket last, up to ``limit`` per bucket, longest
        unvisited first in each, ordered by bucket."""
        ...

    def new_page_rows(self, conn: Connection, limit: int, *, now: datetime) -> list[Any]:
        """Up to ``limit`` never-fetched candidate rows, highest cash first (cash in place of
        the seconds and of the key)."""
        ...

    def serialize(self, conn: Connection) -> None:
        """Wait until no other release writes the queue (for the rest of the transaction)."""
        ...

    def queue(
        self, conn: Connection, chosen: ChosenPages, withdraw: Sequence[int]
    ) -> tuple[int, list[int]]:
        """Withdraw the due times of pages ``withdraw`` and queue ``chosen``; the number of
        pages queued and the hosts of the withdrawn pages (in id order)."""
        ...


@dataclass
class LeaseBatch:
    """A lease batch being taken: per host its pages (due rows, in due order), and the pages
    to mark leased in ``pages`` (queued pages need no mark: their host's lease is one)."""

    by_host: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    pages: list[tuple[int, int]] = field(default_factory=list)  # (page id, host id)


class LeaseSql(Protocol):
    """One engine's statements of a lease."""

    def begin(self, conn: Connection) -> None:
        """Prepare the lease's transaction (session settings)."""
        ...

    def for_lease(self, hosts_due: Select[Any]) -> Select[Any]:
        """The query of the hosts a lease takes, with the row locks the engine needs."""
        ...

    def for_report(self, pages_reported: Select[Any]) -> Select[Any]:
        """The query of a report's pages, with the row locks the engine needs."""
        ...

    def due_rows(
        self, conn: Connection, host_ids: list[int], per_host: int, now: datetime
    ) -> list[tuple[Any, ...]]:
        """Up to ``per_host`` due, free pages of each host from ``pages`` and as many from the
        release queue, in host order then ``(due, id)`` order: plain tuples ``(host_id, id,
        url, status, last_fetch_at, etag, last_modified, signature, due, queued)``, times as
        the driver gives them."""
        ...

    def take(
        self, conn: Connection, worker: str, batch: LeaseBatch, now: datetime, expires: datetime
    ) -> dict[int, int]:
        """Insert the batch's leases and mark their hosts and pages; lease id by host id."""
        ...

    def leased_pages(self, rows: Sequence[tuple[Any, ...]]) -> tuple[LeasedPage, ...]:
        """The :class:`LeasedPage` of each due row (times as aware UTC)."""
        ...


class HostReadySql(Protocol):
    """One engine's part of keeping ``hosts.ready_at`` (:mod:`store.host_ready`): the
    expressions the engines spell differently, and the row locks that keep a recomputation
    from undoing a writer's lowering (the module docstring of :mod:`store.host_ready`).

    Implementations hold no state: :mod:`store.host_ready` builds its statements once per
    implementation class.
    """

    def greatest(self, *values: ColumnElement[Any]) -> ColumnElement[Any]:
        """The largest of ``values`` (none NULL)."""
        ...

    def least(self, a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        """The smaller of ``a`` and ``b`` ignoring a NULL one; NULL when both are."""
        ...

    def host_ids(self) -> FromClause:
        """A one-column table (column ``id``) of the host ids in the list parameter ``ids``
        (up to :data:`CHUNK` of them)."""
        ...

    def skip_held(self, hosts: Select[Any]) -> Select[Any]:
        """The query of hosts ``hosts`` (rows of ``hosts``), taking the hosts for
        recomputation: those a writer holds are left out (and keep their value)."""
        ...

    def hold(self, conn: Connection, host_ids: list[int]) -> None:
        """Hold hosts ``host_ids`` (distinct, in id order) against recomputation until the
        transaction ends: before their ``ready_at`` is lowered or their pages made due."""
        ...

    def hold_queued(self, conn: Connection, plan_id: int, period: int) -> None:
        """Hold the hosts of the pages period ``period`` of plan ``plan_id`` queued, as
        :meth:`hold` does."""
        ...

    def take(self, conn: Connection, host_ids: list[int]) -> list[int]:
        """Those of hosts ``host_ids`` (distinct, in id order) this transaction may
        recompute, taken until it ends (none a writer holds), in id order."""
        ...

    def recompute_all(
        self, conn: Connection, hosts: Select[Any], *, at_once: Update, by_id: Update
    ) -> int:
        """Recompute ``ready_at`` of the hosts of query ``hosts`` (their ids, in id order)
        no writer holds, by ``at_once`` (the same hosts in one statement) or by ``by_id``
        (list parameter ``ids``, up to :data:`CHUNK`) on the hosts taken;
        the number of hosts whose value changed."""
        ...


class PagesSql(Protocol):
    """One engine's statements of pages (:mod:`store.pages`)."""

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        """``INSERT ... ON CONFLICT DO NOTHING`` into ``table``."""
        ...

    def insert_new(
        self,
        conn: Connection,
        urls: list[str],
        hosts: list[int],
        *,
        now: datetime,
        due: datetime | None,
        discovered: bool,
        status: str = "new",
        new_after: datetime | None = None,
    ) -> tuple[int, list[int]]:
        """Insert page ``urls[k]`` of host ``hosts[k]`` (distinct URLs, in URL order) with
        ``status`` (``new``, or ``blocked``: unfetchable), never fetched, first seen at
        ``now``, new since ``new_after`` (``pages.new_after``; None: not known to be new)
        and due at ``due`` (None: not due), known URLs left as they are; the number
        of pages inserted, and hosts that include those of every page inserted (their
        ``ready_at`` may need lowering)."""
        ...

    def lock(self, conn: Connection, page_ids: list[int], lease_id: int | None) -> None:
        """Lock pages ``page_ids`` (distinct, in id order) and, with ``lease_id``, the pages
        that lease holds, for update in id order until the transaction ends."""
        ...


@dataclass(frozen=True)
class Backend:
    """The SQL of one engine: what a :class:`~store.database.Database` runs."""

    releases: ReleaseSql
    leases: LeaseSql
    host_ready: HostReadySql
    pages: PagesSql
