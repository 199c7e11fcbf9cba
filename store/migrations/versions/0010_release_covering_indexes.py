"""pages: the candidate indexes hold the columns a release copies into the release queue

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23

A release queued its 100,000 chosen pages with their URL and validators read from the table
by id: 100,000 rows scattered over 10,000,000, about as many table pages. When the OS had
not kept the store's file cached (on a machine that reclaims idle file pages, a period
release always finds them cold), that was 2 to 4 s of disk reads, and the release's time
moved by a factor of 2.5 from run to run with the cache. Now ``ix_pages_bucket_scheduled``
(bucket, scheduled_at, the candidate columns) and ``ix_pages_new_cash`` (cash, id, the
candidate columns) also hold ``url``, ``last_fetch_at``, ``etag``, ``last_modified`` and
``signature``: the release reads each chosen page from the index entry its candidate query
has just read (a bucket's entries lie together), not from the table. Every report rewrites a
page's entry in ``ix_pages_bucket_scheduled`` anyway (its ``scheduled_at`` and ``fetches``
change), so the wider entries cost space (about 60 bytes a page more with short URLs and no
validators, more with long ones), not extra writes. Rebuilding both indexes takes about two
minutes on a store of 10,000,000 pages.

PostgreSQL holds a B-tree entry of at most 2,704 bytes, and a page with a URL of 2,048
characters and an ETag of 512 would not fit (the insert or the report fails). So on
PostgreSQL a page keeps no ETag whose URL, ETag and signature together pass 2,400 bytes
(trigger ``pages_fit_index_row``; such ETags held already are cleared first): the page is
fetched without ``If-None-Match`` (``Last-Modified`` still applies), and its entry fits with
room to spare. SQLite has no such limit (long entries overflow to other pages).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEW = "status = 'new'"
_CANDIDATE = ["status", "host_id", "importance", "fetches", "next_due_at", "leased_until"]
_RELEASE = ["url", "last_fetch_at", "etag", "last_modified", "signature"]


def _rebuild(bucket_columns: list[str], new_columns: list[str]) -> None:
    op.drop_index("ix_pages_bucket_scheduled", table_name="pages")
    op.create_index("ix_pages_bucket_scheduled", "pages", bucket_columns)
    op.drop_index("ix_pages_new_cash", table_name="pages")
    op.create_index(
        "ix_pages_new_cash",
        "pages",
        new_columns,
        postgresql_where=sa.text(_NEW),
        sqlite_where=sa.text(_NEW),
    )


#: PostgreSQL: the URL, ETag and signature bytes past which the ETag is not kept.
_FIT_BYTES = 2_400
_TOO_LONG = (
    "octet_length({row}url) + coalesce(octet_length({row}etag), 0) "
    f"+ coalesce(octet_length({{row}}signature), 0) > {_FIT_BYTES}"
)
_PG_FIT_FUNCTION = """
CREATE FUNCTION pages_fit_index_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.etag := NULL;
    RETURN NEW;
END $$
"""
_PG_FIT_TRIGGER = f"""
CREATE TRIGGER pages_fit_index_row BEFORE INSERT OR UPDATE OF url, etag, signature ON pages
FOR EACH ROW WHEN ({_TOO_LONG.format(row="NEW.")})
EXECUTE FUNCTION pages_fit_index_row();
"""


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"UPDATE pages SET etag = NULL WHERE {_TOO_LONG.format(row='')}")
        op.execute(_PG_FIT_FUNCTION)
        op.execute(_PG_FIT_TRIGGER)
    _rebuild(
        ["bucket", "scheduled_at", *_CANDIDATE, "id", *_RELEASE],
        ["cash", "id", *_CANDIDATE, *_RELEASE],
    )


def downgrade() -> None:
    _rebuild(["bucket", "scheduled_at", *_CANDIDATE, "id"], ["cash", "id"])
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER pages_fit_index_row ON pages")
        op.execute("DROP FUNCTION pages_fit_index_row()")
