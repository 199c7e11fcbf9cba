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

URL patterns (settings ``crawl.include`` and ``crawl.exclude``, as Heritrix's and Scrapy's
users write them) narrow the mode: a URL in the mode's scope is followed only if
``include`` is empty or one of its patterns matches it, and none of ``exclude`` does (exclude
wins). A pattern is a shell-style glob (:mod:`fnmatch`) matched against the whole normalized
URL: ``*`` is any run of characters, ``/`` included (``*/private/*``, ``*.php``,
``https://docs.example.org/en/*``), ``?`` one character, ``[...]`` one of a set (``[?]``
a literal question mark). Matching is case-sensitive, as URL paths are; normalized URLs
have a lower-case scheme and host and sorted query arguments, so write patterns for that
form. Seeds stay seeds: a page a user adds is fetched even when a pattern excludes it; the
patterns screen what it links to. Links to assets (``.pdf``, images: see
:mod:`crawler.links`) are never followed, whatever the patterns say.

An out-of-scope URL is dropped where it is found, as Scrapy's offsite filter and Heritrix's
scope rules drop theirs: it is not stored, so it is never a candidate, never a host to fetch
robots.txt from, and an ``--until-idle`` crawl of a site ends. The workers count them
(:attr:`crawler.worker.CrawlStats.out_of_scope`).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
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


def _compiled(patterns: tuple[str, ...], name: str) -> re.Pattern[str] | None:
    """One regular expression that matches a URL when any of the glob ``patterns`` matches
    all of it (None for no patterns), so that a link costs one ``match`` whatever their
    number. ``name`` (the setting) is in the message of the ValueError a pattern that is not
    a non-empty string raises."""
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            raise ValueError(
                f"{name}: {pattern!r} is not a URL glob pattern: write a non-empty string "
                "such as '*/private/*' or 'https://example.org/docs/*'"
            )
    if not patterns:
        return None
    # fnmatch.translate anchors each at the end (``\Z``) and, on Python 3.11, uses atomic
    # groups rather than named ones, so the translations join into one alternation.
    return re.compile("|".join(fnmatch.translate(p) for p in patterns))


@dataclass(frozen=True)
class CrawlScope:
    """Which URLs found on a page a crawl follows (see the module docstring): the ``mode``,
    then the glob patterns ``include`` (empty: every URL) and ``exclude``."""

    mode: str = "domains"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    _include: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _exclude: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in SCOPE_MODES:
            modes = ", ".join(SCOPE_MODES)
            raise ValueError(f"crawl scope {self.mode!r} is not one of {modes}")
        # Compiled once per scope (a crawl has one), not once per link.
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "_include", _compiled(self.include, "crawl.include"))
        object.__setattr__(self, "_exclude", _compiled(self.exclude, "crawl.exclude"))

    def follows(self, url: str, found_on: str) -> bool:
        """Whether ``url`` (normalized) found on a page of origin ``found_on`` is in scope."""
        return bool(self.followed([url], found_on))

    def followed(self, urls: list[str], found_on: str) -> list[str]:
        """The normalized ``urls`` found on a page of origin ``found_on`` that are in scope,
        in their order (a few string operations a URL, and one regular-expression match per
        pattern list: a page has hundreds of links)."""
        if self.mode == "any":
            kept = urls
        elif self.mode == "hosts":
            prefix = found_on + "/"
            kept = [u for u in urls if u.startswith(prefix) or u == found_on]
        else:
            here = _domain(_netloc(found_on))
            kept = [u for u in urls if _domain(_netloc(u)) == here]
        if self._include is not None:
            include = self._include.match
            kept = [u for u in kept if include(u)]
        if self._exclude is not None:
            exclude = self._exclude.match
            kept = [u for u in kept if not exclude(u)]
        return kept


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
