"""pages.plan_rate: the rate a plan uses, the Bayes-equivalent rate

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29

A point estimate used as if true makes the plan crawl a page seen changed at every fetch as
if its rate were its likelihood's knee. The nightly run now also writes, per page, the rate
whose plug-in crawl rate is the Bayes action under the page's whole posterior
(``estimators.bayes_action``), and buckets the page by it; ``rate`` stays the estimate that
``status`` and the page exports show. NULL (``crawlplan estimate`` alone, ``plan.rates =
"estimates"``, a page known from change notifications): the plan uses ``rate``. A plain ADD
COLUMN without a default: a populated store upgrades in place, its pages NULL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pages", sa.Column("plan_rate", sa.Float(), nullable=True))


def downgrade() -> None:
    # In place (SQLite 3.35+): a batch rebuild of ``pages`` would break its foreign keys.
    op.execute("ALTER TABLE pages DROP COLUMN plan_rate")
