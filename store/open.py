"""Opening a database: URL checks, engine settings per engine, the engine's SQL, error mapping.

Supported URLs::

    sqlite:///crawlplan.db            a file (relative to the working directory), WAL mode
    sqlite:////abs/path/crawlplan.db
    postgresql://user@host:port/dbname    (also postgres://, postgresql+psycopg://)

SQLite: the Python driver's implicit transactions are turned off so that a write transaction
can start with ``BEGIN IMMEDIATE`` (:meth:`store.database.Database.write`); ``busy_timeout``
makes writers queue instead of failing. PostgreSQL: psycopg 3, READ COMMITTED.

Here, above both :mod:`store.database` and :mod:`store.dialects`, the
:class:`~store.database.Database` is given its engine's :class:`~store.backend.Backend`
(:func:`store.dialects.backend_for`), so that the database module never imports the engines'
modules that import it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from store.database import SQLITE_BUSY_TIMEOUT_MS, Database, sqlite_path
from store.dialects import backend_for
from store.errors import DatabaseUnreachableError, InvalidDatabaseURLError, SchemaMissingError

__all__ = ["open_database", "parse_database_url"]


def parse_database_url(raw: str) -> URL:
    """Parse and normalize a database URL, or raise :class:`InvalidDatabaseURLError`."""
    raw = raw.strip()
    if not raw:
        raise InvalidDatabaseURLError(
            "empty database URL: pass --db sqlite:///crawlplan.db or a postgresql:// URL"
        )
    try:
        url = make_url(raw)
    except exc.ArgumentError:
        raise InvalidDatabaseURLError(
            f"malformed database URL {raw!r}: expected sqlite:///PATH or "
            "postgresql://USER@HOST:PORT/DBNAME"
        ) from None
    backend = url.get_backend_name()
    if backend in ("postgres", "postgresql"):
        # One driver, psycopg 3, whatever the URL asked for (psycopg2 is not installed).
        url = url.set(drivername="postgresql+psycopg")
        if not url.database:
            raise InvalidDatabaseURLError(
                f"database URL {url.render_as_string(hide_password=True)!r} names no database: "
                "add /DBNAME at the end"
            )
    elif backend == "sqlite":
        if url.get_driver_name() not in ("pysqlite", ""):
            url = url.set(drivername="sqlite")
    else:
        raise InvalidDatabaseURLError(
            f"unsupported database {backend!r} in {raw!r}: crawlplan runs on sqlite:///PATH "
            "or postgresql://USER@HOST:PORT/DBNAME"
        )
    return url


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("crawlplan_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def open_database(raw_url: str, *, create: bool = False, echo: bool = False) -> Database:
    """Open the database at ``raw_url`` and check that it answers.

    With ``create=False`` a SQLite file that does not exist is an error (commands that read
    must not leave empty files behind); ``crawlplan init`` passes ``create=True``.

    Raises
    ------
    InvalidDatabaseURLError, DatabaseUnreachableError, SchemaMissingError
    """
    url = parse_database_url(raw_url)
    shown = url.render_as_string(hide_password=True)
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(url)
        if path is not None:
            if not path.exists() and not create:
                raise SchemaMissingError(
                    f"no database at {path}: run `crawlplan init --db {shown}` first"
                )
            if create and not path.parent.exists():
                raise DatabaseUnreachableError(
                    f"cannot create {path}: directory {path.parent} does not exist"
                )
        if path is None:
            kwargs["poolclass"] = StaticPool  # one in-memory database, shared by the pool
        else:
            kwargs.update(pool_size=8, max_overflow=32)  # a thread per leased host
        engine = create_engine(url, **kwargs)
        _install_sqlite_hooks(engine)
    else:
        # Crawler workers run a thread per leased host; their reports are short transactions.
        kwargs.update(pool_pre_ping=True, pool_size=8, max_overflow=16)
        # The store's transactions are written for READ COMMITTED (each statement sees what
        # committed before it: a lease skips the rows a concurrent one locked, a release sees
        # the pages queued before it), whatever the server's default_transaction_isolation says.
        kwargs["isolation_level"] = "READ COMMITTED"
        kwargs["connect_args"] = {"connect_timeout": 10, "application_name": "crawlplan"}
        engine = create_engine(url, **kwargs)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except exc.DBAPIError as error:  # OperationalError, or DatabaseError for a non-database file
        engine.dispose()
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        if url.get_backend_name() == "postgresql" and "does not exist" in reason:
            raise DatabaseUnreachableError(
                f"cannot open {shown}: {reason}; create it with "
                f"`createdb -h {url.host or 'localhost'} {url.database}`"
            ) from None
        hint = (
            "point --db at a crawlplan SQLite file, or at a new path for `crawlplan init`"
            if url.get_backend_name() == "sqlite"
            else "check the URL, and that the server is running"
        )
        sqlite_file = sqlite_path(url) if url.get_backend_name() == "sqlite" else None
        if sqlite_file is not None and _read_only_file_system(sqlite_file.parent):
            hint = (
                f"{sqlite_file.resolve().parent} is on a read-only file system: "
                "point --db elsewhere"
            )
        raise DatabaseUnreachableError(f"cannot open {shown}: {reason}; {hint}") from None
    return Database(engine, url, backend_for(engine.dialect.name))


def _read_only_file_system(directory: Path) -> bool:
    """Whether ``directory`` is on a file system mounted read-only (SQLite in WAL mode cannot
    open even an existing database there: it must write the ``-shm`` index beside it)."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False
