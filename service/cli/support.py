"""What every ``crawlplan`` command shares: the consoles, the user-error wrapper, the store.

Each command lives in its own module beside this one (``service/cli/seed.py``, ...); they all
print through :data:`out` and :data:`err` and wrap themselves in :func:`user_errors`, so a
user's mistake is one ``error:`` line with exit code 2 wherever the command is defined.

Start-up cost: this module, :mod:`service.cli.options` and every command module import only
the standard library, ``typer`` and ``rich`` at module level. Everything else (the store and
SQLAlchemy, the crawler, numpy, pandas, Pyomo, FastAPI, ...) is imported inside the command
that uses it, so that ``crawlplan --help`` does not pay for the libraries of every command
(tests/test_cli_startup.py checks which modules a bare import loads).
"""

from __future__ import annotations

import errno
import functools
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:
    from service.config import Settings
    from store.database import Database

__all__ = [
    "counted",
    "err",
    "fail",
    "freeze_start_up",
    "open_checked",
    "out",
    "settings_from",
    "user_errors",
]

P = ParamSpec("P")
R = TypeVar("R")

#: Results go to stdout; progress, warnings and errors to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """``count`` and its noun, singular for exactly 1: ``1 page``, ``2 pages``, ``1.5 days``."""
    shown = f"{count:,}" if isinstance(count, int) else f"{count:g}"
    return f"{shown} {noun if count == 1 else plural or noun + 's'}"


def freeze_start_up() -> None:
    """Hand what a long-running command has built by now to the collector's permanent
    generation (:func:`gc.freeze`).

    Modules, classes, settings and the store's engine live as long as the process; without
    this every full collection a crawl, a lease or a release triggers walks them again
    (about a third of a 100,000-URL lease's CPU). The store itself never touches the
    collector: a library that switches it off changes the whole process under its caller.
    Called by ``crawl``, ``worker``, ``serve`` and ``nightly`` once they are set up.
    """
    gc.freeze()


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr and return the exit to raise."""
    err.print(f"error: {message}", markup=False)
    return typer.Exit(code)


#: File-system errors that are the operator's to fix, and what to do about each.
_FILE_SYSTEM_ERRNOS = {
    errno.EROFS: "the file system is read-only: point --db (or the output) elsewhere",
    errno.EACCES: "check the permissions of the file and its directory",
    errno.EPERM: "check the permissions of the file and its directory",
    errno.ENOSPC: "free some space on the disk",
    errno.EDQUOT: "the disk quota is used up",
}


def _user_message(error: Exception) -> str | None:
    """The one-line message of a mistake the user can fix, or None for a bug.

    The error classes are looked up only when something went wrong, so that start-up does
    not import the packages that define them; a SQLAlchemy error can only have been raised
    if SQLAlchemy was imported, so it is looked up in ``sys.modules`` rather than imported.
    """
    from service.errors import user_error_types

    if isinstance(error, user_error_types()):
        return str(error)
    if isinstance(error, OSError) and error.errno in _FILE_SYSTEM_ERRNOS:
        where = f"{error.filename}: " if error.filename else ""
        return f"cannot write {where}{error.strerror or error}; {_FILE_SYSTEM_ERRNOS[error.errno]}"
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(error, sa_exc.OperationalError):
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        if "readonly database" in reason:
            reason += " (the database file or its directory is read-only: check who may write it)"
        return f"database error: {reason}"
    return None


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn the user's mistakes into one ``error:`` line and exit code 2, not a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:
            message = _user_message(error)
            if message is None:
                raise
            raise fail(message) from None

    return wrapper


def settings_from(db: str | None, config: Path | None) -> Settings:
    """The resolved configuration of a command with the ``--db`` and ``--config`` options."""
    from service.config import load_settings

    return load_settings({"store.db": db}, config_file=config)


def open_checked(settings: Settings) -> Database:
    """Open the configured database and check that its schema is this version's."""
    from store import check_schema, open_database

    database = open_database(settings.db_url)
    check_schema(database)
    return database
