"""Creating, migrating and checking the schema with Alembic.

``crawlplan init`` calls :func:`upgrade_schema`, which creates the schema on an empty database
and migrates an older one to the current revision; every other command calls
:func:`check_schema` first so that a database that was never initialized, or was written by
another version of crawlplan, gets a one-line error instead of a traceback deep in a query.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text

from store.database import Database
from store.errors import SchemaMissingError, SchemaOutdatedError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["check_schema", "current_revision", "head_revision", "upgrade_schema"]

_MIGRATIONS = Path(__file__).with_name("migrations")


def _config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


@functools.cache
def head_revision() -> str:
    """The revision this version of crawlplan expects: the highest migration number.

    Migrations are numbered ``NNNN_name.py`` with revision ``"NNNN"``, each revising the one
    before (tests/test_store_schema.py checks Alembic's own head agrees). Reading the names
    spares every command the import of Alembic and its scripts (about 0.1 s) just to check.
    """
    return max(
        path.name[:4] for path in (_MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")
    )


def current_revision(db: Database) -> str | None:
    """The database's revision, or None when it has no crawlplan schema."""
    with db.read() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one_or_none()


def upgrade_schema(db: Database) -> tuple[str | None, str]:
    """Create or migrate the schema to head; returns ``(revision_before, revision_after)``."""
    from alembic import command
    from alembic.script import ScriptDirectory

    before = current_revision(db)
    known = {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}
    if before is not None and before not in known:
        raise SchemaOutdatedError(
            f"{db.display_url} is at schema revision {before}, which this crawlplan does not "
            "know: it was written by a newer crawlplan; upgrade crawlplan"
        )
    cfg = _config()
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return before, head_revision()


def check_schema(db: Database) -> None:
    """Raise unless the database is at the revision this crawlplan expects."""
    current = current_revision(db)
    if current is None:
        raise SchemaMissingError(
            f"{db.display_url} has no crawlplan schema: run `crawlplan init --db "
            f"{db.display_url}` first"
        )
    head = head_revision()
    if current != head:
        raise SchemaOutdatedError(
            f"{db.display_url} is at schema revision {current}, this crawlplan expects {head}: "
            f"run `crawlplan init --db {db.display_url}` to migrate it"
        )
