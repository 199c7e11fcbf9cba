"""The fetcher's address policy (SSRF, DNS rebinding) and its whole-request deadline.

No test here needs the internet: names are answered by stubs, and a "public" address is
either refused by a stub connect or translated to the loopback server that plays it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import crawler.addresses
from crawler.addresses import address_refusal
from crawler.fetch import Fetcher, FetchError, FetchLimits, FetchOutcome
from scenarios.hostile_web import HostileConfig, HostileWeb

#: A global unicast address (a documentation-free, ordinary public one); never contacted:
#: the stub connect refuses it or sends it to loopback.
PUBLIC = "93.184.215.14"
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def web(settled_collector: None) -> Iterator[HostileWeb]:
    with HostileWeb(HostileConfig(trickle=0.2, bomb_bytes=1024 * 1024)) as server:
        yield server


def _port(web: HostileWeb, name: str) -> int:
    return int(web.origin(name).rsplit(":", 1)[1])


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The addresses the fetcher connects to; PUBLIC refuses (nobody there), others connect."""
    seen: list[str] = []

    def connect(sock: socket.socket, address: tuple[str, int]) -> None:
        seen.append(address[0])
        if address[0] == PUBLIC:
            raise ConnectionRefusedError(111, "Connection refused")
        sock.connect(address)

    monkeypatch.setattr(crawler.addresses, "_connect", connect)
    return seen


def _answers(monkeypatch: pytest.MonkeyPatch, name: str, *answers: str | None) -> list[str]:
    """Make the system resolver answer ``name`` with ``answers`` in turn (None: no such
    name), the last one for good; returns the log of lookups of ``name``."""
    real = socket.getaddrinfo
    queue = list(answers)
    lookups: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != name:
            return real(host, port, *args, **kwargs)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        lookups.append(str(answer))
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port or 0))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


def test_a_name_that_rebinds_to_loopback_is_never_fetched(
    web: HostileWeb, monkeypatch: pytest.MonkeyPatch, connects: list[str]
) -> None:
    # The check sees a public address, a second lookup would give 127.0.0.1: one lookup,
    # and the connection goes to the address that was checked.
    lookups = _answers(monkeypatch, "rebind.test", PUBLIC, LOOPBACK)
    outcome = Fetcher(FetchLimits(connect_timeout=1.0)).fetch(
        f"http://rebind.test:{_port(web, 'slow-body')}/ok.html"
    )
    assert outcome.status is None and outcome.error == FetchError.CONNECTION_REFUSED
    assert connects == [PUBLIC] and lookups == [PUBLIC]
    assert web.visits("slow-body") == []


def test_every_address_is_checked_and_the_refusal_says_why(
    web: HostileWeb, monkeypatch: pytest.MonkeyPatch, connects: list[str]
) -> None:
    _answers(monkeypatch, "private.test", LOOPBACK)
    outcome = Fetcher().fetch(f"http://private.test:{_port(web, 'slow-body')}/ok.html")
    assert outcome.refused and outcome.status is None
    assert outcome.error is not None and "127.0.0.1, a loopback address" in outcome.error
    assert connects == [] and web.visits("slow-body") == []


def test_a_failed_lookup_is_an_error_and_not_remembered_as_safe(
    web: HostileWeb, monkeypatch: pytest.MonkeyPatch, connects: list[str]
) -> None:
    _answers(monkeypatch, "flaky.test", None, LOOPBACK)
    fetcher = Fetcher()
    url = f"http://flaky.test:{_port(web, 'slow-body')}/ok.html"
    first = fetcher.fetch(url)
    assert first.error == FetchError.NAME_NOT_RESOLVED and not first.refused
    second = fetcher.fetch(url)
    assert second.refused and connects == [] and web.visits("slow-body") == []


def test_a_redirect_hop_to_a_private_address_is_refused(
    web: HostileWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # site.test is public; the test plays it on loopback. Its redirect points at the cloud
    # metadata service, which is refused before any connection.
    def connect(sock: socket.socket, address: tuple[str, int]) -> None:
        assert address[0] == PUBLIC, address
        sock.connect((LOOPBACK, address[1]))

    monkeypatch.setattr(crawler.addresses, "_connect", connect)
    fetcher = Fetcher(resolver=lambda host: [PUBLIC] if host == "site.test" else [host])
    port = _port(web, "redirect-private")
    outcome = fetcher.fetch(
        f"http://site.test:{port}/redirect-private", max_redirects=5, any_origin=True
    )
    assert outcome.status is None and not outcome.refused  # the host's doing, not ours
    assert outcome.error is not None
    assert outcome.error.startswith("redirect refused 169.254.169.254")
    assert "link-local" in outcome.error


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "link-local"),  # 169.254.169.254 through NAT64
        ("fe80::1%eth0", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "non-global"),
        (PUBLIC, None),
        ("2606:4700::1111", None),
    ],
)
def test_address_refusal(address: str, kind: str | None) -> None:
    assert address_refusal(address) == kind


def _fetch_within(fetcher: Fetcher, url: str, seconds: float) -> FetchOutcome:
    """The fetch's outcome, failing (not hanging) when it takes longer than ``seconds``."""
    box: list[FetchOutcome] = []
    thread = threading.Thread(target=lambda: box.append(fetcher.fetch(url)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"{url}: still fetching after {seconds} s"
    return box[0]


@pytest.mark.parametrize("behaviour", ["slow-headers", "slow-body"])
def test_one_deadline_covers_headers_and_body(web: HostileWeb, behaviour: str) -> None:
    # A byte every 0.2 s never trips the 1 s read timeout; the 1.5 s deadline ends it.
    fetcher = Fetcher(FetchLimits(allow_private=True, read_timeout=1.0, total_timeout=1.5))
    t0 = time.monotonic()
    outcome = _fetch_within(fetcher, web.url(behaviour), 10.0)
    assert outcome.error == "total timeout of 1.5 s exceeded", outcome
    assert outcome.body == b""
    assert 1.5 <= time.monotonic() - t0 < 2.5
    # The connection cut does not spoil the next request to the host.
    again = fetcher.fetch(web.origin(behaviour) + "/ok.html")
    assert again.status == 200 and again.error is None


def test_the_deadline_covers_a_trickled_tls_handshake(web: HostileWeb) -> None:
    # A handshake record announced and sent a byte every 0.2 s: no read times out, the
    # TLS socket is not ours until the handshake ends; the deadline still ends it.
    fetcher = Fetcher(FetchLimits(allow_private=True, read_timeout=1.0, total_timeout=1.5))
    url = web.origin("slow-tls-handshake").replace("http://", "https://") + "/"
    t0 = time.monotonic()
    outcome = _fetch_within(fetcher, url, 10.0)
    assert outcome.error == "total timeout of 1.5 s exceeded", outcome
    assert 1.5 <= time.monotonic() - t0 < 2.5


def test_the_deadline_covers_a_dns_lookup_that_hangs() -> None:
    release = threading.Event()

    def hanging(host: str) -> list[str]:
        release.wait(10)
        return [PUBLIC]

    fetcher = Fetcher(FetchLimits(total_timeout=1.0), resolver=hanging)
    t0 = time.monotonic()
    try:
        outcome = _fetch_within(fetcher, "http://slow-dns.test/", 5.0)
    finally:
        release.set()
    assert outcome.error == "total timeout of 1 s exceeded", outcome
    assert time.monotonic() - t0 < 2.0
