"""pages.probe_delay and the "probe" urgent source: crawls that learn a page's rate

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02

A page seen changed at every fetch, crawled far apart, could change a little faster than one
change per interval or a hundred times faster: no crawl at the plan's intervals tells which,
and the plan leaves such pages uncrawled. The nightly run now picks the pages whose rate is
worth learning (``estimators.bayes_action.choose_probes``): each is put in the urgent lane
(source ``probe``) and marked with the delay of its probe (``probe_delay``, days); the report
of its next fetch makes it due again that delay later and clears the mark, so the second
fetch sees whether the page changed in a short time. Both crawls are charged to the plan as
urgent requests. Between the two the page's mark is the delay negated (the second crawl is
pending), which keeps a new plan from withdrawing its due time. A plain ADD COLUMN (a
populated store upgrades in place, its pages NULL), a partial index of the marked pages
(a new night's run clears the old marks through it), and the urgent requests' source
constraint rebuilt with the new source.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "source IN ('cli', 'api', 'notification')"
_NEW = "source IN ('cli', 'api', 'notification', 'probe')"
_MARKED = "probe_delay IS NOT NULL"


def _source_check(condition: str) -> None:
    with op.batch_alter_table("urgent_requests") as batch:
        batch.drop_constraint("ck_urgent_requests_source", type_="check")
        batch.create_check_constraint("ck_urgent_requests_source", condition)


def upgrade() -> None:
    op.add_column("pages", sa.Column("probe_delay", sa.Float(), nullable=True))
    op.create_index(
        "ix_pages_probe",
        "pages",
        ["id"],
        postgresql_where=sa.text(_MARKED),
        sqlite_where=sa.text(_MARKED),
    )
    _source_check(_NEW)


def downgrade() -> None:
    op.drop_index("ix_pages_probe", table_name="pages")
    op.execute("DELETE FROM urgent_requests WHERE source = 'probe'")
    _source_check(_OLD)
    # In place (SQLite 3.35+): a batch rebuild of ``pages`` would break its foreign keys.
    op.execute("ALTER TABLE pages DROP COLUMN probe_delay")
