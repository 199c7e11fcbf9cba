"""drop split_releases: a release is one transaction again

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25

A PostgreSQL release no longer queues half of its pages on a second connection, so no
release can leave a committed half behind: the table that marked those halves goes. The
downgrade creates it again, empty (the code of revision 0012 reads it, and finds nothing to
undo).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_table("split_releases")


def downgrade() -> None:
    op.create_table(
        "split_releases",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"]),
        sa.PrimaryKeyConstraint("plan_id", "period"),
    )
