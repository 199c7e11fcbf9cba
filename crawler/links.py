"""HTML pages read from their bytes, and their outlinks.

:func:`parse_html` decodes a body as a browser does (byte order mark, then the HTTP charset,
then ``<meta charset>`` or the XML declaration, else UTF-8, by ``w3lib.encoding``) and hands
lxml UTF-8 bytes with that encoding named, so XHTML that starts with ``<?xml ...
encoding=...?>`` parses like any page (lxml refuses a ``str`` that carries a declaration).

:func:`extract_links` gives the outlinks: ``<a href>`` and ``<area href>`` only, resolved
against the page (and ``<base href>``), normalized, de-duplicated, restricted to http(s). A
link in ``src`` (images, scripts, frames) or ``<link href>`` (stylesheets, icons) is an
asset of the page, never a page to crawl; an ``<a href>`` whose path ends in an asset's
extension (images, stylesheets, scripts, fonts, media, archives: :data:`ASSET_EXTENSIONS`,
Scrapy's list) is not followed either.
Links a crawler must not follow are dropped: ``rel="nofollow"`` anchors and every link of a
page whose robots meta tag says ``nofollow``; fragments alone (``#top``) are the page itself.
"""

from __future__ import annotations

import codecs
import threading
from contextlib import suppress
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

import lxml.html
from lxml import etree
from w3lib.encoding import html_to_unicode

from crawler.urls import InvalidURLError, normalize_url

__all__ = ["ASSET_EXTENSIONS", "decode_body", "extract_links", "parse_html", "robots_meta"]

#: Extensions of URLs that are not pages (Scrapy's ``IGNORED_EXTENSIONS``, plus fonts): an
#: ``<a href>`` to one is not followed.
_ASSET_EXTENSIONS = (  # archives, images, audio, office documents, video, binaries, web, fonts
    "7z 7zip apk bz2 cdr dmg ico iso jar rar tar tgz gz zip "
    "mng pct bmp gif jpg jpeg png pst psp tif tiff ai drw dxf eps ps svg webp avif "
    "mp3 wma ogg wav ra aac mid au aiff "
    "xls xlsx ppt pptx pps doc docx odt ods odg odp pdf "
    "3gp asf asx avi mov mp4 mpg qt rm swf wmv m4a m4v flv webm "
    "css js mjs map exe bin msi deb rpm woff woff2 ttf otf eot"
)
ASSET_EXTENSIONS = frozenset(_ASSET_EXTENSIONS.split())
#: One UTF-8 HTML parser per thread (an lxml parser serializes the threads that share it).
_PARSERS = threading.local()
#: First characters of an ``href`` resolved by its page's directory alone (a relative path:
#: not ``/``, ``?``, ``#``, ``;``, not a control character or space).
_PATH_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-~%")


def robots_meta(root: lxml.html.HtmlElement) -> set[str]:
    """Directives of ``<meta name="robots">`` (lower case), e.g. {"noindex", "nofollow"}."""
    found: set[str] = set()
    for meta in root.iter("meta"):
        if (meta.get("name") or "").strip().lower() in ("robots", "crawlplan"):
            found.update(d.strip().lower() for d in (meta.get("content") or "").split(","))
    found.discard("")
    return found


def decode_body(body: bytes, charset: str | None = None) -> str:
    """``body`` as text, never raising: the encoding of its byte order mark, else ``charset``
    (the HTTP header's), else its ``<meta charset>`` or XML declaration, else UTF-8 (the
    HTML standard's order, by ``w3lib.encoding.html_to_unicode``). A charset that is not a
    text encoding Python knows (``x-no-such``, ``base64``, ``idna``) is ignored; bytes
    invalid in the chosen encoding become U+FFFD."""
    header = "text/html"
    if charset and _text_codec(charset):
        header = f"text/html; charset={charset}"
    try:
        return html_to_unicode(header, body)[1]
    except (UnicodeError, LookupError, ValueError):  # a declared codec that refuses "replace"
        return body.decode("utf-8", errors="replace")


