"""observations: one notification per (page, time), enforced by a partial unique index

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22

``record_notifications`` skipped a (page, time) already recorded by reading first, which two
concurrent writers on PostgreSQL (read committed) could both pass. The partial unique index
makes the store refuse the second copy (``INSERT ... ON CONFLICT DO NOTHING``). Copies that
an older version let in are the same notification twice: the upgrade keeps the first of each
(lowest id) before building the index. The index holds notifications only, so it stays small
beside the fetch log.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NOTIFICATION = "kind = 'notification'"


def upgrade() -> None:
    op.execute(
        "DELETE FROM observations WHERE kind = 'notification' AND id NOT IN ("
        "SELECT min(id) FROM observations WHERE kind = 'notification' "
        "GROUP BY page_id, fetched_at)"
    )
    op.create_index(
        "uq_observations_notification",
        "observations",
        ["page_id", "fetched_at"],
        unique=True,
        postgresql_where=sa.text(_NOTIFICATION),
        sqlite_where=sa.text(_NOTIFICATION),
    )


def downgrade() -> None:
    op.drop_index("uq_observations_notification", table_name="observations")
