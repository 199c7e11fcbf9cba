"""Where a worker gets its work: the store's lease queue, or the worker API over HTTP.

:class:`WorkQueue` is what :class:`crawler.worker.CrawlWorker` needs of either: lease hosts,
renew, report, finish and release leases, add discovered URLs (``discovered``: new candidates
``(url, origin)``; ``blocked``: unfetchable ones ``(url, origin, check again at)`` that
robots.txt disallows), record change notifications
(a sitemap's ``lastmod``), and ask whether work remains.
:class:`store.LeaseQueue` is one (in-process, with database credentials);
:class:`crawler.remote.RemoteWorkQueue` is the other (``crawlplan worker --api URL``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from store import FetchResult, HostUpdate, Lease, ReportOutcome
from store.importance import CashSplit

__all__ = ["QueuePolicy", "WorkQueue"]


class QueuePolicy(Protocol):
    """The part of the lease policy a worker reads: how long a lease lasts (seconds)."""

    @property
    def lease_seconds(self) -> float: ...


class WorkQueue(Protocol):
    """A source of leases and a sink of results; see the module docstring."""

    @property
    def policy(self) -> QueuePolicy: ...

    def lease(self, worker: str, *, max_urls: int | None = None) -> list[Lease]: ...

    def renew(self, lease_id: int) -> datetime | None: ...

    def report(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        *,
        cash_split: CashSplit | None = None,
        discovered: Sequence[tuple[str, str]] = (),
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> ReportOutcome: ...

    def finish(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        host: HostUpdate | None = None,
        *,
        cash_split: CashSplit | None = None,
        discovered: Sequence[tuple[str, str]] = (),
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> tuple[ReportOutcome, int]: ...

    def release(self, lease_id: int, host: HostUpdate | None = None) -> int: ...

    def add_pages(
        self,
        pages: Iterable[tuple[str, str]],
        *,
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> int: ...

    def add_notifications(
        self, notifications: Sequence[tuple[str, str, datetime | None]]
    ) -> int: ...

    def work_remaining(self) -> bool: ...
