"""urgent_requests: pages put ahead of the plan (the immediate-crawl lane)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22

One row per urgent crawl request (``crawlplan seed --now``, the worker API, or a change
notification). The requests of a period are charged to the next period's release.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "urgent_requests",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("page_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("requested_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.CheckConstraint(
            "source IN ('cli', 'api', 'notification')", name="ck_urgent_requests_source"
        ),
        sa.ForeignKeyConstraint(["page_id"], ["pages.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_urgent_requests_time", "urgent_requests", ["requested_at"])


def downgrade() -> None:
    op.drop_index("ix_urgent_requests_time", table_name="urgent_requests")
    op.drop_table("urgent_requests")
