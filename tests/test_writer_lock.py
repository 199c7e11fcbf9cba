"""SQLite's writer queue (store.database._WriterLock): re-entrant, ordered across processes,
and never worse than SQLite's own locking when a writer holds on too long."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from store.database import _WriterLock


def _hold(path: str, seconds: float, held: Event) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.set()
    time.sleep(seconds)
    fcntl.flock(fd, fcntl.LOCK_UN)


def _holder(path: Path, seconds: float) -> multiprocessing.process.BaseProcess:
    ctx = multiprocessing.get_context("spawn")
    held = ctx.Event()
    child = ctx.Process(target=_hold, args=(f"{path}-writer", seconds, held), daemon=True)
    child.start()
    assert held.wait(30)
    return child


def test_reentrant_in_one_thread(tmp_path: Path) -> None:
    lock = _WriterLock(tmp_path / "db.sqlite", timeout=1.0)
    with lock.held(), lock.held():
        pass
    with lock.held():  # released: taken again at once
        pass


def test_waits_for_another_process_and_goes_on_when_it_is_done(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    child = _holder(path, 0.5)
    lock = _WriterLock(path, timeout=30.0)
    t0 = time.monotonic()
    with lock.held():
        waited = time.monotonic() - t0
    child.join(10)
    assert 0.2 < waited < 10  # queued behind the other process, then let in


def test_a_writer_holding_too_long_is_not_waited_for_forever(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    child = _holder(path, 5.0)
    lock = _WriterLock(path, timeout=0.3)
    t0 = time.monotonic()
    with lock.held():  # goes on without the queue: SQLite's own locking decides
        waited = time.monotonic() - t0
    assert 0.25 < waited < 3
    child.kill()
    child.join(10)
