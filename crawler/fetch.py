"""Fetching one URL politely and safely with ``requests``: the crawler's only network seam.

Limits a production crawler needs, all in :class:`FetchLimits`: connect and read timeouts
plus a total deadline (a server that trickles one byte a second never trips a read timeout),
a size cap (1 MB by default, as WebFountain: the rest is not downloaded and the page is
marked truncated), redirects, and the content types worth downloading.

Redirects are not followed by default (``max_redirects=0``, as Nutch and StormCrawler do): the
fetch is recorded as a redirect and its target is queued as a page of its own, so content is
stored once, under the URL that serves it, and another host's politeness is never spent under
this host's lease. A redirect loop then costs one request per URL per revisit. With
``max_redirects > 0`` same-origin hops are followed inside the fetch, loops detected.

URLs come from untrusted pages, so by default addresses that are private, loopback,
link-local, multicast or reserved are refused (SSRF); tests and the demo allow loopback.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests

from crawler.urls import InvalidURLError, normalize_url, origin_of
from store.types import utcnow

__all__ = ["FetchLimits", "FetchOutcome", "Fetcher", "UnsafeAddressError"]


class UnsafeAddressError(Exception):
    """The URL's host resolves to an address the crawler must not contact."""


@dataclass(frozen=True)
class FetchLimits:
    """Timeouts (seconds), size cap (bytes), redirects, and what to download."""

    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    total_timeout: float = 30.0
    max_bytes: int = 1_000_000
    max_redirects: int = 0
    content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml", "text/plain")
    allow_private: bool = False


