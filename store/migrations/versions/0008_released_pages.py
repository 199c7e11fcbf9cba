"""released_pages: the release queue that period releases append to and leases take from

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22

A period release used to write ``next_due_at`` of its 100,000 chosen pages, scattered over
the 10,000,000-row ``pages`` table, and each lease then wrote their ``lease_id`` and
``leased_until`` there too: two scattered writes of 100,000 rows (each dirtying about one
table page per row, plus its index entries). Now the release inserts its pages into this small
table (with their URL and validators, read from ``pages`` in the same statement) and the lease
queue hands them out without writing anything per page (the host's lease covers its queued
pages); a report deletes a page's row. Its primary key ``(host_id, due_at, page_id)`` is
the order leases read it in; on SQLite the table is stored in that order (``WITHOUT
ROWID``): a release, inserting in host then due order, appends. A new table: a populated
store upgrades in place.

``ix_pages_bucket_scheduled`` becomes a covering index (bucket, scheduled_at and the columns
the release's candidate query reads and filters on): the release reads its 125,000
candidates from the index alone instead of looking each row up in the table. Rebuilding it
takes about a minute on a store of 10,000,000 pages.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CANDIDATE_COLUMNS = [
    "status",
    "host_id",
    "importance",
    "fetches",
    "next_due_at",
    "leased_until",
    "id",
]


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "released_pages",
        sa.Column("host_id", big_id, nullable=False),
        sa.Column("due_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("page_id", big_id, nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("last_fetch_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("etag", sa.String(length=512), nullable=True),
        sa.Column("last_modified", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("signature", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("host_id", "due_at", "page_id", name="pk_released_pages"),
        sa.UniqueConstraint("page_id"),
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_bucket_scheduled")
        batch_op.create_index(
            "ix_pages_bucket_scheduled", ["bucket", "scheduled_at", *_CANDIDATE_COLUMNS]
        )


def downgrade() -> None:
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_bucket_scheduled")
        batch_op.create_index("ix_pages_bucket_scheduled", ["bucket", "scheduled_at"])
    op.drop_table("released_pages")
