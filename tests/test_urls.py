"""URL normalization: one page, one URL; uncrawlable URLs refused with a reason."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.seeds import SeedReader
from crawler.urls import MAX_URL_LENGTH, InvalidURLError, normalize_url, origin_of


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM:80/a/../b/./c?b=2&a=1#frag", "http://example.com/b/c?a=1&b=2"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        ("http://user:pw@example.com/", "http://example.com/"),
        ("http://münchen.de/straße", "http://xn--mnchen-3ya.de/stra%C3%9Fe"),
        ("http://[::1]:80/", "http://[::1]/"),
        ("http://127.0.0.2:8080/p", "http://127.0.0.2:8080/p"),
        ("  http://example.com/a  ", "http://example.com/a"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("example.com/x", "no scheme"),
        ("ftp://example.com/", "not crawlable"),
        ("mailto:a@b.test", "not crawlable"),
        ("http:///path", "no host"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com:99999/", "invalid port"),
        ("http://ex!ample.com/", "invalid host"),
        ("http://example.com/" + "a" * MAX_URL_LENGTH, "longer than"),
    ],
)
def test_refused(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURLError, match=reason):
        normalize_url(raw)


def test_origin() -> None:
    assert origin_of("https://a.test:8443/x?y") == "https://a.test:8443"
    assert origin_of("http://a.test/") == "http://a.test"


_segment = st.text(alphabet="abcXYZ019-._~%/?=&", max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    host=st.from_regex(r"[a-z]{1,10}\.(test|example)", fullmatch=True),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    path=_segment,
    scheme=st.sampled_from(["http", "https", "HTTP"]),
)
def test_normalization_is_idempotent(host: str, port: int | None, path: str, scheme: str) -> None:
    raw = f"{scheme}://{host}{'' if port is None else f':{port}'}/{path}"
    once = normalize_url(raw)
    assert normalize_url(once) == once
    assert origin_of(once).startswith(("http://", "https://"))
    assert once.startswith(origin_of(once) + "/")


def test_seed_reader_skips_comments_and_reports_bad_lines() -> None:
    seen = []
    reader = SeedReader(on_reject=seen.append, keep=1)
    lines = [
        ("line 1", "# c"),
        ("line 2", ""),
        ("line 3", "http://a.test"),
        ("line 4", "x"),
        ("line 5", "y"),
    ]
    assert list(reader.pairs(lines)) == [("http://a.test/", "http://a.test")]
    assert reader.rejected_count == 2 and len(reader.rejected) == 1 and len(seen) == 2
    assert reader.rejected[0].where == "line 4"
