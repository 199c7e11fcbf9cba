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
the field (NaN and Infinity too: "Input should be a finite number"); batches are capped
(URLs per lease, results per report, URLs per page add); a body over ``max_body_bytes`` is
refused with 413, whether its Content-Length says so or a chunked body runs over; a token is
compared in constant time; a store failure is a 503 without details, and any other failure
a 500 without details (logged with its traceback); every answer, 5xx included, is counted in
``/metrics`` by endpoint and code. The server (uvicorn) caps concurrent connections and idle
keep-alive, so a slow or flooding client cannot hold every worker.

**Trust.** Tokens are trusted: the ``worker`` name checked against a lease's holder (409
otherwise) keeps honest workers from reporting on each other's leases by mistake, but any
holder of a token can name any worker. Give tokens only to your own workers.

Layout: this module assembles the app; each resource's routes are a router in
``service/api/routers/`` (leases, pages, urgent, notifications, plans, health); the request
bodies are :mod:`service.api.schemas`, the shared context and token check
:mod:`service.api.context`, the metrics :mod:`service.api.metrics`, the body cap
:mod:`service.api.body_limit`.

Service edge: wires the store to HTTP; no planning logic here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from service.api.body_limit import BodyLimit
from service.api.context import ApiContext
from service.api.errors import validation_failed
from service.api.metrics import measure
from service.api.routers import health, leases, notifications, pages, plans, urgent
from service.api.settings import API_VERSION, ApiSettings
from service.pipeline import release_period
from service.release_timing import ReleaseTimer
from store import Database

__all__ = ["API_VERSION", "ApiSettings", "create_app"]

log = logging.getLogger(__name__)


def create_app(db: Database, settings: ApiSettings) -> FastAPI:
    """The worker API over ``db``; while it runs, a thread releases each new plan period's
    work (:func:`service.pipeline.release_period`), as ``crawlplan crawl`` does in process."""
    app = FastAPI(
        title="crawlplan worker API",
        version=API_VERSION,
        description="Lease URLs, report what was fetched, read the plan.",
        lifespan=_period_releaser(db, settings),
    )
    app.state.api = ApiContext(db, settings)
    app.add_exception_handler(RequestValidationError, validation_failed)
    app.middleware("http")(measure)
    for module in (health, leases, pages, urgent, notifications, plans):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app


def _period_releaser(
    db: Database, settings: ApiSettings
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: a thread that releases each new plan period's work while the app
    runs (never when ``settings.release_every`` is None). It checks at each period's start
    and every 1 % of a period in between, at least every ``release_every`` seconds
    (:class:`service.release_timing.ReleaseTimer`)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        every = settings.release_every

        def releaser() -> None:
            if every is None:
                return
            timer = ReleaseTimer(max_wait=every)
            while not stop.is_set():
                wait = every
                try:
                    summary = release_period(
                        db,
                        min_delay_seconds=settings.min_delay_seconds,
                        due_share=settings.due_share,
                    )
                    if (spilled := summary.spill_line()) is not None:
                        log.info("%s", spilled)
                    if settings.on_release is not None and summary.status == "released":
                        settings.on_release(summary)
                    wait = timer.wait_after(summary, datetime.now(UTC))
                except Exception as error:
                    log.warning("period release failed: %s", error)
                stop.wait(wait)

        thread = threading.Thread(target=releaser, name="period-releaser", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=10)

    return lifespan
