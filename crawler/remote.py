"""The worker API's client: a :class:`crawler.work_queue.WorkQueue` over HTTP/JSON.

``crawlplan worker --api URL`` runs the same worker pool as ``crawlplan crawl`` with this
queue in place of the store's, so a machine that crawls needs a URL and a token, never the
database's credentials.

**Nothing lost when the server goes away.** Every call is retried with exponential backoff
(connection refused or reset, 502, 503, 504) for up to ``retry_seconds``, so a server
restart costs a pause, not work. Retrying a report is safe: the store records a fetch once per
(lease, page) however often it is reported; retrying a lease is safe too: the call carries a
``request_id`` and the server answers a retry with the leases it granted the first time. A
call that still fails raises :class:`RemoteQueueError`; the worker's lease then expires on
the server and its unreported pages return to the pool.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import requests

from store import FetchResult, HostUpdate, Lease, LeasedPage, ReportOutcome
from store.errors import LeaseNotFoundError, StoreError
from store.importance import CashSplit

__all__ = ["RemotePolicy", "RemoteQueueError", "RemoteWorkQueue"]

_RETRY_STATUS = {502, 503, 504}
_PAGES_PER_CALL = 5_000


class RemoteQueueError(StoreError):
    """The worker API refused a call or could not be reached in time."""


@dataclasses.dataclass(frozen=True)
class RemotePolicy:
    """The server's lease length, seconds (what a worker needs to renew in time)."""

    lease_seconds: float


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    return value


def _payload(item: Any) -> dict[str, Any]:
    return {k: _json(v) for k, v in dataclasses.asdict(item).items()}


#: The worker API's limits on a result's fields (service.api.schemas.FetchResultIn), kept here so
#: that an odd page (a 3,000-character Location, 10,000 links) is sent trimmed rather than
#: refused: characters for text fields, items for outlinks, characters per URL.
_TEXT_LIMITS = {"error": 2_000, "etag": 512, "signature": 64}
_MAX_OUTLINKS = 5_000
_MAX_URL = 2_048


def _result_payload(result: FetchResult) -> dict[str, Any]:
    body = _payload(result)
    for name, limit in _TEXT_LIMITS.items():
        value = body.get(name)
        if isinstance(value, str):
            value = value.replace("\x00", "")
            body[name] = (
                value[:limit] if name == "error" else (value if len(value) <= limit else None)
            )
    body["outlinks"] = [u for u in body["outlinks"] if len(u) <= _MAX_URL][:_MAX_OUTLINKS]
    return body


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _host_payload(host: HostUpdate) -> dict[str, Any]:
    body = _payload(host)
    if isinstance(body.get("robots_txt"), str):
        body["robots_txt"] = body["robots_txt"].replace("\x00", "")[: 512 * 1024]
    return body


def _lease(data: dict[str, Any]) -> Lease:
    pages = tuple(
        LeasedPage(
            page_id=p["page_id"],
            url=p["url"],
            status=p["status"],
            last_fetch_at=_time(p["last_fetch_at"]),
            etag=p["etag"],
            last_modified=_time(p["last_modified"]),
            signature=p["signature"],
        )
        for p in data["pages"]
    )
    expires = _time(data["expires_at"])
    assert expires is not None
    return Lease(
        lease_id=data["lease_id"],
        worker=data["worker"],
        host_id=data["host_id"],
        origin=data["origin"],
        expires_at=expires,
        crawl_delay=data["crawl_delay"],
        robots_txt=data["robots_txt"],
        robots_status=data["robots_status"],
        robots_fetched_at=_time(data["robots_fetched_at"]),
        robots_expires_at=_time(data["robots_expires_at"]),
        pages=pages,
        robots_failures=int(data.get("robots_failures") or 0),
        noise_rules=data.get("noise_rules"),
        noise_checked_at=_time(data.get("noise_checked_at")),
    )


