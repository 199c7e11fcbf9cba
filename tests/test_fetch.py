"""The fetcher against the synthetic server: limits, redirects, safety, garbage answers."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from crawler.fetch import Fetcher, FetchError, FetchLimits, FetchOutcome
from scenarios.synthetic_web import GARBAGE_MODES, HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store.types import utcnow

#: Each garbage mode as the fetcher must report it: (error, status); no error: a page.
GARBAGE_OUTCOMES = {
    "truncated": (FetchError.TRUNCATED, 200),
    "conflicting-length": (FetchError.INVALID_HEADERS, None),
    "bad-gzip": (FetchError.INVALID_CONTENT_ENCODING, 200),
    "reset": (FetchError.CONNECTION_RESET, None),
    "reset-mid-headers": (FetchError.CONNECTION_RESET, None),
    "bad-status-line": (FetchError.INVALID_STATUS_LINE, None),
    "short-length": (None, 200),
    "bad-bytes": (None, 200),
    "bogus-charset": (None, 200),
}


@pytest.fixture(scope="module")
def server() -> Iterator[WebServer]:
    web = SyntheticWeb(
        WebConfig(
            hosts=4,
            pages_per_host=10,
            behaviors={
                1: HostBehavior(garbage_rate=1.0),
                2: HostBehavior(latency=0.5),
                3: HostBehavior(garbage=GARBAGE_MODES, garbage_share=1.0),
            },
        )
    )
    with WebServer(web, seed=2) as s:
        yield s


def _fetcher(**limits: object) -> Fetcher:
    return Fetcher(FetchLimits(allow_private=True, **limits))  # type: ignore[arg-type]


def test_plain_and_conditional_get(server: WebServer) -> None:
    f = _fetcher()
    first = f.fetch(server.origins[0] + "/s0/p0.html")
    assert first.status == 200 and first.is_html and first.etag and first.last_modified
    again = f.fetch(server.origins[0] + "/s0/p0.html", etag=first.etag)
    assert again.status == 304 and again.body == b""


def test_redirects_not_followed_by_default_and_loops_detected_when_followed(
    server: WebServer,
) -> None:
    loop = server.origins[0] + "/loop/a"
    plain = _fetcher().fetch(loop)
    assert plain.status == 302 and plain.redirect_to == server.origins[0] + "/loop/b"
    followed = _fetcher(max_redirects=5).fetch(loop)
    assert followed.error == "redirect loop"
    moved = _fetcher(max_redirects=2).fetch(server.origins[0] + "/moved/p1")
    assert moved.status == 200 and moved.final_url.endswith("/s1/p1.html")


def test_size_cap_and_content_types(server: WebServer) -> None:
    big = _fetcher(max_bytes=100_000).fetch(server.origins[0] + "/big.html")
    assert big.truncated and len(big.body) == 100_000
    image = _fetcher().fetch(server.origins[0] + "/image.png")
    assert image.status == 200 and image.body == b"" and not image.is_html


def test_private_addresses_are_refused_by_default(server: WebServer) -> None:
    refused = Fetcher().fetch(server.origins[0] + "/s0/p0.html")
    assert refused.status is None and "private, loopback" in (refused.error or "")


def test_timeouts(server: WebServer) -> None:
    slow = _fetcher(read_timeout=0.1).fetch(server.origins[2] + "/s0/p0.html")
    assert slow.error == "read timeout" and slow.status is None
    refused = _fetcher(connect_timeout=0.5).fetch("http://127.0.0.1:9/")
    assert refused.error in ("connection refused", "connection error")


def test_garbage_answers_become_errors_not_exceptions(server: WebServer) -> None:
    f = _fetcher()
    kinds = set()
    for _ in range(30):
        outcome = f.fetch(server.origins[1] + "/s0/p0.html")
        if outcome.error:
            kinds.add(outcome.error)
        else:
            assert outcome.status == 200
            assert "\ufffd" in outcome.text()  # invalid UTF-8 replaced, not fatal
            kinds.add("bad-bytes")
    assert {"truncated response", "connection reset", "bad-bytes"} <= kinds, kinds


@pytest.mark.parametrize("mode", GARBAGE_MODES)
def test_each_garbage_mode(server: WebServer, mode: str) -> None:
    web = server.web
    (page,) = [p for p, m in web.garbage.items() if m == mode]
    f = _fetcher()
    outcome = f.fetch(server.url(page))
    error, status = GARBAGE_OUTCOMES[mode]
    assert (outcome.error, outcome.status) == (error, status), outcome
    if error is not None:
        assert outcome.body == b""
        return
    text = outcome.text()
    assert outcome.is_html and f"<title>{web.title(page)}</title>" in text
    assert text.rstrip().endswith("</html>")  # the whole page, nothing past its length
    # The connection the garbage came on does not spoil the next request.
    good = f.fetch(server.origins[0] + "/s0/p0.html")
    assert good.status == 200 and good.error is None


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/html; charset=utf-8", b"caf\xc3\xa9 \xff", "café \ufffd"),
        ("text/html; charset=undefined", b"caf\xc3\xa9", "café"),  # a codec that refuses all
        ("text/html; charset=idna", b"caf\xc3\xa9", "café"),  # refuses errors="replace"
        ("text/html; charset=base64", b"caf\xc3\xa9", "café"),  # not a text encoding
        ("text/html; charset=x-no-such-thing", b"caf\xc3\xa9", "café"),
        ("text/html; charset='latin-1'", b"caf\xe9", "café"),
        ("text/html", b"<meta charset=windows-1252>caf\xe9", "<meta charset=windows-1252>café"),
        ("text/html", b"caf\xc3\xa9", "café"),  # undeclared: UTF-8, not ISO-8859-1
    ],
)
def test_text_is_decoded_leniently(content_type: str, body: bytes, expected: str) -> None:
    outcome = _canned_fetch(200, {"Content-Type": content_type}, body)
    assert outcome.error is None
    assert outcome.text() == expected


def test_garbage_headers_do_not_escape() -> None:
    # requests parses a redirect's Location even when not following it, and raises.
    bad_location = _canned_fetch(302, {"Location": "http://[::1/oops"})
    assert bad_location.redirect_to is None
    assert bad_location.error == "invalid response: ValueError: Invalid IPv6 URL"
    odd = _canned_fetch(
        503, {"Retry-After": "\u00b2", "Last-Modified": "Mon, 01 Jan 99999 00:00:00 GMT"}
    )
    assert odd.status == 503 and odd.retry_after is None and odd.last_modified is None


def test_an_unexpected_exception_in_the_http_stack_is_an_error() -> None:
    outcome = _canned_fetch(200, {}, raises=KeyError())
    assert outcome.status is None and outcome.error == "invalid response: KeyError"


class _Canned(BaseAdapter):
    """A transport that answers every request with one canned response (or raises)."""

    def __init__(
        self, status: int, headers: dict[str, str], body: bytes, raises: Exception | None
    ) -> None:
        super().__init__()
        self.answer = (status, headers, body, raises)

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        status, headers, body, raises = self.answer
        if raises is not None:
            raise raises
        response = requests.Response()
        response.status_code = status
        response.headers = CaseInsensitiveDict(headers)
        response.raw = io.BytesIO(body)
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass


def _canned_fetch(
    status: int, headers: dict[str, str], body: bytes = b"", raises: Exception | None = None
) -> FetchOutcome:
    session = requests.Session()
    session.mount("http://", _Canned(status, headers, body, raises))
    fetcher = Fetcher(FetchLimits(allow_private=True), session=session, clock=utcnow)
    return fetcher.fetch("http://example.test/page.html")
