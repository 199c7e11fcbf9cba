"""period_releases: new pages released, and the pages carried over from earlier releases

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25

``crawlplan status``, the metrics and the nightly capacity measurement report per plan period
what was released (re-crawls and new pages) and whether the crawler kept up: the release
records how many of its pages were new, and how many pages of earlier releases were still
waiting when it ran, and how many of those waited on hosts backed off (429, 503, unreachable
robots.txt). NULL in releases made before this revision. Plain ADD COLUMNs, nullable: a
populated store upgrades in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("new_pages", "carried_over", "carried_backed_off")


def upgrade() -> None:
    for name in _COLUMNS:
        op.add_column("period_releases", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("period_releases") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
