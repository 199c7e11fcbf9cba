"""A database: its engine, its engine's SQL, transactions, retries, driver-level helpers.

A :class:`Database` is an engine plus the transaction discipline the store relies on, and
the :class:`~store.backend.Backend` of its engine (given by whoever builds it:
:func:`store.open.open_database`). The helpers below it (:func:`driver_cursor`,
:class:`DriverStatement`, :func:`sqlite_bulk_cache`, :data:`PG_BY_ID`) are what the engines'
modules (:mod:`store.dialects`) and the generic modules share; this module imports neither.

SQLite: the write transaction starts with ``BEGIN IMMEDIATE`` (take the write lock first,
then read: the lease query and its update are one atomic step even with many processes on
one file), and this process's writers queue on :class:`_WriterLock`. PostgreSQL: psycopg 3,
READ COMMITTED, row locks with ``SKIP LOCKED`` in the lease queue.
"""

from __future__ import annotations

import fcntl
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    CursorResult,
    Engine,
    Select,
    exc,
)
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from store.backend import Backend
from store.types import UTCDateTime, sqlite_text

__all__ = [
    "DEFAULT_DB_URL",
    "PG_BY_ID",
    "Database",
    "DriverStatement",
    "driver_cursor",
    "driver_rows",
    "sqlite_bulk_cache",
    "sqlite_path",
]

DEFAULT_DB_URL = "sqlite:///crawlplan.db"
SQLITE_BUSY_TIMEOUT_MS = 60_000
#: SQLite page cache (KiB) of a connection while it writes rows scattered over a large table,
#: and the default it returns to (SQLite's own). With the default 2 MiB, a transaction that
#: dirties more pages spills them to the WAL one at a time, then reads them back.
SQLITE_BULK_CACHE_KIB = 262_144
SQLITE_CACHE_KIB = 2_000
#: PostgreSQL, for the rest of a transaction that joins a list of ids (an ``unnest`` of
#: array parameters) to a large table: look the rows up by index, in the list's order, rather
#: than hash the list and scan the whole table (which also writes the rows in random order).
PG_BY_ID = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
_RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock detected

T = TypeVar("T")


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for an in-memory database."""
    if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
        return None
    return Path(url.database)


class Database:
    """An engine plus the transaction discipline the store relies on.

    Use :meth:`write` for anything that changes data (it retries on deadlocks and
    serialization failures) and :meth:`read` for queries.
    """

    def __init__(self, engine: Engine, url: URL, backend: Backend) -> None:
        self.engine = engine
        self.url = url
        #: The SQL of this database's engine (:mod:`store.dialects`). The seam for tests that
        #: inject faults: assign a :class:`~store.backend.Backend` whose releases or leases
        #: are a subclass of the engine's, failing where the test wants.
        self.backend = backend
        path = sqlite_path(url) if engine.dialect.name == "sqlite" else None
        self._writer_lock = _WriterLock(path) if engine.dialect.name == "sqlite" else None

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self.engine.dialect.name

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages."""
        return self.url.render_as_string(hide_password=True)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection in a transaction that is rolled back at the end (read only)."""
        with self.engine.connect() as conn, conn.begin() as tx:
            yield conn
            tx.rollback()

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A connection in a write transaction, committed when the block ends without error.

        On SQLite the transaction starts with ``BEGIN IMMEDIATE``: it holds the file's write
        lock from its first statement, so a read-then-update in it cannot interleave with
        another writer.
        """
        lock = self._writer_lock
        with lock.held() if lock is not None else nullcontext(), self.engine.connect() as conn:
            conn = conn.execution_options(crawlplan_immediate=True)
            with conn.begin():
                yield conn

    def run_write(self, work: Callable[[Connection], T], *, attempts: int = 8) -> T:
        """Run ``work(conn)`` in :meth:`write`, retrying on deadlock or serialization failure."""
        for attempt in range(1, attempts + 1):
            try:
                with self.write() as conn:
                    return work(conn)
            except exc.OperationalError as error:
                if attempt == attempts or not _is_retryable(error):
                    raise
                time.sleep(random.uniform(0.0, 0.02 * 2**attempt))
        raise AssertionError("unreachable")

    def dispose(self) -> None:
        """Close every pooled connection (call before forking worker processes)."""
        self.engine.dispose()


