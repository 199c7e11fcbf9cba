"""The worker API (``crawlplan serve``): HTTP/JSON over the store, so remote workers need no
database credentials.

Endpoints (OpenAPI at ``/openapi.json``, browsable at ``/docs``); all under ``/v1`` need
``Authorization: Bearer <token>`` with one of the configured tokens:

==========================================  ===============================================
``POST /v1/leases``                         lease a batch of hosts with their due URLs
``POST /v1/leases/{id}/renew``              extend a live lease
``POST /v1/leases/{id}/report``             record fetch results (idempotent per page)
``POST /v1/leases/{id}/finish``             report and hand the host back
``POST /v1/leases/{id}/release``            hand the host back unreported
``POST /v1/pages``                          add discovered URLs
``POST /v1/urgent``                         crawl URLs ahead of the plan (immediate lane)
``POST /v1/notifications``                  a site says pages changed (push or sitemap)
``GET  /v1/work``                           whether anything is due or leased
``GET  /v1/plan``                           the current plan and its quotas
``GET  /health``                            liveness and the store's reachability (no token)
``GET  /metrics``                           Prometheus text format (no token)
==========================================  ===============================================

**Hostile clients.** Bodies are validated field by field (types, ranges, lengths, times
between 1970 and 9000, no unknown keys; NUL characters dropped) and refused with 422 naming
the field; batches are capped (URLs per lease, results per report, URLs per page add); a body
over ``max_body_bytes`` is refused with 413, whether its Content-Length says so or a chunked
body runs over; a token is compared in constant time; a store failure is a 503
without details. The server (uvicorn) caps concurrent connections and idle keep-alive, so a
slow or flooding client cannot hold every worker.

**Trust.** Tokens are trusted: the ``worker`` name checked against a lease's holder (409
otherwise) keeps honest workers from reporting on each other's leases by mistake, but any
holder of a token can name any worker. Give tokens only to your own workers.

Service edge: wires the store to HTTP; no planning logic here.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import exc as sa_exc

from crawler.urls import InvalidURLError, normalize_url, origin_of
from estimators.opic import crawl_cash_split
from service.api.replay import ReplayCache
from service.pipeline import release_period
from store import (
    Database,
    FetchResult,
    HostUpdate,
    Lease,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    latest_plan,
    work_remaining,
)
from store.errors import InvalidReportError, LeaseNotFoundError
from store.leases import ReportOutcome, lease_worker
from store.notifications import Notification, record_notifications
from store.plans import plan_detail
from store.urgent import request_urgent

__all__ = ["API_VERSION", "ApiSettings", "create_app"]

API_VERSION = "1.0"

log = logging.getLogger(__name__)

#: Reads ``Authorization: Bearer <token>``; the check against the tokens is ours.
_BEARER = HTTPBearer(auto_error=False)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class ApiSettings:
    """Tokens accepted, the lease policy, batch caps, the body cap (bytes), OPIC damping."""

    tokens: tuple[str, ...]
    policy: LeasePolicy = dataclasses.field(default_factory=LeasePolicy)
    max_results: int = 1_000
    max_new_urls: int = 10_000
    max_body_bytes: int = 8 * 1024 * 1024
    opic_damping: float = 0.85
    #: Seconds between checks for a new plan period to release (None: never, e.g. when a
    #: ``crawlplan crawl`` on the same store releases them).
    release_every: float | None = 5.0
    min_delay_seconds: float = 1.0

    def __post_init__(self) -> None:
        if not self.tokens or any(len(t) < 16 for t in self.tokens):
            raise ValueError("the worker API needs tokens of at least 16 characters")


def _plausible_time(value: datetime) -> datetime:
    if not 1970 <= value.year <= 9000:
        raise ValueError("must be a time between the years 1970 and 9000")
    return value


Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.:@-]+$")]
Url = Annotated[str, Field(min_length=1, max_length=2048)]
#: A time between 1970 and 9000 (the store's timestamps hold no more), with a time zone.
Time = Annotated[AwareDatetime, AfterValidator(_plausible_time)]
#: A lease id as the store holds it (a signed 64-bit integer).
LeaseId = Annotated[int, Path(ge=1, le=2**63 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """NUL characters cannot be stored (PostgreSQL refuses them in text): dropped."""
        return value.replace("\x00", "") if isinstance(value, str) else value


class LeaseRequest(_Strict):
    """Ask for work: the worker's name and the most URLs it wants."""

    worker: Name
    max_urls: int | None = Field(default=None, ge=1, le=10_000)
    #: The same for every retry of one call: a repeated id gets the first call's answer.
    request_id: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$"
    )


