"""``/v1/leases``: lease hosts with their due URLs, renew, report, finish and release them."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from service.api.context import ApiContext, Context, authorized
from service.api.schemas import (
    FetchResultIn,
    FinishRequest,
    LeaseId,
    LeaseRequest,
    ReleaseRequest,
    ReportRequest,
    fetch_result,
    host_update,
)
from store import FetchResult, Lease
from store.errors import InvalidReportError
from store.leases import ReportOutcome

__all__ = ["router"]

router = APIRouter(prefix="/v1/leases", dependencies=[Depends(authorized)])


@router.post("")
def lease(body: LeaseRequest, context: Context) -> dict[str, Any]:
    """Lease hosts with their due URLs (at most ``max_urls``, and the server's cap);
    a retried call (same worker and ``request_id``) gets the first call's leases."""
    lease_seconds = context.settings.policy.lease_seconds

    def new_leases() -> dict[str, Any]:
        leases = context.queue().lease(body.worker, max_urls=body.max_urls)
        context.metrics.leases.inc(len(leases))
        context.metrics.urls.inc(sum(len(x.pages) for x in leases))
        return {"leases": [_lease_json(x) for x in leases], "lease_seconds": lease_seconds}

    if body.request_id is None:
        return new_leases()
    return context.lease_replies.get_or_compute((body.worker, body.request_id), new_leases)


@router.post("/{lease_id}/renew")
def renew(lease_id: LeaseId, body: ReleaseRequest, context: Context) -> dict[str, datetime | None]:
    """Extend a live lease; ``expires_at`` null when it had expired or was released."""
    context.owned(lease_id, body.worker)
    return {"expires_at": context.queue().renew(lease_id)}


@router.post("/{lease_id}/report")
def report(lease_id: LeaseId, body: ReportRequest, context: Context) -> dict[str, int]:
    """Record results; reporting the same page of a lease again changes nothing."""
    results = _checked(context, body.results)
    context.owned(lease_id, body.worker)
    try:
        out = context.queue().report(lease_id, results, cash_split=context.cash_split)
    except InvalidReportError as error:
        raise HTTPException(422, str(error)) from None
    context.metrics.results_recorded(out.recorded, out.duplicates, out.late)
    return _report_body(out)


@router.post("/{lease_id}/finish")
def finish(lease_id: LeaseId, body: FinishRequest, context: Context) -> dict[str, int]:
    """Record results and hand the host back; unreported pages return to the pool."""
    results = _checked(context, body.results)
    context.owned(lease_id, body.worker)
    try:
        out, returned = context.queue().finish(
            lease_id, results, host_update(body.host), cash_split=context.cash_split
        )
    except InvalidReportError as error:
        raise HTTPException(422, str(error)) from None
    context.metrics.results_recorded(out.recorded, out.duplicates, out.late)
    return {**_report_body(out), "returned": returned}


@router.post("/{lease_id}/release")
def release(lease_id: LeaseId, body: ReleaseRequest, context: Context) -> dict[str, int]:
    """Hand a host back without results."""
    context.owned(lease_id, body.worker)
    return {"returned": context.queue().release(lease_id, host_update(body.host))}


def _checked(context: ApiContext, results: list[FetchResultIn]) -> list[FetchResult]:
    context.at_most(len(results), context.settings.max_results, "results")
    return [fetch_result(r) for r in results]


def _lease_json(lease: Lease) -> dict[str, Any]:
    """A lease as the worker API sends it: its fields, and each page as an object (a shallow
    read: ``dataclasses.asdict`` would deep-copy every page's fields first)."""
    body = {f.name: getattr(lease, f.name) for f in dataclasses.fields(lease)}
    body["pages"] = [page._asdict() for page in lease.pages]
    return body


def _report_body(out: ReportOutcome) -> dict[str, int]:
    """A report's answer: the API adds discovered URLs through ``/v1/pages``, not here."""
    return {"recorded": out.recorded, "duplicates": out.duplicates, "late": out.late}
