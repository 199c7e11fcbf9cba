"""``/health`` and ``/metrics``: liveness and Prometheus metrics, without a token.

``/metrics`` reads the capacity use of the running and the last ended plan period from the
store at each scrape (:func:`store.period_use.current_and_last`: a few indexed counts)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sqlalchemy import exc as sa_exc

from service.api.context import Context
from service.api.settings import API_VERSION
from store import latest_plan
from store.period_use import current_and_last

__all__ = ["router"]

router = APIRouter()


@router.get("/health")
def health(context: Context) -> dict[str, Any]:
    """Liveness; 503 when the store cannot be read."""
    try:
        plan = latest_plan(context.db)
    except sa_exc.SQLAlchemyError as error:
        raise HTTPException(503, f"store unavailable: {type(error).__name__}") from None
    return {"status": "ok", "plan": plan.version if plan else None, "api": API_VERSION}


@router.get("/metrics", response_class=Response)
def prometheus(context: Context) -> Response:
    """Prometheus text format."""
    plan = latest_plan(context.db)
    context.metrics.plan.set(plan.version if plan else 0)
    context.metrics.period_use(*current_and_last(context.db))
    return Response(generate_latest(context.metrics.registry), media_type=CONTENT_TYPE_LATEST)
