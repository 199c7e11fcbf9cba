"""The worker API's request bodies (pydantic): every field typed, bounded and named.

A hostile client's body is refused with 422 naming the field: types, ranges, lengths, times
between 1970 and 9000 with a time zone, no unknown keys; NUL characters are dropped (the
store cannot hold them). ``crawler.remote`` keeps the client's copy of the result limits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from crawler.noise import NoiseRules
from store import FetchResult, HostUpdate

__all__ = [
    "BlockedUrlIn",
    "FetchResultIn",
    "FinishRequest",
    "HostUpdateIn",
    "LeaseId",
    "LeaseRequest",
    "NotificationIn",
    "NotificationsRequest",
    "PagesRequest",
    "ReleaseRequest",
    "ReportRequest",
    "fetch_result",
    "host_update",
]


def _plausible_time(value: datetime) -> datetime:
    if not 1970 <= value.year <= 9000:
        raise ValueError("must be a time between the years 1970 and 9000")
    return value


Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.:@-]+$")]
Url = Annotated[str, Field(min_length=1, max_length=2048)]
#: A time between 1970 and 9000 (the store's timestamps hold no more), with a time zone.
Time = Annotated[AwareDatetime, AfterValidator(_plausible_time)]


def _noise_rules(value: str) -> str:
    NoiseRules.from_text(value)  # raises ValueError naming the malformed rule
    return value


#: A host's noise rules as stored (``crawler.noise``): one ``tag#id`` or ``tag.class`` a line.
NoiseRulesText = Annotated[str, Field(max_length=64 * 1024), AfterValidator(_noise_rules)]
#: A lease id as the store holds it (a signed 64-bit integer).
LeaseId = Annotated[int, Path(ge=1, le=2**63 - 1)]


class _Strict(BaseModel):
    # NaN and Infinity (which Python's JSON parser accepts) are refused in every number
    # field: "Input should be a finite number" (service.api.errors renders the 422).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    robots_failures: int | None = Field(default=None, ge=0, le=1_000_000)
    given_up_at: Time | None = None
    noise_rules: NoiseRulesText | None = None
    noise_checked_at: Time | None = None


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


class BlockedUrlIn(_Strict):
    """A discovered URL its host's robots.txt disallows: stored unfetchable, never a
    candidate, and checked again at ``check_at`` (when the rules that block it expire)."""

    url: Url
    check_at: Time


class PagesRequest(_Strict):
    """URLs discovered by a worker: new candidates, and unfetchable ones (``blocked``)."""

    urls: list[Url]
    blocked: list[BlockedUrlIn] = Field(default_factory=list)


class NotificationIn(_Strict):
    """A site says ``url`` changed at ``changed_at`` (default: now)."""

    url: Url
    changed_at: Time | None = None


class NotificationsRequest(_Strict):
    """Change notifications pushed by a site (or a sitemap's lastmod dates)."""

    notifications: list[NotificationIn]


def fetch_result(item: FetchResultIn) -> FetchResult:
    """The store's fetch result of a validated body item."""
    return FetchResult(**{**item.model_dump(), "outlinks": tuple(item.outlinks)})


def host_update(item: HostUpdateIn | None) -> HostUpdate | None:
    """The store's host update of a validated body item (None: nothing to update)."""
    return None if item is None else HostUpdate(**item.model_dump())