class FetchResultIn(_Strict):
    """One fetched page, as :class:`store.FetchResult`."""

    page_id: int = Field(ge=1, le=2**63 - 1)
    fetched_at: Time
    status: Literal["ok", "gone", "redirect", "blocked", "error"]
    http_status: int | None = Field(default=None, ge=100, le=599)
    changed: bool | None = None
    last_modified: Time | None = None
    etag: str | None = Field(default=None, max_length=512)
    signature: str | None = Field(default=None, max_length=64)
    bytes: int | None = Field(default=None, ge=0, le=2**63 - 1)
    duration: float | None = Field(default=None, ge=0, le=86_400)
    error: str | None = Field(default=None, max_length=2_000)
    next_due_at: Time | None = None
    outlinks: list[Url] = Field(default_factory=list, max_length=5_000)


class HostUpdateIn(_Strict):
    """Politeness and robots state handed back with a host, as :class:`store.HostUpdate`."""

    next_fetch_at: Time | None = None
    backoff_until: Time | None = None
    consecutive_errors: int | None = Field(default=None, ge=0, le=1_000_000)
    crawl_delay: float | None = Field(default=None, ge=0, le=86_400 * 365)
    robots_txt: str | None = Field(default=None, max_length=512 * 1024)
    robots_status: int | None = Field(default=None, ge=0, le=999)
    robots_fetched_at: Time | None = None
    robots_expires_at: Time | None = None


class ReportRequest(_Strict):
    """Results of a lease's pages."""

    worker: Name
    results: list[FetchResultIn] = Field(default_factory=list)


class FinishRequest(ReportRequest):
    """Results and the host's state: the end of a lease."""

    host: HostUpdateIn | None = None


class ReleaseRequest(_Strict):
    """Hand a host back without results."""

    worker: Name
    host: HostUpdateIn | None = None


class PagesRequest(_Strict):
    """URLs discovered by a worker."""

    urls: list[Url]


class NotificationIn(_Strict):
    """A site says ``url`` changed at ``changed_at`` (default: now)."""

    url: Url
    changed_at: Time | None = None


class NotificationsRequest(_Strict):
    """Change notifications pushed by a site (or a sitemap's lastmod dates)."""

    notifications: list[NotificationIn]


