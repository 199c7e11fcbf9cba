"""split_releases: a PostgreSQL release's second half, committed before the release is

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23

On PostgreSQL a large release queues its second half on a second connection, in a
transaction of its own that commits just before the release's (two server processes, two
cores: ``store.releases._pg_queue_split``). That transaction also inserts the period's row
here, and the release's transaction deletes it: a row that stays marks a release that failed
after its second half committed, whose queue rows are not recorded. The next release (or the
release's retry) deletes those rows first. The probe reads this small table, not the queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "split_releases",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"]),
        sa.PrimaryKeyConstraint("plan_id", "period"),
    )


def downgrade() -> None:
    op.drop_table("split_releases")
