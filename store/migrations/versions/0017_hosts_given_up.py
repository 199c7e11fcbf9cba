"""hosts.robots_failures, hosts.given_up_at: hosts whose robots.txt stays unreachable

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27

A host whose robots.txt can't be fetched (connection refused, DNS failure, timeout, 5xx) is
asked again every 30 minutes, and its pages stayed due for ever: a crawl of a real site that
links to hundreds of such hosts never went idle. ``robots_failures`` counts a host's
consecutive unreachable robots.txt fetches (the worker hands it back with the host, as the
robots.txt state; a reachable robots.txt sets it to 0); once it reaches the crawl's
``crawl.robots_give_up_after`` the host is given up (``given_up_at``) and every page of it
leaves the due set in the same transaction. ``ix_pages_host (host_id, id)`` finds a host's
pages in id order (the order writers lock pages in) whether they are due or not: a host's
pages waiting for a release have no due time, so the partial ``ix_pages_host_due`` does not
hold them. Plain ADD COLUMNs with constant defaults (a populated store upgrades in place);
the index is built once, over every page.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "hosts",
        sa.Column("robots_failures", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "hosts", sa.Column("given_up_at", store.types.UTCDateTime(timezone=True), nullable=True)
    )
    op.create_index("ix_pages_host", "pages", ["host_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_pages_host", table_name="pages")
    # In place (SQLite 3.35+): a batch rebuild of ``hosts`` would break the pages' foreign key.
    op.execute("ALTER TABLE hosts DROP COLUMN given_up_at")
    op.execute("ALTER TABLE hosts DROP COLUMN robots_failures")
