"""Shared fixtures: one store contract suite run against SQLite and PostgreSQL.

PostgreSQL: ``$CRAWLPLAN_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
is an administrative connection; each test gets a database of its own, created and dropped
here. When the server cannot be reached the PostgreSQL variants are skipped and the summary
says why, except under CI (``$CI`` set) or ``$CRAWLPLAN_TEST_REQUIRE_PG=1``, where that is a
failure: the suite must really run on both backends there.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.orm import Session

from store import Database, open_database, upgrade_schema

PG_ADMIN_URL = os.environ.get(
    "CRAWLPLAN_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_PG = bool(os.environ.get("CI")) or os.environ.get("CRAWLPLAN_TEST_REQUIRE_PG") == "1"

#: A fixed instant for tests that pass ``now`` explicitly.
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _pg_admin_conninfo() -> str:
    return PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")


_pg_problem: str | None = None
_pg_checked = False


def pg_unavailable() -> str | None:
    """None when PostgreSQL answers, else the reason (checked once per session)."""
    global _pg_checked, _pg_problem
    if not _pg_checked:
        _pg_checked = True
        try:
            with psycopg.connect(_pg_admin_conninfo(), connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as error:
            _pg_problem = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {error}".strip()
    return _pg_problem


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped on exit; skips the test (fails it
    under CI) when the server is not reachable."""
    problem = pg_unavailable()
    if problem:
        if REQUIRE_PG:
            pytest.fail(problem + " (required under CI)")
        pytest.skip(problem)
    name = f"crawlplan_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="module")
def settled_collector() -> Iterator[None]:
    """Collect, then freeze what lives before the module's servers start (pytest's own
    state, imports, earlier fixtures), for modules whose checks hang on loopback timing;
    handed back after the module.

    A full collection walks every object not frozen: late in the suite, some 500,000 of
    them, 0.3-0.7 s with the interpreter lock held (measured 2026-11-28), and up to twice
    that on a busy machine. Run in the middle of a crawl over loopback, that stall froze
    the test's own HTTP servers past the fetcher's 1 s read timeout, and what was recorded
    depended on when the collector ran. Frozen, those objects are not walked again. Not
    for every module: with few objects left unfrozen, full collections come often, and a
    module that builds much ran about a tenth slower."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _collector_unfrozen() -> Iterator[None]:
    """Long-running commands freeze what they set up (``freeze_start_up``); run in this test
    process by CliRunner, the freeze is handed back after the test (the test's objects must
    not outlive it), with the module's own (``settled_collector``)."""
    frozen = gc.get_freeze_count()
    yield
    if gc.get_freeze_count() > frozen:  # frozen objects that die make it smaller
        gc.unfreeze()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file URL in the test's temporary directory (not created yet)."""
    return f"sqlite:///{tmp_path / 'crawlplan.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty database on each backend in turn."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def db(backend_url: str) -> Iterator[Database]:
    """An initialized store on each backend in turn."""
    yield from _store(backend_url)


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[Database]:
    """An initialized store on SQLite alone, for crawler behaviour that does not depend on the
    backend (the store's part is tested on both elsewhere)."""
    yield from _store(sqlite_url)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Database]:
    """An initialized store on PostgreSQL alone (concurrency that only PostgreSQL has)."""
    yield from _store(pg_url)


def _store(url: str) -> Iterator[Database]:
    """A store created and migrated at ``url``, its connections closed afterwards."""
    database = open_database(url, create=True)
    upgrade_schema(database)
    try:
        yield database
    finally:
        database.dispose()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say plainly whether the PostgreSQL half of the store suite ran."""
    if not _pg_checked:
        return
    if _pg_problem:
        terminalreporter.write_line(f"PostgreSQL store tests SKIPPED: {_pg_problem}", yellow=True)
    else:
        terminalreporter.write_line(f"PostgreSQL store tests ran against {PG_ADMIN_URL}")


def orm_all(db: Database, stmt: Any) -> list[Any]:
    """ORM objects for ``stmt`` (e.g. ``select(Page)``), detached for reading in tests."""
    with Session(db.engine, expire_on_commit=False) as session:
        return list(session.scalars(stmt).all())


def orm_one(db: Database, stmt: Any) -> Any:
    """The single ORM object ``stmt`` selects."""
    (only,) = orm_all(db, stmt)
    return only


def count_store_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the nightly run's whole-store reads (``measure_crawl``,
    ``aggregates_from_store``), appended as they are called (they still run)."""
    import service.nightly as nightly_module

    reads: list[str] = []
    for name in ("measure_crawl", "aggregates_from_store"):
        real = getattr(nightly_module, name)
        monkeypatch.setattr(
            nightly_module,
            name,
            lambda *a, _real=real, _name=name, **k: reads.append(_name) or _real(*a, **k),
        )
    return reads
