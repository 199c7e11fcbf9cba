"""plan marginal values; re-crawl candidates read longest-unvisited first

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25

``quotas.marginal`` and ``plan_periods.new_marginal``: the plan's value of one more crawl of
a bucket in a period, and of one more new page. A release spends the crawls a bucket cannot
use (too few fetchable pages, hosts full) on the other buckets and on new pages in the order
of these values. NULL when the plan has none (plans published before this revision, solvers
that give none): the release then spills to the pages unvisited longest. Plain nullable ADD
COLUMNs on both backends: no table rebuild, and the immutability triggers on these tables
stay in place; the downgrade drops them with a native ``ALTER TABLE ... DROP COLUMN``
(SQLite >= 3.35), which keeps the triggers too.

The planning model assumes that inside a bucket the crawl takes the pages unvisited longest
first, so a release reads each bucket's candidates in ``last_fetch_at`` order: the covering
candidate index ``ix_pages_bucket_scheduled`` (bucket, scheduled_at, ...) becomes
``ix_pages_bucket_fetched`` (bucket, last_fetch_at, the candidate columns, id, the columns a
release copies). Same columns but ``scheduled_at``: a report rewrites the entry as before
(its ``last_fetch_at`` and ``fetches`` change), the nightly page schedule's writes of
``scheduled_at`` no longer touch it. Rebuilding it takes about a minute on a store of
10,000,000 pages.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CANDIDATE = ["status", "host_id", "importance", "fetches", "next_due_at", "leased_until"]
_RELEASE = ["url", "last_fetch_at", "etag", "last_modified", "signature"]


def upgrade() -> None:
    op.add_column("quotas", sa.Column("marginal", sa.Float(), nullable=True))
    op.add_column("plan_periods", sa.Column("new_marginal", sa.Float(), nullable=True))
    op.drop_index("ix_pages_bucket_scheduled", table_name="pages")
    op.create_index(
        "ix_pages_bucket_fetched",
        "pages",
        [
            "bucket",
            "last_fetch_at",
            *_CANDIDATE,
            "id",
            *(c for c in _RELEASE if c != "last_fetch_at"),
        ],
    )


def downgrade() -> None:
    op.drop_index("ix_pages_bucket_fetched", table_name="pages")
    op.create_index(
        "ix_pages_bucket_scheduled",
        "pages",
        ["bucket", "scheduled_at", *_CANDIDATE, "id", *_RELEASE],
    )
    op.execute("ALTER TABLE plan_periods DROP COLUMN new_marginal")
    op.execute("ALTER TABLE quotas DROP COLUMN marginal")