class _WriterLock:
    """SQLite's writers, one at a time, woken as soon as the writer before them is done.

    SQLite lets one writer in at a time and makes the others poll: its busy handler sleeps
    1, 2, 5, ... up to 100 ms between tries, so under many writing threads (a crawl's) much
    of the time goes to sleeping while the file is free. Writers of this process queue on a
    lock instead, and writers of other processes on an advisory lock (``flock``) of a file
    beside the database (``<db>-writer``, released by the kernel when a process dies), tried
    every millisecond or so. SQLite's own locking still guards the file; this only orders the
    queue: a writer that waited ``timeout`` seconds goes on without it, as before, to SQLite's
    busy handler. Re-entrant per thread (only the outermost acquisition takes the file lock).
    """

    def __init__(self, path: Path | None, timeout: float = SQLITE_BUSY_TIMEOUT_MS / 1000) -> None:
        self.path = Path(f"{path}-writer") if path is not None else None
        self.timeout = timeout
        self._lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._pid = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=self.timeout):
            yield  # queued too long: SQLite's own locking decides
            return
        try:
            self._depth += 1
            fd = self._flock(deadline) if self._depth == 1 and self.path is not None else None
            try:
                yield
            finally:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                self._depth -= 1
        finally:
            self._lock.release()

    def _flock(self, deadline: float) -> int | None:
        """Take the file lock (its descriptor), or None once ``deadline`` passed."""
        if self._fd is None or self._pid != os.getpid():  # a forked child opens its own
            assert self.path is not None
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                # A directory this process cannot write (read-only file system, another
                # user's): no queue file, so SQLite's own locking decides, and a write that
                # SQLite cannot make fails there with its own message.
                return None
            self._pid = os.getpid()
        wait = 0.0002
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self._fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(wait)
                wait = min(2 * wait, 0.002)


def _is_retryable(error: exc.OperationalError) -> bool:
    sqlstate = getattr(error.orig, "sqlstate", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return True
    return "database is locked" in str(error.orig)


@contextmanager
def sqlite_bulk_cache(conn: Connection) -> Iterator[None]:
    """On SQLite, a large page cache for a bulk write in ``conn``'s transaction (no-op else).

    Only dirty pages are kept pinned, so shrinking the cache back at the end does not spill
    the transaction's pages; the memory goes back when the transaction ends.
    """
    if conn.dialect.name != "sqlite":
        yield
        return
    conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_BULK_CACHE_KIB}")
    try:
        yield
    finally:
        conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")


def driver_cursor(conn: Connection) -> Any:
    """A DBAPI cursor of ``conn``'s connection, for bulk reads straight through the driver.

    On PostgreSQL its results come in binary format: psycopg reads numbers, booleans and
    timestamps from their binary form faster than it parses their text (a fifth less time
    for the 125,000 candidate rows of a release; values and Python types are the same).
    """
    raw = conn.connection.driver_connection
    if conn.dialect.name == "postgresql":
        return raw.cursor(binary=True)  # type: ignore[union-attr]
    return raw.cursor()  # type: ignore[union-attr]


def driver_rows(conn: Connection, stmt: Select[Any]) -> list[Any]:
    """Run ``stmt`` on the DBAPI cursor: plain tuples, no Row object or type processing per
    row (the statement's columns must need none: numbers and booleans)."""
    compiled = stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    params = compiled.construct_params()
    args: Any = tuple(params[k] for k in compiled.positiontup) if compiled.positiontup else params
    cursor = driver_cursor(conn)
    try:
        cursor.execute(str(compiled), args)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _sqlite_utc_text(value: Any) -> str:
    """A :class:`UTCDateTime` bind value as SQLite stores it (as the type would)."""
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
    return sqlite_text(value)


class DriverStatement:
    """A statement compiled once for one dialect, run many times straight through the driver.

    For the hot statements of a crawl's reports, run with many rows each: SQLAlchemy builds
    a parameter dictionary per row (with every bind of the statement) before its type
    processors, and compiles dialect-specific statements (``INSERT ... ON CONFLICT``) on
    every execution, as they have no cache key. Here each row becomes the driver's
    parameters in one pass: the row's value of each bind (a literal's value when the
    statement holds one), through the bind's type processor (so a :class:`UTCDateTime`
    still refuses naive datetimes). No expanding (``IN``) parameters.
    """

    def __init__(
        self, stmt: ClauseElement, dialect: Dialect, *, column_keys: Sequence[str] | None = None
    ) -> None:
        compiled = stmt.compile(
            dialect=dialect, column_keys=list(column_keys) if column_keys is not None else None
        )
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        literals = compiled.construct_params(_check=False) or {}
        processors = compiled._bind_processors
        binds = compiled.binds
        if dialect.name == "sqlite":
            # UTCDateTime's text straight from the datetime (one call instead of the
            # decorator's two), the naive-datetime check kept
            processors = {
                name: _sqlite_utc_text if isinstance(binds[name].type, UTCDateTime) else proc
                for name, proc in processors.items()
            }
        positions = compiled.positiontup
        names = list(positions) if positions else list(literals)
        self._positional = positions is not None
        #: per bind: (name, required from the row, its literal value, type processor)
        self._slots: list[tuple[str, bool, Any, Any]] = [
            (
                name,
                binds[name].required,
                literals.get(name),
                processors.get(name),
            )
            for name in names
        ]

    def parameters(self, row: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """The driver's parameters of one row (keys: the statement's bind names)."""
        values = []
        for name, required, literal, process in self._slots:
            value = row[name] if required else row.get(name, literal)
            values.append(value if process is None or value is None else process(value))
        if self._positional:
            return tuple(values)
        return dict(zip((slot[0] for slot in self._slots), values, strict=True))

    def execute(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> CursorResult[Any]:
        """Run the statement once per row (one ``executemany``); the result's ``rowcount``
        is the rows changed in all."""
        return conn.exec_driver_sql(self.sql, [self.parameters(row) for row in rows])
