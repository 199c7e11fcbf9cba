"""due-URL selection: refresh interval, scheduled time, period releases

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

``pages.refresh_interval`` (days) and ``pages.scheduled_at`` (last fetch + interval) carry the
page-level refresh schedule; ``ix_pages_bucket_scheduled`` (bucket, scheduled_at) replaces
``ix_pages_bucket_due`` (bucket, next_due_at), which no query used; the partial index
``ix_pages_new_cash`` orders never-fetched pages by OPIC cash; ``period_releases`` records
each plan period released once.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEW = "status = 'new'"


def upgrade() -> None:
    op.create_table(
        "period_releases",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("released_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"]),
        sa.PrimaryKeyConstraint("plan_id", "period"),
    )
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("refresh_interval", sa.Float(), nullable=True))
        batch_op.add_column(
            sa.Column("scheduled_at", store.types.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.drop_index("ix_pages_bucket_due")
        batch_op.create_index("ix_pages_bucket_scheduled", ["bucket", "scheduled_at"], unique=False)
        batch_op.create_index(
            "ix_pages_new_cash",
            ["cash", "id"],
            unique=False,
            postgresql_where=sa.text(_NEW),
            sqlite_where=sa.text(_NEW),
        )


def downgrade() -> None:
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_new_cash")
        batch_op.drop_index("ix_pages_bucket_scheduled")
        batch_op.create_index("ix_pages_bucket_due", ["bucket", "next_due_at"], unique=False)
        batch_op.drop_column("scheduled_at")
        batch_op.drop_column("refresh_interval")
    op.drop_table("period_releases")
