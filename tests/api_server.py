"""A real worker API server on loopback for tests: uvicorn in a thread, on a port of its own.

``ApiServer(db, settings).start()`` serves until ``stop()``; starting again serves on the
same port (a restart, as after a crash).
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from service.api.app import ApiSettings, create_app
from store import Database

TOKEN = "test-token-0123456789abcdef"


class ApiServer:
    """The worker API over ``db`` at ``self.url``."""

    def __init__(self, db: Database, settings: ApiSettings | None = None) -> None:
        self.db = db
        self.settings = settings or ApiSettings(tokens=(TOKEN,), release_every=None)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ApiServer:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        config = uvicorn.Config(
            create_app(self.db, self.settings),
            log_level="warning",
            limit_concurrency=32,
            timeout_keep_alive=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
