"""pages.status 'duplicate': a directory's index file that serves the directory's document

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28

``http://host/doc/`` and ``http://host/doc/index.html`` are one file on a static server, and
were two pages: both planned, both re-crawled, both counted in the estimates. The index file
of such a pair now has status ``duplicate`` (``store.duplicates``): never a candidate, never
released, not a page of any bucket. Only the CHECK constraint ``ck_pages_status`` changes, to
allow the new value; no row changes, so a populated store upgrades in place:

- PostgreSQL: the constraint is dropped and added again ``NOT VALID``, then validated (a
  scan of ``pages`` that blocks no reader or writer of other tables).
- SQLite cannot alter a constraint, and a rebuild of ``pages`` is what its foreign keys
  (observations, urgent requests) refuse. The table's SQL text in ``sqlite_schema`` is
  rewritten instead, as SQLite documents for loosening a constraint ("Making Other Kinds Of
  Table Schema Changes", sqlitelang ``lang_altertable``): the new list of statuses allows
  every row the old one did, so no row needs checking. ``PRAGMA integrity_check`` passes
  after it (``tests/test_duplicates.py``).

Downgrade: duplicates become ``ok`` pages again (their last fetch answered), then the old
constraint is put back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = ("new", "ok", "gone", "redirect", "blocked", "error")
_NEW = (*_OLD, "duplicate")
_CHECK = re.compile(r"CONSTRAINT ck_pages_status CHECK \(status IN \([^)]*\)\)")


def _condition(statuses: tuple[str, ...]) -> str:
    return "status IN (" + ", ".join(f"'{s}'" for s in statuses) + ")"


def _set_statuses(statuses: tuple[str, ...]) -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE pages DROP CONSTRAINT ck_pages_status")
        op.execute(
            f"ALTER TABLE pages ADD CONSTRAINT ck_pages_status CHECK ({_condition(statuses)}) "
            "NOT VALID"
        )
        op.execute("ALTER TABLE pages VALIDATE CONSTRAINT ck_pages_status")
        return
    ddl = bind.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'pages'")
    ).scalar_one()
    new_ddl, found = _CHECK.subn(f"CONSTRAINT ck_pages_status CHECK ({_condition(statuses)})", ddl)
    if found != 1:
        raise RuntimeError(f"pages has no one ck_pages_status constraint to rewrite: {ddl}")
    version = int(bind.execute(text("PRAGMA schema_version")).scalar_one())
    bind.execute(text("PRAGMA writable_schema = ON"))
    try:
        bind.execute(
            text("UPDATE sqlite_master SET sql = :ddl WHERE type = 'table' AND name = 'pages'"),
            {"ddl": new_ddl},
        )
        # Other connections (and this one) read the schema again.
        bind.execute(text(f"PRAGMA schema_version = {version + 1}"))
    finally:
        bind.execute(text("PRAGMA writable_schema = OFF"))


def upgrade() -> None:
    _set_statuses(_NEW)


def downgrade() -> None:
    op.execute("UPDATE pages SET status = 'ok' WHERE status = 'duplicate'")
    _set_statuses(_OLD)
