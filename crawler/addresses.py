"""Where a fetch may connect: resolve a host once, check every address, connect to it.

A page can link to any URL, so a crawler that fetches what it finds must refuse addresses
inside the network it runs in (SSRF): loopback, private, link-local (the cloud metadata
service at 169.254.169.254), multicast, reserved. Checking a name and then letting the HTTP
stack resolve it again to connect is not enough: a name can answer a public address to the
check and 127.0.0.1 to the connection (DNS rebinding). So the check lives in the connection
itself (:class:`GuardedAdapter`, a ``requests`` transport adapter): the host is resolved
once per connection, every address it resolves to is checked, and the socket connects to
the checked addresses only. The URL is unchanged, so the Host header, TLS SNI and the
certificate check still use the name. Redirect hops and robots.txt go through the same
adapter. A failed lookup is an error ("name not resolved"), never "safe".

The adapter also keeps the sockets it opened, so that a watchdog can cut a request that
outlives its deadline (:meth:`GuardedAdapter.cut`), whatever phase it is blocked in.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import socket
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

__all__ = [
    "GuardedAdapter",
    "Resolver",
    "UnsafeAddressError",
    "address_refusal",
    "host_refusal",
    "resolve",
]

#: Resolve a host name to its IP addresses (strings), in the order to try them; raise
#: ``socket.gaierror`` (or any ``OSError``) when it has none. The seam tests replace.
Resolver = Callable[[str], Sequence[str]]

#: Threads for DNS lookups, so that a fetch waits for one no longer than its deadline.
_LOOKUPS = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="dns")

#: NAT64's well-known prefix (RFC 6052): 64:ff9b::7f00:1 is 127.0.0.1 behind a NAT64 gateway.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class UnsafeAddressError(Exception):
    """The URL's host resolves to an address the crawler must not contact."""


def resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to (system resolver), duplicates removed."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def address_refusal(address: str) -> str | None:
    """Why ``address`` must not be contacted ("loopback", "private", ...), or None when it
    is a global unicast address. IPv4 inside IPv6 (mapped, NAT64) is judged as IPv4."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone index: fe80::1%eth0
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.is_global and not ip.is_multicast:
        return None
    for kind in ("loopback", "link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return "non-global"  # 100.64.0.0/10 (carrier-grade NAT) and the like


def _connect(sock: socket.socket, address: tuple[str, int]) -> None:
    """Connect ``sock`` to a checked ``(ip, port)`` (a seam: tests watch where it goes)."""
    sock.connect(address)


def host_refusal(host: str) -> str | None:
    """Why a URL's ``host`` must not be contacted, judged without DNS: an address literal
    the policy refuses (:func:`address_refusal`), or ``localhost`` and its subdomains
    (RFC 6761), else None. Names are checked again, resolved, when fetched."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    try:
        return address_refusal(name)
    except ValueError:
        return None  # a name, not an address


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


class _Guard:
    """One adapter's policy and the sockets its connections opened."""

    def __init__(self, resolver: Resolver, allow_private: bool) -> None:
        self.resolver = resolver
        self.allow_private = allow_private
        #: Monotonic time by which a connection must be up (set per request by the fetcher).
        self.deadline: float | None = None
        self.sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self.lock = threading.Lock()

    def checked_addresses(self, host: str) -> list[str]:
        """Resolve ``host`` once (by the deadline) and check every address it gave."""
        addresses = self._lookup(host.strip("[]"))
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "no address")
        if not self.allow_private:
            for address in addresses:
                kind = address_refusal(address)
                if kind is not None:
                    raise UnsafeAddressError(
                        f"refused {host}: it resolves to {address}, a {kind} address "
                        "(private, loopback, link-local and reserved addresses are not "
                        "crawled unless allowed)"
                    )
        return addresses

    def _lookup(self, host: str) -> list[str]:
        """The resolver's answer; by the deadline when there is one (the system resolver
        cannot be interrupted, so it runs in a pool thread that is left to finish)."""
        if self.deadline is None or _is_address(host):  # a literal needs no DNS
            return list(self.resolver(host))
        future = _LOOKUPS.submit(self.resolver, host)
        try:
            return list(future.result(timeout=max(self.deadline - time.monotonic(), 0.001)))
        except concurrent.futures.TimeoutError:
            raise socket.gaierror(socket.EAI_AGAIN, "lookup timed out") from None

    def register(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.add(sock)

    def cut(self) -> None:
        """Shut down every socket still open: a read or write blocked on one returns."""
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):  # closed, or not connected yet
                sock.shutdown(socket.SHUT_RDWR)


