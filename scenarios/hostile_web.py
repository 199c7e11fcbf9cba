"""A hostile web on loopback: servers that stall, flood, lie and loop, one behaviour per path.

The synthetic web (:mod:`scenarios.web_server`) answers garbage framing from ordinary pages
(:data:`~scenarios.synthetic_web.GARBAGE_MODES`: truncated bodies, conflicting lengths, a
"gzip" body that is not, resets, no HTTP at all). This server adds what attacks a crawler's
deadlines, memory and politeness, written to the socket by hand (asyncio streams), each on a
host (port) of its own so that one behaviour never delays another's test:

==========================  ================================================================
path (host)                 what the server does
==========================  ================================================================
``/slow-headers``           the status line and headers, one byte every ``trickle`` s, forever
``/slow-body``              headers at once, then the announced body one byte a ``trickle``
``/endless-body``           headers without a length, then bytes as fast as read, forever
``/reset-mid-body``         half of the announced body, then a TCP reset
``/no-answer``              accepts and reads the request, never answers (holds it open)
``/redirect-loop``          302 to ``/redirect-loop/b``, which 302s back
``/redirect-private``       302 to the cloud metadata service, ``http://169.254.169.254/``
``/invalid-encoding``       ``Content-Encoding: gzip`` on a body that is not gzip
``/gzip-bomb``              a valid gzip body of ``bomb_bytes`` zeros (about 1000:1)
``/mislabelled-encoding``   ``Content-Encoding: deflate`` on a gzip body
``/unknown-encoding``       ``Content-Encoding: x-hostile`` (no client can decode it)
``/many-links``             a page of ``many_links`` links, all under a disallowed path
``/retry-after-429``        429 with ``Retry-After: retry_after`` (``.../next``: a page)
``/retry-after-503``        503 with ``Retry-After: retry_after`` (``.../next``: a page)
robots-timeout host         ``/robots.txt`` never answers
robots-5xx host             ``/robots.txt`` is a 503
robots-huge host            ``/robots.txt`` of ``huge_robots_bytes``, its last rule past 500 KiB
robots-redirect host        ``/robots.txt`` 301s to ``/rules.txt``, which disallows ``/secret``
slow-tls-handshake host     takes a TLS ClientHello, answers a record header announcing 16 KB,
                            then its bytes one every ``trickle`` s (``https://`` to its port)
==========================  ================================================================

Every host also serves ``/ok.html`` (a plain page) and ``/secret.html``; robots.txt
disallows ``/secret`` everywhere (except where it is the behaviour). Every request is
logged (:attr:`HostileWeb.log`, the server's own record) with its arrival time, and the
time its connection ended. The server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import struct
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

__all__ = [
    "PAGE_BEHAVIOURS",
    "ROBOTS_BEHAVIOURS",
    "TLS_BEHAVIOURS",
    "HostileConfig",
    "HostileWeb",
    "Visit",
]

#: Page behaviours, each the path it is served at on a host of its own.
PAGE_BEHAVIOURS = (
    "slow-headers",
    "slow-body",
    "endless-body",
    "reset-mid-body",
    "no-answer",
    "redirect-loop",
    "redirect-private",
    "invalid-encoding",
    "gzip-bomb",
    "mislabelled-encoding",
    "unknown-encoding",
    "many-links",
    "retry-after-429",
    "retry-after-503",
)
#: robots.txt behaviours, each a host of its own (its pages: ``/ok.html``, ``/secret.html``).
ROBOTS_BEHAVIOURS = ("robots-timeout", "robots-5xx", "robots-huge", "robots-redirect")
#: Behaviours below HTTP, each a host of its own.
TLS_BEHAVIOURS = ("slow-tls-handshake",)

_LOOPBACK = "127.0.0.1"
_ROBOTS = b"User-agent: *\nDisallow: /secret\n"
_OK = b"<!DOCTYPE html><html><head><title>ok</title></head><body><p>A plain page.</p></body></html>"


@dataclass(frozen=True)
class HostileConfig:
    """How hostile: seconds between trickled bytes, sizes, and the Retry-After sent."""

    trickle: float = 0.25
    bomb_bytes: int = 64 * 1024 * 1024
    many_links: int = 5_000
    huge_robots_bytes: int = 2 * 1024 * 1024
    retry_after: int = 2


@dataclass
class Visit:
    """One request as the server saw it: its host (behaviour), path, monotonic arrival and
    end (None while the connection is open) times, and bytes sent."""

    host: str
    path: str
    arrived: float
    ended: float | None = None
    sent: int = 0


@dataclass
class _Host:
    name: str
    origin: str = ""
    server: asyncio.AbstractServer | None = field(default=None, repr=False)


class HostileWeb:
    """Serve every behaviour on loopback in a background thread; use as a context manager.

    ``origin(name)`` is the origin of a behaviour's host, ``url(behaviour)`` the URL of a page
    behaviour; ``visits(name)`` that host's log.
    """

    def __init__(self, config: HostileConfig | None = None) -> None:
        self.config = config or HostileConfig()
        names = PAGE_BEHAVIOURS + ROBOTS_BEHAVIOURS + TLS_BEHAVIOURS
        self.hosts = {name: _Host(name) for name in names}
        self.log: list[Visit] = []
        self.lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._bomb: bytes | None = None

    # -- addresses and the log ---------------------------------------------------------------
    def origin(self, name: str) -> str:
        """``http://127.0.0.1:PORT`` of the host of behaviour ``name``."""
        return self.hosts[name].origin

    def url(self, behaviour: str) -> str:
        """The URL of a page behaviour."""
        return f"{self.origin(behaviour)}/{behaviour}"

    def visits(self, name: str) -> list[Visit]:
        """The requests to one host, in arrival order."""
        with self.lock:
            return [v for v in self.log if v.host == name]

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> HostileWeb:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Bind one port per host on 127.0.0.1 and serve until :meth:`stop`."""
        self._bomb_body()  # built before serving: it takes a moment of CPU
        self._thread = threading.Thread(target=self._serve, name="hostile-web", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30) or any(not h.origin for h in self.hosts.values()):
            raise RuntimeError("the hostile web server failed to start")

    def stop(self) -> None:
        """Close every connection and port, and join the server thread."""
        loop = self._loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loop = None

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._bind())
        finally:
            self._ready.set()
        loop.run_forever()
        loop.close()

    async def _bind(self) -> None:
        for host in self.hosts.values():

            async def handle(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str = host.name
            ) -> None:
                await self._connection(name, reader, writer)

            server = await asyncio.start_server(handle, _LOOPBACK, 0)
            host.server = server
            port = server.sockets[0].getsockname()[1]
            host.origin = f"http://{_LOOPBACK}:{port}"

    async def _close(self) -> None:
        for host in self.hosts.values():
            if host.server is not None:
                host.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- one connection, one request ---------------------------------------------------------
    async def _connection(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        visit: Visit | None = None
        try:
            if name == "slow-tls-handshake":
                visit = Visit(name, "(TLS)", time.monotonic())
                with self.lock:
                    self.log.append(visit)
                await self._slow_tls(reader, _Counted(writer, visit))
                return
            head = await reader.readuntil(b"\r\n\r\n")
            parts = head.split(b" ", 2)
            path = parts[1].decode("latin-1") if len(parts) > 1 else "/"
            visit = Visit(name, path, time.monotonic())
            with self.lock:
                self.log.append(visit)
            await self._answer(name, path, reader, _Counted(writer, visit))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or cut us off: what a crawler's deadline does
        except asyncio.CancelledError:
            pass  # the server is stopping
        finally:
            if visit is not None:
                visit.ended = time.monotonic()
            with contextlib.suppress(Exception):
                writer.close()
            self._tasks.discard(task)

    async def _answer(
        self, name: str, path: str, reader: asyncio.StreamReader, out: _Counted
    ) -> None:
        if path == "/robots.txt":
            await self._robots(name, reader, out)
        elif path == "/rules.txt":
            await out.send(_response(200, _ROBOTS, "text/plain"))
        elif path in ("/ok.html", "/secret.html", "/"):
            await out.send(_response(200, _OK))
        elif path == f"/{name}" or path.startswith(f"/{name}/"):
            behaviour = _BEHAVIOURS.get(name)
            if behaviour is None:
                await out.send(_response(404, b"not found"))
            else:
                await behaviour(self, path, reader, out)
        else:
            await out.send(_response(404, b"not found"))

    async def _robots(self, name: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        if name == "robots-timeout":
            await reader.read()  # until the client gives up
        elif name == "robots-5xx":
            await out.send(_response(503, b"unavailable", "text/plain"))
        elif name == "robots-huge":
            line = b"Disallow: /nothing-here/" + b"x" * 40 + b"\n"
            filler = line * (self.config.huge_robots_bytes // len(line))
            body = b"User-agent: *\n" + filler + b"Disallow: /ok.html\n"
            await out.send(_response(200, body, "text/plain"))
        elif name == "robots-redirect":
            await out.send(_response(301, b"", headers=[("Location", "/rules.txt")]))
        else:
            await out.send(_response(200, _ROBOTS, "text/plain"))

    # -- the behaviours ----------------------------------------------------------------------
    async def _slow_headers(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        head = _head(200, [("Content-Type", "text/html"), *[("X-Filler", "y" * 60)] * 1000])
        for i in range(len(head)):
            await out.send(head[i : i + 1])
            await asyncio.sleep(self.config.trickle)

    async def _slow_body(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        body = _OK * 100
        await out.send(_head(200, [("Content-Type", "text/html"), ("Content-Length", len(body))]))
        for i in range(len(body)):
            await out.send(body[i : i + 1])
            await asyncio.sleep(self.config.trickle)

    async def _endless_body(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        await out.send(_head(200, [("Content-Type", "text/html")]) + b"<html><body>")
        chunk = b"<p>" + b"endless " * 8000 + b"</p>\n"
        while True:
            await out.send(chunk)

    async def _reset_mid_body(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        body = _OK * 100
        await out.send(_head(200, [("Content-Type", "text/html"), ("Content-Length", len(body))]))
        await out.send(body[: len(body) // 2])
        await asyncio.sleep(0.05)  # let the client start on the body
        out.reset()

    async def _no_answer(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        await reader.read()  # until the client gives up

    async def _redirect_loop(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        target = "/redirect-loop" if path.endswith("/b") else "/redirect-loop/b"
        await out.send(_response(302, b"", headers=[("Location", target)]))

    async def _redirect_private(
        self, path: str, reader: asyncio.StreamReader, out: _Counted
    ) -> None:
        target = "http://169.254.169.254/latest/meta-data/"
        await out.send(_response(302, b"", headers=[("Location", target)]))

    async def _invalid_encoding(
        self, path: str, reader: asyncio.StreamReader, out: _Counted
    ) -> None:
        await out.send(_response(200, _OK, headers=[("Content-Encoding", "gzip")]))

    async def _gzip_bomb(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        await out.send(_response(200, self._bomb_body(), headers=[("Content-Encoding", "gzip")]))

    async def _mislabelled_encoding(
        self, path: str, reader: asyncio.StreamReader, out: _Counted
    ) -> None:
        body = gzip.compress(_OK)
        await out.send(_response(200, body, headers=[("Content-Encoding", "deflate")]))

    async def _unknown_encoding(
        self, path: str, reader: asyncio.StreamReader, out: _Counted
    ) -> None:
        await out.send(_response(200, _OK, headers=[("Content-Encoding", "x-hostile")]))

    async def _many_links(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        links = "".join(
            f'<li><a href="/secret/{i}.html">{i}</a></li>' for i in range(self.config.many_links)
        )
        html = f"<!DOCTYPE html><html><head><title>links</title></head><body><ul>{links}</ul>"
        await out.send(_response(200, (html + "</body></html>").encode()))

    async def _retry_after(self, path: str, reader: asyncio.StreamReader, out: _Counted) -> None:
        if path.endswith("/next"):  # a page to ask for after the wait
            await out.send(_response(200, _OK))
            return
        status = 429 if path.endswith("429") else 503
        retry = [("Retry-After", str(self.config.retry_after))]
        await out.send(_response(status, b"slow down", "text/plain", headers=retry))

    async def _slow_tls(self, reader: asyncio.StreamReader, out: _Counted) -> None:
        await reader.read(1)  # the ClientHello has begun
        await out.send(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KB, to come
        while True:
            await out.send(b"\x00")
            await asyncio.sleep(self.config.trickle)

    def _bomb_body(self) -> bytes:
        """``bomb_bytes`` zeros, gzip-compressed (built once, in chunks)."""
        if self._bomb is None:
            packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
            block = bytes(1024 * 1024)
            parts = [packer.compress(block) for _ in range(self.config.bomb_bytes // len(block))]
            self._bomb = b"".join(parts) + packer.flush()
        return self._bomb


_Behaviour = Callable[[HostileWeb, str, asyncio.StreamReader, "_Counted"], Awaitable[None]]
_BEHAVIOURS: dict[str, _Behaviour] = {
    "slow-headers": HostileWeb._slow_headers,
    "slow-body": HostileWeb._slow_body,
    "endless-body": HostileWeb._endless_body,
    "reset-mid-body": HostileWeb._reset_mid_body,
    "no-answer": HostileWeb._no_answer,
    "redirect-loop": HostileWeb._redirect_loop,
    "redirect-private": HostileWeb._redirect_private,
    "invalid-encoding": HostileWeb._invalid_encoding,
    "gzip-bomb": HostileWeb._gzip_bomb,
    "mislabelled-encoding": HostileWeb._mislabelled_encoding,
    "unknown-encoding": HostileWeb._unknown_encoding,
    "many-links": HostileWeb._many_links,
    "retry-after-429": HostileWeb._retry_after,
    "retry-after-503": HostileWeb._retry_after,
}


class _Counted:
    """A stream writer that counts what it sent into the visit, and can reset."""

    def __init__(self, writer: asyncio.StreamWriter, visit: Visit) -> None:
        self.writer = writer
        self.visit = visit

    async def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self.writer.write(data)
        await self.writer.drain()
        self.visit.sent += len(data)

    def reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


def _head(status: int, fields: list[tuple[str, object]]) -> bytes:
    lines = [f"HTTP/1.1 {status} Hostile", *(f"{k}: {v}" for k, v in fields)]
    return ("\r\n".join([*lines, "Connection: close"]) + "\r\n\r\n").encode("latin-1")


def _response(
    status: int,
    body: bytes,
    content_type: str = "text/html",
    *,
    headers: Sequence[tuple[str, object]] = (),
) -> bytes:
    fields: list[tuple[str, object]] = [("Content-Type", content_type)]
    fields += [*headers, ("Content-Length", len(body))]
    return _head(status, fields) + body
