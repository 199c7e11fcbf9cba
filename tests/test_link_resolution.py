"""Links resolved by their page's directory (the memoized path of ``extract_links``) are the
URLs that resolving against the page itself gives, for every base and reference."""

from __future__ import annotations

from urllib.parse import urljoin

from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawler.links import _PATH_START, _directory, _followable, _is_asset, _joined, extract_links

#: Characters that matter to ``urljoin`` and to normalization, and a few plain ones.
_CHARS = st.sampled_from([*"ab./?#;:%@[]\\ \t\n\x01-_~=&", "..", "%2F", "é", "x.pdf"])
_PARTS = st.lists(_CHARS, max_size=12).map("".join)
_BASES = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}{path}",
    st.sampled_from(["http", "https", "HTTP", "ftp"]),
    st.sampled_from(["a.test", "A.Test:8080", "u:p@a.test", "[::1]", "[oops", "127.0.0.2:81"]),
    _PARTS,
)


def _slow(base: str, href: str) -> str | None:
    """What ``extract_links`` gives for one link without the directory shortcut."""
    url = _joined(base, href)
    return None if url is None or _is_asset(url) else url


@settings(max_examples=3000)
@given(base=_BASES, href=_PARTS)
@example(base="http://a.test/d/page.html?q=/x/y#f/g", href="../up.html")
@example(base="http://a.test", href="x.html")
@example(base="http://a.test/a;p/b;q", href="c;r")
@example(base="http://a.test/d/", href=".")
@example(base="http://a.test/d/p", href="x.pdf")
@example(base="HTTP://A.test/d/p", href="%7Ex")
def test_the_directory_resolves_a_relative_path_as_the_page_does(base: str, href: str) -> None:
    href = href.strip()
    if not href or href[0] not in _PATH_START or ":" in href:
        return  # resolved against the page itself
    try:
        urljoin(base, href)
    except ValueError:
        assert _directory(base) is None or _slow(base, href) is None
        return
    directory = _directory(base)
    if directory is not None:
        assert _followable(directory, href) == _slow(base, href)


def test_links_through_the_directory_keep_order_filters_and_base() -> None:
    html = """<html><head><base href="http://b.test/docs/sub/index.html?x=/q/"></head><body>
    <a href="page.html">p</a> <a href="../up.html">u</a> <a href="page.html#s">again</a>
    <a href="/root.html">r</a> <a href="?q=1">query</a> <a href="img.png">asset</a>
    <a href="other.html" rel="nofollow">nf</a> <a href="mailto:x@b.test">mail</a>
    <a href="HTTP://B.test/docs/abs.html">abs</a> <a href="./index.html?x=/q/">self?</a>
    </body></html>"""
    assert extract_links(html, "http://a.test/elsewhere.html") == [
        "http://b.test/docs/sub/page.html",
        "http://b.test/docs/up.html",
        "http://b.test/root.html",
        "http://b.test/docs/sub/index.html?q=1",
        "http://b.test/docs/abs.html",
        "http://b.test/docs/sub/index.html?x=%2Fq%2F",
    ]
