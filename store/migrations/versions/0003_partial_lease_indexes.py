"""partial indexes for the lease queue: due pages by host, leased pages by lease

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

``ix_pages_host_due`` (host_id, next_due_at) and ``ix_pages_lease`` (lease_id) now hold only
the rows the lease queue looks for: pages with a due time, and pages held by a lease. Most
pages have neither once a plan is published, so the indexes shrink to the work in flight, and
a release (next_due_at NULL -> time) or a lease (lease_id NULL -> id) of 100,000 scattered
pages inserts index entries next to each other instead of also deleting as many NULL entries
scattered over the whole index. Every query that uses them compares the column (``<=``,
``=``), which implies NOT NULL, so both SQLite and PostgreSQL still choose them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DUE = "next_due_at IS NOT NULL"
_LEASED = "lease_id IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_host_due")
        batch_op.drop_index("ix_pages_lease")
        batch_op.create_index(
            "ix_pages_host_due",
            ["host_id", "next_due_at"],
            unique=False,
            postgresql_where=sa.text(_DUE),
            sqlite_where=sa.text(_DUE),
        )
        batch_op.create_index(
            "ix_pages_lease",
            ["lease_id"],
            unique=False,
            postgresql_where=sa.text(_LEASED),
            sqlite_where=sa.text(_LEASED),
        )


def downgrade() -> None:
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_lease")
        batch_op.drop_index("ix_pages_host_due")
        batch_op.create_index("ix_pages_host_due", ["host_id", "next_due_at"], unique=False)
        batch_op.create_index("ix_pages_lease", ["lease_id"], unique=False)
