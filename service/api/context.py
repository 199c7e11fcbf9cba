"""What every route of the worker API shares: the store, settings, metrics and the checks.

One :class:`ApiContext` per app, kept in ``app.state.api``; the routers reach it through the
:func:`api_context` dependency, and :func:`authorized` checks the bearer token on every
``/v1`` route.
"""

from __future__ import annotations

import secrets
import threading
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from crawler.addresses import host_refusal
from crawler.urls import InvalidURLError, normalize_url, origin_of
from estimators.opic import crawl_cash_split
from service.api.metrics import ApiMetrics
from service.api.replay import ReplayCache
from service.api.settings import ApiSettings
from store import Database, LeaseQueue
from store.errors import LeaseNotFoundError
from store.leases import lease_worker

__all__ = ["ApiContext", "Context", "api_context", "authorized", "normalized"]

#: Reads ``Authorization: Bearer <token>``; the check against the tokens is ours.
_BEARER = HTTPBearer(auto_error=False)


class ApiContext:
    """The store, the settings and the metrics of one app, and a lease queue per thread
    (FastAPI runs the synchronous routes on a thread pool)."""

    def __init__(self, db: Database, settings: ApiSettings) -> None:
        self.db = db
        self.settings = settings
        self.metrics = ApiMetrics()
        self.lease_replies: ReplayCache[dict[str, Any]] = ReplayCache(
            ttl=settings.policy.lease_seconds
        )
        self._local = threading.local()

    def queue(self) -> LeaseQueue:
        """This thread's lease queue on the store."""
        if not hasattr(self._local, "queue"):
            self._local.queue = LeaseQueue(self.db, self.settings.policy)
        q: LeaseQueue = self._local.queue
        return q

    def cash_split(self, cash: list[float], degree: list[int]) -> list[float]:
        """OPIC: the cash each crawled page's links receive, at the configured damping."""
        return crawl_cash_split(cash, degree, self.settings.opic_damping)

    def owned(self, lease_id: int, worker: str) -> None:
        """Raise 404 when the lease does not exist, 409 when another worker holds it."""
        try:
            holder = lease_worker(self.db, lease_id)
        except LeaseNotFoundError:
            raise HTTPException(404, f"lease {lease_id} does not exist") from None
        if holder != worker:
            raise HTTPException(409, f"lease {lease_id} belongs to another worker")

    def at_most(self, count: int, cap: int, what: str) -> None:
        """Raise 422 when a request carries more than ``cap`` items."""
        if count > cap:
            raise HTTPException(422, f"at most {cap} {what} per request, got {count}")


async def api_context(request: Request) -> ApiContext:
    """The app's shared context (a FastAPI dependency)."""
    context: ApiContext = request.app.state.api
    return context


Context = Annotated[ApiContext, Depends(api_context)]


async def authorized(
    context: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> None:
    """401 unless the request carries one of the tokens (compared in constant time)."""
    given = credentials.credentials.encode() if credentials else b""
    if not any(secrets.compare_digest(given, t.encode()) for t in context.settings.tokens):
        raise HTTPException(
            401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
        )


def normalized(urls: list[str], *, allow_private: bool = False) -> list[tuple[str, str]]:
    """(normalized URL, origin) of each crawlable URL; the others are dropped (counted by the
    caller as rejected): invalid URLs, and unless ``allow_private`` URLs whose host is a
    private, loopback, link-local or reserved address literal, or ``localhost`` (a token
    holder must not queue ``http://169.254.169.254/``; names are checked when fetched)."""
    good: list[tuple[str, str]] = []
    for url in urls:
        try:
            normalized_url = normalize_url(url)
        except InvalidURLError:
            continue
        if not allow_private and host_refusal(urlsplit(normalized_url).hostname or ""):
            continue
        good.append((normalized_url, origin_of(normalized_url)))
    return good
