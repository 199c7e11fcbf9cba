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
link-local, multicast or reserved are refused (SSRF), in the connection itself: the host is
resolved once, every address checked, and the socket connects to a checked address
(:mod:`crawler.addresses`); tests and the demo allow loopback. A refused fetch has
``refused`` set: the operator's policy, not the host's fault.

One deadline covers the whole request, connect, headers and body (``total_timeout``): a
watchdog shuts the request's socket down when it passes, whatever the request is blocked in,
so a server that trickles its headers a byte a second cannot hold a worker.

Servers answer garbage: bodies cut short of their Content-Length, conflicting lengths, a
``Content-Encoding`` the body is not in, bytes invalid in the declared charset or a charset
nobody knows, connection resets, no HTTP at all. :meth:`Fetcher.fetch` never raises for any
of it: an answer that cannot be read whole is an outcome with one of the stable
:class:`FetchError` kinds in ``error``; a complete answer in a broken or unknown encoding is
a page, decoded leniently by :meth:`FetchOutcome.text` (see docs/crawler.md, "Garbage
answers").
"""

from __future__ import annotations

import codecs
import heapq
import http.client
import itertools
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from email.utils import format_datetime, parsedate_to_datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urljoin

import requests
import urllib3.exceptions
import urllib3.response

from crawler.addresses import GuardedAdapter, Resolver, UnsafeAddressError, resolve
from crawler.urls import InvalidURLError, normalize_url, origin_of
from store.types import utcnow

__all__ = ["FetchError", "FetchLimits", "FetchOutcome", "Fetcher", "UnsafeAddressError"]

log = logging.getLogger(__name__)


class FetchError(StrEnum):
    """Why a fetch gave no usable answer: the stable kinds stored as observations' ``error``.

    Other errors are stored as free text: ``total timeout of N s exceeded``, ``redirect
    loop``, ``redirect to an invalid URL ...``, the refusal of an unsafe address.
    """

    CONNECT_TIMEOUT = "connect timeout"
    """No connection within ``connect_timeout``."""
    READ_TIMEOUT = "read timeout"
    """The server went silent for ``read_timeout`` (before or during the body)."""
    CONNECTION_REFUSED = "connection refused"
    """Nothing listens on the port."""
    CONNECTION_RESET = "connection reset"
    """The server reset the connection (TCP RST) before the answer was complete."""
    CLOSED_WITHOUT_RESPONSE = "connection closed without response"
    """The server closed the connection before sending a status line."""
    NAME_NOT_RESOLVED = "name not resolved"
    """DNS has no address for the host (or the lookup failed)."""
    CONNECTION_ERROR = "connection error"
    """Any other network failure (unreachable network, TLS)."""
    INVALID_STATUS_LINE = "invalid status line"
    """The answer did not begin with an HTTP status line (not HTTP, or HTTP/0.9)."""
    INVALID_HEADERS = "invalid response headers"
    """Headers that cannot be read: conflicting Content-Lengths, too many or too long."""
    INVALID_CHUNKING = "invalid chunked encoding"
    """A chunked body whose chunk sizes are not numbers."""
    TRUNCATED = "truncated response"
    """The connection ended before the body its Content-Length (or chunking) announced."""
    INVALID_CONTENT_ENCODING = "invalid content encoding"
    """The body is not in the ``Content-Encoding`` it declares (e.g. "gzip" that is not),
    or that coding is one the crawler cannot decode."""
    INVALID_RESPONSE = "invalid response"
    """Anything else the HTTP stack refused to read (an unexpected exception, logged)."""


#: A ``<meta charset>`` or ``http-equiv`` charset in the first bytes of a page (the HTML
#: standard's prescan looks at the first 1024 bytes).
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


@dataclass(frozen=True)
class FetchLimits:
    """Timeouts (seconds), size cap (bytes), redirects, and what to download."""

    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    total_timeout: float = 30.0
    max_bytes: int = 1_000_000
    max_redirects: int = 0
    #: Types whose body is read: pages (HTML), and documents that get a signature from their
    #: text (plain text, XML and feeds, JSON); other types (assets) are not downloaded.
    content_types: tuple[str, ...] = (
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "application/xml",
        "text/xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/json",
    )
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
    #: The address policy refused the host (private, loopback, ...): no request was sent.
    refused: bool = False

    @property
    def is_html(self) -> bool:
        """Whether the body is a page whose text and links matter."""
        ct = (self.content_type or "").lower()
        return ct.startswith(("text/html", "application/xhtml+xml"))

    def text(self) -> str:
        """The body decoded, never raising: the charset the Content-Type declares, else the
        page's ``<meta charset>``, else UTF-8; a charset Python does not know as a text
        encoding falls through to the next; bytes invalid in it are replaced (U+FFFD)."""
        meta = _META_CHARSET.search(self.body[:1024])
        candidates = (self.encoding, meta.group(1).decode("ascii") if meta else None, "utf-8")
        for name in candidates:
            if name and _text_codec(name):
                try:
                    return self.body.decode(name, errors="replace")
                except (UnicodeError, LookupError, ValueError):
                    continue  # a codec that refuses lenient decoding ("idna", "undefined")
        return self.body.decode("utf-8", errors="replace")


def _text_codec(name: str) -> bool:
    """Whether ``name`` is a text encoding Python knows (not "base64", "rot13", "zlib")."""
    try:
        return codecs.lookup(name)._is_text_encoding
    except LookupError:
        return False


def _declared_charset(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a Content-Type, or None (requests' ISO-8859-1 default
    for text/* without one is not used: undeclared means look at the page, then UTF-8)."""
    for param in (content_type or "").split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip("\"'").strip() or None
    return None


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return parsed if parsed.tzinfo is not None else None


def _retry_after(value: str | None) -> str | None:
    """The Retry-After header when it can be one (RFC 9110: ASCII delay-seconds or an
    HTTP-date); headers are decoded as Latin-1, and "\u00b2" passes ``str.isdigit``."""
    if value is None or not value.isascii():
        return None
    return value


class Fetcher:
    """Fetch URLs with one ``requests.Session`` (connection reuse per host).

    The session's transport is a :class:`~crawler.addresses.GuardedAdapter` (the address
    policy, ``resolver`` its DNS seam); a ``session`` passed in is used as it is, without
    the address policy or the watchdog's cut (a test's canned transport).
    Not thread-safe: give each worker thread its own Fetcher.
    """

    def __init__(
        self,
        limits: FetchLimits | None = None,
        *,
        user_agent: str = "crawlplan/0.1 (+https://example.invalid/crawlplan)",
        session: requests.Session | None = None,
        clock: Callable[[], datetime] | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.limits = limits or FetchLimits()
        self.user_agent = user_agent
        self._adapter: GuardedAdapter | None = None
        if session is None:
            session = requests.Session()
            self._adapter = GuardedAdapter(
                resolver=resolver or resolve, allow_private=self.limits.allow_private
            )
            session.mount("http://", self._adapter)
            session.mount("https://", self._adapter)
        self.session = session
        # No proxy or .netrc lookups from the environment on every request (a crawler's
        # network path is configured, not inherited); they cost more than the request.
        self.session.trust_env = False
        self.session.headers.update({"User-Agent": user_agent, "Accept-Encoding": "gzip"})
        self.clock = clock or utcnow

    def close(self) -> None:
        """Close pooled connections."""
        self.session.close()

    # -- fetching ----------------------------------------------------------------------------
    def fetch(
        self,
        url: str,
        *,
        etag: str | None = None,
        last_modified: datetime | None = None,
        allowed: Callable[[str], bool] | None = None,
        content_types: tuple[str, ...] | None = None,
        max_redirects: int | None = None,
        any_origin: bool = False,
    ) -> FetchOutcome:
        """GET ``url`` (conditionally when validators are given) within the limits.

        ``allowed`` is the robots.txt check, applied to every same-origin redirect hop.
        ``content_types`` replaces the limits' list of types whose body is read (a sitemap
        is XML, not a page). ``max_redirects`` replaces the limits' number of hops followed,
        and ``any_origin`` follows hops to other origins too (robots.txt, RFC 9309).
        Everything, hops included, ends by ``total_timeout`` after the start.
        Never raises for network or HTTP trouble: the outcome carries the error.
        """
        started = self.clock()
        t0 = time.monotonic()
        watchdog = _Watchdog(self.limits.total_timeout, self._adapter)
        try:
            outcome = self._follow(
                url,
                etag,
                last_modified,
                allowed,
                content_types,
                max_redirects,
                any_origin,
                started,
                t0,
            )
        finally:
            fired = watchdog.finish()
        late = outcome.error is not None and time.monotonic() - t0 >= self.limits.total_timeout
        if fired or late:  # whatever the cut request looked like, it ran out of time
            return replace(
                outcome,
                body=b"",
                truncated=False,
                redirect_to=None,
                duration=time.monotonic() - t0,
                error=_total_timeout(self.limits.total_timeout),
            )
        return outcome

    def _follow(
        self,
        url: str,
        etag: str | None,
        last_modified: datetime | None,
        allowed: Callable[[str], bool] | None,
        content_types: tuple[str, ...] | None,
        max_redirects: int | None,
        any_origin: bool,
        started: datetime,
        t0: float,
    ) -> FetchOutcome:
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified is not None:
            headers["If-Modified-Since"] = format_datetime(last_modified, usegmt=True)
        current = url
        seen = {url}
        hops = self.limits.max_redirects if max_redirects is None else max_redirects
        for hop in range(hops + 1):
            outcome = self._get(url, current, headers, started, t0, content_types)
            if outcome.refused and hop > 0:  # the host is fine; where it sends us is not
                return replace(outcome, refused=False, error=f"redirect {outcome.error}")
            target = outcome.redirect_to
            if target is None:
                return outcome
            foreign = not any_origin and origin_of(target) != origin_of(url)
            if hop == hops or foreign or (allowed and not allowed(target)):
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
        if self._adapter is not None:
            self._adapter.deadline = t0 + limits.total_timeout
        try:
            response = self.session.get(
                current,
                headers=headers,
                allow_redirects=False,
                stream=True,
                timeout=(limits.connect_timeout, limits.read_timeout),
            )
        except UnsafeAddressError as error:
            outcome = self._failed(url, current, started, t0, str(error))
            return replace(outcome, refused=True)
        except requests.RequestException as error:
            return self._failed(url, current, started, t0, _describe(error))
        except Exception as error:  # a server's garbage must never end the worker's thread
            log.warning("%s: unexpected error from the HTTP stack", current, exc_info=True)
            return self._failed(url, current, started, t0, _describe(error))
        with response:
            h = response.headers
            common: dict[str, Any] = {
                "etag": h.get("ETag"),
                "last_modified": _http_date(h.get("Last-Modified")),
                "retry_after": _retry_after(h.get("Retry-After")),
                "content_type": (h.get("Content-Type") or "").split(";")[0].strip() or None,
                "encoding": _declared_charset(h.get("Content-Type")),
            }
            if response.is_redirect:
                location = h.get("Location", "")
                try:
                    target = normalize_url(urljoin(current, location))
                except (InvalidURLError, ValueError):  # urljoin: "http://[::1" is a ValueError
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
            if wanted and not _decodable(h.get("Content-Encoding")):
                return FetchOutcome(
                    url,
                    current,
                    response.status_code,
                    started,
                    time.monotonic() - t0,
                    error=FetchError.INVALID_CONTENT_ENCODING.value,
                    **common,
                )
            if wanted:
                try:
                    body, truncated = self._read(response, t0)
                except Exception as error:  # the body broke off or is not what it claims
                    if not isinstance(error, requests.RequestException | _TotalTimeoutError):
                        log.warning("%s: unexpected error reading the body", current, exc_info=True)
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
                raise _TotalTimeoutError(_total_timeout(self.limits.total_timeout))
        return b"".join(chunks), False


def _decodable(content_encoding: str | None) -> bool:
    """Whether the HTTP stack can undo every coding of a ``Content-Encoding`` (a body in
    one it cannot, "br" without brotli or a made-up one, is bytes no page is made of)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    known = urllib3.response.HTTPResponse.CONTENT_DECODERS
    return all(c in known for c in codings if c and c != "identity")


class _TotalTimeoutError(TimeoutError):
    """The body took longer than ``FetchLimits.total_timeout`` to arrive."""


def _total_timeout(seconds: float) -> str:
    return f"total timeout of {seconds:g} s exceeded"


class _Deadlines:
    """One thread, started on first use, that runs each armed action at its monotonic time
    (a heap): a timer per fetch without a thread per fetch (a thread's start cost about a
    fifth of a crawled page's CPU time)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, when: float, action: Callable[[], None]) -> int:
        """Run ``action`` at ``when`` unless disarmed first; returns the token to disarm."""
        with self._cond:
            token = next(self._tokens)
            heapq.heappush(self._heap, (when, token, action))
            self._live.add(token)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][1] == token:
                self._cond.notify()  # sooner than what the thread waits for
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._live.discard(token)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][1] not in self._live:
                        heapq.heappop(self._heap)  # disarmed
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        _when, token, action = heapq.heappop(self._heap)
                        self._live.discard(token)
                        break
                    self._cond.wait(wait)
            try:
                action()
            except Exception:  # an action must not end the thread every fetch relies on
                log.exception("a fetch deadline's action failed")


_DEADLINES = _Deadlines()


class _Watchdog:
    """Cuts a request that outlives its deadline, from outside the thread that waits on it.

    A read blocked on a socket returns only when data comes or its timeout passes, and a
    server that sends a byte just inside every read timeout keeps it blocked for good;
    checking a clock between reads does not help. At the deadline the request's sockets
    are shut down instead (:meth:`GuardedAdapter.cut`, run by :data:`_DEADLINES`' thread):
    the blocked read fails at once, and :meth:`finish` tells the fetch that it was cut.
    """

    def __init__(self, seconds: float, adapter: GuardedAdapter | None) -> None:
        self._adapter = adapter
        self._lock = threading.Lock()
        self._done = False
        self.fired = False
        self._token: int | None = None
        if adapter is not None:
            self._token = _DEADLINES.arm(time.monotonic() + seconds, self._fire)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
        assert self._adapter is not None
        self._adapter.cut()

    def finish(self) -> bool:
        """Stop watching; whether the deadline passed and the request was cut."""
        with self._lock:
            self._done = True
        if self._token is not None:
            _DEADLINES.disarm(self._token)
        return self.fired


def _describe(error: BaseException) -> str:
    """A short, stable description of a network error for the observation record: a
    :class:`FetchError` kind, found from the innermost cause outwards (requests wraps
    urllib3, which wraps http.client and the socket's OSError)."""
    if isinstance(error, _TotalTimeoutError):
        return str(error)
    causes = _causes(error)
    # (Not urllib3's ConnectTimeoutError: its NewConnectionError, "refused", is one.)
    if isinstance(error, requests.ConnectTimeout):
        return FetchError.CONNECT_TIMEOUT.value
    if isinstance(error, requests.ReadTimeout) or _any(causes, urllib3.exceptions.ReadTimeoutError):
        return FetchError.READ_TIMEOUT.value
    if isinstance(error, requests.exceptions.ContentDecodingError):
        return FetchError.INVALID_CONTENT_ENCODING.value
    if isinstance(error, requests.exceptions.InvalidHeader) or _any(
        causes, http.client.LineTooLong, urllib3.exceptions.HeaderParsingError
    ):
        return FetchError.INVALID_HEADERS.value
    if _any(causes, urllib3.exceptions.InvalidChunkLength):
        return FetchError.INVALID_CHUNKING.value
    if _any(causes, http.client.IncompleteRead):
        return FetchError.TRUNCATED.value
    if _any(causes, http.client.RemoteDisconnected):
        return FetchError.CLOSED_WITHOUT_RESPONSE.value
    if _any(causes, http.client.BadStatusLine):
        return FetchError.INVALID_STATUS_LINE.value
    if _any(causes, ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return FetchError.CONNECTION_RESET.value
    if _any(causes, ConnectionRefusedError):
        return FetchError.CONNECTION_REFUSED.value
    if _any(causes, urllib3.exceptions.NameResolutionError):
        return FetchError.NAME_NOT_RESOLVED.value
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return FetchError.TRUNCATED.value  # the body broke off for a reason not named above
    if _any(causes, http.client.HTTPException):
        return FetchError.INVALID_RESPONSE.value
    if isinstance(error, requests.ConnectionError):
        text = str(error).lower()
        if "refused" in text:
            return FetchError.CONNECTION_REFUSED.value
        return FetchError.CONNECTION_ERROR.value
    if isinstance(error, requests.RequestException | OSError):
        return FetchError.CONNECTION_ERROR.value
    # Not a network error: something the HTTP stack choked on (requests raises ValueError
    # for a redirect's unparsable Location even when redirects are not followed).
    detail = " ".join(str(error).split())[:160]
    kind = f"{FetchError.INVALID_RESPONSE.value}: {type(error).__name__}"
    return f"{kind}: {detail}" if detail else kind


def _causes(error: BaseException) -> list[BaseException]:
    """The error and every exception it wraps: in ``args`` (urllib3's ProtocolError, requests'
    ConnectionError), ``reason`` (MaxRetryError), ``__cause__`` and ``__context__``."""
    found: list[BaseException] = []
    todo: list[object] = [error]
    while todo and len(found) < 32:
        item = todo.pop()
        if not isinstance(item, BaseException) or any(item is f for f in found):
            continue
        found.append(item)
        todo.extend(item.args)
        todo.extend((getattr(item, "reason", None), item.__cause__, item.__context__))
    return found


def _any(causes: list[BaseException], *types: type[BaseException]) -> bool:
    return any(isinstance(c, types) for c in causes)
