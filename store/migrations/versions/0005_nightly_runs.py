"""nightly_runs: one row per nightly plan generation run

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

Records each ``crawlplan nightly`` run: the cycle it planned, its outcome, the plan it
published and its stage timings. A run that was killed stays ``running`` with an old
heartbeat; the next run marks it ``abandoned`` and does its work.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATUSES = "'running', 'published', 'unchanged', 'resumed', 'failed', 'abandoned'"


def upgrade() -> None:
    op.create_table(
        "nightly_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("started_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("cycle_start", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("stages", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.CheckConstraint(f"status IN ({_STATUSES})", name="ck_nightly_runs_status"),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("nightly_runs")
