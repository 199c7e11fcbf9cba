"""The crawl scope: which discovered URLs a crawl follows, by where they were found.

A crawl is kept to its seeds by never leaving where it is: a link (or a redirect) is in
scope when it stays on the host, or the registered domain, of the page it was found on.
Since every crawl starts from seeds and follows only such links, it stays on the seeds'
hosts (or domains), without the crawler knowing the seeds. Pages a user adds (``seed``,
``notify``, the API) are seeds: they are never out of scope.

Modes (setting ``crawl.scope``):

- ``hosts``: the same origin ``scheme://host[:port]`` (a robots.txt's and politeness' host);
- ``domains`` (the default, as Heritrix's seed-domain scope): the same registered domain
  (``docs.python.org`` and ``www.python.org`` are both ``python.org``; ``www.bbc.co.uk`` is
  ``bbc.co.uk``, by the Public Suffix List), any scheme and port;
- ``any``: every http(s) URL (Scrapy without ``allowed_domains``).

An out-of-scope URL is dropped where it is found, as Scrapy's offsite filter and Heritrix's
scope rules drop theirs: it is not stored, so it is never a candidate, never a host to fetch
robots.txt from, and an ``--until-idle`` crawl of a site ends. The workers count them
(:attr:`crawler.worker.CrawlStats.out_of_scope`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["SCOPE_MODES", "CrawlScope", "registered_domain"]

#: The scope modes, narrowest first.
SCOPE_MODES = ("hosts", "domains", "any")


@lru_cache(maxsize=1)
def _suffix_list() -> object:
    # Imported on first use: reading the list takes some 30 ms, which a CLI's start need not pay.
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


@lru_cache(maxsize=1 << 14)
def registered_domain(host: str) -> str:
    """The registered domain of a lower-case host name (public suffix plus one label); an IP
    address, a bare name (``localhost``) or a public suffix itself is its own domain."""
    name = host.strip("[]").rstrip(".")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    found = _suffix_list().privatesuffix(name)  # type: ignore[attr-defined]
    return str(found) if found else name


@dataclass(frozen=True)
class CrawlScope:
    """Which URLs found on a page a crawl follows (see the module docstring)."""

    mode: str = "domains"

    def __post_init__(self) -> None:
        if self.mode not in SCOPE_MODES:
            modes = ", ".join(SCOPE_MODES)
            raise ValueError(f"crawl scope {self.mode!r} is not one of {modes}")

    def follows(self, url: str, found_on: str) -> bool:
        """Whether ``url`` (normalized) found on a page of origin ``found_on`` is in scope."""
        return bool(self.followed([url], found_on))

    def followed(self, urls: list[str], found_on: str) -> list[str]:
        """The normalized ``urls`` found on a page of origin ``found_on`` that are in scope,
        in their order (a few string operations a URL: a page has hundreds of links)."""
        if self.mode == "any":
            return urls
        if self.mode == "hosts":
            prefix = found_on + "/"
            return [u for u in urls if u.startswith(prefix) or u == found_on]
        here = _domain(_netloc(found_on))
        return [u for u in urls if _domain(_netloc(u)) == here]


def _netloc(url: str) -> str:
    """``host[:port]`` of a normalized URL ``scheme://host[:port]/...``."""
    start = url.find("//") + 2
    end = url.find("/", start)
    return url[start:] if end < 0 else url[start:end]


@lru_cache(maxsize=1 << 14)
def _domain(netloc: str) -> str:
    """The registered domain of ``host[:port]`` (lower case already; an IPv6 address in
    brackets)."""
    colon = netloc.rfind(":")
    host = netloc if colon < 0 or netloc.rfind("]") > colon else netloc[:colon]
    return registered_domain(host)
