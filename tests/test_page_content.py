"""Pages read from their bytes, and change detection a user can trust (issue 27).

Pure: no sockets. The same claims on real documentation trees served by nginx are in
``tests/realweb/``.
"""

from __future__ import annotations

import json
import random
import threading
from datetime import UTC, datetime

import pytest

from crawler.fetch import FetchLimits, FetchOutcome
from crawler.links import decode_body, extract_links, parse_html
from crawler.signature import (
    change_size,
    content_changed,
    document_text,
    main_text,
    page_kind,
    page_signature,
    signature_words,
)
from crawler.worker import CrawlSettings, CrawlStats, CrawlWorker

URL = "http://docs.test/15/index.html"

XHTML = (
    '<?xml version="1.0" encoding="{enc}" standalone="no"?>\n'
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" '
    '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">'
    '<html xmlns="http://www.w3.org/1999/xhtml"><head>'
    '<meta http-equiv="Content-Type" content="text/html; charset={enc}" />'
    '<title>PostgreSQL 15 Documentation</title><link rel="stylesheet" href="stylesheet.css" />'
    '</head><body><div class="navheader"><a accesskey="n" href="preface.html">Next</a></div>'
    '<div class="book"><h1>PostgreSQL 15 Documentation</h1><p>Caf\u00e9 cr\u00e8me.</p>'
    '<a href="tutorial.html">Tutorial</a> <a href="sql.html">The SQL Language</a>'
    '<img src="logo.png" /></div>'
    '<div class="navfooter"><a href="preface.html">Next</a> Submit correction</div>'
    "</body></html>"
)


def _xhtml(enc: str = "UTF-8") -> bytes:
    return XHTML.format(enc=enc).encode(enc)


# -- parsing bytes ---------------------------------------------------------------------------
@pytest.mark.parametrize("enc", ["UTF-8", "ISO-8859-1"])
def test_xhtml_with_an_xml_declaration_yields_links_and_content(enc: str) -> None:
    root = parse_html(_xhtml(enc))
    assert root is not None
    assert extract_links(root, URL) == [
        "http://docs.test/15/preface.html",
        "http://docs.test/15/tutorial.html",
        "http://docs.test/15/sql.html",
    ]
    text = main_text(root)
    assert "Caf\u00e9 cr\u00e8me." in text
    assert "Submit correction" not in text  # the page's frame is not its content


def test_text_with_a_declaration_parses_too() -> None:
    root = parse_html(_xhtml().decode("utf-8"))  # lxml alone refuses this str
    assert root is not None and "Tutorial" in root.text_content()


def test_the_encoding_comes_from_bom_then_http_then_the_page() -> None:
    page = "<html><head><meta charset='iso-8859-1'></head><body><p>na\u00efve</p></body></html>"
    assert decode_body(page.encode("latin-1")) == page  # the page's own meta
    utf8 = page.encode("utf-8")
    assert "na\u00efve" in decode_body(utf8, "utf-8")  # HTTP beats the meta
    assert "na\u00efve" in decode_body(b"\xef\xbb\xbf" + utf8, "iso-8859-1")  # BOM beats HTTP
    # charsets that are not text encodings are ignored, never raised
    for charset in ("base64", "idna", "undefined", "x-no-such", "rot13"):
        assert "na" in decode_body(utf8, charset)
    assert decode_body(b"\xfa\xfb broken", "utf-8") == "\ufffd\ufffd broken"


def test_base_href_and_asset_links() -> None:
    html = b"""<html><head><base href="http://cdn.test/docs/">
      <link rel="stylesheet" href="style.css"><script src="app.js"></script></head>
      <body><a href="a.html">a</a> <a href="pic.PNG">image</a> <a href="f.woff2">font</a>
      <a href="guide.pdf">pdf</a> <a href="source.rst.txt">source</a> <a href="dir/">dir</a>
      <img src="img.png"><iframe src="frame.html"></iframe></body></html>"""
    assert extract_links(html, URL) == [
        "http://cdn.test/docs/a.html",
        "http://cdn.test/docs/source.rst.txt",
        "http://cdn.test/docs/dir/",
    ]


def test_page_kind_by_content_type() -> None:
    types = FetchLimits().content_types
    assert page_kind(None, types) == "html"
    assert page_kind("application/xhtml+xml", types) == "html"
    for ctype in ("text/plain", "application/json", "application/xml", "application/rss+xml"):
        assert page_kind(ctype, types) == "document", ctype
    for ctype in ("image/png", "text/css", "application/javascript", "font/woff2"):
        assert page_kind(ctype, types) is None, ctype


