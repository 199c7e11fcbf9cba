"""Alembic environment: always run from :func:`store.schema.upgrade_schema` with a connection.

``alembic`` on the command line is not needed; the schema is created and migrated by
``crawlplan init``. For a new migration: ``alembic -c store/alembic.ini revision --autogenerate``
against a database at head (see docs/development.md).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things in place
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        _run(conn)
