"""WebConfig options that build worlds unlike the demo's: links into a robots-disallowed
section (``private_links``), served on loopback."""

from __future__ import annotations

import re
import urllib.request

import pytest

from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer


def test_private_links_are_each_pages_own_and_never_pages_of_the_web() -> None:
    web = SyntheticWeb(WebConfig(hosts=2, pages_per_host=5, private_links=3, seed=1))
    paths = [p for page in range(web.n_pages) for p in web.private_paths(page)]
    assert len(paths) == 3 * web.n_pages
    assert all(p.startswith("/private/") for p in paths)
    # each page its own (a host's pages share nothing)
    assert len(set(web.private_paths(0) + web.private_paths(1))) == 6
    assert all(web.page_at(0, p) is None for p in paths)
    assert SyntheticWeb(WebConfig(hosts=1, pages_per_host=3)).private_paths(0) == []
    with pytest.raises(ValueError, match="private_links"):
        WebConfig(private_links=-1)


def test_served_pages_link_into_the_disallowed_section() -> None:
    web = SyntheticWeb(WebConfig(hosts=1, pages_per_host=4, private_links=2, seed=3))
    server = WebServer(web, seed=3)
    server.start()
    try:
        origin = server.origins[0]
        with urllib.request.urlopen(origin + web.path(2), timeout=10) as answer:
            html = answer.read().decode()
        with urllib.request.urlopen(origin + "/robots.txt", timeout=10) as answer:
            robots = answer.read().decode()
        with urllib.request.urlopen(origin + web.private_paths(2)[0], timeout=10) as answer:
            assert answer.status == 200  # a crawler that ignored robots.txt would be served
    finally:
        server.stop()
    hrefs = re.findall(r'href="([^"]+)"', html)
    assert [h for h in hrefs if h.startswith("/private/")] == web.private_paths(2)
    assert "Disallow: /private/" in robots
    assert [r.path for r in server.log if r.path.startswith("/private/")] == [
        web.private_paths(2)[0]
    ]
