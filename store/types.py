"""Column types shared by the models: timezone-aware UTC timestamps on SQLite and PostgreSQL."""

from __future__ import annotations

import math
import operator
from datetime import UTC, datetime
from itertools import repeat
from typing import Any

from sqlalchemy import ColumnElement, DateTime, Float, cast, func
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = [
    "URGENT_DUE",
    "UTCDateTime",
    "epoch_seconds",
    "seconds_micros",
    "sqlite_text",
    "utcnow",
    "whole_micros",
]


#: The due time of an urgent page (:mod:`store.urgent`): before any real due time.
URGENT_DUE = datetime(1970, 1, 1, tzinfo=UTC)


def utcnow() -> datetime:
    """The current time as an aware UTC datetime (the only clock the store uses by default)."""
    return datetime.now(UTC)


def sqlite_text(when: datetime) -> str:
    """``when`` (aware) as SQLite stores a :class:`UTCDateTime`: naive UTC text, microseconds.

    For statements sent straight through the driver (bulk writes), bypassing the type.
    """
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(" ", timespec="microseconds")


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


def epoch_seconds(column: Any, dialect: str) -> ColumnElement[float]:
    """A :class:`UTCDateTime` column as float seconds since the epoch, exact to the microsecond."""
    if dialect == "postgresql":
        return cast(func.date_part("epoch", column), Float)
    # SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC): whole seconds plus the fraction.
    return cast(func.strftime("%s", column), Float) + cast(func.substr(column, 20), Float)


def seconds_micros(epoch_s: float) -> tuple[int, int]:
    """Whole seconds and microseconds of an epoch time (rounded half to even, as ``datetime``
    rounds), for SQLite statements that format the stored text themselves."""
    whole = math.floor(epoch_s)
    micros = round((epoch_s - whole) * 1e6)
    return (whole + 1, 0) if micros == 1_000_000 else (whole, micros)


def whole_micros(secs: list[float]) -> tuple[list[int], list[int]]:
    """:func:`seconds_micros` of each of ``secs`` (seconds since the epoch), as
    two columns: whole seconds and microseconds (rounded half to even, a fraction that rounds
    to the next second carried). C loops of ``map``, no Python frame per page."""
    wholes = list(map(math.floor, secs))
    micros = list(map(round, map(operator.mul, map(operator.sub, secs, wholes), repeat(1e6))))
    if 1_000_000 in micros:  # a fraction that rounds up to the next second
        for k, m in enumerate(micros):
            if m == 1_000_000:
                wholes[k], micros[k] = wholes[k] + 1, 0
    return wholes, micros
