"""pages.new_after: since when a page discovered on a re-crawl was new

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28

A page first linked from pages the crawl had read before without the link (a new article on
an index page) was most likely created between those pages' previous fetches and its
discovery. Its first Last-Modified is then its creation, not a change: read as a change
seen A days ago, a new page looks as fast as one that changes every A days. ``new_after``
is the earliest previous fetch of the pages whose report discovered it (``first_seen`` is
the discovery); NULL for pages found on a first fetch, seeds and sitemaps, whose dates
are read as before (``estimators.LastModifiedEvidence.first_is_creation``). A plain ADD
COLUMN without a default: a populated store upgrades in place, its pages NULL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "pages", sa.Column("new_after", store.types.UTCDateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    # In place (SQLite 3.35+): a batch rebuild of ``pages`` would break its foreign keys.
    op.execute("ALTER TABLE pages DROP COLUMN new_after")
