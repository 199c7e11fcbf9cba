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

__all__ = ["MAX_URL_LENGTH", "InvalidURLError", "normalize_url", "origin_of"]

#: Longer URLs are refused: they are almost always crawler traps, and PostgreSQL's unique
#: index on pages.url cannot hold keys much longer than 2,700 bytes.
MAX_URL_LENGTH = 2048
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
    text = raw.strip()
    if not text:
        raise InvalidURLError("empty URL")
    if _SPACE.search(text):
        raise InvalidURLError(f"{text!r} contains whitespace: percent-encode it as %20")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        if not scheme or "." in scheme:
            raise InvalidURLError(f"{text!r} has no scheme: write http://{text}")
        raise InvalidURLError(f"{text!r}: scheme {scheme!r} is not crawlable (http, https)")
    try:
        port = parts.port
    except ValueError:
        raise InvalidURLError(f"{text!r} has an invalid port") from None
    host = (parts.hostname or "").lower()
    if not host:
        raise InvalidURLError(f"{text!r} has no host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidURLError(f"{text!r} has an invalid host name {host!r}") from None
    if not _HOST.match(host if ":" not in host else f"[{host}]"):
        raise InvalidURLError(f"{text!r} has an invalid host name {host!r}")
    canonical = urlsplit(canonicalize_url(text))
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    url = urlunsplit((scheme, netloc, canonical.path or "/", canonical.query, ""))
    if len(url) > MAX_URL_LENGTH:
        raise InvalidURLError(f"URL longer than {MAX_URL_LENGTH} characters ({len(url)})")
    return url


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a normalized URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
