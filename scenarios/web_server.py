"""The synthetic web served over real HTTP on loopback, one port per host.

Every test, benchmark and demo crawls this server for real. It listens on 127.0.0.1 only
(never any other address), serves each host of a :class:`~scenarios.synthetic_web.SyntheticWeb`
on a port of its own, and keeps a log of every request per host, so that tests can check
politeness and freshness against the server's own record and the web's ground truth.

Besides pages it serves what real hosts serve: robots.txt (rules, Crawl-delay, or 4xx/5xx),
a sitemap with lastmod, redirects (one hop, and a loop), an oversized page, malformed HTML,
non-HTML types, a disallowed area, 404/410 for unborn and dead pages, and, per host
behavior, lying Last-Modified headers, 304s, 429/503 with Retry-After, 500s, slow answers and
garbage (:data:`~scenarios.synthetic_web.GARBAGE_MODES`: truncated bodies, wrong or
conflicting lengths, a gzip body that is not gzip, bytes invalid in the declared charset, a
charset no decoder knows, connection resets, no HTTP at all). Broken framing is written to
the socket by hand (aiohttp would not send it), and the connection is then closed or reset.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from types import TracebackType

from aiohttp import web as aioweb

from scenarios.synthetic_web import LENIENT_GARBAGE, HostBehavior, SyntheticWeb

__all__ = ["OVERSIZE_BYTES", "LoggedRequest", "WebServer"]

LOOPBACK = "127.0.0.1"
OVERSIZE_BYTES = 2 * 1024 * 1024
#: Per request, for the log: the garbage mode of the answer, and the status line sent when
#: the answer was written by hand.
_GARBAGE = aioweb.RequestKey("garbage", str)
_SENT_STATUS = aioweb.RequestKey("sent_status", int)


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server saw it; ``t`` in seconds since the web's epoch.

    ``status`` is the status line sent, 0 when none was (a reset, bytes that are not HTTP);
    ``garbage`` the garbage mode of the answer, None for a well-formed one.
    """

    t: float
    host: int
    path: str
    status: int
    conditional: bool
    garbage: str | None = None


