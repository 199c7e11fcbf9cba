"""The worker API's Prometheus metrics, and the middleware that counts and times requests."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi import Request, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import exc as sa_exc

if TYPE_CHECKING:
    from store.period_use import PeriodUse

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
        # Capacity use of two plan periods, read from the store at each scrape: the one
        # running ("current") and the one that ended last ("last"); see store.period_use.
        period = ["period"]
        self.period_number = Gauge(
            "crawlplan_period_number", "plan period number (plan version apart)", period, registry=r
        )
        self.period_capacity = Gauge(
            "crawlplan_period_capacity_crawls", "crawls the plan planned", period, registry=r
        )
        self.period_released = Gauge(
            "crawlplan_period_released_crawls",
            "pages released for the period, by kind (recrawl, new)",
            [*period, "kind"],
            registry=r,
        )
        self.period_fetched = Gauge(
            "crawlplan_period_fetched_crawls",
            "requests made in the period, by outcome (answered, failed)",
            [*period, "outcome"],
            registry=r,
        )
        self.period_no_request = Gauge(
            "crawlplan_period_no_request_crawls",
            "fetch results recorded without a request (crawler failures)",
            period,
            registry=r,
        )
        self.period_blocked = Gauge(
            "crawlplan_period_blocked_crawls",
            "released pages robots.txt turned away when leased",
            period,
            registry=r,
        )
        self.period_pending = Gauge(
            "crawlplan_period_pending_crawls",
            "released pages not fetched yet, by state (leased, waiting)",
            [*period, "state"],
            registry=r,
        )
        self.period_idle = Gauge(
            "crawlplan_period_idle_crawls",
            "planned crawls not used: capacity minus requests made (ended periods)",
            period,
            registry=r,
        )

    def results_recorded(self, recorded: int, duplicates: int, late: int) -> None:
        """Count a report's results by outcome."""
        self.results.labels("recorded").inc(recorded)
        self.results.labels("duplicate").inc(duplicates)
        self.results.labels("late").inc(late)

    def period_use(self, current: PeriodUse | None, last: PeriodUse | None) -> None:
        """Set the per-period gauges from the store's counts (a period absent: its series
        are dropped)."""
        gauges = (
            self.period_number,
            self.period_capacity,
            self.period_released,
            self.period_fetched,
            self.period_no_request,
            self.period_blocked,
            self.period_pending,
            self.period_idle,
        )
        for gauge in gauges:
            gauge.clear()
        for label, use in (("current", current), ("last", last)):
            if use is None:
                continue
            self.period_number.labels(label).set(use.period)
            self.period_capacity.labels(label).set(use.capacity)
            if use.released is not None:
                released = self.period_released
                if use.new_pages is not None:
                    released.labels(label, "recrawl").set(use.released - use.new_pages)
                    released.labels(label, "new").set(use.new_pages)
                else:
                    released.labels(label, "unknown").set(use.released)
            self.period_fetched.labels(label, "answered").set(use.fetched - use.failed)
            self.period_fetched.labels(label, "failed").set(use.failed)
            self.period_no_request.labels(label).set(use.no_request)
            if use.blocked is not None:
                self.period_blocked.labels(label).set(use.blocked)
            self.period_pending.labels(label, "leased").set(use.leased)
            self.period_pending.labels(label, "waiting").set(use.waiting)
            if use.idle is not None:
                self.period_idle.labels(label).set(use.idle)


async def measure(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """HTTP middleware: count and time each request by route; a store failure becomes a 503
    and any other failure a 500, both without details (no traceback reaches a client; the
    500's goes to the log) and both counted like every other answer."""
    metrics: ApiMetrics = request.app.state.api.metrics
    started = time.perf_counter()
    try:
        response = await call_next(request)
    except sa_exc.SQLAlchemyError as error:
        log.warning("store error on %s: %s", request.url.path, error)
        response = Response(
            '{"detail": "the store is unavailable"}', 503, media_type="application/json"
        )
    except Exception:
        log.exception("internal error on %s %s", request.method, request.url.path)
        response = Response(
            '{"detail": "internal error (logged by the server)"}',
            500,
            media_type="application/json",
        )
    endpoint = getattr(request.scope.get("route"), "path", "unmatched")
    metrics.requests.labels(endpoint, str(response.status_code)).inc()
    metrics.seconds.labels(endpoint).observe(time.perf_counter() - started)
    return response
