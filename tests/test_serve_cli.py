"""``crawlplan serve``: the worker API from the command line, as a user or a script runs it.

A script waits for the ``worker API on`` line and connects at once: the server listens
before it prints that line, so the first request is answered, never refused.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import requests

from store import open_database, upgrade_schema
from tests.interrupts import interruptible

TOKEN = "serve-test-token-0123456789"


def _env(tmp_path: Path) -> dict[str, str]:
    db = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade_schema(open_database(db, create=True))
    env = {**os.environ, "CRAWLPLAN_DB_URL": db, "CRAWLPLAN_API_TOKENS": TOKEN}
    env.pop("CRAWLPLAN_CONFIG", None)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _lines(stream: object) -> queue.Queue[str | None]:
    """The lines of ``stream`` as a reader thread sees them (so a test can wait boundedly),
    then None at the end of the stream."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_serve_answers_as_soon_as_it_says_it_listens(tmp_path: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env=_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    lines = _lines(server.stderr)
    try:
        first = lines.get(timeout=120)
        assert first is not None
        assert first.strip() == f"worker API on http://127.0.0.1:{port} (OpenAPI at /docs)"
        health = requests.get(f"http://127.0.0.1:{port}/health", timeout=30)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        work = requests.get(
            f"http://127.0.0.1:{port}/v1/work",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert work.status_code == 200 and work.json()["remaining"] is False
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    # uvicorn shuts down gracefully, then the CLI exits as every command does on Ctrl-C.
    assert server.returncode == 130
    rest: list[str] = []
    while (line := lines.get(timeout=60)) is not None:
        rest.append(line)
    assert "Traceback" not in "".join(rest)


def test_serve_on_a_busy_port_or_without_tokens_is_one_error_line(tmp_path: Path) -> None:
    env = _env(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = subprocess.run(
            [sys.executable, "-m", "service", "serve", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert busy.returncode == 2
    assert busy.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert "Traceback" not in busy.stderr
    no_tokens = subprocess.run(
        [sys.executable, "-m", "service", "serve"],
        env={**env, "CRAWLPLAN_API_TOKENS": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert no_tokens.returncode == 2
    assert no_tokens.stderr.startswith("error: the worker API needs api.tokens")
