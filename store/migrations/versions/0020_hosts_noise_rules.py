"""hosts.noise_rules, hosts.noise_checked_at: per-site noise learned from twin fetches

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28

Noise that signatures cannot mask by its look (a teaser, a quote or a greeting picked per
request) made a page count as changed at nearly every fetch. A worker now fetches the first
HTML page of a host's lease twice, moments apart, and names the elements whose text
differed (``crawler.noise``): ``noise_rules`` holds them, one ``tag#id`` or ``tag.class``
per line ('' when the check found none; NULL: never checked), and ``noise_checked_at`` when
they were last checked (checked again after ``crawler.noise.NOISE_RECHECK``). The workers
hand both back with the host. Plain ADD COLUMNs without defaults: a populated store upgrades
in place, its hosts unchecked.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("noise_rules", sa.Text(), nullable=True))
    op.add_column(
        "hosts",
        sa.Column("noise_checked_at", store.types.UTCDateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    # In place (SQLite 3.35+): a batch rebuild of ``hosts`` would break the pages' foreign key.
    op.execute("ALTER TABLE hosts DROP COLUMN noise_checked_at")
    op.execute("ALTER TABLE hosts DROP COLUMN noise_rules")
