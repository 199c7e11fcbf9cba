"""pages.discovered: whether the crawl found the page (outlink, redirect) or a user seeded it

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22

The nightly pipeline's discovery rates (new pages found per crawl) count only pages the
crawl found; seeding a sitemap is not discovery. A plain ADD COLUMN with a constant default
on both backends (no table rebuild: a populated store upgrades in place, quickly).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "pages", sa.Column("discovered", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.drop_column("discovered")