@dataclass(frozen=True)
class FetchOutcome:
    """What one fetch saw. ``status`` is the HTTP status, or None when no answer came."""

    url: str
    final_url: str
    status: int | None
    started_at: datetime
    duration: float
    body: bytes = b""
    content_type: str | None = None
    encoding: str | None = None
    etag: str | None = None
    last_modified: datetime | None = None
    retry_after: str | None = None
    redirect_to: str | None = None
    truncated: bool = False
    error: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def is_html(self) -> bool:
        """Whether the body is a page whose text and links matter."""
        ct = (self.content_type or "").lower()
        return ct.startswith(("text/html", "application/xhtml+xml"))

    def text(self) -> str:
        """The body decoded (declared charset, else UTF-8), bad bytes replaced."""
        encoding = self.encoding or "utf-8"
        try:
            return self.body.decode(encoding, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else None


class Fetcher:
    """Fetch URLs with one ``requests.Session`` (connection reuse per host).

    Not thread-safe: give each worker thread its own Fetcher.
    """

    def __init__(
        self,
        limits: FetchLimits | None = None,
        *,
        user_agent: str = "crawlplan/0.1 (+https://example.invalid/crawlplan)",
        session: requests.Session | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.limits = limits or FetchLimits()
        self.user_agent = user_agent
        self.session = session or requests.Session()
        # No proxy or .netrc lookups from the environment on every request (a crawler's
        # network path is configured, not inherited); they cost more than the request.
        self.session.trust_env = False
        self.session.headers.update({"User-Agent": user_agent, "Accept-Encoding": "gzip"})
        self.clock = clock or utcnow
        self._safe_hosts: dict[str, bool] = {}

    def close(self) -> None:
        """Close pooled connections."""
        self.session.close()

    # -- safety ------------------------------------------------------------------------------
    def check_address(self, url: str) -> None:
        """Raise :class:`UnsafeAddressError` unless the URL's host may be contacted."""
        if self.limits.allow_private:
            return
        host = urlsplit(url).hostname or ""
        if host not in self._safe_hosts:
            try:
                infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            except OSError:
                self._safe_hosts[host] = True  # let the fetch report the DNS error
            else:
                addresses = {ipaddress.ip_address(info[4][0]) for info in infos}
                self._safe_hosts[host] = all(a.is_global for a in addresses)
        if not self._safe_hosts[host]:
            raise UnsafeAddressError(f"{host} resolves to a private, loopback or reserved address")

    # -- fetching ----------------------------------------------------------------------------
    def fetch(
        self,
        url: str,
        *,
        etag: str | None = None,
        last_modified: datetime | None = None,
        allowed: Callable[[str], bool] | None = None,
        content_types: tuple[str, ...] | None = None,
    ) -> FetchOutcome:
        """GET ``url`` (conditionally when validators are given) within the limits.

        ``allowed`` is the robots.txt check, applied to every same-origin redirect hop.
        ``content_types`` replaces the limits' list of types whose body is read (a sitemap
        is XML, not a page).
        Never raises for network or HTTP trouble: the outcome carries the error.
        """
        started = self.clock()
        t0 = time.monotonic()
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified is not None:
            headers["If-Modified-Since"] = format_datetime(last_modified, usegmt=True)
        current = url
        seen = {url}
        for hop in range(self.limits.max_redirects + 1):
            try:
                self.check_address(current)
            except UnsafeAddressError as error:
                return self._failed(url, current, started, t0, str(error))
            outcome = self._get(url, current, headers, started, t0, content_types)
            target = outcome.redirect_to
            if target is None:
                return outcome
            last_hop = hop == self.limits.max_redirects
            if last_hop or origin_of(target) != origin_of(url) or (allowed and not allowed(target)):
                return outcome  # recorded as a redirect; the target is a page of its own
            if target in seen:
                return self._failed(url, target, started, t0, "redirect loop", outcome.status)
            seen.add(target)
            current = target
            headers = {}  # validators belong to the original URL
        raise AssertionError("unreachable")

    def _failed(
        self,
        url: str,
        final: str,
        started: datetime,
        t0: float,
        error: str,
        status: int | None = None,
    ) -> FetchOutcome:
        return FetchOutcome(url, final, status, started, time.monotonic() - t0, error=error)

    def _get(
        self,
        url: str,
        current: str,
        headers: dict[str, str],
        started: datetime,
        t0: float,
        content_types: tuple[str, ...] | None = None,
    ) -> FetchOutcome:
        limits = self.limits
        try:
            response = self.session.get(
                current,
                headers=headers,
                allow_redirects=False,
                stream=True,
                timeout=(limits.connect_timeout, limits.read_timeout),
            )
        except requests.RequestException as error:
            return self._failed(url, current, started, t0, _describe(error))
        with response:
            h = response.headers
            common: dict[str, Any] = {
                "etag": h.get("ETag"),
                "last_modified": _http_date(h.get("Last-Modified")),
                "retry_after": h.get("Retry-After"),
                "content_type": (h.get("Content-Type") or "").split(";")[0].strip() or None,
                "encoding": response.encoding,
            }
            if response.is_redirect:
                location = h.get("Location", "")
                try:
                    target = normalize_url(urljoin(current, location))
                except InvalidURLError:
                    target = None
                problem = None if target else f"redirect to an invalid URL {location!r}"
                return FetchOutcome(
                    url,
                    current,
                    response.status_code,
                    started,
                    time.monotonic() - t0,
                    redirect_to=target,
                    error=problem,
                    **common,
                )
            ctype = str(common["content_type"] or "").lower()
            types = content_types if content_types is not None else limits.content_types
            wanted = response.status_code == 200 and (
                not ctype or any(ctype.startswith(t) for t in types)
            )
            body = b""
            truncated = False
            if wanted:
                try:
                    body, truncated = self._read(response, t0)
                except (requests.RequestException, TimeoutError) as error:
                    return FetchOutcome(
                        url,
                        current,
                        response.status_code,
                        started,
                        time.monotonic() - t0,
                        error=_describe(error),
                        **common,
                    )
            return FetchOutcome(
                url,
                current,
                response.status_code,
                started,
                time.monotonic() - t0,
                body=body,
                truncated=truncated,
                **common,
            )

    def _read(self, response: requests.Response, t0: float) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_content(chunk_size=64 * 1024):
            chunks.append(chunk)
            size += len(chunk)
            if size > self.limits.max_bytes:
                return b"".join(chunks)[: self.limits.max_bytes], True
            if time.monotonic() - t0 > self.limits.total_timeout:
                raise TimeoutError(f"total timeout of {self.limits.total_timeout:g} s exceeded")
        return b"".join(chunks), False


def _describe(error: BaseException) -> str:
    """A short, stable description of a network error for the observation record."""
    if isinstance(error, requests.ConnectTimeout):
        return "connect timeout"
    if isinstance(error, requests.ReadTimeout):
        return "read timeout"
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return "truncated response"
    if isinstance(error, requests.ConnectionError):
        text = str(error)
        if "reset" in text.lower() or "aborted" in text.lower():
            return "connection reset"
        if "refused" in text.lower():
            return "connection refused"
        return "connection error"
    if isinstance(error, TimeoutError):
        return str(error)
    return type(error).__name__
