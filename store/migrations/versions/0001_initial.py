"""initial schema: hosts, pages, observations, leases, plans

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Also makes published plans immutable in the database itself: UPDATE on plans, plan_periods
and quotas is refused by triggers (a change to a plan is a new version).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import store.types

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("origin", sa.String(length=300), nullable=False),
        sa.Column("first_seen", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("robots_txt", sa.Text(), nullable=True),
        sa.Column("robots_status", sa.SmallInteger(), nullable=True),
        sa.Column("robots_fetched_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("robots_expires_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("crawl_delay", sa.Float(), nullable=True),
        sa.Column("next_fetch_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("backoff_until", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("consecutive_errors", sa.Integer(), nullable=False),
        sa.Column("lease_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("leased_until", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("origin"),
    )
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.create_index("ix_hosts_next_fetch_at", ["next_fetch_at"], unique=False)

    op.create_table(
        "plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("published_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("starts_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("period_days", sa.Float(), nullable=False),
        sa.Column("periods", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(length=64), nullable=False),
        sa.Column("objective", sa.Float(), nullable=True),
        sa.Column("solver_status", sa.String(length=64), nullable=True),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("solver", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.CheckConstraint("period_days > 0", name="ck_plans_period_days"),
        sa.CheckConstraint("periods >= 1", name="ck_plans_periods"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "leases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=False),
        sa.Column("host_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("created_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("released_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["host_id"],
            ["hosts.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index("ix_leases_host", ["host_id", "created_at"], unique=False)

    op.create_table(
        "pages",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("host_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("first_seen", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("next_due_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_fetch_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_change_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("http_status", sa.SmallInteger(), nullable=True),
        sa.Column("etag", sa.String(length=512), nullable=True),
        sa.Column("last_modified", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("signature", sa.String(length=64), nullable=True),
        sa.Column("fetches", sa.Integer(), nullable=False),
        sa.Column("changes", sa.Integer(), nullable=False),
        sa.Column("rate", sa.Float(), nullable=True),
        sa.Column("rate_low", sa.Float(), nullable=True),
        sa.Column("rate_high", sa.Float(), nullable=True),
        sa.Column("estimator", sa.String(length=32), nullable=True),
        sa.Column("estimated_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("importance", sa.Float(), nullable=True),
        sa.Column("cash", sa.Float(), nullable=False),
        sa.Column("history", sa.Float(), nullable=False),
        sa.Column("lease_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("leased_until", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('new', 'ok', 'gone', 'redirect', 'blocked', 'error')",
            name="ck_pages_status",
        ),
        sa.CheckConstraint("bucket BETWEEN 0 AND 255", name="ck_pages_bucket"),
        sa.ForeignKeyConstraint(
            ["host_id"],
            ["hosts.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("url"),
    )
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.create_index("ix_pages_bucket_due", ["bucket", "next_due_at"], unique=False)
        batch_op.create_index("ix_pages_host_due", ["host_id", "next_due_at"], unique=False)
        batch_op.create_index("ix_pages_lease", ["lease_id"], unique=False)

    op.create_table(
        "plan_periods",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("starts_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("ends_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("capacity", sa.Float(), nullable=False),
        sa.Column("new_pages", sa.Integer(), nullable=False),
        sa.CheckConstraint("new_pages >= 0", name="ck_plan_periods_new"),
        sa.ForeignKeyConstraint(
            ["plan_id"],
            ["plans.id"],
        ),
        sa.PrimaryKeyConstraint("plan_id", "period"),
    )
    op.create_table(
        "quotas",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("fraction", sa.Float(), nullable=False),
        sa.CheckConstraint("bucket BETWEEN 0 AND 255", name="ck_quotas_bucket"),
        sa.CheckConstraint("pages >= 0", name="ck_quotas_pages"),
        sa.ForeignKeyConstraint(
            ["plan_id"],
            ["plans.id"],
        ),
        sa.PrimaryKeyConstraint("plan_id", "period", "bucket"),
    )
    op.create_table(
        "observations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("page_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("lease_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("fetched_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("previous_fetch_at", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("recorded_at", store.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("http_status", sa.SmallInteger(), nullable=True),
        sa.Column("changed", sa.Boolean(), nullable=True),
        sa.Column("last_modified", store.types.UTCDateTime(timezone=True), nullable=True),
        sa.Column("etag", sa.String(length=512), nullable=True),
        sa.Column("signature", sa.String(length=64), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('fetch', 'notification')", name="ck_observations_kind"),
        sa.ForeignKeyConstraint(
            ["page_id"],
            ["pages.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("lease_id", "page_id", name="uq_observations_lease_page"),
    )
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.create_index("ix_observations_fetched_at", ["fetched_at"], unique=False)
        batch_op.create_index("ix_observations_page_time", ["page_id", "fetched_at"], unique=False)

    _create_immutability_triggers()


def downgrade() -> None:
    _drop_immutability_triggers()
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.drop_index("ix_observations_page_time")
        batch_op.drop_index("ix_observations_fetched_at")

    op.drop_table("observations")
    op.drop_table("quotas")
    op.drop_table("plan_periods")
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_lease")
        batch_op.drop_index("ix_pages_host_due")
        batch_op.drop_index("ix_pages_bucket_due")

    op.drop_table("pages")
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index("ix_leases_host")

    op.drop_table("leases")
    op.drop_table("plans")
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_index("ix_hosts_next_fetch_at")

    op.drop_table("hosts")


_IMMUTABLE = ("plans", "plan_periods", "quotas")


def _create_immutability_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION crawlplan_plan_immutable() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'published plans are immutable: publish a new version';
            END;
            $$ LANGUAGE plpgsql
            """
        )
        for table in _IMMUTABLE:
            op.execute(
                f"CREATE TRIGGER {table}_immutable BEFORE UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION crawlplan_plan_immutable()"
            )
    else:
        for table in _IMMUTABLE:
            op.execute(
                f"CREATE TRIGGER {table}_immutable BEFORE UPDATE ON {table} BEGIN "
                "SELECT RAISE(ABORT, 'published plans are immutable: publish a new version'); "
                "END"
            )


def _drop_immutability_triggers() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    for table in _IMMUTABLE:
        op.execute(
            f"DROP TRIGGER IF EXISTS {table}_immutable" + (f" ON {table}" if postgres else "")
        )
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS crawlplan_plan_immutable()")
