"""The worker API's Prometheus metrics, and the middleware that counts and times requests."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from fastapi import Request, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import exc as sa_exc

__all__ = ["ApiMetrics", "measure"]

log = logging.getLogger(__name__)


class ApiMetrics:
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

    def results_recorded(self, recorded: int, duplicates: int, late: int) -> None:
        """Count a report's results by outcome."""
        self.results.labels("recorded").inc(recorded)
        self.results.labels("duplicate").inc(duplicates)
        self.results.labels("late").inc(late)


async def measure(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """HTTP middleware: count and time each request by route; a store failure becomes a 503
    without details (no traceback reaches a client)."""
    metrics: ApiMetrics = request.app.state.api.metrics
    started = time.perf_counter()
    try:
        response = await call_next(request)
    except sa_exc.SQLAlchemyError as error:
        log.warning("store error on %s: %s", request.url.path, error)
        response = Response(
            '{"detail": "the store is unavailable"}', 503, media_type="application/json"
        )
    endpoint = getattr(request.scope.get("route"), "path", "unmatched")
    metrics.requests.labels(endpoint, str(response.status_code)).inc()
    metrics.seconds.labels(endpoint).observe(time.perf_counter() - started)
    return response
