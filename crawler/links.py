"""Outlinks of an HTML page: parsed with lxml, resolved against the page (and <base href>),
normalized, de-duplicated, restricted to http(s).

Links a crawler must not follow are dropped: ``rel="nofollow"`` anchors and every link of a
page whose robots meta tag says ``nofollow``; fragments alone (``#top``) are the page itself.
"""

from __future__ import annotations

from contextlib import suppress
from urllib.parse import urljoin

import lxml.html
from lxml import etree

from crawler.urls import InvalidURLError, normalize_url

__all__ = ["extract_links", "parse_html", "robots_meta"]


def robots_meta(root: lxml.html.HtmlElement) -> set[str]:
    """Directives of ``<meta name="robots">`` (lower case), e.g. {"noindex", "nofollow"}."""
    found: set[str] = set()
    for meta in root.iter("meta"):
        if (meta.get("name") or "").strip().lower() in ("robots", "crawlplan"):
            found.update(d.strip().lower() for d in (meta.get("content") or "").split(","))
    found.discard("")
    return found


def parse_html(html: str | bytes) -> lxml.html.HtmlElement | None:
    """The page's element tree (lxml's forgiving HTML parser), or None for no document."""
    try:
        return lxml.html.fromstring(html)
    except (etree.ParserError, ValueError):
        return None


def extract_links(html: str | bytes | lxml.html.HtmlElement, page_url: str) -> list[str]:
    """Normalized absolute URLs the page links to, in document order, each once."""
    root = parse_html(html) if isinstance(html, str | bytes) else html
    if root is None:
        return []
    if "nofollow" in robots_meta(root) or "none" in robots_meta(root):
        return []
    base = page_url
    for element in root.iter("base"):
        href = element.get("href")
        if href:
            with suppress(ValueError):  # e.g. "http://[oops/": keep the page's own URL
                base = urljoin(page_url, href.strip())
            break
    seen: set[str] = set()
    links: list[str] = []
    self_url = _normalized(page_url)
    for anchor in root.iter("a", "area"):
        href = (anchor.get("href") or "").strip()
        if not href or href.startswith("#"):
            continue
        if "nofollow" in (anchor.get("rel") or "").lower().split():
            continue
        url = _joined(base, href)
        if url is None or url == self_url or url in seen:
            continue
        seen.add(url)
        links.append(url)
    return links


def _normalized(url: str) -> str | None:
    try:
        return normalize_url(url)
    except InvalidURLError:
        return None


def _joined(base: str, href: str) -> str | None:
    """``href`` resolved against ``base`` and normalized; None when either step fails
    (urljoin raises ValueError on an unparsable host such as ``http://[oops/``)."""
    try:
        return normalize_url(urljoin(base, href))
    except (InvalidURLError, ValueError):
        return None
