"""page_schedules: the page schedule of a plan, finished

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

One row per plan whose page schedule (each page's refresh interval and scheduled time from the
plan's quotas) has been written in full. A period of a plan is released only after it: a
release that ran on the previous plan's scheduled times, or while the old regime's due times
were being withdrawn, would choose the wrong pages.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "page_schedules",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("finished_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("objective", sa.String(length=32), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"]),
        sa.PrimaryKeyConstraint("plan_id"),
    )


def downgrade() -> None:
    op.drop_table("page_schedules")
