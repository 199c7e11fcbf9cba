"""Sitemaps (sitemaps.org protocol): the URLs a site lists and when each last changed.

A sitemap's ``lastmod`` is the site telling us when a page changed: crawlplan records each as
a change notification (``crawlplan notify --sitemap``). Parsed with lxml, namespaces or not;
a ``lastmod`` that is not a W3C datetime is ignored (the URL still counts), and a date
without a time is midnight UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

__all__ = ["SitemapEntry", "SitemapError", "parse_sitemap"]


class SitemapError(ValueError):
    """The document is not a sitemap (not XML, or no <urlset>)."""


@dataclass(frozen=True)
class SitemapEntry:
    """One ``<url>``: its ``loc`` and ``lastmod`` (aware UTC, None when absent or unreadable)."""

    loc: str
    lastmod: datetime | None


def _when(text: str | None) -> datetime | None:
    if not text:
        return None
    value = text.strip().replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)


def parse_sitemap(data: bytes) -> list[SitemapEntry]:
    """The entries of a sitemap ``<urlset>`` document."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        root = etree.fromstring(data, parser=parser)
    except etree.XMLSyntaxError as error:
        raise SitemapError(f"not an XML sitemap: {error}") from None
    if etree.QName(root).localname != "urlset":
        raise SitemapError(
            f"expected a <urlset> sitemap, got <{etree.QName(root).localname}> "
            "(a sitemap index lists other sitemaps: pass those)"
        )
    entries = []
    for url in root:
        if not isinstance(url.tag, str) or etree.QName(url).localname != "url":
            continue
        fields = {
            etree.QName(child).localname: child.text for child in url if isinstance(child.tag, str)
        }
        loc = (fields.get("loc") or "").strip()
        if loc:
            entries.append(SitemapEntry(loc, _when(fields.get("lastmod"))))
    return entries
