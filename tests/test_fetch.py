"""The fetcher against the synthetic server: limits, redirects, safety, garbage answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crawler.fetch import Fetcher, FetchLimits
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import WebServer


@pytest.fixture(scope="module")
def server() -> Iterator[WebServer]:
    web = SyntheticWeb(
        WebConfig(
            hosts=3,
            pages_per_host=5,
            behaviors={1: HostBehavior(garbage_rate=1.0), 2: HostBehavior(latency=0.5)},
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
            kinds.add("bad-utf8")
    assert {"truncated response", "connection reset", "bad-utf8"} <= kinds, kinds