class _GuardedConnectionMixin:
    """``_new_conn`` through the guard: checked addresses only, registered for the watchdog."""

    guard: _Guard
    host: str
    port: int
    timeout: Any
    socket_options: Any
    source_address: Any
    sock: Any
    _handshake_dup: socket.socket | None = None

    def _new_conn(self) -> socket.socket:
        guard = self.guard
        try:
            addresses = guard.checked_addresses(self.host)
        except OSError as error:  # gaierror, or a stub's OSError
            gai = error if isinstance(error, socket.gaierror) else socket.gaierror(str(error))
            raise NameResolutionError(self.host, self, gai) from error  # type: ignore[arg-type]
        last: OSError | None = None
        for address in addresses:
            timeout = self.timeout if isinstance(self.timeout, int | float) else None
            if guard.deadline is not None:
                left = max(guard.deadline - time.monotonic(), 0.001)
                timeout = left if timeout is None else min(timeout, left)
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            guard.register(sock)
            try:
                for option in self.socket_options or ():
                    sock.setsockopt(*option)
                if self.source_address:
                    sock.bind(self.source_address)
                sock.settimeout(timeout)
                _connect(sock, (address, self.port))
            except TimeoutError as error:
                sock.close()
                last = error
                message = f"Connection to {self.host} timed out. (connect timeout={timeout})"
                if address == addresses[-1]:
                    raise ConnectTimeoutError(self, message) from error
                continue
            except OSError as error:
                sock.close()
                last = error
                continue
            if isinstance(self, HTTPSConnection):
                # The TLS handshake detaches ``sock`` (its descriptor moves to the TLS
                # socket, which is not ours until the handshake ends): a duplicate of the
                # descriptor, held until then, lets the watchdog cut a trickled handshake.
                self._handshake_dup = sock.dup()
                guard.register(self._handshake_dup)
            return sock
        message = f"Failed to establish a new connection: {last}"
        raise NewConnectionError(self, message) from last  # type: ignore[arg-type]

    def connect(self) -> None:
        try:
            super().connect()  # type: ignore[misc]
        finally:
            dup = getattr(self, "_handshake_dup", None)
            if dup is not None:
                dup.close()
                self._handshake_dup = None
        if self.sock is not None:  # HTTPS: the TLS socket that wraps the one registered
            self.guard.register(self.sock)


class _GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    def __init__(self, *args: Any, guard: _Guard, **kwargs: Any) -> None:
        self.guard = guard
        super().__init__(*args, **kwargs)


class _GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    def __init__(self, *args: Any, guard: _Guard, **kwargs: Any) -> None:
        self.guard = guard
        super().__init__(*args, **kwargs)


class GuardedAdapter(HTTPAdapter):
    """A ``requests`` transport whose connections go only to addresses the policy allows.

    ``resolver`` replaces the system resolver (a test's stub); ``allow_private`` turns the
    address check off (loopback test servers, the demo) but keeps the single resolution.
    """

    def __init__(self, *, resolver: Resolver = resolve, allow_private: bool = False) -> None:
        self.guard = _Guard(resolver, allow_private)
        super().__init__(max_retries=0)

    @property
    def deadline(self) -> float | None:
        """Monotonic time by which new connections must be up, or None."""
        return self.guard.deadline

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        self.guard.deadline = value

    def cut(self) -> None:
        """Shut down the sockets of this adapter's connections (see :meth:`_Guard.cut`)."""
        self.guard.cut()

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> HTTPConnectionPool:
        pool = super().get_connection_with_tls_context(*args, **kwargs)
        assert isinstance(pool, HTTPConnectionPool)  # no proxies: a plain or TLS pool
        if pool.conn_kw.get("guard") is not self.guard:  # a pool this adapter has not seen
            https = pool.scheme == "https"
            pool.ConnectionCls = _GuardedHTTPSConnection if https else _GuardedHTTPConnection
            pool.conn_kw["guard"] = self.guard
        return pool