class WebServer:
    """Serve ``web`` on loopback in a background thread; use as a context manager.

    ``origins[h]`` is host h's ``http://127.0.0.1:PORT``; ``epoch`` the wall-clock time of
    t = 0; ``log`` the requests so far (read it after :meth:`stop`, or under ``lock``).
    """

    def __init__(self, web: SyntheticWeb, *, seed: int = 0) -> None:
        self.web = web
        self.origins: list[str] = []
        self.log: list[LoggedRequest] = []
        self.lock = threading.Lock()
        self.epoch = datetime.now(UTC)
        self._t0 = time.monotonic()
        self._seed = seed
        self._rngs: dict[int, random.Random] = {}
        self._visits = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: aioweb.AppRunner | None = None
        self._by_port: dict[int, int] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> WebServer:
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
        self._thread = threading.Thread(target=self._serve, name="synthetic-web", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._error is not None:
            raise RuntimeError(f"synthetic web server failed to start: {self._error}")
        self.epoch = datetime.now(UTC)
        self._t0 = time.monotonic()

    def stop(self) -> None:
        """Stop serving and join the server thread."""
        if self._loop is not None and self._runner is not None:
            future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            future.result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loop = None

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._bind())
        except BaseException as error:  # reported to start()
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _bind(self) -> None:
        app = aioweb.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = aioweb.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        for host in range(self.web.config.hosts):
            site = aioweb.TCPSite(self._runner, LOOPBACK, 0, reuse_address=True)
            await site.start()
            server = site._server
            assert server is not None
            port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
            self._by_port[port] = host
            self.origins.append(f"http://{LOOPBACK}:{port}")

    # -- clock and log -----------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the web's epoch."""
        return time.monotonic() - self._t0

    def to_web_time(self, when: datetime) -> float:
        """A wall-clock instant as seconds since the epoch."""
        return (when - self.epoch) / timedelta(seconds=1)

    def requests_to(self, host: int) -> list[LoggedRequest]:
        """The log of one host, in arrival order."""
        with self.lock:
            return [r for r in self.log if r.host == host]

    def url(self, page: int) -> str:
        """The absolute URL of a page."""
        return self.origins[int(self.web.host_of[page])] + self.web.path(page)

    # -- handling ----------------------------------------------------------------------------
    async def _handle(self, request: aioweb.Request) -> aioweb.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        host = self._by_port.get(int(sockname[1]) if sockname else -1, 0)
        behavior = self.web.config.behavior(host)
        t = self.now()
        if behavior.latency:
            await asyncio.sleep(behavior.latency)
        conditional = "If-None-Match" in request.headers or "If-Modified-Since" in request.headers
        response = await self._respond(request, host, behavior, t)
        status = int(request.get(_SENT_STATUS, response.status))
        entry = LoggedRequest(t, host, request.path, status, conditional, request.get(_GARBAGE))
        with self.lock:
            self.log.append(entry)
        return response

    async def _respond(
        self, request: aioweb.Request, host: int, behavior: HostBehavior, t: float
    ) -> aioweb.StreamResponse:
        path = request.path
        if path == "/robots.txt":
            if behavior.robots is None:
                return aioweb.Response(status=404, text="no robots.txt")
            return aioweb.Response(
                status=behavior.robots_status, text=behavior.robots, content_type="text/plain"
            )
        if path == "/sitemap.xml":
            return self._sitemap(host, t)
        special = self._special(host, path)
        if special is not None:
            return special
        page = self.web.page_at(host, path)
        if page is None:
            return aioweb.Response(status=404, text="not found")
        roll = self._rng(host).random()
        if roll < behavior.error_rate:
            return aioweb.Response(
                status=behavior.error_status,
                text="slow down",
                headers={"Retry-After": str(round(behavior.retry_after))},
            )
        roll -= behavior.error_rate
        if roll < behavior.server_error_rate:
            return aioweb.Response(status=500, text="internal error")
        roll -= behavior.server_error_rate
        mode = self.web.garbage_mode(page)
        if roll < behavior.garbage_rate:
            mode = self._rng(host).choice(behavior.garbage_modes)
        if t < self.web.born[page]:
            return aioweb.Response(status=404, text="not yet")
        if t >= self.web.dies[page]:
            return aioweb.Response(status=410, text="gone")
        if mode is not None and mode not in LENIENT_GARBAGE:
            return await self._garbage(request, host, page, t, mode)
        return self._page(request, host, page, behavior, t, garbage=mode)

    def _headers(self, page: int, behavior: HostBehavior, t: float) -> dict[str, str]:
        headers: dict[str, str] = {}
        version = self.web.version(page, t)
        if behavior.etag:
            headers["ETag"] = f'"{page}-{version}"'
        changed_at = self.epoch + timedelta(seconds=self.web.last_change(page, t))
        now = self.epoch + timedelta(seconds=t)
        lm = {
            "truthful": changed_at,
            "now": now,
            "future": now + timedelta(days=1),
            "static": self.epoch - timedelta(days=30),
        }.get(behavior.last_modified)
        if lm is not None:
            headers["Last-Modified"] = format_datetime(lm.astimezone(UTC), usegmt=True)
        return headers

    def _not_modified(self, request: aioweb.Request, headers: dict[str, str]) -> bool:
        etag = headers.get("ETag")
        if etag is not None and request.headers.get("If-None-Match") == etag:
            return True
        since = request.headers.get("If-Modified-Since")
        lm = headers.get("Last-Modified")
        if since and lm and "If-None-Match" not in request.headers:
            try:
                return parsedate_to_datetime(lm) <= parsedate_to_datetime(since)
            except (TypeError, ValueError):
                return False
        return False

    def _page(
        self,
        request: aioweb.Request,
        host: int,
        page: int,
        behavior: HostBehavior,
        t: float,
        *,
        garbage: str | None = None,
    ) -> aioweb.Response:
        """The page, or 304; ``garbage`` one of the lenient modes, which serve the real page
        (same visible text, validators and 304s: no change to the ground truth) badly."""
        headers = self._headers(page, behavior, t)
        if behavior.conditional and self._not_modified(request, headers):
            return aioweb.Response(status=304, headers=headers)
        html = self._render(host, page, t)
        if garbage is None:
            return aioweb.Response(text=html, content_type="text/html", headers=headers)
        request[_GARBAGE] = garbage
        body = html.encode()
        if garbage == "bad-bytes":
            # Latin-1 and stray bytes where UTF-8 is declared, out of the visible text.
            junk = b"<!-- caf\xe9 \xff\xfe --><meta name='description' content='na\xefve \xc3('>"
            body = body.replace(b"<head>", b"<head>" + junk, 1)
            return aioweb.Response(
                body=body, content_type="text/html", charset="utf-8", headers=headers
            )
        if garbage == "bogus-charset":
            # "undefined" is a codec Python knows that refuses every byte.
            headers["Content-Type"] = "text/html; charset=undefined"
            return aioweb.Response(body=body, headers=headers)
        # short-length: the page as its Content-Length says, then bytes past it, then close.
        fields = [("Content-Type", "text/html; charset=utf-8"), *headers.items()]
        fields.append(("Content-Length", str(len(body))))
        trailer = b"\r\n<!-- bytes past the Content-Length -->\x00\xff" * 4
        # "Connection: close", or a client that reuses the connection races the close: its
        # next request meets a reset (as with any server that drops keep-alive silently).
        return self._raw(request, _head(200, fields) + body + trailer, status=200)

    def _render(self, host: int, page: int, t: float) -> str:
        """The HTML of the page's version at ``t`` (one more visitor)."""
        self._visits += 1
        version = self.web.version(page, t)
        links = []
        for target in self.web.links[page]:
            if self.web.born[target] > t:
                continue
            href = self.web.path(int(target))
            if int(self.web.host_of[target]) != host:
                href = self.origins[int(self.web.host_of[target])] + href
            links.append(f'<li><a href="{href}">{self.web.title(int(target))}</a></li>')
        links.extend(f'<li><a href="{p}">more</a></li>' for p in self.web.private_paths(page))
        if self.web.index_in_host[page] == 0:
            specials = ["/private/secret.html", "/loop/a", "/moved/p1", "/image.png"]
            specials += ["/malformed.html"] + (["/big.html"] if host == 0 else [])
            links.extend(f'<li><a href="{p}">{p}</a></li>' for p in specials)
        html = (
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{self.web.title(page)}"
            f"</title></head><body><p class='stamp'>Rendered at {t:.3f} for visitor "
            f"{self._visits}</p><article>{self.web.body_text(page, version)}</article>"
            f"<ul>{''.join(links)}</ul></body></html>"
        )
        return html

    def _special(self, host: int, path: str) -> aioweb.Response | None:
        if path == "/loop/a":
            return _redirect(302, "/loop/b")
        if path == "/loop/b":
            return _redirect(302, "/loop/a")
        if path.startswith("/moved/p"):
            page = (
                self.web.page_at(
                    host, f"/s{int(path[8:]) % self.web.config.sections_per_host}/p{path[8:]}.html"
                )
                if path[8:].isdigit()
                else None
            )
            if page is None:
                return aioweb.Response(status=404)
            return _redirect(301, self.web.path(page))
        if path == "/big.html":
            filler = "<p>" + "lorem ipsum dolor sit amet " * 40 + "</p>\n"
            body = "<html><body>" + filler * (OVERSIZE_BYTES // len(filler) + 1) + "</body></html>"
            return aioweb.Response(text=body, content_type="text/html")
        if path == "/image.png":
            return aioweb.Response(body=b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")
        if path == "/malformed.html":
            return aioweb.Response(
                text="<html><body><p>unclosed <div><a href='/s0/p0.html'>home<table><tr><td>x",
                content_type="text/html",
            )
        if path.startswith("/private/"):
            return aioweb.Response(
                text="<html><body>secret</body></html>", content_type="text/html"
            )
        return None

    def _sitemap(self, host: int, t: float) -> aioweb.Response:
        n = self.web.config.pages_per_host
        entries = []
        for page in range(host * n, (host + 1) * n):
            if not self.web.alive(page, t):
                continue
            lastmod = self.epoch + timedelta(seconds=self.web.last_change(page, t))
            entries.append(
                f"<url><loc>{self.origins[host]}{self.web.path(page)}</loc>"
                f"<lastmod>{lastmod.isoformat(timespec='seconds')}</lastmod></url>"
            )
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + "".join(entries)
            + "</urlset>"
        )
        return aioweb.Response(text=xml, content_type="application/xml")

    def _rng(self, host: int) -> random.Random:
        """The host's own random stream: a host is crawled by one worker at a time, so its
        requests, and hence its errors, come in the same order on every run."""
        if host not in self._rngs:
            self._rngs[host] = random.Random(f"{self._seed}/{host}")
        return self._rngs[host]

    async def _garbage(
        self, request: aioweb.Request, host: int, page: int, t: float, mode: str
    ) -> aioweb.StreamResponse:
        """An answer no client can read whole (:data:`~scenarios.synthetic_web.ERROR_GARBAGE`),
        written to the socket by hand; the connection is then closed or reset."""
        request[_GARBAGE] = mode
        body = self._render(host, page, t).encode()
        html = ("Content-Type", "text/html; charset=utf-8")
        if mode == "truncated":
            head = _head(200, [html, ("Content-Length", str(len(body) + 4096))])
            return self._raw(request, head + body[: len(body) // 2], status=200)
        if mode == "conflicting-length":
            lengths = [("Content-Length", str(len(body))), ("Content-Length", str(len(body) + 17))]
            return self._raw(request, _head(200, [html, *lengths]) + body, status=200)
        if mode == "bad-gzip":
            fields = [html, ("Content-Encoding", "gzip"), ("Content-Length", str(len(body)))]
            return self._raw(request, _head(200, fields) + body, status=200)
        if mode == "bad-status-line":
            return self._raw(request, b"\x00\xff\xfeNOT HTTP AT ALL\r\n\r\n" + body, status=0)
        if mode == "reset-mid-headers":
            if request.transport is not None:
                request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/ht")
            await asyncio.sleep(0.02)  # let the client read them and wait for the rest
        return self._raw(request, b"", status=0, reset=True)  # reset, reset-mid-headers

    def _raw(
        self, request: aioweb.Request, data: bytes, *, status: int, reset: bool = False
    ) -> aioweb.Response:
        """Send ``data`` as is and close the connection (``reset``: abort it with a TCP RST,
        SO_LINGER 0). ``status`` is what the log records as sent."""
        request[_SENT_STATUS] = status
        transport = request.transport
        if transport is not None:
            if data:
                transport.write(data)
            if reset:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()
            else:
                transport.close()  # after the buffered data is sent
        # Never sent: aiohttp finds the connection closing and drops it.
        return aioweb.Response(status=200)


def _head(status: int, fields: list[tuple[str, str]]) -> bytes:
    """A status line and header block, as given (duplicates and lies included), announcing
    that the server closes the connection after it."""
    lines = [f"HTTP/1.1 {status} OK", *(f"{k}: {v}" for k, v in fields), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _redirect(status: int, location: str) -> aioweb.Response:
    """A redirect returned (not raised), so that the request log records it."""
    return aioweb.Response(status=status, headers={"Location": location})
