"""period_releases.blocked: released pages robots.txt turned away at their lease

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25

A page robots.txt disallows when a worker leases it leaves the release queue without a
request and without an observation (it becomes unfetchable): the report adds it to its
release's ``blocked`` count, so that ``crawlplan status`` and the metrics account for every
released page (fetched, blocked or pending). NULL in releases made before this revision. A
plain nullable ADD COLUMN: a populated store upgrades in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("period_releases", sa.Column("blocked", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("period_releases") as batch:
        batch.drop_column("blocked")
