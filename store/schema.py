"""Creating, migrating and checking the schema with Alembic.

``crawlplan init`` calls :func:`upgrade_schema`, which creates the schema on an empty database
and migrates an older one to the current revision; every other command calls
:func:`check_schema` first so that a database that was never initialized, or was written by
another version of crawlplan, gets a one-line error instead of a traceback deep in a query.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from store.database import Database
from store.errors import SchemaMissingError, SchemaOutdatedError

__all__ = ["check_schema", "current_revision", "head_revision", "upgrade_schema"]

_MIGRATIONS = Path(__file__).with_name("migrations")


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def head_revision() -> str:
    """The revision this version of crawlplan expects."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(db: Database) -> str | None:
    """The database's revision, or None when it has no crawlplan schema."""
    with db.read() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_schema(db: Database) -> tuple[str | None, str]:
    """Create or migrate the schema to head; returns ``(revision_before, revision_after)``."""
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
