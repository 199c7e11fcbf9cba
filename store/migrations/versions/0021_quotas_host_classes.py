"""quotas.bucket holds a politeness-bound host's classes: INTEGER, any class >= 0

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29

The nightly run now splits the pages of a host whose politeness binds the plan into classes
of their own (``planner.cycle.bound_hosts``): class c of the plan's bound host g is
``c + 256 (g + 1)``, past the 255 change-rate classes that ``quotas.bucket`` (SMALLINT,
``CHECK bucket BETWEEN 0 AND 255``) allowed. The column becomes INTEGER and the check
``bucket >= 0``. No row changes, so a populated store upgrades in place:

- PostgreSQL: the column's type is altered (SMALLINT to INTEGER widens every value) and the
  constraint dropped and added again ``NOT VALID``, then validated.
- SQLite stores both types alike (INTEGER affinity, 64-bit values); its table's SQL text in
  ``sqlite_schema`` is rewritten as in revision 0018, since the plans' immutability
  triggers and foreign keys make a rebuild of ``quotas`` the wrong tool. The new check
  allows every row the old one did.

Downgrade: the quotas of split classes (bucket > 255) are deleted first, which the old code
could not release anyway; the plans stay, their other quotas too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = ("SMALLINT", "bucket BETWEEN 0 AND 255")
_NEW = ("INTEGER", "bucket >= 0")
_COLUMN = re.compile(r"\bbucket (SMALLINT|INTEGER) NOT NULL")
_CHECK = re.compile(r"CONSTRAINT ck_quotas_bucket CHECK \((bucket BETWEEN 0 AND 255|bucket >= 0)\)")


def _set(kind: tuple[str, str]) -> None:
    column_type, condition = kind
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(f"ALTER TABLE quotas ALTER COLUMN bucket TYPE {column_type}")
        op.execute("ALTER TABLE quotas DROP CONSTRAINT ck_quotas_bucket")
        op.execute(
            f"ALTER TABLE quotas ADD CONSTRAINT ck_quotas_bucket CHECK ({condition}) NOT VALID"
        )
        op.execute("ALTER TABLE quotas VALIDATE CONSTRAINT ck_quotas_bucket")
        return
    ddl = bind.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'quotas'")
    ).scalar_one()
    new_ddl, columns = _COLUMN.subn(f"bucket {column_type} NOT NULL", ddl)
    new_ddl, checks = _CHECK.subn(f"CONSTRAINT ck_quotas_bucket CHECK ({condition})", new_ddl)
    if (columns, checks) != (1, 1):
        raise RuntimeError(f"quotas has no one bucket column and check to rewrite: {ddl}")
    version = int(bind.execute(text("PRAGMA schema_version")).scalar_one())
    bind.execute(text("PRAGMA writable_schema = ON"))
    try:
        bind.execute(
            text("UPDATE sqlite_master SET sql = :ddl WHERE type = 'table' AND name = 'quotas'"),
            {"ddl": new_ddl},
        )
        bind.execute(text(f"PRAGMA schema_version = {version + 1}"))
    finally:
        bind.execute(text("PRAGMA writable_schema = OFF"))


def upgrade() -> None:
    _set(_NEW)


def downgrade() -> None:
    op.execute("DELETE FROM quotas WHERE bucket > 255")
    _set(_OLD)
