"""A :class:`~scenarios.web_server.WebServer` in a spawned process of its own.

The synthetic web's server is an asyncio loop in Python: in the process that crawls it, it
competes with the crawler's threads for one GIL. :class:`ServerProcess` runs it in a child
process (the ``spawn`` start method, so nothing of the parent's state is inherited) and keeps
in the parent what a test or the demo needs of it: the origins, the epoch (wall-clock time of
t = 0) and, after :meth:`ServerProcess.stop`, the server's request log. The web itself is
rebuilt in the parent from the same :class:`~scenarios.synthetic_web.WebConfig` (it is
deterministic), for ground truth.

The child ignores SIGINT (a Ctrl-C at a terminal reaches the whole process group: the parent
decides when the server stops) and stops by itself when the parent goes away (its control
pipe reads end of file), so an interrupted or killed parent leaves no server behind.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
import traceback
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from types import TracebackType

from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import LoggedRequest, WebServer

__all__ = ["ServerProcess", "context", "end_process"]

_START_TIMEOUT = 120.0


def context(start_method: str) -> SpawnContext | ForkServerContext:
    """The multiprocessing context of ``start_method`` (``spawn`` or ``forkserver``)."""
    if start_method == "forkserver":
        return multiprocessing.get_context("forkserver")
    if start_method == "spawn":
        return multiprocessing.get_context("spawn")
    raise ValueError(f"start method spawn or forkserver, not {start_method!r}")


def _serve(config: WebConfig, seed: int, control: Connection, results: Connection) -> None:
    """The child: serve until the parent says stop (or goes away), then send the log."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        server = WebServer(SyntheticWeb(config), seed=seed)
        server.start()
    except BaseException:
        results.send(("error", traceback.format_exc()))
        return
    results.send(("ready", list(server.origins), server.epoch))
    try:
        control.recv()  # "stop"
    except (EOFError, OSError):  # the parent is gone: nobody to send the log to
        server.stop()
        return
    server.stop()
    with server.lock:
        log = [(r.t, r.host, r.path, r.status, r.conditional, r.garbage) for r in server.log]
    with suppress(BrokenPipeError, OSError):
        results.send(("log", log))


class ServerProcess:
    """Serve the web of ``config`` on loopback from a child process; a context manager.

    ``origins[h]`` is host h's ``http://127.0.0.1:PORT`` and ``epoch`` the wall-clock time of
    the server's t = 0, both known once :meth:`start` returns; ``web`` is the parent's copy of
    the same web (built from ``config`` unless given). :meth:`stop` returns the request log.
    ``start_method``: ``spawn`` (a fresh interpreter, the default) or ``forkserver`` (forked
    from a server process that has imported what it was told to preload: faster to start
    when the parent's ``__main__`` is expensive to import again).
    """

    def __init__(
        self,
        config: WebConfig,
        *,
        seed: int = 0,
        web: SyntheticWeb | None = None,
        start_method: str = "spawn",
    ) -> None:
        self.config = config
        self.start_method = start_method
        self.seed = seed
        self._web = web
        self.origins: list[str] = []
        self.epoch = datetime.now(UTC)
        self.log: list[LoggedRequest] = []
        self._process: BaseProcess | None = None
        self._control: Connection | None = None
        self._results: Connection | None = None

    @property
    def web(self) -> SyntheticWeb:
        """The parent's copy of the served web (ground truth)."""
        if self._web is None:
            self._web = SyntheticWeb(self.config)
        return self._web

    @property
    def pid(self) -> int | None:
        """The child's process id (None before :meth:`launch`)."""
        return self._process.pid if self._process is not None else None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def launch(self) -> None:
        """Spawn the child (returns at once; :meth:`wait_ready` waits for its ports)."""
        ctx = context(self.start_method)
        control_reader, control_writer = ctx.Pipe(duplex=False)
        results_reader, results_writer = ctx.Pipe(duplex=False)
        self._process = ctx.Process(
            target=_serve,
            args=(self.config, self.seed, control_reader, results_writer),
            name="synthetic-web-server",
            daemon=True,
        )
        self._process.start()
        control_reader.close()
        results_writer.close()
        self._control, self._results = control_writer, results_reader

    def wait_ready(self, timeout: float = _START_TIMEOUT) -> None:
        """Wait until the child serves; its origins and epoch are then known."""
        assert self._results is not None, "launch() first"
        if not self._results.poll(timeout):
            self.stop()
            raise RuntimeError(f"the synthetic web server did not start within {timeout:g} s")
        try:
            message = self._results.recv()
        except EOFError:
            self.stop()
            raise RuntimeError("the synthetic web server process died while starting") from None
        if message[0] != "ready":
            self.stop()
            raise RuntimeError(f"synthetic web server failed to start:\n{message[1]}")
        _, self.origins, self.epoch = message

    def start(self) -> None:
        """Spawn the child and wait until it serves."""
        self.launch()
        self.wait_ready()

    def stop(self, timeout: float = 60.0) -> list[LoggedRequest]:
        """Stop the server, collect its request log (also kept in ``log``), end the child.

        Safe to call twice, and after a failed start; a child that does not end in time is
        terminated, then killed.
        """
        process, control, results = self._process, self._control, self._results
        self._process = self._control = self._results = None
        if process is None:
            return self.log
        try:
            if control is not None:
                with suppress(BrokenPipeError, OSError):
                    control.send("stop")
            deadline = time.monotonic() + timeout
            # A child stopped while starting sends "ready" (or "error") before its log.
            while results is not None and results.poll(max(0.0, deadline - time.monotonic())):
                try:
                    message = results.recv()
                except (EOFError, OSError):
                    break
                if message[0] == "log":
                    self.log = [LoggedRequest(*row) for row in message[1]]
                    break
                if message[0] == "error":
                    break
        finally:
            end_process(process, timeout)
            for conn in (control, results):
                if conn is not None:
                    conn.close()
        return self.log

    # -- clock and addresses -----------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the web's epoch (the server's clock, read from the wall clock)."""
        return self.to_web_time(datetime.now(UTC))

    def to_web_time(self, when: datetime) -> float:
        """A wall-clock instant as seconds since the epoch."""
        return (when - self.epoch) / timedelta(seconds=1)

    def url(self, page: int) -> str:
        """The absolute URL of a page."""
        return self.origins[int(self.web.host_of[page])] + self.web.path(page)


def end_process(process: BaseProcess, timeout: float) -> None:
    """Join a child; terminate it, then kill it, if it does not end."""
    process.join(timeout)
    if process.is_alive():
        process.terminate()
        process.join(5)
    if process.is_alive():
        process.kill()
        process.join(5)
