"""quotas.marginal, plan_periods.new_marginal: the plan's value of one more crawl

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25

A release spends the crawls a bucket cannot use (too few fetchable pages, hosts full) on the
other buckets and on new pages, in the order of the plan's marginal values: per period and
bucket, the value of one more re-crawl (``quotas.marginal``); per period, the value of one
more new page (``plan_periods.new_marginal``). NULL when the plan has no values (plans
published before this revision, solvers that give none): the release then spills to the
pages unvisited longest. Plain nullable ADD COLUMNs on both backends: no table rebuild, and
the immutability triggers on these tables stay in place. The downgrade drops the columns
with a native ``ALTER TABLE ... DROP COLUMN`` (SQLite >= 3.35), which keeps the triggers too.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("quotas", sa.Column("marginal", sa.Float(), nullable=True))
    op.add_column("plan_periods", sa.Column("new_marginal", sa.Float(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE plan_periods DROP COLUMN new_marginal")
    op.execute("ALTER TABLE quotas DROP COLUMN marginal")
