"""Schema: migrations match the models, init is idempotent, missing/outdated schemas are named."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from store import (
    Database,
    SchemaMissingError,
    SchemaOutdatedError,
    check_schema,
    open_database,
    upgrade_schema,
)
from store.models import Base
from store.schema import head_revision


def test_migrations_create_exactly_the_models_schema(db: Database) -> None:
    with db.read() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"migrations and models differ: {diff}"


def test_head_revision_is_alembics_and_the_database_agrees(db: Database) -> None:
    """The head read from the migrations' numbered names is Alembic's own head, and
    current_revision (plain SQL) reads what Alembic's MigrationContext reads."""
    from alembic.script import ScriptDirectory

    from store.schema import _config, current_revision

    assert head_revision() == ScriptDirectory.from_config(_config()).get_current_head()
    with db.read() as conn:
        assert current_revision(db) == MigrationContext.configure(conn).get_current_revision()
    assert current_revision(db) == head_revision()


def test_init_is_idempotent(db: Database) -> None:
    assert upgrade_schema(db) == (head_revision(), head_revision())
    check_schema(db)


def test_status_of_an_empty_database_says_run_init(backend_url: str) -> None:
    database = open_database(backend_url, create=True)
    with pytest.raises(SchemaMissingError, match="crawlplan init"):
        check_schema(database)
    database.dispose()


def test_outdated_schema_is_named(db: Database) -> None:
    with db.write() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(SchemaOutdatedError, match="ffff"):
        check_schema(db)
    with pytest.raises(SchemaOutdatedError, match="newer crawlplan"):
        upgrade_schema(db)


def test_migration_downgrade_and_upgrade_round_trip(db: Database) -> None:
    from alembic import command

    from store.schema import _config

    cfg = _config()
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    with db.read() as conn:
        assert MigrationContext.configure(conn).get_current_revision() is None
    upgrade_schema(db)
    check_schema(db)


def test_a_populated_store_upgrades_in_place(db: Database) -> None:
    """Down to the revision before the latest column, pages and observations in the store,
    then up again: the rows survive (no table rebuild that foreign keys would refuse)."""
    from alembic import command

    from store import add_pages
    from store.schema import _config

    cfg = _config()
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0006")
    with db.write() as conn:
        conn.execute(
            text(
                "INSERT INTO hosts (origin, first_seen, next_fetch_at, consecutive_errors) "
                "VALUES ('http://a.test', '2026-01-01 00:00:00.000000', "
                "'2026-01-01 00:00:00.000000', 0)"
            )
            if db.dialect == "sqlite"
            else text(
                "INSERT INTO hosts (origin, first_seen, next_fetch_at, consecutive_errors) "
                "VALUES ('http://a.test', now(), now(), 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO pages (url, host_id, status, first_seen, fetches, changes, "
                "bucket, cash, history) SELECT 'http://a.test/x', id, 'new', "
                + ("'2026-01-01 00:00:00.000000'" if db.dialect == "sqlite" else "now()")
                + ", 0, 0, 0, 0, 0 FROM hosts"
            )
        )
    upgrade_schema(db)
    check_schema(db)
    with db.read() as conn:
        assert conn.execute(text("SELECT url, discovered FROM pages")).all() == [
            ("http://a.test/x", False)
        ]
    assert add_pages(db, [("http://a.test/y", "http://a.test")]).added == 1
