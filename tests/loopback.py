"""Small HTTP hosts on loopback for crawl tests: a request log, an origin, URLs as stored.

Each test module says what its host answers (a handler class, or a directory served as
files); what they share is here: the server in a daemon thread on 127.0.0.1 and a free
port, the log of request paths, the normalized URL of a path, and a plain page with links.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from crawler.urls import normalize_url

__all__ = ["LoopbackHost", "PagesHost", "html_page", "respond"]


@dataclass
class LoopbackHost:
    """One host on loopback and the paths it was asked for, in order."""

    log: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` (the host must be serving)."""
        assert self.server is not None, "serve() first"
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self, path: str) -> str:
        """The stored (normalized) URL of ``path`` on this host."""
        return normalize_url(self.origin + path)

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        """Answer with ``handler`` on a free loopback port, in a daemon thread."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop serving and free the port."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@dataclass
class PagesHost(LoopbackHost):
    """A host of HTML pages by path (mutable while it runs), redirects (path to target,
    answered 301), and a robots.txt answered with the statuses of ``robots_statuses`` in
    turn, then 200 (an answer other than 200 carries no rules a crawler may read)."""

    pages: dict[str, str] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    robots: str = "User-agent: *\nAllow: /\n"
    robots_statuses: list[int] = field(default_factory=list)

    def start(self) -> Self:
        """Serve on loopback; returns self."""
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.log.append(self.path)
                if self.path == "/robots.txt":
                    status = site.robots_statuses.pop(0) if site.robots_statuses else 200
                    respond(self, status, "text/plain", site.robots)
                elif self.path in site.redirects:
                    self.send_response(301)
                    self.send_header("Location", site.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path in site.pages:
                    respond(self, 200, "text/html; charset=utf-8", site.pages[self.path])
                else:
                    self.send_error(404)

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)
        return self


def respond(handler: BaseHTTPRequestHandler, status: int, kind: str, body: str) -> None:
    """Answer ``handler``'s request with ``body`` as ``kind`` and its length."""
    data = body.encode()
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def html_page(*links: str) -> str:
    """A page with a few words and an anchor to each of ``links``."""
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return f"<html><body><p>A page with words in it.</p>{anchors}</body></html>"