# -- change detection ------------------------------------------------------------------------
def _prose(words: int, seed: int) -> str:
    rng = random.Random(seed)
    vocabulary = [f"{a}{b}" for a in ("lo", "ra", "ki", "su", "me", "to") for b in "aeiou"]
    sentences = []
    for _ in range(words // 12):
        sentences.append(" ".join(rng.choice(vocabulary) for _ in range(12)) + ".")
    return " ".join(sentences)


def _doc(body: str, *, stamp: str = "Nov 25, 2026", frame: str = "Home") -> str:
    return (
        f"<html><body><nav><a href='/'>{frame}</a></nav><aside class='sidebar'>{frame}</aside>"
        f"<div role='main'><h1>Title</h1><p>{body}</p></div>"
        f"<div class='footer'>Last updated on {stamp}. {frame}</div></body></html>"
    )


@pytest.mark.parametrize("words", [200, 12_000, 60_000])  # about 1 KB to 360 KB of text
def test_an_appended_paragraph_is_a_change_whatever_the_page_size(words: int) -> None:
    body = _prose(words, seed=words)
    before = page_signature(main_text(_doc(body)))
    paragraph = "Note: this section was revised to describe the new behaviour in detail."
    after = page_signature(main_text(_doc(body + "</p><p>" + paragraph)))
    assert content_changed(before, after) is True
    size = change_size(before, after)
    assert size is not None and size.words == len(paragraph.split())
    if words >= 12_000:  # the SimHash barely moves: the old 3-bit test would have missed it
        assert content_changed(before, after, threshold=3) is False


NOISY = [
    ("Updated Nov 25, 2026 at 10:04", "Updated Dec 1, 2026 at 09:59"),
    ("Tuesday, 25 November", "Wednesday, 26 November"),
    ("posted 3 minutes ago", "posted 1 hour ago"),
    ("session 9f86d081884c7d65e1a2", "session 5e884898da28047151d0"),
    ("token b3JpZ2luYWx0b2tlbnZhbHVl9x", "token c2Vjb25kdG9rZW52YWx1ZXh4y7"),
    ("csrf deadbeefcafebabe", "csrf feedfacefeedface"),
    ("1,234 views", "1,301 views"),
    ("rendered in 0.034s", "rendered in 0.101s"),
]


@pytest.mark.parametrize(("old", "new"), NOISY)
def test_per_request_noise_in_the_main_text_is_no_change(old: str, new: str) -> None:
    body = _prose(400, seed=1)
    before = page_signature(main_text(_doc(f"{body} {old}.")))
    after = page_signature(main_text(_doc(f"{body} {new}.")))
    assert content_changed(before, after) is False, (signature_words(old), signature_words(new))


def test_the_frame_of_a_page_is_not_its_content() -> None:
    body = _prose(400, seed=2)
    before = page_signature(main_text(_doc(body)))
    for variant in (_doc(body, stamp="Jan 2, 2027"), _doc(body, frame="Sale! Buy now")):
        assert content_changed(before, page_signature(main_text(variant))) is False
    assert content_changed(before, page_signature(main_text(_doc(body + " More.")))) is True


def test_real_word_edits_are_changes() -> None:
    body = _prose(400, seed=3)
    before = page_signature(main_text(_doc(body)))
    words = body.split()
    words[200] = "replaced"
    assert content_changed(before, page_signature(main_text(_doc(" ".join(words))))) is True


def test_a_page_without_a_main_region_falls_back_to_its_body() -> None:
    html = "<html><body><header>Site</header><div>Only <b>content</b></div></body></html>"
    assert main_text(html) == "Only content"
    assert main_text("<html><body><nav>all of it is navigation</nav></body></html>") == (
        "all of it is navigation"
    )


def test_documents_that_are_not_html_get_a_signature_from_their_content() -> None:
    plain = b"Title\n=====\n\nSome reStructuredText source.\n"
    assert document_text(plain, "text/plain") == plain.decode()
    doc = {"b": [1, "two"], "a": {"c": "three"}}
    reordered = json.dumps({"a": {"c": "three"}, "b": [1, "two"]}).encode()
    assert document_text(json.dumps(doc).encode(), "application/json") == "a c three b 1 two"
    assert document_text(reordered, "application/json") == "a c three b 1 two"
    xml = (
        b'<?xml version="1.0" encoding="ISO-8859-1"?><rss><item><title>Caf\xe9</title></item></rss>'
    )
    assert document_text(xml, "application/rss+xml") == "Caf\u00e9"
    evil = b'<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>'
    assert "root" not in document_text(evil, "application/xml")
    assert document_text(b"{not json", "application/json") == "{not json"


# -- the worker's observation ----------------------------------------------------------------
def _worker() -> CrawlWorker:
    return CrawlWorker(
        None,  # type: ignore[arg-type]  # observe() never calls the queue
        "w",
        CrawlSettings(),
        stop=threading.Event(),
        stats=CrawlStats(),
    )


def _outcome(body: bytes, content_type: str | None, encoding: str | None = None) -> FetchOutcome:
    when = datetime(2026, 11, 26, tzinfo=UTC)
    return FetchOutcome(
        URL, URL, 200, when, 0.01, body=body, content_type=content_type, encoding=encoding
    )


def test_the_worker_parses_xhtml_bytes_and_signs_text_documents() -> None:
    worker = _worker()
    result, links = worker.observe(1, None, _outcome(_xhtml("ISO-8859-1"), "text/html"))
    assert len(links) == 3 and result.signature is not None and result.changed is None
    again, _ = worker.observe(1, result.signature, _outcome(_xhtml("UTF-8"), "text/html"))
    assert again.changed is False  # same text, another encoding
    text, _ = worker.observe(2, None, _outcome(b"plain text page", "text/plain"))
    edited, _ = worker.observe(
        2, text.signature, _outcome(b"plain text page, edited", "text/plain")
    )
    assert text.signature is not None and edited.changed is True
    asset, links = worker.observe(3, None, _outcome(b"", "image/png"))
    assert asset.status == "ok" and asset.signature is None and links == []
    assert asset.error == "not a page (image/png): body not read"
