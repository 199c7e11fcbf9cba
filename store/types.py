"""Column types shared by the models: timezone-aware UTC timestamps on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["UTCDateTime", "utcnow"]


def utcnow() -> datetime:
    """The current time as an aware UTC datetime (the only clock the store uses by default)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always an aware UTC ``datetime`` in Python.

    PostgreSQL stores ``timestamptz``. SQLite has no time zones: values are stored as naive UTC
    text in SQLAlchemy's fixed-width format, so that comparisons in SQL order correctly, and
    come back with ``tzinfo=UTC``. Naive datetimes passed in are refused rather than guessed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