class _Metrics:
    """Prometheus metrics of one app (its own registry, so tests can build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "crawlplan_api_requests", "API requests", ["endpoint", "code"], registry=r
        )
        self.seconds = Histogram(
            "crawlplan_api_request_seconds", "API request time", ["endpoint"], registry=r
        )
        self.leases = Counter("crawlplan_leases", "hosts leased", registry=r)
        self.urls = Counter("crawlplan_leased_urls", "URLs leased", registry=r)
        self.results = Counter(
            "crawlplan_results", "fetch results recorded", ["outcome"], registry=r
        )
        self.discovered = Counter("crawlplan_discovered_urls", "new URLs added", registry=r)
        self.urgent = Counter("crawlplan_urgent_urls", "URLs put ahead of the plan", registry=r)
        self.notifications = Counter(
            "crawlplan_notifications", "change notifications recorded", registry=r
        )
        self.plan = Gauge("crawlplan_plan_version", "current plan version (0: none)", registry=r)


class _BodyLimit:
    """ASGI middleware: refuse a request body over ``limit`` bytes with 413, counting the
    bytes as they arrive (a client may lie in Content-Length or send none, e.g. chunked).

    The body is read whole before the application sees it (the application would buffer it
    anyway to parse the JSON), so an oversized body is refused before any handler runs.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                # Read on (up to four times the cap more) before answering: a server that
                # closes on a client still sending makes the kernel reset the connection,
                # and the client loses the 413 with it.
                drained = 0
                while message.get("more_body", False) and drained <= 4 * self.limit:
                    message = await receive()
                    if message["type"] != "http.request":
                        return
                    drained += len(message.get("body", b""))
                await _too_large(send, self.limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: Message | None = {"type": "http.request", "body": b"".join(chunks)}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    body = f'{{"detail": "request body over {limit} bytes"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _normalized(urls: list[str]) -> list[tuple[str, str]]:
    """(normalized URL, origin) of each crawlable URL; the others are dropped (counted by the
    caller as rejected)."""
    good: list[tuple[str, str]] = []
    for url in urls:
        try:
            normalized = normalize_url(url)
        except InvalidURLError:
            continue
        good.append((normalized, origin_of(normalized)))
    return good


def _lease_json(lease: Lease) -> dict[str, Any]:
    """A lease as the worker API sends it: its fields, and each page as an object (a shallow
    read: ``dataclasses.asdict`` would deep-copy every page's fields first)."""
    body = {f.name: getattr(lease, f.name) for f in dataclasses.fields(lease)}
    body["pages"] = [page._asdict() for page in lease.pages]
    return body


def _report_body(out: ReportOutcome) -> dict[str, int]:
    """A report's answer: the API adds discovered URLs through ``/v1/pages``, not here."""
    return {"recorded": out.recorded, "duplicates": out.duplicates, "late": out.late}


def _result(item: FetchResultIn) -> FetchResult:
    return FetchResult(**{**item.model_dump(), "outlinks": tuple(item.outlinks)})


def _host(item: HostUpdateIn | None) -> HostUpdate | None:
    return None if item is None else HostUpdate(**item.model_dump())


def create_app(db: Database, settings: ApiSettings) -> FastAPI:
    """The worker API over ``db``; while it runs, a thread releases each new plan period's
    work (:func:`service.pipeline.release_period`), as ``crawlplan crawl`` does in process."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        every = settings.release_every

        def releaser() -> None:
            while every is not None and not stop.is_set():
                try:
                    release_period(db, min_delay_seconds=settings.min_delay_seconds)
                except Exception as error:
                    log.warning("period release failed: %s", error)
                stop.wait(every)

        thread = threading.Thread(target=releaser, name="period-releaser", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=10)

    app = FastAPI(
        title="crawlplan worker API",
        version=API_VERSION,
        description="Lease URLs, report what was fetched, read the plan.",
        lifespan=lifespan,
    )
    metrics = _Metrics()
    local = threading.local()
    damping = settings.opic_damping

    def cash_split(cash: list[float], degree: list[int]) -> list[float]:
        return crawl_cash_split(cash, degree, damping)

    def queue() -> LeaseQueue:
        if not hasattr(local, "queue"):
            local.queue = LeaseQueue(db, settings.policy)
        q: LeaseQueue = local.queue
        return q

    def authorized(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        given = credentials.credentials.encode() if credentials else b""
        if not any(secrets.compare_digest(given, t.encode()) for t in settings.tokens):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    def owned(lease_id: LeaseId, worker: str) -> None:
        try:
            holder = lease_worker(db, lease_id)
        except LeaseNotFoundError:
            raise HTTPException(404, f"lease {lease_id} does not exist") from None
        if holder != worker:
            raise HTTPException(409, f"lease {lease_id} belongs to another worker")

    @app.middleware("http")
    async def measure(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        route = request.scope.get("route")
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except sa_exc.SQLAlchemyError as error:  # the store failed: no traceback to clients
            log.warning("store error on %s: %s", request.url.path, error)
            response = Response(
                '{"detail": "the store is unavailable"}', 503, media_type="application/json"
            )
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "unmatched")
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        metrics.seconds.labels(endpoint).observe(time.perf_counter() - started)
        return response

    auth = [Depends(authorized)]
    lease_replies: ReplayCache[dict[str, Any]] = ReplayCache(ttl=settings.policy.lease_seconds)

    @app.get("/health")
    def health() -> dict[str, Any]:
        """Liveness; 503 when the store cannot be read."""
        try:
            plan = latest_plan(db)
        except sa_exc.SQLAlchemyError as error:
            raise HTTPException(503, f"store unavailable: {type(error).__name__}") from None
        return {"status": "ok", "plan": plan.version if plan else None, "api": API_VERSION}

    @app.get("/metrics", response_class=Response)
    def prometheus() -> Response:
        """Prometheus text format."""
        plan = latest_plan(db)
        metrics.plan.set(plan.version if plan else 0)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/leases", dependencies=auth)
    def lease(body: LeaseRequest) -> dict[str, Any]:
        """Lease hosts with their due URLs (at most ``max_urls``, and the server's cap);
        a retried call (same worker and ``request_id``) gets the first call's leases."""

        def new_leases() -> dict[str, Any]:
            leases = queue().lease(body.worker, max_urls=body.max_urls)
            metrics.leases.inc(len(leases))
            metrics.urls.inc(sum(len(x.pages) for x in leases))
            return {
                "leases": [_lease_json(x) for x in leases],
                "lease_seconds": settings.policy.lease_seconds,
            }

        if body.request_id is None:
            return new_leases()
        return lease_replies.get_or_compute((body.worker, body.request_id), new_leases)

    @app.post("/v1/leases/{lease_id}/renew", dependencies=auth)
    def renew(lease_id: LeaseId, body: ReleaseRequest) -> dict[str, datetime | None]:
        """Extend a live lease; ``expires_at`` null when it had expired or was released."""
        owned(lease_id, body.worker)
        return {"expires_at": queue().renew(lease_id)}

    def _outcome(recorded: int, duplicates: int, late: int) -> None:
        metrics.results.labels("recorded").inc(recorded)
        metrics.results.labels("duplicate").inc(duplicates)
        metrics.results.labels("late").inc(late)

    def _checked(results: list[FetchResultIn]) -> list[FetchResult]:
        if len(results) > settings.max_results:
            raise HTTPException(
                422, f"at most {settings.max_results} results per request, got {len(results)}"
            )
        return [_result(r) for r in results]

    @app.post("/v1/leases/{lease_id}/report", dependencies=auth)
    def report(lease_id: LeaseId, body: ReportRequest) -> dict[str, int]:
        """Record results; reporting the same page of a lease again changes nothing."""
        results = _checked(body.results)
        owned(lease_id, body.worker)
        try:
            out = queue().report(lease_id, results, cash_split=cash_split)
        except InvalidReportError as error:
            raise HTTPException(422, str(error)) from None
        _outcome(out.recorded, out.duplicates, out.late)
        return _report_body(out)

    @app.post("/v1/leases/{lease_id}/finish", dependencies=auth)
    def finish(lease_id: LeaseId, body: FinishRequest) -> dict[str, int]:
        """Record results and hand the host back; unreported pages return to the pool."""
        results = _checked(body.results)
        owned(lease_id, body.worker)
        try:
            out, returned = queue().finish(
                lease_id, results, _host(body.host), cash_split=cash_split
            )
        except InvalidReportError as error:
            raise HTTPException(422, str(error)) from None
        _outcome(out.recorded, out.duplicates, out.late)
        return {**_report_body(out), "returned": returned}

    @app.post("/v1/leases/{lease_id}/release", dependencies=auth)
    def release(lease_id: LeaseId, body: ReleaseRequest) -> dict[str, int]:
        """Hand a host back without results."""
        owned(lease_id, body.worker)
        return {"returned": queue().release(lease_id, _host(body.host))}

    @app.post("/v1/pages", dependencies=auth)
    def pages(body: PagesRequest) -> dict[str, int]:
        """Add discovered URLs (normalized again here; bad ones are counted, not added)."""
        if len(body.urls) > settings.max_new_urls:
            raise HTTPException(
                422, f"at most {settings.max_new_urls} URLs per request, got {len(body.urls)}"
            )
        good = _normalized(body.urls)
        done = add_pages(db, good, discovered=True)
        metrics.discovered.inc(done.added)
        return {"added": done.added, "known": done.known, "rejected": len(body.urls) - len(good)}

    @app.post("/v1/urgent", dependencies=auth)
    def urgent(body: PagesRequest) -> dict[str, int]:
        """Crawl these URLs ahead of the plan (still politely; charged to the next period)."""
        if len(body.urls) > settings.max_new_urls:
            raise HTTPException(
                422, f"at most {settings.max_new_urls} URLs per request, got {len(body.urls)}"
            )
        good = _normalized(body.urls)
        done = request_urgent(db, good, source="api")
        metrics.urgent.inc(done.queued + done.leased)
        return {**dataclasses.asdict(done), "rejected": len(body.urls) - len(good)}

    @app.post("/v1/notifications", dependencies=auth)
    def notifications(body: NotificationsRequest) -> dict[str, int]:
        """Record change notifications (observations of their own kind, used by the
        estimators) and crawl the pages soon; a page that reliably notifies its changes
        gets no blind recrawls."""
        if len(body.notifications) > settings.max_new_urls:
            raise HTTPException(
                422,
                f"at most {settings.max_new_urls} notifications per request, "
                f"got {len(body.notifications)}",
            )
        items = []
        for note in body.notifications:
            good = _normalized([note.url])
            if good:
                items.append(Notification(good[0][0], good[0][1], note.changed_at))
        done = record_notifications(db, items)
        metrics.notifications.inc(done.recorded)
        return {**dataclasses.asdict(done), "rejected": len(body.notifications) - len(items)}

    @app.get("/v1/work", dependencies=auth)
    def work() -> dict[str, Any]:
        """Whether any page is due now or leased (a worker pool run ``--until-idle`` stops
        when not), and the lease length in seconds."""
        return {"remaining": work_remaining(db), "lease_seconds": settings.policy.lease_seconds}

    @app.get("/v1/plan", dependencies=auth)
    def plan() -> dict[str, Any]:
        """The current plan: its summary and, in ``period_quotas``, per period the quotas by
        bucket and the new pages."""
        current = latest_plan(db)
        if current is None:
            raise HTTPException(404, "no plan has been published yet")
        detail = plan_detail(db, current.version)
        periods: dict[int, dict[str, Any]] = {}
        for (period, bucket), pages_ in sorted(detail.quotas.items()):
            entry = periods.setdefault(period, {"period": period, "quotas": {}})
            entry["quotas"][str(bucket)] = pages_
        for period, new_pages in detail.new_pages.items():
            periods.setdefault(period, {"period": period, "quotas": {}})["new_pages"] = new_pages
        return {
            **dataclasses.asdict(current),
            "period_quotas": [periods[k] for k in sorted(periods)],
        }

    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)
    return app
