"""URL normalization and host origins, so that one page has one URL in the store.

Normalization is w3lib's ``canonicalize_url`` (Scrapy's: percent-encoding, ``.``/``..``
segments, sorted query arguments, no fragment) followed by what it leaves out: lower-case
scheme and host, no default port, no user info, http(s) only, a length cap. The origin
``scheme://host[:port]`` is the host of politeness and robots.txt (RFC 9309 sec. 2.3).
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

from w3lib.url import canonicalize_url

__all__ = [
    "MAX_INPUT_LENGTH",
    "MAX_URL_LENGTH",
    "InvalidURLError",
    "normalize_url",
    "origin_of",
    "quoted",
]

#: Longer URLs are refused: they are almost always crawler traps, and PostgreSQL's unique
#: index on pages.url cannot hold keys much longer than 2,700 bytes.
MAX_URL_LENGTH = 2048
#: Longer text is refused before it is parsed: normalizing a 10 MB line took 1.3 GB. Four
#: times the URL cap leaves room for what normalization removes (a fragment, ``..``).
MAX_INPUT_LENGTH = 4 * MAX_URL_LENGTH
#: How much of a bad URL an error message quotes.
QUOTE_CHARACTERS = 100
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SPACE = re.compile(r"\s")
_HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[a-z0-9]([a-z0-9\-_.]*[a-z0-9])?)$")


class InvalidURLError(ValueError):
    """A URL that cannot be crawled; the message says why."""


@lru_cache(maxsize=1 << 16)
def normalize_url(raw: str) -> str:
    """Return the canonical form of ``raw`` or raise :class:`InvalidURLError`.

    Memoized (the most recent 65,536 URLs): a crawl meets the same links on page after page,
    and canonicalization costs about 25 us a URL. Failures are not memoized.
    """
    if len(raw) > MAX_INPUT_LENGTH + 64:  # before strip(), which copies: room for padding
        raise InvalidURLError(_too_long(raw))
    text = raw.strip()
    if not text:
        raise InvalidURLError("empty URL")
    if len(text) > MAX_INPUT_LENGTH:
        raise InvalidURLError(_too_long(text))
    if _SPACE.search(text):
        raise InvalidURLError(f"{quoted(text)} contains whitespace: percent-encode it as %20")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        if not scheme or "." in scheme:
            fix = f"write http://{text}" if len(text) <= QUOTE_CHARACTERS else "add http://"
            raise InvalidURLError(f"{quoted(text)} has no scheme: {fix}")
        raise InvalidURLError(
            f"{quoted(text)}: scheme {quoted(scheme)} is not crawlable (http, https)"
        )
    try:
        port = parts.port
    except ValueError:
        raise InvalidURLError(f"{quoted(text)} has an invalid port") from None
    host = (parts.hostname or "").lower()
    if not host:
        raise InvalidURLError(f"{quoted(text)} has no host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidURLError(
                f"{quoted(text)} has an invalid host name {quoted(host)}"
            ) from None
    if not _HOST.match(host if ":" not in host else f"[{host}]"):
        raise InvalidURLError(f"{quoted(text)} has an invalid host name {quoted(host)}")
    canonical = urlsplit(canonicalize_url(text))
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    url = urlunsplit((scheme, netloc, canonical.path or "/", canonical.query, ""))
    if len(url) > MAX_URL_LENGTH:
        raise InvalidURLError(f"URL longer than {MAX_URL_LENGTH} characters ({len(url)})")
    return url


def quoted(text: str, limit: int = QUOTE_CHARACTERS) -> str:
    """``repr(text)``, cut to its first ``limit`` characters with the length said, so that an
    error about a huge line is one short line."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def _too_long(text: str) -> str:
    return (
        f"{quoted(text)} is longer than {MAX_INPUT_LENGTH:,} characters: not a URL a crawl can use"
    )


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a normalized URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