def _parser() -> lxml.html.HTMLParser:
    parser: lxml.html.HTMLParser | None = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = _PARSERS.parser = lxml.html.HTMLParser(encoding="utf-8")
    return parser


def _text_codec(name: str) -> bool:
    try:
        info = codecs.lookup(name)
    except LookupError:
        return False
    return info._is_text_encoding and info.name not in ("idna", "undefined")


def parse_html(html: str | bytes, charset: str | None = None) -> lxml.html.HtmlElement | None:
    """The page's element tree (lxml's forgiving HTML parser), or None for no document.

    Bytes are decoded by :func:`decode_body` (``charset``: the HTTP header's). Either way
    lxml reads UTF-8 bytes with the encoding named, so a ``<?xml ... encoding=...?>``
    declaration or a ``<meta charset>`` that disagrees cannot stop or garble the parse.
    """
    text = decode_body(html, charset) if isinstance(html, bytes) else html
    try:
        return lxml.html.fromstring(text.encode("utf-8", errors="replace"), parser=_parser())
    except (etree.ParserError, ValueError):
        return None


def extract_links(html: str | bytes | lxml.html.HtmlElement, page_url: str) -> list[str]:
    """Normalized absolute URLs the page links to, in document order, each once."""
    root = parse_html(html) if isinstance(html, str | bytes) else html
    if root is None:
        return []
    meta = robots_meta(root)
    if "nofollow" in meta or "none" in meta:
        return []
    base = page_url
    for element in root.iter("base"):
        href = element.get("href")
        if href:
            with suppress(ValueError):  # e.g. "http://[oops/": keep the page's own URL
                base = urljoin(page_url, href.strip())
            break
    directory = _directory(base)
    seen: set[str] = set()
    links: list[str] = []
    self_url = _normalized(page_url)
    for anchor in root.iter("a", "area"):
        href = (anchor.get("href") or "").strip()
        if not href or href.startswith("#"):
            continue
        if "nofollow" in (anchor.get("rel") or "").lower().split():
            continue
        if directory is not None and href[0] in _PATH_START and ":" not in href:
            url = _followable(directory, href)  # the same on every page of the directory
        else:
            url = _joined(base, href)
            if url is not None and _is_asset(url):
                url = None
        if url is None or url == self_url or url in seen:
            continue
        seen.add(url)
        links.append(url)
    return links


def _directory(base: str) -> str | None:
    """``scheme://netloc/path/to/`` of an http(s) ``base`` (its path cut after the last
    ``/``, no query or fragment), or None. A relative-path ``href`` (see :data:`_PATH_START`,
    no ``:``) resolves against it as against ``base`` itself: ``urljoin`` keeps of the base
    only its scheme, its netloc and its path's directory when the reference has a path."""
    try:
        parts = urlsplit(base)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https"):
        return None
    path = parts.path
    return f"{parts.scheme}://{parts.netloc}{path[: path.rfind('/') + 1]}"


@lru_cache(maxsize=1 << 16)
def _followable(directory: str, href: str) -> str | None:
    """``href`` resolved against ``directory`` and normalized, None when that fails or the
    URL is an asset's. Memoized: a site's pages share their navigation, so a crawl meets
    the same relative links in the same directory page after page (this skips ``urljoin``,
    the normalization's cache lookup and the asset test, a sixth of a page's Python time)."""
    url = _joined(directory, href)
    return None if url is None or _is_asset(url) else url


def _is_asset(url: str) -> bool:
    """Whether ``url``'s path ends in an asset's extension (:data:`ASSET_EXTENSIONS`)."""
    path = urlsplit(url).path
    dot = path.rfind(".")
    return dot > path.rfind("/") and path[dot + 1 :].lower() in ASSET_EXTENSIONS


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