class RemoteWorkQueue:
    """One worker's connection to the worker API at ``base_url`` with ``token``.

    ``worker`` names the worker on the server (leases are checked against it); a lease
    call names it again, and later calls use that name. ``timeout`` is (connect, read)
    seconds per request.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        worker: str = "worker",
        *,
        timeout: tuple[float, float] = (5.0, 60.0),
        retry_seconds: float = 120.0,
        session: requests.Session | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.worker = worker
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self._policy: RemotePolicy | None = None

    # -- transport ---------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        deadline = time.monotonic() + self.retry_seconds
        wait = 0.25
        while True:
            try:
                response = self.session.request(
                    method, self.base_url + path, json=body, timeout=self.timeout
                )
            except requests.RequestException as error:  # refused, reset, timed out, cut short
                problem = f"cannot reach the worker API at {self.base_url}: {error}"
            else:
                if response.status_code < 300:
                    try:
                        return response.json()
                    except ValueError:
                        raise RemoteQueueError(
                            f"{method} {path}: the worker API answered something not JSON"
                        ) from None
                detail = _detail(response)
                if response.status_code == 404 and "/leases/" in path:
                    raise LeaseNotFoundError(detail)
                if response.status_code not in _RETRY_STATUS:
                    raise RemoteQueueError(
                        f"{method} {path}: HTTP {response.status_code}: {detail}"
                    )
                problem = f"{method} {path}: HTTP {response.status_code}: {detail}"
            if time.monotonic() + wait > deadline:
                raise RemoteQueueError(f"{problem} (gave up after {self.retry_seconds:.0f} s)")
            time.sleep(wait)
            wait = min(wait * 2, 10.0)

    # -- WorkQueue ---------------------------------------------------------------------------
    @property
    def policy(self) -> RemotePolicy:
        """The server's lease policy (read with the first lease)."""
        if self._policy is None:
            self._policy = RemotePolicy(float(self._call("GET", "/v1/work")["lease_seconds"]))
        return self._policy

    def lease(self, worker: str, *, max_urls: int | None = None) -> list[Lease]:
        """Lease hosts with due URLs for ``worker``."""
        self.worker = worker
        # One id for every retry of this call: a lease the server granted but whose answer
        # was lost (a read timeout) is answered again, not granted twice.
        body = {"worker": worker, "max_urls": max_urls, "request_id": uuid.uuid4().hex}
        data = self._call("POST", "/v1/leases", body)
        self._policy = RemotePolicy(float(data["lease_seconds"]))
        return [_lease(x) for x in data["leases"]]

    def renew(self, lease_id: int) -> datetime | None:
        """Extend a live lease; None when it had expired or was released."""
        data = self._call("POST", f"/v1/leases/{lease_id}/renew", {"worker": self.worker})
        return _time(data["expires_at"])

    def _results(self, results: Sequence[FetchResult]) -> list[dict[str, Any]]:
        return [_result_payload(r) for r in results]

    def report(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        *,
        cash_split: CashSplit | None = None,
        discovered: Sequence[tuple[str, str]] = (),
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> ReportOutcome:
        """Record results (the server splits OPIC cash with its own damping), after adding
        the ``discovered`` and ``blocked`` pages (a call of their own, first, so the cash
        reaches them)."""
        added, unfetchable = self._add(discovered, blocked)
        body = {"worker": self.worker, "results": self._results(results)}
        data = self._call("POST", f"/v1/leases/{lease_id}/report", body)
        return ReportOutcome(data["recorded"], data["duplicates"], data["late"], added, unfetchable)

    def finish(
        self,
        lease_id: int,
        results: Sequence[FetchResult],
        host: HostUpdate | None = None,
        *,
        cash_split: CashSplit | None = None,
        discovered: Sequence[tuple[str, str]] = (),
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> tuple[ReportOutcome, int]:
        """Record results and hand the host back (``discovered`` and ``blocked`` pages
        added first)."""
        added, unfetchable = self._add(discovered, blocked)
        body: dict[str, Any] = {"worker": self.worker, "results": self._results(results)}
        if host is not None:
            body["host"] = _host_payload(host)
        data = self._call("POST", f"/v1/leases/{lease_id}/finish", body)
        outcome = ReportOutcome(
            data["recorded"], data["duplicates"], data["late"], added, unfetchable
        )
        return outcome, data["returned"]

    def release(self, lease_id: int, host: HostUpdate | None = None) -> int:
        """Hand a host back without results."""
        body: dict[str, Any] = {"worker": self.worker}
        if host is not None:
            body["host"] = _host_payload(host)
        return int(self._call("POST", f"/v1/leases/{lease_id}/release", body)["returned"])

    def add_pages(
        self,
        pages: Iterable[tuple[str, str]],
        *,
        blocked: Sequence[tuple[str, str, datetime]] = (),
    ) -> int:
        """Add discovered URLs (the server normalizes them again), and ``blocked`` ones as
        unfetchable; returns how many new candidates were added."""
        return self._add(list(pages), blocked)[0]

    def _add(
        self, pages: Sequence[tuple[str, str]], blocked: Sequence[tuple[str, str, datetime]]
    ) -> tuple[int, int]:
        """``POST /v1/pages`` in chunks: new candidates and new unfetchable pages added."""
        urls = [url for url, _origin in pages]
        unfetchable = [{"url": url, "check_at": at.isoformat()} for url, _origin, at in blocked]
        added = blocked_added = 0
        for start in range(0, max(len(urls), len(unfetchable)), _PAGES_PER_CALL):
            body: dict[str, Any] = {"urls": urls[start : start + _PAGES_PER_CALL]}
            if unfetchable[start : start + _PAGES_PER_CALL]:
                body["blocked"] = unfetchable[start : start + _PAGES_PER_CALL]
            data = self._call("POST", "/v1/pages", body)
            added += int(data["added"])
            blocked_added += int(data.get("unfetchable", 0))
        return added, blocked_added

    def add_notifications(self, notifications: Sequence[tuple[str, str, datetime | None]]) -> int:
        """Record change notifications (a sitemap's lastmod); returns how many were new."""
        recorded = 0
        items = [
            {"url": url, "changed_at": None if at is None else at.isoformat()}
            for url, _origin, at in notifications
        ]
        for start in range(0, len(items), _PAGES_PER_CALL):
            chunk = items[start : start + _PAGES_PER_CALL]
            recorded += int(
                self._call("POST", "/v1/notifications", {"notifications": chunk})["recorded"]
            )
        return recorded

    def work_remaining(self) -> bool:
        """Whether anything is due or leased on the server."""
        return bool(self._call("GET", "/v1/work")["remaining"])


def _detail(response: requests.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return str(detail)[:500]
